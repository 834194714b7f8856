"""A call's durability mode: the same run, the same log and the same state in every mode;
what differs is only when records land, and a commit with a tool call's records or the
run's rest is durable at once in all of them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.actors import END, InvalidDurabilityError, StateGraph, ToolNode
from agentlog.events import (
    MemoryEventStore,
    StepAdvanced,
    ToolCallFinished,
)
from agentlog.projections import AgentState, Message, ToolCallBlock, replay
from tests.helpers import thread_log

CFG = {"thread_id": "t1"}
MODES = ("sync", "async", "exit")


class Work(AgentState):
    done: list[str] = []


def build(
    gate: asyncio.Event | None = None,
    ran: list[str] | None = None,
    holding: asyncio.Event | None = None,
) -> Any:
    """plan -> tools (one call) -> a -> b -> hold (sets `holding`, waits on `gate`) -> END."""
    ran = [] if ran is None else ran

    async def lookup(key: str) -> str:
        """Look a key up."""
        ran.append(key)
        return f"value of {key}"

    async def plan(state: Work) -> list[Message]:
        call = ToolCallBlock(id="c1", name="lookup", args={"key": "k"})
        return [Message(role="assistant", content=[call])]

    def step(name: str) -> Any:
        async def node(state: Work) -> dict[str, Any]:
            return {"done": [*state.done, name]}

        return node

    async def hold(state: Work) -> dict[str, Any]:
        if holding is not None:
            holding.set()
        if gate is not None:
            await gate.wait()
        return {"done": [*state.done, "hold"]}

    graph = StateGraph(Work)
    graph.add_node("plan", plan)
    graph.add_node("tools", ToolNode([lookup]))
    for name in ("a", "b"):
        graph.add_node(name, step(name))
    graph.add_node("hold", hold)
    graph.set_entry_point("plan")
    for a, b in [("plan", "tools"), ("tools", "a"), ("a", "b"), ("b", "hold"), ("hold", END)]:
        graph.add_edge(a, b)
    return graph.compile(checkpointer=MemoryEventStore())


async def logged(app: Any) -> list[Any]:
    return await thread_log(app.store, "t1")


async def test_every_mode_writes_the_same_log_and_state() -> None:
    seen = {}
    for mode in MODES:
        app = build()
        await app.ainvoke("go", CFG, durability=mode)
        records = await logged(app)
        state = await app.aget_state(CFG)
        assert state.done == ["a", "b", "hold"]
        assert replay(records, Work) == state
        seen[mode] = [(r.seq, r.kind, r.actor, r.run_id is not None) for r in records]
    assert seen["async"] == seen["sync"] == seen["exit"]


async def test_a_bad_mode_is_refused_before_anything_is_written() -> None:
    app = build()
    with pytest.raises(InvalidDurabilityError, match="sync, async, exit"):
        await app.ainvoke("go", CFG, durability="never")
    assert await logged(app) == []


@pytest.mark.parametrize("mode", MODES)
async def test_what_the_log_holds_while_a_later_step_runs(mode: str) -> None:
    gate, holding = asyncio.Event(), asyncio.Event()
    ran: list[str] = []
    app = build(gate, ran, holding)
    running = asyncio.ensure_future(app.ainvoke("go", CFG, durability=mode))
    await holding.wait()  # the last node runs: a and b have committed (or are held)
    records = await logged(app)
    steps = sum(isinstance(r.event, StepAdvanced) for r in records)
    finished = any(isinstance(r.event, ToolCallFinished) for r in records)
    assert finished  # a tool call's records are durable in every mode
    if mode == "sync":
        assert steps == 4  # plan, tools, a, b: every step before the running one
    elif mode == "async":
        assert steps >= 3  # at most the last step is still in flight
    else:
        assert steps == 1  # plan only: held since the tool's records landed
    gate.set()
    await running
    assert len(await logged(app)) > len(records) or mode == "sync"
    assert ran == ["k"]
    assert (await app.aget_state(CFG)).done == ["a", "b", "hold"]


@settings(max_examples=10, deadline=None)
@given(mode=st.sampled_from(MODES), stop_at=st.sampled_from(["a", "b", "hold"]))
def test_a_stop_in_any_mode_pauses_the_run_and_resume_finishes_it(mode: str, stop_at: str) -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        app = build(gate)
        running = asyncio.ensure_future(app.ainvoke("go", CFG, durability=mode))
        while "t1" not in await app.store.threads():
            await asyncio.sleep(0)
        await app.astop(CFG)
        gate.set()
        await running
        await app.ainvoke(None, CFG, durability=mode)
        state = await app.aget_state(CFG)
        assert state.done == ["a", "b", "hold"]
        assert replay(await logged(app), Work) == state

    asyncio.run(scenario())
