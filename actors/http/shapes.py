"""The JSON the API answers with: a thread, a state, a step of history, a run, and a record
as a live stream sends it. Values that cannot be shown (nesting too deep) are left out and
said so (`values_error`, `messages_error`): one thread's value never fails a listing."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentlog.actors.http.errors import classify
from agentlog.actors.http.limits import MAX_DEPTH, nesting_within, showable, shown
from agentlog.actors.runtime.facade import StepEntry, TriggerState, created_metadata
from agentlog.events import EventRecord
from agentlog.projections import AgentState, present
from agentlog.projections.edge import to_builtins


def thread_json(
    thread_id: str,
    graph: str,
    state: AgentState,
    created_at: float | None = None,
    updated_at: float | None = None,
    with_values: bool = True,
) -> dict[str, Any]:
    """The thread; without its values (`"values": null`) unless `with_values`: a long
    thread's state is most of what shaping it costs."""
    values, unshown = shown(state) if with_values else (None, None)
    metadata = created_metadata(state) if unshown is None else shown_metadata(state)
    return present.thread(
        thread_id,
        graph,
        state,
        values=values,
        values_error=unshown,
        metadata=metadata,
        created_at=created_at,
        updated_at=updated_at,
    )


def unreadable_json(thread_id: str, graph: str, exc: Exception) -> dict[str, Any]:
    """A search's row for a thread whose state could not be read: its id, and why."""
    _, code, message = classify(exc)
    return {"thread_id": thread_id, "graph_id": graph, "error": {"code": code, "message": message}}


def shown_metadata(state: AgentState) -> dict[str, Any]:
    """The creation metadata, or {} when it nests too deep to show (written before the
    limit): one thread's value never fails a listing."""
    metadata = created_metadata(state)
    return metadata if nesting_within(metadata, 2 * MAX_DEPTH) else {}


def state_json(thread_id: str, state: AgentState) -> dict[str, Any]:
    values, unshown = shown(state)
    return present.thread_state(thread_id, state, values=values, values_error=unshown)


def step_json(entry: StepEntry) -> dict[str, Any]:
    """One step of a thread's history, with the messages it added."""
    messages, unshown = showable([to_builtins(m) for m in entry.messages], "the step")
    return {
        "step": entry.step,
        "node": entry.node,
        "status": entry.status,
        "first_seq": entry.first_seq,
        "last_seq": entry.last_seq,
        "at": entry.at,
        "messages": messages,
        **({"messages_error": unshown} if unshown else {}),
    }


def run_json(trigger: TriggerState, running: bool) -> dict[str, Any]:
    """A run (`running`: it executes now)."""
    accepted = trigger.accepted
    if running:
        status = "running"
    elif not trigger.done:
        status = "pending"
    else:
        status = {"completed": "success", "interrupted": "interrupted"}.get(
            trigger.outcome or "", trigger.outcome or "pending"
        )
    return {
        "run_id": trigger.id,
        "thread_id": accepted.thread_id,
        "assistant_id": accepted.entry_point,
        "graph_id": accepted.graph_id,
        "status": status,
        "created_at": trigger.accepted_at,
        "updated_at": trigger.updated_at,
        "attempt": trigger.attempt,
        "cause": accepted.cause,
        "created_by": accepted.by,
        "idempotency_key": accepted.idempotency_key,
        "correlation_id": accepted.correlation_id,
        "error": (
            {"type": trigger.error_type, "message": trigger.message}
            if trigger.outcome == "failed"
            else None
        ),
    }


class ThreadShape(BaseModel):
    """A thread as `thread_json` shows it."""

    model_config = ConfigDict(extra="allow")

    thread_id: str
    graph_id: str | None
    created_at: float | None
    updated_at: float | None
    metadata: dict[str, Any]
    status: str
    step: int
    hidden: bool
    interrupts: Any
    messages: int
    values: Any


class StateShape(BaseModel):
    """A thread's state as `state_json` shows it."""

    model_config = ConfigDict(extra="allow")

    thread_id: str
    values: Any
    next: list[str]
    step: int
    status: str
    interrupts: Any


class StepShape(BaseModel):
    """A history entry as `step_json` shows it."""

    model_config = ConfigDict(extra="allow")

    step: int
    node: str | None
    status: str
    first_seq: int
    last_seq: int
    at: float | None
    messages: Any


class HiddenShape(BaseModel):
    thread_id: str
    hidden: bool
    erased: bool


class ForkedFrom(BaseModel):
    thread_id: str
    step: int | None


class ForkShape(BaseModel):
    thread_id: str
    forked_from: ForkedFrom


class RunShape(BaseModel):
    """A run as `run_json` shows it (the OpenAPI document's `Run` of the /log routes)."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    thread_id: str
    assistant_id: str
    graph_id: str | None
    status: str
    created_at: float | None
    updated_at: float | None
    attempt: int
    cause: Any
    created_by: str | None
    idempotency_key: str | None
    correlation_id: str | None
    error: dict[str, Any] | None


class RunResultShape(BaseModel):
    """A waited-for run: the run, and its thread's state as `state_json` shows it."""

    model_config = ConfigDict(extra="allow")

    run: RunShape
    thread_id: str


def record_json(record: EventRecord, run_id: str | None) -> dict[str, Any]:
    """A record of the log, naming its run (the API's run id)."""
    return present.record_event(record, run_id)


def sse_record(record: EventRecord, run_id: str | None) -> str:
    """A record as one Server-Sent Event: its position is its id."""
    payload = json.dumps(record_json(record, run_id), ensure_ascii=True, default=str)
    return f"id: {record.position}\nevent: {record.kind}\ndata: {payload}\n\n"
