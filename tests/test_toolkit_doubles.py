"""The testing doubles: a scripted model, recording tools that fail, hang or are slow, a fake
clock and seeded ids that make two runs of a graph write the same log."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import NodeTimeoutError, StateGraph
from agentlog.actors.testing import (
    FakeClock,
    MemoryEventStore,
    RecordingTool,
    ScriptedModel,
    ScriptExhaustedError,
    ask_tool,
    ask_tools,
    reply,
    seeded_ids,
    tool_call,
)
from agentlog.actors.tools.node import Tool
from agentlog.events import EventRecord, SQLiteEventStore, ToolCallFinished
from agentlog.events.stores.memory import MemoryEventStore as StoreItself
from agentlog.projections import AgentState, Message, generate_id, replay
from tests.helpers import agent_with_tools

WAIT = 20.0


def lookup_order(order_id: int, verbose: bool = False) -> str:
    """Look an order up.

    Args:
        order_id: the order's number.
    """
    return f"order {order_id} shipped"


def agent_graph(model: ScriptedModel, *tools: RecordingTool) -> StateGraph[AgentState]:
    return agent_with_tools(model, tools)  # type: ignore[no-any-return]


async def finished(store: Any, thread: str) -> list[tuple[str, str]]:
    return [
        (r.event.call_id, r.event.status)
        async for r in store.read(thread)
        if isinstance(r.event, ToolCallFinished)
    ]


def test_the_memory_store_is_the_events_one() -> None:
    assert MemoryEventStore is StoreItself


def test_a_recording_tool_looks_like_its_function_to_a_tool_node() -> None:
    wrapped = Tool.from_function(RecordingTool(lookup_order))
    plain = Tool.from_function(lookup_order)
    assert wrapped.schema() == plain.schema()
    params = inspect.signature(RecordingTool(lookup_order)).parameters
    assert list(params) == ["order_id", "verbose", "tool_call_id"]
    with pytest.raises(TypeError, match="named function"):
        RecordingTool(42)  # type: ignore[arg-type]


async def test_a_scripted_agent_and_recording_tool_run_to_the_end() -> None:
    lookup = RecordingTool(lookup_order)
    ping = RecordingTool.returning("ping", "pong")
    model = ScriptedModel(
        [
            ask_tools(tool_call("lookup_order", call_id="c1", order_id=3), text="checking"),
            ask_tool("ping", call_id="c2"),
            "all done",
        ],
        name="support",
    )
    app = agent_graph(model, lookup, ping).compile(MemoryEventStore())
    out = await app.ainvoke("where is order 3?", {"thread_id": "t"})
    assert out["status"] == "completed"
    assert [(c.number, c.call_id, c.args, c.outcome, c.result) for c in lookup.calls] == [
        (1, "c1", {"order_id": 3, "verbose": False}, "completed", "order 3 shipped")
    ]
    assert [(c.call_id, c.result) for c in ping.calls] == [("c2", "pong")]
    assert [(s.turn, s.context_length, s.last and s.last.role) for s in model.seen] == [
        (0, 1, "user"),
        (1, 3, "tool"),
        (2, 5, "tool"),
    ]
    assert out["messages"][-1].text() == "all done"


async def test_a_script_that_runs_out_names_itself() -> None:
    model = ScriptedModel([ask_tool("ping", call_id="c1")], name="short script")
    app = agent_graph(model, RecordingTool.returning("ping")).compile(MemoryEventStore())
    with pytest.raises(Exception) as caught:
        await app.ainvoke("hi", {"thread_id": "t"})
    chain: BaseException | None = caught.value
    while chain is not None and not isinstance(chain, ScriptExhaustedError):
        chain = chain.__cause__
    text = str(chain) if chain is not None else str(caught.value)
    assert "'short script' has no reply for turn 1" in text
    with pytest.raises(TypeError, match="list of replies"):
        ScriptedModel("not a list")


async def test_a_script_may_be_a_function_of_the_state() -> None:
    def answer(state: AgentState) -> str:
        return f"you said {state.context[-1].text()}"

    app = agent_graph(ScriptedModel(answer)).compile(MemoryEventStore())
    out = await app.ainvoke("hello", {"thread_id": "t"})
    assert out["messages"][-1].text() == "you said hello"


async def test_a_failing_call_is_recorded_as_failed() -> None:
    lookup = RecordingTool(lookup_order, fail={1: ConnectionError("orders db down")})
    model = ScriptedModel(
        [ask_tool("lookup_order", call_id="c1", order_id=1),
         ask_tool("lookup_order", call_id="c2", order_id=2), "ok"]
    )  # fmt: skip
    store = MemoryEventStore()
    out = await agent_graph(model, lookup).compile(store).ainvoke("go", {"thread_id": "t"})
    assert out["status"] == "completed"
    assert [(c.call_id, c.outcome) for c in lookup.calls] == [("c1", "failed"), ("c2", "completed")]
    assert isinstance(lookup.calls[0].error, ConnectionError)
    assert await finished(store, "t") == [("c1", "failed"), ("c2", "completed")]


async def test_a_hanging_call_is_cancelled_by_a_stop_and_a_released_one_finishes(
    tmp_path: Path,
) -> None:
    lookup = RecordingTool(lookup_order, hang={1, 2})
    model = ScriptedModel(
        [ask_tool("lookup_order", call_id="c1", order_id=1), "stopped",
         ask_tool("lookup_order", call_id="c2", order_id=2), "done"]
    )  # fmt: skip
    async with SQLiteEventStore(tmp_path / "hang.db") as store:
        app = agent_graph(model, lookup).compile(store)
        config = {"thread_id": "t"}
        task = asyncio.create_task(app.ainvoke("go", config))
        await asyncio.wait_for(lookup.hanging.wait(), WAIT)
        assert await app.astop(config) is True
        out = await asyncio.wait_for(task, WAIT)
        assert out["status"] == "interrupted_before"
        assert [(c.call_id, c.outcome) for c in lookup.calls] == [("c1", "cancelled")]
        assert await finished(store, "t") == [("c1", "abandoned")]

        resumed = await asyncio.wait_for(app.ainvoke(None, config), WAIT)
        assert resumed["status"] == "completed"
        assert len(lookup.calls) == 1, "an abandoned call must never run again"

        lookup.release()  # the second call, told to hang too, goes straight on
        done = await asyncio.wait_for(app.ainvoke("again", config), WAIT)
        assert done["status"] == "completed"
        assert [(c.call_id, c.outcome) for c in lookup.calls] == [
            ("c1", "cancelled"),
            ("c2", "completed"),
        ]
        state = await app.aget_state(config)
        assert replay([r async for r in store.read("t")], AgentState) == state


async def test_a_slow_call_times_out_under_a_node_timeout() -> None:
    lookup = RecordingTool(lookup_order, slow={1: 30.0})
    model = ScriptedModel([ask_tool("lookup_order", call_id="c1", order_id=1), "done"])
    store = MemoryEventStore()
    app = agent_graph(model, lookup).compile(store, node_timeouts={"tools": 0.1})
    with pytest.raises(NodeTimeoutError):
        await asyncio.wait_for(app.ainvoke("go", {"thread_id": "t"}), WAIT)
    assert [(c.call_id, c.outcome) for c in lookup.calls] == [("c1", "cancelled")]
    assert await finished(store, "t") == [("c1", "abandoned")]


def test_a_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock(100.0)
    assert clock() == clock() == 100.0
    assert clock.advance(2.5) == 102.5 == clock()
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)


def envelope(record: EventRecord) -> tuple[Any, ...]:
    return (record.seq, record.run_id, record.actor, record.at, record.kind, record.version,
            record.hash)  # fmt: skip


async def seeded_run(tmp_path: Path, name: str) -> list[Any]:
    """One run of a scripted graph under seed 7; its records as (envelope, payload)."""
    clock = FakeClock()

    with seeded_ids(7, clock=clock):
        lookup = RecordingTool(lookup_order)
        model = ScriptedModel([ask_tool("lookup_order", order_id=3), "shipped", "welcome"])
        async with SQLiteEventStore(tmp_path / name, clock=clock) as store:
            app = agent_graph(model, lookup).compile(store)
            await app.ainvoke("where is order 3?", {"thread_id": "t"})
            clock.advance(60)
            await app.ainvoke("thanks", {"thread_id": "t"})
            return [(envelope(r), r.event) async for r in store.read("t")]


async def test_two_runs_under_one_seed_write_the_same_log(tmp_path: Path) -> None:
    first = await seeded_run(tmp_path, "a.db")
    second = await seeded_run(tmp_path, "b.db")
    assert len(first) > 8
    assert first == second
    assert {env[3] for env, _ in first} == {1_700_000_000.0, 1_700_000_060.0}


def test_seeded_ids_look_like_uuid4_and_differ_by_seed() -> None:
    with seeded_ids(7) as clock:
        a = [generate_id() for _ in range(3)]
        message = Message.text_message("x")
        assert message.timestamp == clock()
    with seeded_ids(7):
        assert [generate_id() for _ in range(3)] == a
    with seeded_ids(8):
        assert generate_id() not in a
    assert all(uuid.UUID(str(i)).version == 4 for i in a)
    assert len(set(a)) == 3


def test_outside_seeded_ids_ids_are_fresh_uuid4_strings_and_times_are_now() -> None:
    with seeded_ids(7):
        pass
    ids = {generate_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(isinstance(i, str) and uuid.UUID(i).version == 4 for i in ids)
    assert generate_id("kept") == "kept"
    message = reply("hi")
    assert message.timestamp is not None and message.timestamp > 1_750_000_000
    assert uuid.UUID(str(message.message_id)).version == 4


def test_the_module_imports_without_pytest_or_hypothesis() -> None:
    code = (
        "import sys; sys.modules['pytest'] = None; sys.modules['hypothesis'] = None\n"
        "import agentlog.actors.testing\n"
        "assert agentlog.actors.testing.ScriptedModel and agentlog.actors.testing.seeded_ids\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
