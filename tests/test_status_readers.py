"""Every reader says the same status for a thread: `agentlog threads` and `show`, the HTTP
thread, state and search answers, and the fold they all read (`agentlog.projections.fold`).

End to end: a run cancelled through the runtime, a thread created over HTTP and never run,
and the runtime's own threads, which are not the user's. Then a property: random sequences
of events the gate accepts, drawn over every kind `agentlog.events.kinds` declares (discovered from
the module, not listed here), read by every reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agentlog.actors.cli import app as cli
from agentlog.actors.engine.threads import RUNTIME_KINDS, STORE_KINDS
from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig, shared_state
from agentlog.events import SQLiteEventStore
from agentlog.events.kinds import (
    EVENT_TYPES,
    KINDS,
    BaseEvent,
    Forked,
    RunStarted,
    ThreadCreated,
    kind_of,
)
from agentlog.projections import (
    END,
    START,
    AgentState,
    ExecutionState,
    ExecutionStatus,
    IllegalTransitionError,
    InvalidStateUpdateError,
    Message,
    StopRequestStatus,
    ToolCallBlock,
    ToolResultBlock,
    message_appended,
    state_at,
    state_history,
)
from agentlog.projections.fold import Fold, decide, uncommitted_record
from agentlog.projections.keys import TOOL_CALLS_KEY
from agentlog.projections.transcript import open_calls
from tests.conftest import examples
from tests.helpers import line

PATIENCE = 120.0
"""A failure guard only: how long a test waits for an event before it gives up."""


def reply(state: AgentState) -> list[Message]:
    return [Message.text_message(f"seen {len(state.context)}", role="assistant")]


class Gate:
    """An async node that waits until the test lets it go: a run held mid-way."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def __call__(self, state: AgentState) -> list[Message]:
        self.entered.set()
        await self.go.wait()
        return [Message.text_message("done", role="assistant")]


def agentlog(*args: str | Path) -> Any:
    """`agentlog ARGS --json` through typer's runner: its JSON answer."""
    done = CliRunner().invoke(cli, [*map(str, args), "--json"])
    assert done.exit_code == 0, (done.output, done.exception)
    return json.loads(done.stdout)


def client_of(runtime: AgentRuntime) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(runtime))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=PATIENCE)


async def http_reads(client: httpx.AsyncClient, thread: str) -> dict[str, Any]:
    """What the HTTP API says of the thread's status: its thread answer (and the status in its
    values), its state answer (and its values'), and the search hits for that status."""
    got = await client.get(f"/log/threads/{thread}")
    assert got.status_code == 200, got.text
    state = await client.get(f"/log/threads/{thread}/state")
    assert state.status_code == 200, state.text
    status = got.json()["status"]
    found = await client.post("/log/threads/search", json={"status": status, "limit": 100})
    assert found.status_code == 200, found.text
    return {
        "thread": status,
        "thread values": got.json()["values"]["execution_meta"]["status"],
        "state": state.json()["status"],
        "state values": state.json()["values"]["execution_meta"]["status"],
        "search": [t["status"] for t in found.json() if t["thread_id"] == thread],
    }


def cli_reads(db: Path, thread: str) -> dict[str, Any]:
    rows = {row["thread_id"]: row for row in agentlog("threads", "--db", db)}
    return {
        "threads": rows[thread]["status"],
        "show": agentlog("show", thread, "--db", db)["status"],
    }


# ---- end to end ------------------------------------------------------------------------------


