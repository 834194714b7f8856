"""How a thread, a state, a run's result and a record look to a reader: one module that
shapes them for every reader (the command line's `--json`, `ainvoke`'s result, the HTTP API,
`agentlog tail`), so that a thread's status, its pause, its next node, its messages and its
fields are said one way everywhere.

Each reader keeps the keys its users rely on (a wire format, Agentflow's result, the CLI's
`--json`): the shapes differ in which pieces they hold, never in how a piece is worked out.
The pieces (`status`, `stop`, `interrupts`, `next_nodes`, `message`, `fields`) are the
answers of the one fold (`execution_meta`); the shapes are built from them here. Every
function is pure: it reads what it is given and returns builtins (or, for `run_result`, the
models `ainvoke` hands back), with no text meant for people.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import msgspec

from agentlog.events.record import EventRecord
from agentlog.projections.keys import TASKS_KEY
from agentlog.projections.messages import Message
from agentlog.projections.state import (
    AgentState,
    ExecutionState,
    ExecutionStatus,
    StopRequestStatus,
)
from agentlog.projections.timetravel import interrupt_summary

BUILTIN_FIELDS = ("context", "execution_meta")
"""AgentState fields shown on their own; every other field is a custom field."""

_OVER = (ExecutionStatus.COMPLETED, ExecutionStatus.CANCELLED)


# ---- the pieces ------------------------------------------------------------------------------


def status(meta: ExecutionState) -> str:
    """Where the thread's run stands, as the fold says (`ExecutionStatus`)."""
    return meta.status.value


def stop(meta: ExecutionState) -> str | None:
    """The stop status (`StopRequestStatus`) once someone asked the run to stop; else None."""
    asked = meta.stop_current_execution
    return None if asked == StopRequestStatus.NONE else asked.value


def interrupts(meta: ExecutionState) -> list[dict[str, Any]]:
    """The run's pending pause (a stop, too, pauses) as a list of one, or none."""
    pause = interrupt_summary(meta)
    return [pause] if pause is not None else []


def next_nodes(meta: ExecutionState) -> list[str]:
    """The nodes the thread goes on with (each branch of a planned superstep, a node per
    `Send`); none once its run is over."""
    if meta.status in _OVER:
        return []
    planned = meta.internal_data.get(TASKS_KEY) or {}
    if planned.get("step") == meta.step + 1:
        return [str(task.get("node")) for task in planned["tasks"]]
    return [meta.current_node]


def message(message: Message) -> dict[str, Any]:
    """A message as JSON builtins."""
    return message.model_dump(mode="json")


def messages(context: Iterable[Message]) -> list[dict[str, Any]]:
    return [message(m) for m in context]


def fields(state: AgentState, unset: Collection[str] = ()) -> dict[str, Any]:
    """The custom fields (besides the messages and the execution metadata) as JSON builtins,
    leaving out those named `unset` (fields an open state could not give a value)."""
    names = [n for n in type(state).model_fields if n not in BUILTIN_FIELDS and n not in unset]
    data = state.model_dump(mode="json", include=set(names))  # not the whole context
    return {name: data[name] for name in names}


# ---- a thread and its state -------------------------------------------------------------------


def run_position(meta: ExecutionState) -> dict[str, Any]:
    """The thread's run at a glance: status, stop, step and node (`agentlog threads`)."""
    return {
        "status": status(meta),
        "stop": stop(meta),
        "step": meta.step,
        "node": meta.current_node,
    }


def state(
    thread_id: str, seq: int, state: AgentState, unset: Collection[str] = ()
) -> dict[str, Any]:
    """The state of a thread after record `seq`, whole (`agentlog show --json`)."""
    meta = state.execution_meta
    pause = interrupt_summary(meta)
    return {
        "thread_id": thread_id,
        "seq": seq,
        "step": meta.step,
        "status": status(meta),
        "stop": stop(meta),
        "node": meta.current_node,
        "interrupt": pause,
        "messages": messages(state.context),
        "fields": fields(state, unset),
        "state": state.model_dump(mode="json"),
    }


