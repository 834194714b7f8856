"""Facts a node records beside its step (a model call, an outcome, a shared write), and
chunks it streams: the facts ride in the step's one commit, so a step that never commits
leaves none behind; chunks reach `astream` consumers and never the log."""

from __future__ import annotations

from typing import Any

import pytest

from agentlog.actors import END, NotInNodeError, StateGraph, current_context
from agentlog.events import (
    MemoryEventStore,
    ModelCalled,
    OutcomeRecorded,
    SharedWritten,
    StepAdvanced,
)
from agentlog.projections import AgentState, Message, StreamChunk, StreamEvent

CFG = {"configurable": {"thread_id": "t1"}}


def called(node: str, attempt: int = 1, status: str = "completed") -> ModelCalled:
    return ModelCalled(
        node=node, provider="test", model="m", request_hash="h", attempt=attempt, status=status
    )


def one_node(fn: Any) -> Any:
    builder = StateGraph()
    builder.add_node("agent", fn)
    builder.set_entry_point("agent")
    builder.add_edge("agent", END)
    store = MemoryEventStore()
    return builder.compile(checkpointer=store), store


async def kinds(store: MemoryEventStore) -> list[str]:
    return [r.kind async for r in store.read("t1")]


@pytest.mark.parametrize("sync", [True, False])
async def test_recorded_facts_ride_in_the_step_commit_before_its_outputs(sync: bool) -> None:
    def work() -> dict[str, Any]:
        current_context().record(called("agent"))
        current_context().record(OutcomeRecorded(metric="solved", value=1.0, node="agent"))
        return {"messages": [Message.text_message("done", role="assistant")]}

    async def awork() -> dict[str, Any]:
        return work()

    graph, store = one_node(work if sync else awork)
    await graph.ainvoke({"messages": [Message.text_message("hi")]}, config=CFG)
    records = [r async for r in store.read("t1")]
    step = next(r for r in records if r.kind == "step_advanced")
    facts = [r for r in records if r.kind in ("model_called", "outcome_recorded")]
    reply = [r for r in records if r.kind == "message_appended"][-1]
    assert [r.kind for r in facts] == ["model_called", "outcome_recorded"]
    assert facts[0].seq + 2 == reply.seq and reply.seq < step.seq
    assert all(r.actor == "agent" for r in facts)
    assert isinstance(step.event, StepAdvanced)


async def test_a_failed_step_keeps_its_model_calls_and_drops_its_writes() -> None:
    def work() -> None:
        context = current_context()
        context.record(called("agent", status="failed"))
        context.record(SharedWritten(key="g/n", op="increment", value=1, node="agent"))
        context.record(OutcomeRecorded(metric="solved", value=1.0))
        raise RuntimeError("the provider refused")

    graph, store = one_node(work)
    with pytest.raises(Exception, match="refused"):
        await graph.ainvoke({"messages": [Message.text_message("hi")]}, config=CFG)
    tail = (await kinds(store))[-2:]
    assert tail == ["model_called", "run_failed"]
    assert "shared_written" not in await kinds(store)
    assert "outcome_recorded" not in await kinds(store)


async def test_a_node_records_only_facts() -> None:
    def work() -> None:
        current_context().record(StepAdvanced(step=9, next_node="__end__"))

    graph, store = one_node(work)
    with pytest.raises(Exception, match="records only model_called, outcome_recorded"):
        await graph.ainvoke({"messages": [Message.text_message("hi")]}, config=CFG)
    assert "step_advanced" not in await kinds(store)


def test_the_context_outside_a_node_is_a_typed_error() -> None:
    with pytest.raises(NotInNodeError, match="inside a node"):
        current_context()


async def test_published_chunks_reach_astream_and_never_the_log() -> None:
    async def work(state: AgentState) -> dict[str, Any]:
        for part in ("he", "llo"):
            await current_context().publish(
                StreamChunk(event=StreamEvent.MESSAGE, data={"delta": part})
            )
        return {"messages": [Message.text_message("hello", role="assistant")]}

    graph, store = one_node(work)
    seen = [
        chunk
        async for chunk in graph.astream({"messages": [Message.text_message("hi")]}, config=CFG)
    ]
    deltas = [c.data["delta"] for c in seen if c.data and "delta" in c.data]
    assert deltas == ["he", "llo"]
    assert all(c.thread_id == "t1" for c in seen if c.data and "delta" in c.data)
    assert (await kinds(store)).count("message_appended") == 2
    # and with no consumer, publishing is a no-op
    await graph.ainvoke({"messages": [Message.text_message("again")]}, config=CFG)


def test_history_says_what_each_fact_was() -> None:
    from agentlog.events import OutcomeRecorded, RunSuperseded
    from agentlog.projections.fold import uncommitted_record
    from agentlog.projections.timetravel import summarize

    def said(event: Any) -> str:
        return summarize(uncommitted_record(event, 1, "t"))

    call = ModelCalled(
        node="agent", provider="openai", model="gpt-x", request_hash="h", attempt=2,
        usage={"prompt_tokens": 30, "completion_tokens": 12}, latency_ms=812.4,
    )  # fmt: skip
    assert said(call) == "openai:gpt-x attempt 2 completed, 42 tokens, 812 ms"
    failed = ModelCalled(
        node="a", provider="anthropic", model="m", request_hash="h", status="failed",
        error="429 rate limited",
    )  # fmt: skip
    assert said(failed).endswith("failed, 0 ms: 429 rate limited")
    assert said(SharedWritten(key="g/n", op="increment", value=2)) == "shared increment g/n 2"
    assert said(OutcomeRecorded(metric="solved", value=True, goal_id="q")) == (
        "outcome solved = True (goal q)"
    )
    assert said(RunSuperseded(run_id="run-1", by="api", started_seq=5)) == (
        "run run-1 rolled back by api to seq 4"
    )


def test_a_call_answered_from_the_log_spent_no_tokens() -> None:
    from agentlog.actors.cli.render import usage_report
    from agentlog.projections.fold import uncommitted_record
    from agentlog.projections.timetravel import summarize

    replayed = ModelCalled(
        node="agent", provider="openai", model="m", request_hash="h",
        params={"answered_from_log": True}, usage={"total_tokens": 900},
    )  # fmt: skip
    record = uncommitted_record(replayed, 1, "t")
    assert summarize(record) == "openai:m attempt 1 completed, answered from the log"
    report = usage_report([record])
    assert report.total.total_tokens == 0 and report.total.calls == 1


def test_history_names_an_abandoned_call_once() -> None:
    """A closing text already begins with its status; history does not say it twice."""
    from agentlog.actors.engine.ending import abandoned_text
    from agentlog.events import ToolCallFinished
    from agentlog.projections.fold import uncommitted_record
    from agentlog.projections.timetravel import summarize

    event = ToolCallFinished(
        call_id="l-1", name="lookup", status="abandoned", error=abandoned_text("cancelled by al")
    )
    said = summarize(uncommitted_record(event, 1, "t"))
    assert said.startswith("lookup abandoned: cancelled by al; the call had started"), said


def test_history_says_who_cancelled_a_run_and_why() -> None:
    """`run_cancelled` keeps who and why; history says them, not only the node."""
    from agentlog.events.kinds import RunCancelled
    from agentlog.projections.fold import uncommitted_record
    from agentlog.projections.timetravel import summarize

    event = RunCancelled(by="alice", reason="duplicate ticket", node="tools", in_flight=["l-1"])
    said = summarize(uncommitted_record(event, 1, "t"))
    assert said == "cancelled by alice (duplicate ticket) at node tools; cut short: l-1", said
