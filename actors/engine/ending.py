"""What a run that ends early says of its tool calls: one decision for every way it ends.

A stop, a cancel, double-texting's `interrupt` and `rollback`, a caller that went away, a
node timeout, a human edit or new input that ends the run, and the graph reaching its end
all close the run's tool calls through `closing_events`, so the log and the transcript say
the same thing ("When a run ends early" in the design notes):

- a call whose result committed (`tool_call_finished`) keeps that result;
- a call started and not finished is abandoned: whatever it returns is discarded, and
  whether it took effect is unknown;
- only a call that was never handed to its tool is answered "not run".
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping, Sequence
from typing import Any

from agentlog.actors.tools.node import rejected_message, tool_message
from agentlog.events import EventStore, MessageAppended, ToolCallFinished
from agentlog.events.kinds import Event
from agentlog.projections import (
    ExecutionStatus,
    Fold,
    Message,
    RemoteToolCallBlock,
    ToolCallBlock,
    message_appended,
    to_builtins,
)
from agentlog.projections.keys import ENTERED_KEY, TOOL_CALLS_KEY
from agentlog.projections.transcript import unique_id

__all__ = ["abandoned_text", "closing_events", "goes_past", "not_run_text", "step_results"]


def not_run_text(why: str) -> str:
    """The answer of a call that never ran, `why` saying what ended the run."""
    return f"not run: {why}"


def abandoned_text(why: str) -> str:
    """The answer of a call that had started when the run stopped waiting for it."""
    return (
        f"abandoned: {why}; the call had started and any result it returns is discarded, "
        "so whether it took effect is unknown"
    )


async def step_results(store: EventStore, fold: Fold[Any]) -> dict[str, ToolCallFinished]:
    """The tool call results committed in the thread's current step (its node entered and
    the step not yet advanced): those not yet in the context, since a step's outputs join
    it only with the step's commit."""
    meta = fold.state.execution_meta
    entered = meta.internal_data.get(ENTERED_KEY)
    if not entered or not meta.thread_id or fold.seq <= entered["seq"]:
        return {}
    found: dict[str, ToolCallFinished] = {}
    async for record in store.read(meta.thread_id, entered["seq"] + 1, fold.seq):
        if isinstance(record.event, ToolCallFinished):
            found[record.event.call_id] = record.event
    return found


async def closing_events(
    store: EventStore,
    fold: Fold[Any],
    why: str,
    *,
    over: bool,
    never_ran: Collection[str] = (),
    skip: Container[str] = (),
) -> list[Event]:
    """The events closing the tool calls of the run on `fold` as it ends early for `why`.

    Each call started and not finished gets its `tool_call_finished`: abandoned, or, when
    it was never handed to its tool (`never_ran`, known to the call that ran the step, or
    a step the run paused before reaching), a result saying it did not run. When the run
    is `over` (cancelled, rolled back, completed, or superseded by new input), each call
    the context still waits for, except those the caller deals with itself (`skip`), gets its
    result message, placed right after the calls: the committed result, else what the
    closing record says, else "not run".
    """
    meta = fold.state.execution_meta
    started: dict[str, Any] = dict(meta.internal_data.get(TOOL_CALLS_KEY) or {})
    waiting = [c for c in fold.open_calls() if c.id not in skip] if over else []
    if not started and not waiting:
        return []
    finished = await step_results(store, fold) if waiting else {}
    unreached = _step_unreached(meta)
    events: list[Event] = []
    for call_id, name in started.items():
        closing = _closing(call_id, str(name), why, ran=not (unreached or call_id in never_ran))
        finished[call_id] = closing
        events.append(closing)
    known = set(fold.message_ids)
    for call in waiting:
        done = finished.get(call.id)
        message = tool_message(done) if done is not None else _not_run(call, why)
        events.append(_appended(message, known))
    return events


def answered_ids(events: Sequence[Event]) -> set[Any]:
    """The ids of the tool calls the messages of `events` answer."""
    return {
        block.get("call_id")
        for event in events
        if isinstance(event, MessageAppended)
        for block in event.message.get("content") or ()
        if isinstance(block, dict) and block.get("type") == "tool_result"
    }


def goes_past(events: Sequence[Event]) -> bool:
    """Whether `events` add a message that is no tool result: it would come after the calls
    the context waits for, so those must be answered before it."""
    return any(
        isinstance(e, MessageAppended)
        and not any(
            isinstance(block, dict) and block.get("type") == "tool_result"
            for block in e.message.get("content") or ()
        )
        for e in events
    )


def _closing(call_id: str, name: str, why: str, *, ran: bool) -> ToolCallFinished:
    """The record closing a started call: abandoned, or never handed to its tool (then its
    message says so, and that is what the context is told)."""
    if ran:
        return ToolCallFinished(
            call_id=call_id, name=name, status="abandoned", error=abandoned_text(why)
        )
    message = rejected_message(ToolCallBlock(id=call_id, name=name, args={}), not_run_text(why))
    return ToolCallFinished(
        call_id=call_id,
        name=name,
        status="abandoned",
        error=f"{not_run_text(why)}; it was recorded as started and never handed to its tool",
        message=to_builtins(message),
    )


def _step_unreached(meta: Any) -> bool:
    """Whether the run paused after a node before the step it had entered ran: a step's
    commit enters the next node and starts its calls ahead, and a stop between the two
    leaves those calls recorded as started and never handed to their tool."""
    entered: Mapping[str, Any] | None = meta.internal_data.get(ENTERED_KEY)
    return (
        entered is not None
        and meta.status == ExecutionStatus.INTERRUPTED_AFTER
        and meta.interrupted_node != entered["node"]
    )


def _not_run(call: ToolCallBlock | RemoteToolCallBlock, why: str) -> Message:
    """The result of a call never started."""
    return rejected_message(
        ToolCallBlock(id=call.id, name=call.name, args=call.args), not_run_text(why)
    )


def _appended(message: Message, known: set[str | int]) -> MessageAppended:
    """A tool result joining the context under an id of its own (a model may reuse a call
    id in a later turn, and the derived id of its earlier result is taken)."""
    fresh = unique_id(message.message_id, known)
    if fresh != message.message_id:
        message = message.model_copy(update={"message_id": fresh})
    known.add(fresh)
    return message_appended(message)