def thread(
    thread_id: str,
    graph_id: str,
    state: AgentState,
    *,
    values: Any,
    values_error: str | None = None,
    metadata: dict[str, Any],
    created_at: float | None = None,
    updated_at: float | None = None,
) -> dict[str, Any]:
    """A thread as a listing shows it (the HTTP API's thread): its run at a glance, how many
    messages it holds and its `values` as the reader may show them (`values_error` says why
    not)."""
    meta = state.execution_meta
    return {
        "thread_id": thread_id,
        "graph_id": graph_id,
        "created_at": created_at,
        "updated_at": updated_at,
        "metadata": metadata,
        "status": status(meta),
        "step": meta.step,
        "hidden": bool(meta.internal_data.get("hidden")),
        "interrupts": interrupts(meta),
        "messages": len(state.context),
        "values": values,
        **({"values_error": values_error} if values_error else {}),
    }


def thread_state(
    thread_id: str, state: AgentState, *, values: Any, values_error: str | None = None
) -> dict[str, Any]:
    """A thread's state as LangGraph's clients read it (the HTTP API's state): `values`,
    `next`, `step`, `status` and `interrupts`."""
    meta = state.execution_meta
    return {
        "thread_id": thread_id,
        "values": values,
        **({"values_error": values_error} if values_error else {}),
        "next": next_nodes(meta),
        "step": meta.step,
        "status": status(meta),
        "interrupts": interrupts(meta),
    }


# ---- a run's result ---------------------------------------------------------------------------


def run_result(
    state: AgentState,
    own: list[Message],
    token_usage: dict[str, int],
    *,
    context: bool = False,
    whole_state: bool = False,
) -> dict[str, Any]:
    """What a call returns (`ainvoke`, by Agentflow's and LangGraph's keys): with `context`,
    the whole context and its summary; with `whole_state`, the state itself; then the
    call's own `messages`, their `token_usage`, the run's `status` and, when it paused,
    `__interrupt__` (LangGraph's key)."""
    result: dict[str, Any] = {}
    if context:
        result["context"] = list(state.context)
        result["summary"] = state.context_summary
    elif whole_state:
        result["state"] = state
    result["messages"] = own
    result["token_usage"] = token_usage
    meta = state.execution_meta
    result["status"] = status(meta)
    pause = interrupts(meta)
    if pause:
        result["__interrupt__"] = pause
    return result


# ---- a record ---------------------------------------------------------------------------------


RECORD_KEYS = ("thread_id", "seq", "position", "run_id", "actor", "at", "kind", "version")
"""A record's envelope, in the order every record shape lists it."""


def record(record: EventRecord) -> dict[str, Any]:
    """A record whole: its envelope, its event (with its `kind`) and its chain hash
    (`agentlog tail --json`)."""
    data: dict[str, Any] = msgspec.to_builtins(record)
    return data


def record_event(record: EventRecord, run_id: str | None) -> dict[str, Any]:
    """A record as a stream of a thread's events says it: where it is (position, thread,
    seq), the run it belongs to as the reader names runs (`run_id`), who wrote it, when,
    and its event."""
    return {
        "position": record.position,
        "thread_id": record.thread_id,
        "run_id": run_id,
        "seq": record.seq,
        "kind": record.kind,
        "actor": record.actor,
        "at": record.at,
        "event": msgspec.to_builtins(record.event),
    }


def record_update(record: EventRecord) -> dict[str, Any]:
    """A record as a run's stream publishes it: kind, seq and actor beside the event's
    own fields (bytes kept as they are)."""
    return {
        "kind": record.kind,
        "seq": record.seq,
        "actor": record.actor,
        **msgspec.to_builtins(record.event, builtin_types=(bytes, bytearray)),
    }
