"""Execution records: every node step and run records its status and duration in the events
the log already has; `history`, `show` and `history --slowest` print them; replay ignores them.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest

from agentlog.actors import END, NodeError, NodeTimeoutError, StateGraph, ToolNode
from agentlog.events import (
    KINDS,
    EventRecord,
    RunCompleted,
    RunFailed,
    SQLiteEventStore,
    StepAdvanced,
    Stopped,
    ToolCallFinished,
)
from agentlog.events.codec import decode_event
from agentlog.events.statuses import (
    STATUS_MEANINGS,
    STATUSES,
    RunFailedStatus,
    Status,
    ToolCallStatus,
)
from agentlog.projections import AgentState, Message, ToolCallBlock, replay, state_at
from agentlog.projections.timetravel import event_history, slowest

from .fixtures.make_v1_fixture import DB as V1_DB
from .fixtures.make_v1_fixture import THREAD as V1_THREAD
from .fixtures.make_v1_fixture import FixtureState
from .helpers import agentlog, line

SLEEP_S = 0.05
"""How long the sync node sleeps; its step must record at least `FLOOR_MS`."""
FLOOR_MS = 40.0


def lookup(city: str) -> str:
    """A sync tool that takes a little while."""
    time.sleep(0.01)
    return f"sunny in {city}"


async def agent(state: AgentState) -> list[Message]:
    """Ask for one tool call, then answer once its result is in."""
    if any(m.role == "tool" for m in state.context):
        return [Message.text_message("it is sunny", role="assistant")]
    call = ToolCallBlock(id="c1", name="lookup", args={"city": "Oslo"})
    return [Message(role="assistant", content=[call])]


def sleeper(state: AgentState) -> list[Message]:
    """A sync node that sleeps, so its step has a known lower bound."""
    time.sleep(SLEEP_S)
    return [Message.text_message("slept", role="assistant")]


def build() -> StateGraph[AgentState]:
    """agent -> tools -> agent -> sleeper -> END: async, tool and sync steps in one run."""
    graph: StateGraph[AgentState] = StateGraph(AgentState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_node("sleeper", sleeper)
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent",
        lambda state: "tools" if state.context[-1].tool_calls() else "sleeper",
        {"tools": "tools", "sleeper": "sleeper"},
    )
    graph.add_edge("tools", "agent")
    graph.add_edge("sleeper", END)
    return graph


async def records_of(store: SQLiteEventStore, thread_id: str) -> list[EventRecord]:
    return [r async for r in store.read(thread_id)]


async def run_graph(db: Path, thread_id: str = "t") -> tuple[AgentState, list[EventRecord]]:
    async with SQLiteEventStore(db) as store:
        out = (
            await build()
            .compile(checkpointer=store)
            .ainvoke("weather?", {"thread_id": thread_id}, include_state=True)
        )
        return out["state"], await records_of(store, thread_id)


def test_every_status_is_one_of_the_vocabulary_and_means_something() -> None:
    assert set(STATUS_MEANINGS) == set(STATUSES) == set(get_args(Status))
    assert all(meaning.strip() for meaning in STATUS_MEANINGS.values())
    assert set(get_args(ToolCallStatus)) <= set(STATUSES)
    assert set(get_args(RunFailedStatus)) <= set(STATUSES)
    for kind in ("pending", "processing", "completed", "failed"):  # lionagi's, kept
        assert kind in STATUSES


async def test_every_step_and_run_of_a_real_run_records_its_duration(tmp_path: Path) -> None:
    state, records = await run_graph(tmp_path / "log.db")
    steps = [(r.actor, r.event) for r in records if isinstance(r.event, StepAdvanced)]
    assert [node for node, _ in steps] == ["agent", "tools", "agent", "sleeper"]
    for node, step in steps:
        assert step.duration_ms is not None and step.duration_ms >= 0, node
    assert steps[-1][1].duration_ms >= FLOOR_MS  # type: ignore[operator]
    (finished,) = [r.event for r in records if isinstance(r.event, ToolCallFinished)]
    assert finished.status == "completed" and finished.duration_ms >= 5
    tools_step = steps[1][1]
    assert tools_step.duration_ms >= finished.duration_ms  # type: ignore[operator]
    (done,) = [r.event for r in records if isinstance(r.event, RunCompleted)]
    assert done.duration_ms is not None
    assert done.duration_ms >= sum(s.duration_ms or 0 for _, s in steps)
    # Durations are recorded data, never folded: the replayed state equals the live one.
    assert replay(records, AgentState) == state


async def test_durations_never_change_what_replay_gives(tmp_path: Path) -> None:
    state, records = await run_graph(tmp_path / "log.db")

    def retimed(record: EventRecord) -> EventRecord:
        event = record.event
        if "duration_ms" in event.__struct_fields__:
            event = msgspec.structs.replace(event, duration_ms=123456.0)  # type: ignore[call-arg]
        return msgspec.structs.replace(record, event=event)

    other = [retimed(r) for r in records]
    assert other != records
    assert replay(other, AgentState) == replay(records, AgentState) == state
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        assert await state_at(store, "t") == state


async def test_a_timed_out_node_fails_the_run_as_timed_out(tmp_path: Path) -> None:
    async def slow(state: AgentState) -> None:
        await asyncio.Event().wait()  # never ends: the node's timeout cuts it

    def boom(state: AgentState) -> None:
        raise ValueError("no")

    async with SQLiteEventStore(tmp_path / "log.db") as store:
        app = line(("slow", slow)).compile(store, node_timeout=0.1)
        with pytest.raises(NodeTimeoutError):
            await app.ainvoke("go", {"thread_id": "late"})
        failing = line(("boom", boom)).compile(store)
        with pytest.raises(NodeError):
            await failing.ainvoke("go", {"thread_id": "broken"})
        (late,) = [r.event for r in await records_of(store, "late") if r.kind == "run_failed"]
        (broken,) = [r.event for r in await records_of(store, "broken") if r.kind == "run_failed"]
    assert isinstance(late, RunFailed) and isinstance(broken, RunFailed)
    assert (late.status, late.error_type) == ("timed_out", "NodeTimeoutError")
    assert late.duration_ms is not None and late.duration_ms >= 90
    assert (broken.status, broken.error_type) == ("failed", "ValueError")
    assert broken.duration_ms is not None and broken.duration_ms >= 0


async def test_a_stop_records_how_long_the_call_ran(tmp_path: Path) -> None:
    reached, release = threading.Event(), threading.Event()

    def held(state: AgentState) -> list[Message]:
        """Run `SLEEP_S` (so the call has run at least that long), then wait to be released."""
        time.sleep(SLEEP_S)
        reached.set()
        release.wait(timeout=120)
        return [Message.text_message("slept", role="assistant")]

    async with SQLiteEventStore(tmp_path / "log.db") as store:
        app = line(("held", held), ("agent", agent)).compile(store)
        config = {"thread_id": "s"}

        running = asyncio.ensure_future(app.ainvoke("go", config))
        try:
            await asyncio.to_thread(reached.wait, 120)  # the node is running: the stop cuts it
            assert await app.astop(config)
            await running
        finally:
            release.set()
        (stopped,) = [r.event for r in await records_of(store, "s") if r.kind == "stopped"]
    assert isinstance(stopped, Stopped)
    assert stopped.duration_ms is not None and stopped.duration_ms >= FLOOR_MS


def test_history_slowest_and_json_carry_the_durations(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    _, records = asyncio.run(run_graph(db))
    timed = [
        (r.seq, r.kind, r.event.duration_ms)  # type: ignore[attr-defined]
        for r in records
        if r.kind in ("step_advanced", "tool_call_finished")
    ]
    expected = sorted(timed, key=lambda t: (-t[2], t[0]))[:2]

    ranked = agentlog("history", "t", "--db", db, "--slowest", "2", "--json")
    assert ranked.returncode == 0, ranked.stderr
    rows = json.loads(ranked.stdout)
    assert [(r["seq"], r["kind"], r["duration_ms"]) for r in rows] == expected
    assert rows[0]["duration_ms"] >= rows[1]["duration_ms"]
    by_seq = {r.seq: r for r in records}
    for row in rows:
        if row["kind"] == "tool_call_finished":
            assert (row["tool"], row["node"]) == ("lookup", "tools")
        else:
            assert row["node"] == by_seq[row["seq"]].actor and row["tool"] is None

    table = agentlog("history", "t", "--db", db, "--slowest", "2")
    assert table.returncode == 0, table.stderr
    assert "slowest" in table.stdout
    positions = [table.stdout.index(f"{ms:.1f} ms") for _, _, ms in expected]
    assert positions == sorted(positions)  # slowest first

    full = agentlog("history", "t", "--db", db, "--json")
    assert full.returncode == 0, full.stderr
    history = json.loads(full.stdout)
    assert len(history) == len(records)
    for row, record in zip(history, records, strict=True):
        event = record.event
        if isinstance(event, StepAdvanced | RunCompleted | ToolCallFinished):
            assert row["duration_ms"] == event.duration_ms, row
            assert row["status"] == "completed"
        else:
            assert row["duration_ms"] is None, row
    plain = agentlog("history", "t", "--db", db)
    assert plain.returncode == 0, plain.stderr
    assert "duration" in plain.stdout
    sleeper_step = max(timed, key=lambda t: t[2])
    assert f"{sleeper_step[2]:.1f} ms" in plain.stdout

    shown = agentlog("show", "t", "--db", db, "--step", "-1")
    assert shown.returncode == 0, shown.stderr
    last_step = [r.event for r in records if isinstance(r.event, StepAdvanced)][-1]
    assert f"took {last_step.duration_ms:.1f} ms" in shown.stdout
    shown_json = json.loads(agentlog("show", "t", "--db", db, "--step", "-1", "--json").stdout)
    assert last_step.duration_ms in [r["duration_ms"] for r in shown_json["step_records"]]


def test_slowest_refuses_a_negative_count() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        slowest([], -1)
    bad = agentlog("history", "t", "--slowest", "-1")
    assert bad.returncode != 0


@pytest.mark.parametrize(
    ("kind", "payload", "expected"),
    [
        ("step_advanced", {"step": 3, "next_node": "a"}, {"duration_ms": None}),
        ("run_completed", {}, {"duration_ms": None}),
        (
            "run_failed",
            {"node": "a", "error_type": "E", "message": "m"},
            {"status": "failed", "duration_ms": None},
        ),
        ("stopped", {"node": "a"}, {"when": "before", "duration_ms": None}),
    ],
)
def test_version_one_records_of_the_bumped_kinds_still_read(
    kind: str, payload: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert KINDS[kind].VERSION > 1
    event = decode_event("old", 1, kind, 1, msgspec.msgpack.encode(payload))
    for name, value in {**payload, **expected}.items():
        assert getattr(event, name) == value


async def test_the_version_one_fixture_reads_and_lists_its_tool_calls(tmp_path: Path) -> None:
    db = tmp_path / V1_DB.name
    shutil.copyfile(V1_DB, db)
    async with SQLiteEventStore(db) as store:
        records = await records_of(store, V1_THREAD)
        rows = await event_history(store, V1_THREAD)
    assert {r.version for r in records} == {1}
    steps = [r for r in rows if r.kind == "step_advanced"]
    assert steps and all(r.duration_ms is None for r in steps)  # not measured then
    assert replay(records, FixtureState).execution_meta.step == len(steps)
    ranked = agentlog("history", V1_THREAD, "--db", db, "--slowest", "5", "--json")
    assert ranked.returncode == 0, ranked.stderr
    assert {r["kind"] for r in json.loads(ranked.stdout)} <= {"tool_call_finished"}
    assert agentlog("history", V1_THREAD, "--db", db).returncode == 0
