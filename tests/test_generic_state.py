"""Threads of a user's state class, read without that class: the stored fields are data.

Threads are built through the public graph API with a subclass of AgentState; the reader
(`agentlog.projections.generic`, and the command line as a subprocess that never imports this
module) rebuilds an open class from what the log records. Also: the step history's status
pass, against the plain definition.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from agentlog.actors import END, StateGraph
from agentlog.events import EventRecord, Forked, RunStarted, SQLiteEventStore
from agentlog.events.kinds import (
    ENDING_KINDS,
    Event,
    InterruptRaised,
    RunCancelled,
    RunCompleted,
    RunFailed,
    Stopped,
)
from agentlog.projections import AgentState, Message, append_items, state_at, take_snapshot
from agentlog.projections.generic import (
    NOTE_UNRECORDED,
    open_state_class,
    open_states,
    reducer_name,
    state_fields,
)
from agentlog.projections.timetravel import _STEP_BOUNDARY, _status_after_steps, step_status

ROOT = Path(__file__).resolve().parents[1]


class Item(BaseModel):
    id: str
    text: str


def my_extend(left: list[str], right: list[str]) -> list[str]:
    """A user's own reducer: keeps the right side first, then the left (not reproducible)."""
    return [*right, *left]


class Desk(AgentState):
    items: Annotated[list[Item], append_items] = Field(default_factory=list)
    count: int = 0
    log: Annotated[list[str], my_extend] = Field(default_factory=list)
    never: str = "default"


class Plain(AgentState):
    items: Annotated[list[Item], append_items] = Field(default_factory=list)
    count: int = 0


def work(state: Any) -> dict[str, Any]:
    n = state.execution_meta.step + 1
    update: dict[str, Any] = {
        "messages": [Message.text_message(f"step {n}", role="assistant")],
        "items": [Item(id=f"i{n % 3}", text=f"item {n}")],  # ids repeat: append_items skips
        "count": n * 10,
    }
    if "log" in type(state).model_fields:
        update["log"] = [f"l{n}"]
    return update


def route(state: Any) -> str:
    return END if state.execution_meta.step >= 5 else "work"


def graph(state_cls: type[AgentState]) -> StateGraph[Any]:
    g: StateGraph[Any] = StateGraph(state_cls)
    g.add_node("work", work)
    g.set_entry_point("work")
    g.add_conditional_edges("work", route, {"work": "work", END: END})
    return g


async def recorded(store: SQLiteEventStore, thread: str, fields: Any) -> str:
    """The thread copied to `thread + '-rec'` with RunStarted carrying `fields` (or none)."""
    target = f"{thread}-rec"
    seq = 0
    async for record in store.read(thread):
        event: Event = record.event
        if isinstance(event, RunStarted):
            event = RunStarted(
                entry_node=event.entry_node, input=event.input, graph=event.graph, fields=fields
            )
        await store.append(target, [event], expected_seq=seq, actor=record.actor)
        seq += 1
    return target


def build(db: Path, state_cls: type[AgentState] = Desk, *, with_fields: bool = True) -> str:
    async def run() -> str:
        async with SQLiteEventStore(db) as store:
            app = graph(state_cls).compile(checkpointer=store)
            await app.ainvoke({"messages": [Message.text_message("go")]}, {"thread_id": "d"})
            fields = state_fields(state_cls) if with_fields else None
            return await recorded(store, "d", fields)

    return asyncio.run(run())


def read(db: Path, fn: Any) -> Any:
    async def main() -> Any:
        async with SQLiteEventStore(db) as store:
            return await fn(store)

    return asyncio.run(main())


def agentlog(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from agentlog.actors.cli import main; main()", *map(str, args)],
        cwd="/",  # this test module is not importable from there
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )


# ---- what the engine records ----------------------------------------------------------------


