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
    StopRequested,
    ToolCallFinished,
)
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    Message,
    StopRequestStatus,
    ToolCallBlock,
    replay,
)
from tests.helpers import thread_log
from tests.workers.pg_env import DSN, fresh_schema, needs_pg

CFG = {"thread_id": "t1"}
MODES = ("sync", "async", "exit")


class Work(AgentState):
    done: list[str] = []


def build(
    gate: asyncio.Event | None = None,
    ran: list[str] | None = None,
    holding: asyncio.Event | None = None,
    hold_at: str = "hold",
) -> Any:
    """plan -> tools (one call) -> a -> b -> hold -> END; node `hold_at` sets `holding` and
    waits on `gate`."""
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
            if name == hold_at:
                if holding is not None:
                    holding.set()
                if gate is not None:
                    await gate.wait()
            return {"done": [*state.done, name]}

        return node

    graph = StateGraph(Work)
    graph.add_node("plan", plan)
    graph.add_node("tools", ToolNode([lookup]))
    for name in ("a", "b"):
        graph.add_node(name, step(name))
    graph.add_node("hold", step("hold"))
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


@settings(max_examples=12, deadline=None)
@given(mode=st.sampled_from(MODES), stop_at=st.sampled_from(["a", "b", "hold"]))
def test_a_stop_in_any_mode_pauses_the_run_and_resume_finishes_it(mode: str, stop_at: str) -> None:
    """The stop lands while `stop_at` runs, in the log after the run's durable records and
    before those a weaker mode still holds: they land after it, and the run honours it."""

    async def scenario() -> None:
        gate, holding = asyncio.Event(), asyncio.Event()
        app = build(gate, holding=holding, hold_at=stop_at)
        running = asyncio.ensure_future(app.ainvoke("go", CFG, durability=mode))
        await holding.wait()
        assert await app.astop(CFG)
        await running  # the node is cut short by the stop (a quarter second's watch)
        paused = await app.aget_state(CFG)
        assert paused.execution_meta.stop_current_execution == StopRequestStatus.STOPPED
        assert stop_at not in paused.done
        log = await logged(app)
        assert replay(log, Work) == paused
        gate.set()
        await app.ainvoke(None, CFG, durability=mode)
        state = await app.aget_state(CFG)
        assert state.done == ["a", "b", "hold"]
        log = await logged(app)
        assert replay(log, Work) == state
        assert (await app.store.verify("t1")).ok
        assert [r.seq for r in log] == list(range(1, len(log) + 1))

    asyncio.run(scenario())


@pytest.mark.parametrize("mode", ["async", "exit"])
async def test_a_stop_landing_under_an_append_in_flight_is_stepped_over(mode: str) -> None:
    """The stop request takes the seq the run's held append expected: that append lands
    after it, the run reads the log again and pauses at its next commit."""
    app = build()
    store = app.store
    append = store.append
    stopped: list[int] = []

    async def stop_first(thread_id: str, events: Any, **options: Any) -> Any:
        started = options["expected_seq"] > 0  # a stop needs the run's opening in the log
        if not stopped and started and any(isinstance(e, StepAdvanced) for e in events):
            stopped.append(options["expected_seq"])
            assert await app.astop(CFG)  # lands at the seq this append expects
        return await append(thread_id, events, **options)

    store.append = stop_first
    try:
        await app.ainvoke("go", CFG, durability=mode)
    finally:
        del store.append
    paused = await app.aget_state(CFG)
    log = await logged(app)
    assert isinstance(log[stopped[0]].event, StopRequested)  # the seq the append expected
    assert replay(log, Work) == paused and (await store.verify("t1")).ok
    if mode == "async":  # honoured at the run's next commit
        assert paused.execution_meta.stop_current_execution == StopRequestStatus.STOPPED
        await app.ainvoke(None, CFG, durability=mode)
    else:  # it came with the run's last commit: the run had nothing left to stop
        assert paused.execution_meta.status == ExecutionStatus.COMPLETED
    done = await app.aget_state(CFG)
    assert done.done == ["a", "b", "hold"]
    assert replay(await logged(app), Work) == done


@needs_pg
async def test_every_mode_on_postgresql_writes_the_same_log() -> None:
    from agentlog.events.stores.postgres import PostgresEventStore

    seen = {}
    async with fresh_schema() as schema, PostgresEventStore(DSN, schema=schema) as store:
        for mode in MODES:
            app = build().graph.compile(checkpointer=store)
            config = {"thread_id": f"pg-{mode}"}
            await app.ainvoke("go", config, durability=mode)
            state = await app.aget_state(config)
            log = [r async for r in store.read(f"pg-{mode}")]
            assert state.done == ["a", "b", "hold"] and replay(log, Work) == state
            assert (await store.verify(f"pg-{mode}")).ok
            seen[mode] = [(r.seq, r.kind, r.actor) for r in log]
    assert seen["async"] == seen["sync"] == seen["exit"]


async def test_supersteps_write_the_same_log_in_every_mode() -> None:
    import operator
    from typing import Annotated

    from pydantic import Field

    from agentlog.actors import START, Send

    class Jokes(AgentState):
        jokes: Annotated[list[str], operator.add] = Field(default_factory=list)
        checks: Annotated[list[str], operator.add] = Field(default_factory=list)

    async def write(state: dict[str, Any]) -> dict[str, Any]:
        return {"jokes": [f"a joke about {state['subject']}"]}

    def check(name: str) -> Any:
        return lambda state: {"checks": [name]}

    seen = {}
    for mode in MODES:
        graph = StateGraph(Jokes)
        graph.add_node("write", write)
        graph.add_node("spell", check("spell"))
        graph.add_node("tone", check("tone"))
        graph.add_conditional_edges(
            START, lambda s: [Send("write", {"subject": x}) for x in ("ants", "bees")], ["write"]
        )
        graph.add_edge("write", "spell")
        graph.add_edge("write", "tone")
        graph.add_node("pick", check("pick"))
        graph.add_edge(["spell", "tone"], "pick")
        graph.add_edge("pick", END)
        app = graph.compile(checkpointer=MemoryEventStore())
        await app.ainvoke({}, CFG, durability=mode)
        state = await app.aget_state(CFG)
        assert state.jokes == ["a joke about ants", "a joke about bees"]
        assert state.checks == ["spell", "tone", "pick"]
        log = await logged(app)
        assert replay(log, Jokes) == state
        seen[mode] = [(r.seq, r.kind, r.actor) for r in log]
    assert seen["async"] == seen["sync"] == seen["exit"]
