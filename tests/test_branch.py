"""A run or an edit at a past checkpoint of a thread, in process (`agentlog.langgraph`):
the thread goes back there with one record at its head, through the commit path, and goes
on from there; what followed stays in the log and the history, the chain verifies, and the
log folded from its first record is the live state. A thread whose run is going refuses,
writing nothing."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.actors.engine.branch import branch_thread
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.testing import until
from agentlog.events import MemoryEventStore, SQLiteEventStore, ThreadBusyError
from agentlog.langgraph import END, START, StateGraph
from agentlog.projections.invariants import thread_findings
from agentlog.projections.views import state_at
from tests.helpers import agentlog


class Counted(TypedDict):
    seen: Annotated[list[str], operator.add]


def counted(store: Any, gate: asyncio.Event | None = None) -> Any:
    async def one(state: Counted) -> dict[str, Any]:
        return {"seen": ["one"]}

    async def two(state: Counted) -> dict[str, Any]:
        if gate is not None:
            await gate.wait()
        return {"seen": ["two"]}

    builder = StateGraph(Counted)
    builder.add_node("one", one)
    builder.add_node("two", two)
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", END)
    return builder.compile(store)


async def replayed_is_live(graph: Any, thread: str) -> None:
    engine = graph.graph_engine
    state_cls = engine.graph.state_cls
    replayed = await state_at(engine.store, thread, state_cls=state_cls, use_snapshots=False)
    live = await engine.aget_state({"thread_id": thread})
    assert replayed.model_dump() == live.model_dump()
    assert (await engine.store.verify(thread)).ok
    assert (await thread_findings(engine.store, thread)).ok


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(points=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=3))
async def test_runs_at_past_checkpoints_replay_to_the_live_state(points: list[int]) -> None:
    graph = counted(MemoryEventStore())
    config = {"configurable": {"thread_id": "t"}}
    await graph.ainvoke({"seen": ["start"]}, config)
    for point in points:
        history = await graph.aget_state_history(config)
        past = history[point % len(history)]
        done = await graph.ainvoke(None, past.config)
        assert done["seen"][: len(past.values["seen"])] == past.values["seen"]
        assert done["seen"][-1] == "two"
        now = await graph.aget_state_history(config)
        assert len(now) >= len(history)  # every step stays in the history
        steps = [s.metadata["step"] for s in now]
        assert steps == sorted(steps, reverse=True)  # steps keep counting on a branch
        await replayed_is_live(graph, "t")


async def test_a_new_input_at_a_past_checkpoint_starts_from_its_state() -> None:
    graph = counted(MemoryEventStore())
    config = {"configurable": {"thread_id": "t"}}
    await graph.ainvoke({"seen": ["a"]}, config)
    oldest = (await graph.aget_state_history(config))[-1]
    done = await graph.ainvoke({"seen": ["b"]}, oldest.config)
    assert done["seen"][: len(oldest.values["seen"])] == oldest.values["seen"]
    assert "b" in done["seen"]
    await replayed_is_live(graph, "t")


async def test_a_new_input_at_the_checkpoint_that_ended_a_run_runs_the_graph_again() -> None:
    """The last step of a run is a checkpoint with nothing next: a new input there starts a
    new run from the entry, as at the head, not a resume of the old run at its end."""
    graph = counted(MemoryEventStore())
    config = {"configurable": {"thread_id": "t"}}
    await graph.ainvoke({"seen": ["a"]}, config)
    await graph.ainvoke({"seen": ["b"]}, config)
    ended = next(s for s in reversed(await graph.aget_state_history(config)) if not s.next)
    assert ended.values["seen"] == ["a", "one", "two"]
    done = await graph.ainvoke({"seen": ["c"]}, ended.config)
    assert done["seen"] == ["a", "one", "two", "c", "one", "two"]
    await replayed_is_live(graph, "t")
    forked = await graph.graph_engine.aget_state({"thread_id": "t"})
    assert forked.execution_meta.status.value == "completed"


async def test_a_thread_whose_run_is_going_refuses_writing_nothing() -> None:
    gate = asyncio.Event()
    graph = counted(MemoryEventStore(), gate)
    config = {"configurable": {"thread_id": "t"}}
    running = asyncio.ensure_future(graph.ainvoke({"seen": ["a"]}, config))
    engine = graph.graph_engine

    async def in_two() -> bool:
        if not await engine.store.last_seq("t"):
            return False
        state = await engine.aget_state({"thread_id": "t"})
        return state.execution_meta.current_node == "two"

    await until(in_two, what="the run to enter node two")
    head = await engine.store.last_seq("t")
    (step,) = await engine.aget_state_history({"thread_id": "t"})  # its claim holds it
    with pytest.raises(ThreadBusyError):
        await branch_thread(engine, "t", at_seq=step.last_seq, actor="ann")
    past = {"configurable": {"thread_id": "t", "checkpoint_id": str(step.last_seq)}}
    with pytest.raises(ThreadBusyError):
        await graph.aupdate_state(past, {"seen": ["edited"]})
    assert await engine.store.last_seq("t") == head
    gate.set()
    await running
    await replayed_is_live(graph, "t")


async def test_breakpoints_of_one_call_pause_that_call_only() -> None:
    graph = counted(MemoryEventStore())
    config = {"configurable": {"thread_id": "t"}}
    paused = await graph.ainvoke({"seen": ["a"]}, config, interrupt_before=["two"])
    assert paused["seen"] == ["a", "one"]
    assert (await graph.aget_state(config)).next == ("two",)
    assert (await graph.ainvoke(None, config))["seen"] == ["a", "one", "two"]
    parts = [p async for p in graph.astream({"seen": ["b"]}, config, interrupt_after="*")]
    assert (await graph.aget_state(config)).next == ("two",), parts
    with pytest.raises(GraphError, match=r"'three'.*one, two"):
        await graph.ainvoke({"seen": ["c"]}, config, interrupt_before=["three"])


async def test_agentlog_verify_passes_on_a_thread_that_went_back(tmp_path: Any) -> None:
    path = tmp_path / "log.db"
    async with SQLiteEventStore(str(path)) as store:
        graph = counted(store)
        config = {"configurable": {"thread_id": "t"}}
        await graph.ainvoke({"seen": ["a"]}, config)
        oldest = (await graph.aget_state_history(config))[-1]
        await graph.aupdate_state(oldest.config, {"seen": ["edited"]})
        await graph.ainvoke(None, config)
        await replayed_is_live(graph, "t")
    checked = agentlog("verify", "t", "--snapshots", "--db", path)
    assert checked.returncode == 0, (checked.stdout, checked.stderr)
    shown = agentlog("history", "t", "--db", path)
    assert "from t@" in shown.stdout  # the timeline names where the thread went back to
