"""lionagi's execution record (`EventStatus`, `Execution`), derived from the log by
`executions(records)`: one per run, node step and tool call, with `pending` for what waited
and `processing` for what was running, also when the process running it was killed."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from agentlog import (
    END,
    EventStatus,
    Execution,
    ExecutionStatus,
    MemoryEventStore,
    Message,
    SQLiteEventStore,
    StateGraph,
    ToolNode,
    executions,
)
from agentlog.actors.engine.run import scratch_records
from agentlog.events.errors import InvalidArgumentError
from agentlog.events.kinds import TriggerAccepted, TriggerDispatched, TriggerFinished
from agentlog.events.statuses import STATUSES
from agentlog.projections import AgentState, ToolCallBlock, replay
from agentlog.projections.strategies import event_sequences
from tests.helpers import spawn_worker, wait_ready

CONFIG = {"configurable": {"thread_id": "t"}}


def test_event_status_and_execution_read_as_lionagi_prints_them() -> None:
    assert str(EventStatus.PENDING) == "pending"
    assert EventStatus.COMPLETED.value == "completed"
    assert {s.value for s in EventStatus} == set(STATUSES)
    exe = Execution(duration=3.5, response={"result": 42}, status=EventStatus.COMPLETED, error=None)
    assert (
        str(exe) == "Execution(status=completed, duration=3.5, response={'result': 42}, error=None)"
    )
    assert Execution().status is EventStatus.PENDING
    assert Execution(status="failed", error="boom").status is EventStatus.FAILED
    hostile = Execution(response="\x1b[2Jok\nfake line", error="\x1b[31m")
    assert "\x1b" not in str(hostile) and "\n" not in str(hostile)
    with pytest.raises(InvalidArgumentError, match="not an EventStatus"):
        Execution(status="done")


def weather(city: str) -> str:
    return f"sunny in {city}"


def agent(state: AgentState) -> list[Message]:
    if state.context[-1].role == "tool":
        return [Message.text_message("it is sunny", role="assistant")]
    call = ToolCallBlock(id="call-1", name="weather", args={"city": "Paris"})
    return [Message(role="assistant", content=[call])]


def weather_graph() -> StateGraph[AgentState]:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([weather]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent", lambda s: "tools" if s.context[-1].tool_calls() else END, ["tools", END]
    )
    graph.add_edge("tools", "agent")
    return graph


def by_action(found: list[Execution]) -> dict[str, list[tuple[str | None, str]]]:
    out: dict[str, list[tuple[str | None, str]]] = {}
    for e in found:
        out.setdefault(str(e.action), []).append((e.name, e.status.value))
    return out


async def test_a_call_waiting_for_approval_is_pending_then_completed() -> None:
    store = MemoryEventStore()
    app = weather_graph().compile(checkpointer=store, interrupt_before=["tools"])
    await app.ainvoke({"messages": [Message.text_message("weather?")]}, CONFIG)
    paused = executions([r async for r in store.read("t")])
    assert by_action(paused) == {
        "run": [(None, "interrupted")],
        "step": [("agent", "completed"), ("tools", "pending")],
        "tool_call": [("weather", "pending")],
    }
    await app.ainvoke(None, CONFIG)
    done = executions([r async for r in store.read("t")])
    assert by_action(done) == {
        "run": [(None, "interrupted"), (None, "completed")],
        "step": [("agent", "completed"), ("tools", "completed"), ("agent", "completed")],
        "tool_call": [("weather", "completed")],
    }
    call = next(e for e in done if e.action == "tool_call")
    assert call.response == "sunny in Paris" and call.error is None and call.id == "call-1"
    assert call.duration is not None and call.duration >= 0
    run = done[-2] if done[-1].action != "run" else done[-1]
    last_run = [e for e in done if e.action == "run"][-1]
    assert (
        last_run.response is not None and last_run.response["content"][0]["text"] == "it is sunny"
    )
    assert run.finished


async def test_a_failing_node_fails_its_step_and_its_run_with_the_error() -> None:
    def broken(state: AgentState) -> None:
        raise ValueError("no forecast today")

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("forecast", broken)
    graph.set_entry_point("forecast")
    graph.add_edge("forecast", END)
    store = MemoryEventStore()
    with pytest.raises(Exception, match="no forecast today"):
        await graph.compile(checkpointer=store).ainvoke({"messages": []}, CONFIG)
    run, step = executions([r async for r in store.read("t")])
    assert (run.action, run.status, step.action, step.status) == ("run", "failed", "step", "failed")
    assert step.error == run.error and "ValueError: no forecast today" in str(step.error)


def test_a_killed_process_leaves_the_call_it_was_running_processing(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    proc = spawn_worker("tool_in_flight", db)
    try:
        wait_ready(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "hanging"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    async def read() -> list[Execution]:
        store = SQLiteEventStore(db)
        await store.open()
        try:
            return executions([r async for r in store.read("t")])
        finally:
            await store.close()

    found = asyncio.run(read())
    calls = {e.name: e for e in found if e.action == "tool_call"}
    assert calls["lookup"].status is EventStatus.COMPLETED
    assert calls["lookup"].response == "notes on tides"
    assert calls["hang"].status is EventStatus.PROCESSING
    assert (calls["hang"].duration, calls["hang"].node) == (None, "tools")
    steps = [(e.name, e.status.value) for e in found if e.action == "step"]
    assert steps == [
        ("agent", "completed"),
        ("tools", "completed"),
        ("agent", "completed"),
        ("tools", "processing"),
    ]
    assert [e.status.value for e in found if e.action == "run"] == ["processing"]
    assert (
        str(calls["hang"])
        == "Execution(status=processing, duration=None, response=None, error=None)"
    )


@settings(max_examples=60, deadline=None)
@given(event_sequences())
def test_the_runs_stand_as_the_fold_says_after_every_record(events: list[Any]) -> None:
    records = scratch_records("t", events, 0, "run-1")
    for n in range(1, len(records) + 1):
        found = executions(records[:n])
        runs = [e for e in found if e.action == "run"]
        assert all(r.finished for r in runs[:-1])
        assert sum(e.status == "processing" for e in found if e.action == "step") <= 1
        status = replay(records[:n]).execution_meta.status
        expected = {
            ExecutionStatus.RUNNING: "processing",
            ExecutionStatus.COMPLETED: "completed",
            ExecutionStatus.ERROR: "failed",
            ExecutionStatus.CANCELLED: "cancelled",
            ExecutionStatus.INTERRUPTED_BEFORE: "interrupted",
            ExecutionStatus.INTERRUPTED_AFTER: "interrupted",
        }[status]
        assert runs[-1].status.value == expected
        for record in records[:n]:
            if record.kind == "tool_call_finished":
                call = next(e for e in found if e.id == record.event.call_id)
                assert call.status.value == record.event.status


def test_a_runtimes_triggers_read_as_queued_running_and_ended() -> None:
    accepted = [
        TriggerAccepted(
            trigger_id=f"tr-{n}",
            entry_point="api",
            graph_id="support",
            thread_id=f"t{n}",
            cause="api",
        )
        for n in range(4)
    ]
    events = [
        *accepted,
        TriggerDispatched(trigger_id="tr-0", attempt=1, thread_seq=0),
        TriggerFinished(trigger_id="tr-0", outcome="completed"),
        TriggerDispatched(trigger_id="tr-1", attempt=1, thread_seq=0),
        TriggerFinished(
            trigger_id="tr-1",
            outcome="failed",
            error_type="NodeError",
            message="boom",
            retry_at=10.0,
        ),
        TriggerDispatched(trigger_id="tr-2", attempt=1, thread_seq=0),
    ]
    found = executions(scratch_records("__runtime__", events, 0))
    assert [(e.action, e.id, e.name, e.status.value) for e in found] == [
        ("trigger", "tr-0", "api", "completed"),
        ("trigger", "tr-1", "api", "pending"),  # failed, and queued again for its retry
        ("trigger", "tr-2", "api", "processing"),  # running when the records end
        ("trigger", "tr-3", "api", "pending"),  # accepted, never handed to its graph
    ]
    assert found[1].error == "NodeError: boom"