def test_state_fields_names_each_custom_field_and_its_reducer() -> None:
    assert state_fields(AgentState) == {}
    assert state_fields(Desk) == {
        "items": "agentlog.projections.reducers.append_items",
        "count": None,
        "log": f"{__name__}.my_extend",
        "never": None,
    }
    assert reducer_name(my_extend) == f"{__name__}.my_extend"
    opened = open_state_class(state_fields(Desk))
    assert issubclass(opened, AgentState) and state_fields(opened) == state_fields(Desk)


# ---- reading a thread without its class -----------------------------------------------------


def test_library_reducers_replay_exactly_and_a_users_reducer_is_flagged(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    thread = build(db)
    real: Desk = read(db, lambda store: state_at(store, thread, None, Desk))
    (point,) = read(db, lambda store: _open_at_end(store, thread))
    shown = point.state.model_dump(mode="json")
    truth = real.model_dump(mode="json")
    n = real.execution_meta.step
    assert n >= 4
    assert [i["id"] for i in truth["items"]] == ["i1", "i2", "i0"]  # the reducer mattered
    assert shown["items"] == truth["items"] and shown["count"] == truth["count"] == n * 10
    assert shown["context"] == truth["context"]
    assert shown["execution_meta"] == truth["execution_meta"]
    assert truth["log"] == [f"l{k}" for k in range(n, 0, -1)]
    assert shown["log"] == [f"l{n}"]  # the last recorded update, never passed off as the value
    assert "my_extend" in point.notes["log"] and "may differ" in point.notes["log"]
    assert set(point.notes) == {"log"}
    assert point.unset == ["never"]


async def _open_at_end(store: SQLiteEventStore, thread: str) -> Any:
    return await open_states(store, thread, [await store.last_seq(thread)])


def test_a_snapshot_after_the_last_update_gives_the_exact_value(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    thread = build(db)
    read(db, lambda store: take_snapshot(store, thread, None, Desk))
    (point,) = read(db, lambda store: _open_at_end(store, thread))
    n = point.state.execution_meta.step
    assert point.state.model_dump(mode="json")["log"] == [f"l{k}" for k in range(n, 0, -1)]
    assert point.notes == {}
    assert point.unset == []  # the snapshot holds the class's default too


def test_a_thread_without_recorded_reducers_says_each_update_replaces(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    thread = build(db, Plain, with_fields=False)
    (point,) = read(db, lambda store: _open_at_end(store, thread))
    n = point.state.execution_meta.step
    assert point.state.model_dump(mode="json")["items"] == [
        {"id": f"i{n % 3}", "text": f"item {n}"}
    ]
    assert point.notes == {"items": NOTE_UNRECORDED, "count": NOTE_UNRECORDED}


def test_the_command_line_shows_diffs_and_lists_custom_state_threads(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    thread = build(db)
    threads = json.loads(agentlog("threads", "--db", db, "--json").stdout)
    assert {t["thread_id"]: (t["status"], t["error"]) for t in threads} == {
        "d": ("completed", None),
        thread: ("completed", None),
    }
    shown = agentlog("show", thread, "--db", db)
    assert shown.returncode == 0, shown.stderr
    assert '"i0"' in shown.stdout and "status=completed" in shown.stdout
    assert f"field log: reduced by {__name__}.my_extend" in shown.stdout
    assert "never" in shown.stdout and "(not set in the log: the class default)" in shown.stdout
    as_json = json.loads(agentlog("show", thread, "--db", db, "--json").stdout)
    assert as_json["fields"]["count"] == 10 * as_json["step"] and "never" not in as_json["fields"]
    assert set(as_json["notes"]) == {"log"} and as_json["unset"] == ["never"]

    change = json.loads(agentlog("diff", thread, "1", "3", "--db", db, "--json").stdout)
    assert change["fields"]["count"] == [10, 30]
    assert [m["content"][0]["text"] for m in change["messages_added"]] == ["step 2", "step 3"]
    table = agentlog("diff", thread, "1", "3", "--db", db)
    assert table.returncode == 0 and "note (after): field log" in table.stdout


def test_fork_works_without_the_class_and_refuses_what_it_cannot_know(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    plain = build(db, Plain)
    done = agentlog("fork", plain, "--step", "3", "--to", "branch", "--db", db)
    assert done.returncode == 0, done.stderr

    async def both(store: SQLiteEventStore) -> tuple[Plain, Plain]:
        seq = (await store.seqs_of_kind(plain, "step_advanced"))[2]
        source = await state_at(store, plain, seq, Plain)
        return source, await state_at(store, "branch", None, Plain)

    source, branch = read(db, both)
    assert branch.items == source.items and branch.count == source.count == 30
    assert branch.context == source.context
    first = read(db, lambda store: _first(store, "branch"))
    assert isinstance(first, Forked) and first.fields == state_fields(Plain)  # the source's

    desk = tmp_path / "desk.db"
    thread = build(desk)
    before = desk.read_bytes()
    refused = agentlog("fork", thread, "--step", "3", "--db", desk)
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1
    assert "field 'log' is reduced by" in refused.stderr and "state class" in refused.stderr
    assert desk.read_bytes() == before


def test_a_fork_of_a_custom_thread_reads_back_with_the_open_class(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    thread = build(db, Plain)

    async def fork_in_python(store: SQLiteEventStore) -> list[EventRecord]:
        app = graph(Plain).compile(checkpointer=store)
        new = await app.afork({"thread_id": thread}, at_step=2)
        return [r async for r in store.read(new)]

    records = read(db, fork_in_python)
    assert isinstance(records[0].event, Forked)
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    shown = json.loads(agentlog("show", records[0].thread_id, "--db", copy, "--json").stdout)
    assert shown["fields"]["count"] == 20 and len(shown["fields"]["items"]) == 2


async def _first(store: SQLiteEventStore, thread: str) -> Any:
    async for record in store.read(thread, 1, 1):
        return record.event
    return None


# ---- the step history's statuses ------------------------------------------------------------


HISTORY_STATUS = {
    "interrupt_raised": "interrupted",
    "stopped": "stopped",
    "run_completed": "completed",
    "run_failed": "error",
    "run_cancelled": "cancelled",
}
"""What a step's history says of a run each kind ends or pauses: the plain definition."""

ENDS = {
    "interrupt_raised": InterruptRaised(node="n", reason="r"),
    "stopped": Stopped(node="n"),
    "run_completed": RunCompleted(),
    "run_failed": RunFailed(node="n", error_type="E", message="m"),
    "run_cancelled": RunCancelled(by="x"),
}


def forward_statuses(kinds: list[str]) -> dict[int, str]:
    """The plain definition: scan forward from each step to the next boundary."""
    out: dict[int, str] = {}
    for i, kind in enumerate(kinds):
        if kind != "step_advanced":
            continue
        status, j = "running", i + 1
        while j < len(kinds) and kinds[j] not in _STEP_BOUNDARY:
            status = HISTORY_STATUS.get(kinds[j], status)
            j += 1
        out[i] = status
    return out


class _Kind:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.event = ENDS.get(kind)


KIND_NAMES = ["step_advanced", "message_appended", *sorted(_STEP_BOUNDARY), *HISTORY_STATUS]


def test_the_kinds_that_end_a_run_are_the_ones_a_history_names() -> None:
    assert ENDING_KINDS == set(HISTORY_STATUS) == set(ENDS)
    assert {k: step_status(e) for k, e in ENDS.items()} == HISTORY_STATUS


@given(st.lists(st.sampled_from(KIND_NAMES), max_size=60))
def test_the_one_pass_statuses_equal_the_plain_definition(kinds: list[str]) -> None:
    records: Any = [_Kind(k) for k in kinds]
    assert _status_after_steps(records) == forward_statuses(kinds)


@pytest.mark.parametrize("steps", [3000])
def test_steps_with_nothing_between_them_get_their_statuses(steps: int) -> None:
    kinds = ["step_advanced"] * steps + ["run_completed"]
    records: Any = [_Kind(k) for k in kinds]
    statuses = _status_after_steps(records)
    assert len(statuses) == steps and set(statuses.values()) == {"completed"}
