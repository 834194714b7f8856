"""A node's retry policy: each failed attempt and its retry are records, the node runs again
until it succeeds or the attempts run out, a committed tool call never runs again, the wait
gives way to a stop, and a replay of the log is the live state."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.actors import END, GraphError, NodeError, StateGraph, ToolNode
from agentlog.actors.engine import retry
from agentlog.actors.engine.retry import RETRIED_BY, InvalidRetryPolicyError, RetryPolicy
from agentlog.actors.runtime import RegistrationError
from agentlog.actors.runtime import RetryPolicy as RuntimeRetryPolicy
from agentlog.events import MemoryEventStore, Resumed, RunFailed, ToolCallStarted
from agentlog.projections import AgentState, Message, StopRequestStatus, ToolCallBlock, replay

CFG = {"thread_id": "t1"}


class Counted(AgentState):
    tries: int = 0
    done: bool = False


def flaky(fails: int, error: type[Exception] = ConnectionError) -> tuple[Any, list[int]]:
    """A node that raises `fails` times, then succeeds; the list counts its calls."""
    calls: list[int] = []

    async def node(state: Counted) -> dict[str, Any]:
        calls.append(1)
        if len(calls) <= fails:
            raise error(f"attempt {len(calls)} failed")
        return {"tries": len(calls), "done": True}

    return node, calls


def graph_of(node: Any, policy: Any) -> Any:
    graph = StateGraph(Counted)
    graph.add_node("work", node, retry_policy=policy)
    graph.set_entry_point("work")
    graph.add_edge("work", END)
    return graph.compile(checkpointer=MemoryEventStore())


async def records_of(app: Any) -> list[Any]:
    return [r async for r in app.store.read("t1")]


@settings(max_examples=25, deadline=None)
@given(fails=st.integers(0, 5), max_attempts=st.integers(1, 5))
def test_a_node_failing_n_times_is_retried_up_to_max_attempts(
    fails: int, max_attempts: int
) -> None:
    async def scenario() -> None:
        node, calls = flaky(fails)
        app = graph_of(node, RetryPolicy(max_attempts=max_attempts, backoff_s=0))
        if fails < max_attempts:
            await app.ainvoke("go", CFG)
            state = await app.aget_state(CFG)
            assert state.done and state.tries == fails + 1
        else:
            with pytest.raises(NodeError, match="ConnectionError"):
                await app.ainvoke("go", CFG)
        records = await records_of(app)
        failed = [r for r in records if isinstance(r.event, RunFailed)]
        retried = [r for r in records if isinstance(r.event, Resumed)]
        attempts = min(fails + 1, max_attempts)
        assert len(calls) == attempts
        assert len(failed) == min(fails, max_attempts)  # every failed attempt is a record
        assert len(retried) == attempts - 1  # every retry is a record, by the policy
        assert all(r.event.by == RETRIED_BY and r.event.node == "work" for r in retried)
        assert all(r.event.node == "work" for r in failed)
        assert replay(records, Counted) == await app.aget_state(CFG)  # replay == live

    asyncio.run(scenario())


async def test_an_error_the_policy_does_not_retry_fails_at_once() -> None:
    node, calls = flaky(1, KeyError)
    app = graph_of(node, RetryPolicy(max_attempts=3, backoff_s=0, retry_on=(ConnectionError,)))
    with pytest.raises(NodeError, match="KeyError"):
        await app.ainvoke("go", CFG)
    assert len(calls) == 1
    node, calls = flaky(1, KeyError)
    app = graph_of(node, RetryPolicy(max_attempts=3, backoff_s=0, fatal=(KeyError,)))
    with pytest.raises(NodeError):
        await app.ainvoke("go", CFG)
    assert len(calls) == 1
    node, calls = flaky(1, KeyError)
    app = graph_of(node, RetryPolicy(3, 0, retry_on=lambda e: isinstance(e, KeyError)))
    await app.ainvoke("go", CFG)
    assert (await app.aget_state(CFG)).done


async def test_the_first_policy_that_retries_an_error_decides() -> None:
    node, _ = flaky(3, KeyError)
    policies = [
        RetryPolicy(max_attempts=2, backoff_s=0, retry_on=ConnectionError),
        RetryPolicy(max_attempts=4, backoff_s=0, retry_on=KeyError),
    ]
    app = graph_of(node, policies)
    await app.ainvoke("go", CFG)
    assert (await app.aget_state(CFG)).tries == 4


async def test_the_wait_follows_the_backoff_and_a_stop_cuts_it_short() -> None:
    waits: list[float] = []
    waiting = asyncio.Event()
    never = asyncio.Event()

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        waiting.set()
        await never.wait()  # waits until the stop cuts it short

    node, calls = flaky(1)
    app = graph_of(node, RetryPolicy(max_attempts=3, backoff_s=7.0, backoff_factor=3.0))
    patch = pytest.MonkeyPatch()
    patch.setattr(retry, "SLEEP", sleep)
    try:
        running = asyncio.ensure_future(app.ainvoke("go", CFG))
        await waiting.wait()
        assert waits == [7.0]
        assert await app.astop(CFG)
        await running
    finally:
        patch.undo()
    meta = (await app.aget_state(CFG)).execution_meta
    assert meta.stop_current_execution == StopRequestStatus.STOPPED
    assert len(calls) == 1  # the stop came before the second attempt
    await app.ainvoke(None, CFG)  # resumed: the node runs again
    assert (await app.aget_state(CFG)).done and len(calls) == 2
    records = await records_of(app)
    assert replay(records, Counted) == await app.aget_state(CFG)


def test_delays_grow_by_the_factor_up_to_the_most() -> None:
    policy = RetryPolicy(backoff_s=0.5, backoff_factor=2.0, max_backoff_s=3.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    jittered = RetryPolicy(backoff_s=1.0, jitter=True)
    assert jittered.delay(1, uniform=lambda a, b: 0.25) == 1.25
    assert RuntimeRetryPolicy(3, 1.0).delay(3) == 4.0  # the runtime's, unchanged


def test_a_bad_policy_is_refused_with_what_is_wrong() -> None:
    for bad, words in [
        ({"max_attempts": 0}, "max_attempts"),
        ({"backoff_s": -1}, "backoff_s"),
        ({"backoff_factor": 0.5}, "backoff_factor"),
        ({"max_backoff_s": float("inf")}, "max_backoff_s"),
        ({"retry_on": 3}, "retry_on"),
    ]:
        with pytest.raises(InvalidRetryPolicyError, match=words):
            RetryPolicy(**bad)
        with pytest.raises(RegistrationError, match=words):
            RuntimeRetryPolicy(**bad)
    assert issubclass(InvalidRetryPolicyError, GraphError)
    graph = StateGraph(Counted)
    with pytest.raises(GraphError, match="retry_policy is a RetryPolicy"):
        graph.add_node("work", flaky(0)[0], retry_policy=3)  # type: ignore[arg-type]
    assert "work" not in graph.nodes


async def test_a_retry_never_runs_a_committed_tool_call_again() -> None:
    ran: list[str] = []

    async def lookup(n: int) -> int:
        """Finishes once."""
        ran.append("lookup")
        return n

    async def plan(state: AgentState) -> list[Message]:
        if any(m.role == "tool" for m in state.context):
            return []
        call = ToolCallBlock(id="c1", name="lookup", args={"n": 1})
        return [Message(role="assistant", content=[call])]

    tools = ToolNode([lookup])
    failing = {"left": 2}
    original_run = tools.run

    async def run_then_fail(state: Any, context: Any) -> Any:
        result = await original_run(state, context)  # the call's result commits first
        if failing["left"]:
            failing["left"] -= 1
            raise ConnectionError("the tool node failed after its call committed")
        return result

    object.__setattr__(tools, "run", run_then_fail)
    graph = StateGraph(AgentState)
    graph.add_node("plan", plan)
    graph.add_node("tools", tools, retry_policy=RetryPolicy(max_attempts=3, backoff_s=0))
    graph.set_entry_point("plan")
    graph.add_edge("plan", "tools")
    graph.add_edge("tools", END)
    app = graph.compile(checkpointer=MemoryEventStore())
    await app.ainvoke("go", CFG)
    assert ran == ["lookup"]  # run once, whatever the retries
    records = await records_of(app)
    assert sum(isinstance(r.event, ToolCallStarted) for r in records) == 1
    assert sum(isinstance(r.event, RunFailed) for r in records) == 2
    assert replay(records, AgentState) == await app.aget_state(CFG)


async def test_a_branch_retried_runs_its_whole_step_again_and_merges_as_once() -> None:
    import operator
    from typing import Annotated

    from pydantic import Field

    from agentlog.actors import START, Send

    class Jokes(AgentState):
        jokes: Annotated[list[str], operator.add] = Field(default_factory=list)

    failed: list[str] = []

    async def write(state: dict[str, Any]) -> dict[str, Any]:
        if state["subject"] == "dogs" and not failed:
            failed.append("dogs")
            raise ConnectionError("the joke service did not answer")
        return {"jokes": [f"a joke about {state['subject']}"]}

    graph = StateGraph(Jokes)
    graph.add_node("write", write, retry_policy=RetryPolicy(max_attempts=2, backoff_s=0))
    graph.add_conditional_edges(
        START, lambda s: [Send("write", {"subject": x}) for x in ("cats", "dogs")], ["write"]
    )
    graph.add_edge("write", END)
    app = graph.compile(checkpointer=MemoryEventStore())
    await app.ainvoke({}, CFG)
    state = await app.aget_state(CFG)
    assert state.jokes == ["a joke about cats", "a joke about dogs"]  # once each, in order
    records = await records_of(app)
    assert sum(isinstance(r.event, RunFailed) for r in records) == 1
    assert replay(records, Jokes) == state


async def test_a_caller_cancelling_during_the_wait_leaves_a_run_that_resumes() -> None:
    waiting = asyncio.Event()

    async def sleep(seconds: float) -> None:
        waiting.set()
        await asyncio.Event().wait()  # only a cancel ends it

    node, calls = flaky(1)
    app = graph_of(node, RetryPolicy(max_attempts=3, backoff_s=60.0))
    patch = pytest.MonkeyPatch()
    patch.setattr(retry, "SLEEP", sleep)
    try:
        running = asyncio.ensure_future(app.ainvoke("go", CFG))
        await waiting.wait()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    finally:
        patch.undo()
    stopped = await app.aget_state(CFG)
    assert stopped.execution_meta.stop_current_execution == StopRequestStatus.STOPPED
    assert len(calls) == 1
    await app.ainvoke(None, CFG)  # resumed: the node runs again, and succeeds
    assert (await app.aget_state(CFG)).done and len(calls) == 2
    records = await records_of(app)
    assert replay(records, Counted) == await app.aget_state(CFG)


async def test_each_visit_of_a_node_has_its_own_attempts() -> None:
    calls: list[int] = []

    async def node(state: Counted) -> dict[str, Any]:
        calls.append(1)
        if len(calls) % 2:  # every visit fails once first
            raise ConnectionError("once per visit")
        return {"tries": state.tries + 1}

    graph = StateGraph(Counted)
    graph.add_node("work", node, retry_policy=RetryPolicy(max_attempts=2, backoff_s=0))
    graph.set_entry_point("work")
    graph.add_conditional_edges("work", lambda s: "work" if s.tries < 3 else END)
    app = graph.compile(checkpointer=MemoryEventStore())
    await app.ainvoke("go", CFG)
    assert (await app.aget_state(CFG)).tries == 3 and len(calls) == 6


async def test_a_node_past_its_time_limit_is_retried_and_a_wiring_error_is_not() -> None:
    calls: list[int] = []
    release = asyncio.Event()

    async def slow_once(state: Counted) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            await release.wait()  # only the time limit ends the first attempt
        return {"done": True}

    graph = StateGraph(Counted)
    graph.add_node("work", slow_once, retry_policy=RetryPolicy(max_attempts=2, backoff_s=0))
    graph.set_entry_point("work")
    graph.add_edge("work", END)
    app = graph.compile(checkpointer=MemoryEventStore(), node_timeouts={"work": 0.05})
    await app.ainvoke("go", CFG)
    assert (await app.aget_state(CFG)).done and len(calls) == 2
    failed = [r.event for r in await records_of(app) if isinstance(r.event, RunFailed)]
    assert [f.status for f in failed] == ["timed_out"]

    graph = StateGraph(Counted)
    graph.add_node("work", flaky(0)[0], retry_policy=RetryPolicy(max_attempts=3, backoff_s=0))
    graph.set_entry_point("work")
    graph.add_conditional_edges("work", lambda state: "nowhere")  # found out at run time
    app = graph.compile(checkpointer=MemoryEventStore())
    with pytest.raises(GraphError):
        await app.ainvoke("go", CFG)
    assert not [r for r in await records_of(app) if isinstance(r.event, Resumed)]