def test_a_run_cancelled_through_the_runtime_reads_cancelled_everywhere(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    gate = Gate()

    async def scenario() -> tuple[str, str, dict[str, Any]]:
        async with SQLiteEventStore(db) as store:
            runtime = AgentRuntime(store)
            graph = line(("work", gate), ("after", reply))
            graph.name = "support"
            runtime.add_graph("support", graph.compile(store))
            runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
            async with runtime, client_of(runtime) as client:
                thread = await runtime.trigger("chat", "hi")
                await asyncio.wait_for(gate.entered.wait(), PATIENCE)
                await runtime.cancel(thread, actor="ops", reason="a duplicate")
                folded = (await state_at(store, thread)).execution_meta.status.value
                return thread, folded, await http_reads(client, thread)

    thread, folded, http = asyncio.run(scenario())
    assert folded == "cancelled"
    assert http == {
        "thread": "cancelled",
        "thread values": "cancelled",
        "state": "cancelled",
        "state values": "cancelled",
        "search": ["cancelled"],
    }
    assert cli_reads(db, thread) == {"threads": "cancelled", "show": "cancelled"}
    (row,) = [r for r in agentlog("threads", "--db", db) if r["thread_id"] == thread]
    assert row["stop"] is None  # the stop that cut the node short is over with the run


async def test_a_step_history_ends_cancelled_after_a_cancel_at_a_pause(tmp_path: Path) -> None:
    """The history's last step says the run was cancelled, not that it paused."""
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        app = line(("agent", reply), ("after", reply)).compile(store, interrupt_before=["after"])
        config = {"thread_id": "t"}
        await app.ainvoke("hi", config)
        assert (await state_history(store, "t"))[-1].status == "interrupted"
        assert await app.acancel(config, by="ops")
        assert (await state_history(store, "t"))[-1].status == "cancelled"


def test_a_thread_created_over_http_and_never_run_reads_idle_everywhere(tmp_path: Path) -> None:
    db = tmp_path / "log.db"

    async def scenario() -> tuple[str, str, dict[str, Any]]:
        async with SQLiteEventStore(db) as store:
            runtime = AgentRuntime(store)
            runtime.add_graph("support", line(("agent", reply)).compile(store))
            runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
            async with runtime, client_of(runtime) as client:
                made = await client.post("/log/threads", json={"metadata": {"customer": "acme"}})
                assert made.status_code == 200, made.text
                assert made.json()["status"] == "idle"
                assert made.json()["values"]["execution_meta"]["status"] == "idle"
                thread = made.json()["thread_id"]
                folded = (await state_at(store, thread)).execution_meta.status.value
                return thread, folded, await http_reads(client, thread)

    thread, folded, http = asyncio.run(scenario())
    assert folded == "idle"
    assert http == {
        "thread": "idle",
        "thread values": "idle",
        "state": "idle",
        "state values": "idle",
        "search": ["idle"],
    }
    assert cli_reads(db, thread) == {"threads": "idle", "show": "idle"}


def test_the_runtimes_own_threads_are_not_listed_as_the_users(tmp_path: Path) -> None:
    db = tmp_path / "log.db"

    def count(state: AgentState) -> list[Message]:
        seen = shared_state().increment("tickets")
        return [Message.text_message(f"ticket {seen}", role="assistant")]

    async def scenario() -> tuple[str, list[str], list[str]]:
        async with SQLiteEventStore(db) as store:
            runtime = AgentRuntime(store)
            runtime.add_graph("g", line(("work", count)).compile(store))
            runtime.register_entry_point(
                EntryPoint(id="api", graph_id="g", isolation="synchronized")
            )
            async with runtime, client_of(runtime) as client:
                thread = await runtime.trigger("api", "go")
                await runtime.wait(thread, timeout=PATIENCE)
                found = await client.post("/log/threads/search", json={"limit": 100})
                return thread, await store.threads(), [t["thread_id"] for t in found.json()]

    thread, stored, searched = asyncio.run(scenario())
    internal = sorted(t for t in stored if t != thread)
    assert internal == ["__runtime__", "__shared__/g/tickets"]  # both are in the log
    assert searched == [thread]
    assert [r["thread_id"] for r in agentlog("threads", "--db", db)] == [thread]
    everything = agentlog("threads", "--db", db, "--all")
    assert sorted(r["thread_id"] for r in everything) == sorted(stored)


def test_a_runtime_thread_of_another_name_is_not_listed_as_the_users(tmp_path: Path) -> None:
    """The log marks a runtime's thread (it opens with a runtime record), so a reader that
    does not know the name a `RuntimeConfig` gave it (the command line) leaves it out all the
    same."""
    db = tmp_path / "log.db"

    async def scenario() -> tuple[str, list[str], list[str]]:
        async with SQLiteEventStore(db) as store:
            runtime = AgentRuntime(store, RuntimeConfig(runtime_thread="ops-ledger"))
            runtime.add_graph("g", line(("work", reply)).compile(store))
            runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
            async with runtime, client_of(runtime) as client:
                thread = await runtime.trigger("api", "go")
                await runtime.wait(thread, timeout=PATIENCE)
                found = await client.post("/log/threads/search", json={"limit": 100})
                return thread, await store.threads(), [t["thread_id"] for t in found.json()]

    thread, stored, searched = asyncio.run(scenario())
    assert "ops-ledger" in stored
    assert searched == [thread]
    assert [r["thread_id"] for r in agentlog("threads", "--db", db)] == [thread]
    everything = agentlog("threads", "--db", db, "--all")
    assert sorted(r["thread_id"] for r in everything) == sorted(stored)


# ---- every reader, on random sequences over every event kind ------------------------------

GRAPH_ID, GRAPH_NAME = "g", "support"
NODES = [START, "agent", "tools", END]


@functools.cache
def _json() -> st.SearchStrategy[Any]:
    leaf = st.none() | st.booleans() | st.integers(-9, 9) | st.text(max_size=3)
    return st.recursive(
        leaf,
        lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=4,
    )


@functools.cache
def for_type(tp: Any) -> st.SearchStrategy[Any]:
    """Values of a field's declared type, small: the kinds' own annotations pick them."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return _json()
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (Union, types.UnionType):
        return st.one_of(*map(for_type, args))
    if origin is list:
        return st.lists(for_type(args[0]), max_size=2)
    if origin is dict:
        return st.dictionaries(st.text(max_size=3), for_type(args[1]), max_size=2)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        type(None): st.none(),
        bool: st.booleans(),
        int: st.integers(0, 9),
        float: st.floats(0, 1e3),
        str: st.sampled_from(NODES) | st.text(max_size=4),
    }
    return simple[tp]


def _message(message: Message) -> dict[str, Any]:
    return message_appended(message).message


def _messages(fold: Fold[AgentState]) -> st.SearchStrategy[dict[str, Any]]:
    """A message the context may take now: text, an assistant asking for a tool, the answer
    to an open call, or a correction of a message the context holds."""
    seq = fold.seq
    options = [
        st.builds(lambda t: _message(Message.text_message(t, message_id=f"m{seq}")), st.text()),
        st.just(
            _message(
                Message(
                    message_id=f"a{seq}",
                    role="assistant",
                    content=[ToolCallBlock(id=f"c{seq}", name="lookup", args={})],
                )
            )
        ),
    ]
    waiting = open_calls(fold.state.context)
    if waiting:
        options.append(
            st.sampled_from(waiting).map(
                lambda call: _message(
                    Message.tool_message(
                        [ToolResultBlock(call_id=call.id, output="ok")], message_id=f"r{seq}"
                    )
                )
            )
        )
    held = [m for m in fold.state.context if m.role == "user"]
    if held:
        options.append(
            st.sampled_from(held).map(
                lambda m: _message(Message.text_message("fixed", message_id=str(m.message_id)))
            )
        )
    return st.one_of(options)


def _metas() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"current_node": st.sampled_from(NODES)},
        optional={
            "step": st.integers(0, 9),
            "status": st.sampled_from([s.value for s in ExecutionStatus]),
            "stop_current_execution": st.sampled_from([s.value for s in StopRequestStatus]),
        },
    )


_NODES = st.sampled_from(NODES)
_STATIC_HINTS: dict[str, st.SearchStrategy[Any]] = {
    "node": _NODES,
    "entry_node": _NODES,
    "next_node": st.none() | _NODES,
    "values": st.just({}) | st.builds(lambda t: {"context_summary": t}, st.text(max_size=3)),
    "state": st.just({}) | _metas().map(lambda m: {"execution_meta": m}),
    "source_thread": st.just("src"),
    "graph_id": st.just(GRAPH_ID),
    "graph": st.none() | st.just(GRAPH_NAME),
    "fields": st.none(),
}


def _hint(name: str, fold: Fold[AgentState]) -> st.SearchStrategy[Any] | None:
    """Values for a field named `name` that the gate can accept from `fold` (a random dict
    is never a message, a random step never the next); None: draw it from its type."""
    meta = fold.state.execution_meta
    if name in _STATIC_HINTS:
        return _STATIC_HINTS[name]
    if name == "step":
        return st.just(meta.step + 1) | st.integers(0, 9)
    if name == "call_id":
        started = meta.internal_data.get(TOOL_CALLS_KEY, {})
        calls = sorted({*started, *(c.id for c in open_calls(fold.state.context))})
        return st.sampled_from(calls or ["c0"])
    if name == "message":
        return _messages(fold)
    if name == "messages":
        return st.lists(_messages(fold), max_size=2)
    if name == "message_ids":
        ids = [m.message_id for m in fold.state.context] or ["nope"]
        return st.lists(st.sampled_from(ids), min_size=1, max_size=2)
    return None


@functools.cache
def _fields(kind: type[BaseEvent]) -> tuple[msgspec.structs.FieldInfo, ...]:
    return msgspec.structs.fields(kind)


@st.composite
def event_of(draw: st.DrawFn, kind: type[BaseEvent], fold: Fold[AgentState]) -> BaseEvent:
    """An event of `kind`, each field drawn from its hint or its declared type."""
    values = {}
    for f in _fields(kind):
        if f.name in UNDRAWN and not f.required:
            continue
        if f.required or draw(st.booleans()):
            hint = _hint(f.name, fold) if _holds_dicts(f.type) == (f.name in DICT_HINTS) else None
            values[f.name] = draw(for_type(f.type) if hint is None else hint)
    return kind(**values)


UNDRAWN = frozenset({"subject"})
"""Optional fields left at their defaults: a trigger's data subject seals it under a master
key, which the sealing tests hold (test_sealing.py, test_runtime_subject.py), not these."""

DICT_HINTS = frozenset({"message", "messages", "values", "state"})
"""The hints whose values are dicts (or lists of them): they fit only fields that hold dicts."""


@functools.cache
def _holds_dicts(tp: Any) -> bool:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType, list):
        return any(map(_holds_dicts, get_args(tp)))
    return origin is dict


OPENERS: list[type[BaseEvent]] = [ThreadCreated, RunStarted, Forked]
"""First records that can name the graph a thread runs (so the HTTP API can serve it)."""


@st.composite
def accepted_sequences(draw: st.DrawFn) -> list[BaseEvent]:
    """Events the gate accepts from a new thread, drawn one at a time over every kind
    `agentlog.events.kinds` declares (a draw the gate refuses is dropped and drawn again; a runtime
    record never opens the thread, which would make it the runtime's)."""
    fold: Fold[AgentState] = Fold.new(AgentState)
    events: list[BaseEvent] = []
    length = draw(st.integers(1, 24), label="length")
    for _ in range(4 * length):
        if len(events) == length:
            break
        kinds = st.sampled_from(EVENT_TYPES)
        if not events:  # mostly a first record that names the thread's graph, for the server
            kinds = st.sampled_from(OPENERS) | kinds
        kind = draw(kinds, label="kind")
        event = draw(event_of(kind, fold), label=kind.__name__)
        if not events and kind_of(event) in RUNTIME_KINDS | STORE_KINDS:
            continue  # a thread opening with one is a runtime's or a store's (actors.threads)
        try:
            decide(fold.state, [event], seq=fold.seq)
        except (IllegalTransitionError, InvalidStateUpdateError):
            continue
        fold.apply(uncommitted_record(event, fold.seq + 1, "t"))
        events.append(event)
    assume(events)
    return events


async def _http_and_fold(store: SQLiteEventStore) -> tuple[ExecutionState, dict[str, Any]]:
    """The fold's execution state of "t" and what the HTTP API says of it."""
    meta = (await state_at(store, "t")).execution_meta
    runtime = AgentRuntime(store)
    graph = line(("agent", reply))
    graph.name = GRAPH_NAME
    runtime.add_graph(GRAPH_ID, graph.compile(store))
    async with client_of(runtime) as client:
        got = await client.get("/log/threads/t")
        listed = await client.post("/log/threads/search", json={"limit": 100})
        if got.status_code != 200:
            assert got.status_code == 404, got.text
            return meta, {"found": got.json()["error"]["code"], "listed": listed.json()}
        return meta, {
            **await http_reads(client, "t"),
            "step": got.json()["step"],
            "listed": [t["thread_id"] for t in listed.json()],
        }


def check_readers(events: list[BaseEvent], db: Path) -> None:
    """Write `events` as thread "t" (beside "src", a created thread forks copy) and check
    that the CLI's row and `show`, the HTTP thread, state and search, and the fold agree."""

    async def write_and_read() -> tuple[ExecutionState, dict[str, Any]]:
        async with SQLiteEventStore(db) as store:
            await store.append("src", [ThreadCreated(by="ops", graph_id=GRAPH_ID)], expected_seq=0)
            await store.append("t", events, expected_seq=0)
            return await _http_and_fold(store)

    meta, http = asyncio.run(write_and_read())
    status, stop = meta.status.value, meta.stop_current_execution.value
    rows = {row["thread_id"]: row for row in agentlog("threads", "--db", db)}
    assert (rows["t"]["status"], rows["t"]["stop"], rows["t"]["step"], rows["t"]["node"]) == (
        status,
        None if stop == "none" else stop,
        meta.step,
        meta.current_node,
    )
    assert agentlog("show", "t", "--db", db)["status"] == status
    hidden = bool(meta.internal_data.get("hidden"))
    first = events[0]
    named = (
        isinstance(first, Forked)
        or (isinstance(first, ThreadCreated) and first.graph_id is not None)
        or (isinstance(first, RunStarted) and first.graph is not None)
    )
    if "found" in http:  # hidden, or its first record names no graph this server has
        assert http["found"] == "not_found" and "t" not in http["listed"]
        assert hidden or not named
        return
    assert not hidden and "t" in http["listed"]
    assert http == {
        "thread": status,
        "thread values": status,
        "state": status,
        "state values": status,
        "search": [status],
        "step": meta.step,
        "listed": http["listed"],
    }


@settings(
    max_examples=examples(60),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(accepted_sequences())
def test_every_reader_says_the_same_status(
    tmp_path_factory: pytest.TempPathFactory, events: list[BaseEvent]
) -> None:
    check_readers(events, tmp_path_factory.mktemp("readers") / "log.db")


class _Found(Exception):
    """Ends a search: every kind was found."""


def covering_sequences() -> dict[str, list[BaseEvent]]:
    """For each kind, the first sequence `accepted_sequences` draws (derandomized) that holds
    it; not shrunk, since shrinking a sequence whose refused draws are dropped takes minutes."""
    found: dict[str, list[BaseEvent]] = {}

    @settings(
        max_examples=20_000,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(accepted_sequences())
    def search(events: list[BaseEvent]) -> None:
        for kind in map(kind_of, events):
            found.setdefault(kind, events)
        if len(found) == len(KINDS):
            raise _Found

    with contextlib.suppress(_Found):
        search()
    return found


def test_every_reader_says_the_same_status_after_every_kind(tmp_path: Path) -> None:
    """Each kind the module declares, in a sequence the gate accepts, read by every reader."""
    found = covering_sequences()
    missing = sorted(set(KINDS) - set(found))
    assert not missing, f"no sequence the gate accepts holds {missing}: draw them"
    unique = {id(events): events for events in found.values()}
    for index, events in enumerate(unique.values()):
        check_readers(events, tmp_path / f"{index}.db")
