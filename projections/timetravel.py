"""Time travel over a thread's log: any past point, the history, differences, forks, edits.

Points are steps (the state right after step N committed) or seqs (the state right after
record S). Every answer comes from the log, never from re-running nodes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from events import (
    Claim,
    EventRecord,
    EventStore,
    Forked,
    MessageAppended,
    MessageReplaced,
    Snapshot,
    ThreadNotFoundError,
)
from events.kinds import Event

from .edge import state_data, state_updated, to_builtins
from .errors import IllegalTransitionError, InvalidStateUpdateError
from .fold import ENTERED_KEY, RESUME_KEY, TOOL_CALLS_KEY, decide
from .generic import state_fields
from .messages import Message, to_messages
from .state import AgentState, ExecutionState
from .views import PointOutOfRangeError, fold_at, state_at

S = TypeVar("S", bound=AgentState)

_STATUS_AFTER = {
    "interrupt_raised": "interrupted",
    "stopped": "stopped",
    "run_completed": "completed",
    "run_failed": "error",
}


async def step_seq(store: EventStore, thread_id: str, step: int) -> int:
    """The seq after which the thread stood at `step` (its step_advanced record).

    The step a thread starts from (0, or the source's step for a fork) names the state
    before its first node ran.
    """
    seqs = await store.seqs_of_kind(thread_id, "step_advanced")
    base = await _base_step(store, thread_id)
    if step == base:
        entered = await store.seqs_of_kind(thread_id, "node_entered")
        return entered[0] - 1 if entered else await store.last_seq(thread_id)
    index = step - base - 1
    if not 0 <= index < len(seqs):
        raise PointOutOfRangeError(
            f"thread {thread_id!r} has steps {base} to {base + len(seqs)}; "
            f"step {step} does not exist"
        )
    return seqs[index]


async def _base_step(store: EventStore, thread_id: str) -> int:
    """The step the thread started from: 0, or its source's step when it is a fork."""
    async for record in store.read(thread_id, 1, 1):
        if isinstance(record.event, Forked):
            return int(record.event.state.get("execution_meta", {}).get("step", 0))
    return 0


async def point_seq(
    store: EventStore, thread_id: str, *, at_step: int | None = None, at_seq: int | None = None
) -> int | None:
    """The seq a step or seq names (None: the end of the thread)."""
    if at_step is not None and at_seq is not None:
        raise ValueError("name a point by at_step or by at_seq, not both")
    if at_step is not None:
        return await step_seq(store, thread_id, at_step)
    return at_seq


async def state_at_point(
    store: EventStore,
    thread_id: str,
    state_cls: type[S] = AgentState,  # type: ignore[assignment]
    *,
    at_step: int | None = None,
    at_seq: int | None = None,
) -> S:
    """The state at a step or seq (the latest when neither is given), from snapshot + tail."""
    seq = await point_seq(store, thread_id, at_step=at_step, at_seq=at_seq)
    return await state_at(store, thread_id, seq, state_cls)


@dataclass
class StepEntry:
    """One step of a thread's history: where it lies in the log and what it added."""

    step: int
    node: str | None
    first_seq: int
    last_seq: int
    status: str
    at: float
    messages: list[Message]
    thread_id: str
    store: EventStore = field(repr=False, compare=False)
    state_cls: type[AgentState] = field(default=AgentState, repr=False, compare=False)

    async def state(self) -> AgentState:
        """The state right after this step, loaded from the log on demand."""
        return await state_at(self.store, self.thread_id, self.last_seq, self.state_cls)


@dataclass(frozen=True)
class EventRow:
    """One row of a thread's timeline."""

    seq: int
    at: float
    kind: str
    actor: str | None
    node: str | None
    summary: str


_STEP_BOUNDARY = ("node_entered", "run_started", "resumed", "forked")


async def state_history(
    store: EventStore,
    thread_id: str,
    state_cls: type[AgentState] = AgentState,
) -> list[StepEntry]:
    """One entry per step, oldest first: seq range, node, status after it, time, messages.

    A step spans the records after the previous step up to its step_advanced record; its
    status is what the records that follow it say, until the next node or run begins
    (completed, interrupted, stopped, error, or still running).
    """
    records = [r async for r in store.read(thread_id)]
    after = _status_after_steps(records)
    entries: list[StepEntry] = []
    start = 0
    for i, record in enumerate(records):
        if record.kind != "step_advanced":
            continue
        status = after[i]
        span = records[start : i + 1]
        messages = [
            Message.model_validate(r.event.message)  # type: ignore[union-attr]
            for r in span
            if r.kind == "message_appended"
        ]
        entries.append(
            StepEntry(
                step=record.event.step,  # type: ignore[union-attr]
                node=record.actor,
                first_seq=span[0].seq,
                last_seq=record.seq,
                status=status,
                at=record.at,
                messages=messages,
                thread_id=thread_id,
                store=store,
                state_cls=state_cls,
            )
        )
        start = i + 1
    return entries


def _status_after_steps(records: Sequence[EventRecord]) -> dict[int, str]:
    """For each step_advanced record's index, the status the records after it give, up to
    the next boundary (the last status-bearing record wins; "running" when none).

    One backward pass, so a history is linear in the thread's length even when nothing
    separates its steps.
    """
    statuses: dict[int, str] = {}
    status: str | None = None
    for i in range(len(records) - 1, -1, -1):
        kind = records[i].kind
        if kind == "step_advanced":
            statuses[i] = status or "running"
        if kind in _STEP_BOUNDARY:
            status = None
        elif status is None and kind in _STATUS_AFTER:
            status = _STATUS_AFTER[kind]
    return statuses


async def event_history(
    store: EventStore, thread_id: str, kinds: Sequence[str] | None = None
) -> list[EventRow]:
    """One row per event (seq, time, kind, actor, node, a one-line summary)."""
    rows: list[EventRow] = []
    node: str | None = None
    async for record in store.read(thread_id):
        event = record.event
        if record.kind == "node_entered":
            node = event.node  # type: ignore[union-attr]
        elif record.kind == "forked":
            node = None
        if kinds and record.kind not in kinds:
            continue
        rows.append(
            EventRow(record.seq, record.at, record.kind, record.actor, node, summarize(record))
        )
    return rows


def summarize(record: EventRecord) -> str:
    """What a record says, in a few words."""
    event = record.event
    fields = event.__struct_fields__
    if record.kind in ("message_appended",):
        message = Message.model_validate(event.message)  # type: ignore[union-attr]
        calls = ", ".join(c.name for c in message.tool_calls())
        return f"{message.role}: {message.text()[:60]}" + (f" [calls {calls}]" if calls else "")
    if record.kind == "tool_call_finished":
        error = f": {event.error}" if event.error else ""  # type: ignore[union-attr]
        return f"{event.name} {event.status}{error}"  # type: ignore[union-attr]
    if record.kind == "state_updated":
        keys = ", ".join(sorted(event.values))  # type: ignore[union-attr]
        why = f" ({event.reason})" if event.reason else ""  # type: ignore[union-attr]
        return f"{event.source} set {keys}{why}"  # type: ignore[union-attr]
    if record.kind == "step_advanced":
        return f"step {event.step} -> {event.next_node}"  # type: ignore[union-attr]
    if record.kind == "run_failed":
        return f"{event.node}: {event.error_type}: {event.message}"[:100]  # type: ignore[union-attr]
    if record.kind == "forked":
        return f"from {event.source_thread}@{event.source_seq}"  # type: ignore[union-attr]
    for name in ("name", "node", "next_node", "entry_node", "reason"):
        if name in fields and getattr(event, name):
            return f"{name}={getattr(event, name)}"
    return ""


@dataclass(frozen=True)
class StateDiff:
    """What changed between two points of a thread."""

    a_seq: int
    b_seq: int
    messages_added: list[Message]
    messages_removed: list[Message]
    messages_changed: list[tuple[Message, Message]]
    fields: dict[str, tuple[Any, Any]]
    status: tuple[str, str] | None
    step: tuple[int, int]
    interrupt: tuple[dict[str, Any] | None, dict[str, Any] | None] | None

    @property
    def empty(self) -> bool:
        """True when the two points hold the same state."""
        changed = (
            self.messages_added
            or self.messages_removed
            or self.messages_changed
            or self.fields
            or self.status
            or self.interrupt
        )
        return not changed and self.step[0] == self.step[1]


async def diff(
    store: EventStore,
    thread_id: str,
    a: int,
    b: int,
    *,
    by: str = "step",
    state_cls: type[AgentState] = AgentState,
) -> StateDiff:
    """What changed from point `a` to point `b` (steps, or seqs with by="seq")."""
    if by not in ("step", "seq"):
        raise ValueError(f"by must be 'step' or 'seq', got {by!r}")
    seqs = [await step_seq(store, thread_id, p) if by == "step" else p for p in (a, b)]
    before = await fold_at(store, thread_id, seqs[0], state_cls)
    after = await fold_at(store, thread_id, seqs[1], state_cls)
    return compare_states(seqs[0], seqs[1], before.state, after.state)


def interrupt_summary(meta: ExecutionState) -> dict[str, Any] | None:
    """The pending interrupt of a run (node, reason, data, status), or None."""
    if not meta.is_interrupted():
        return None
    return {
        "node": meta.interrupted_node,
        "reason": meta.interrupt_reason,
        "data": meta.interrupt_data,
        "status": meta.status.value,
    }


def compare_states(a_seq: int, b_seq: int, old: AgentState, new: AgentState) -> StateDiff:
    """What changed from `old` (after record `a_seq`) to `new` (after `b_seq`)."""
    old_by_id = {m.message_id: m for m in old.context}
    new_by_id = {m.message_id: m for m in new.context}
    fields = {
        name: (getattr(old, name), getattr(new, name))
        for name in type(new).model_fields
        if name not in ("context", "execution_meta") and getattr(old, name) != getattr(new, name)
    }
    om, nm = old.execution_meta, new.execution_meta
    interrupt = interrupt_summary

    return StateDiff(
        a_seq=a_seq,
        b_seq=b_seq,
        messages_added=[m for i, m in new_by_id.items() if i not in old_by_id],
        messages_removed=[m for i, m in old_by_id.items() if i not in new_by_id],
        messages_changed=[
            (old_by_id[i], m) for i, m in new_by_id.items() if i in old_by_id and old_by_id[i] != m
        ],
        fields=fields,
        status=None if om.status == nm.status else (om.status.value, nm.status.value),
        step=(om.step, nm.step),
        interrupt=None if interrupt(om) == interrupt(nm) else (interrupt(om), interrupt(nm)),
    )


async def fork(
    store: EventStore,
    thread_id: str,
    *,
    at_step: int | None = None,
    at_seq: int | None = None,
    new_thread_id: str | None = None,
    state_cls: type[AgentState] = AgentState,
    actor: str = "user",
) -> str:
    """A new thread starting from the state at a point of `thread_id`; the source is untouched."""
    seq = await point_seq(store, thread_id, at_step=at_step, at_seq=at_seq)
    if seq is not None and seq < 1:
        raise PointOutOfRangeError(
            f"a fork of thread {thread_id!r} needs a point after its first record (at_seq >= 1, "
            "or a step): before it there is no state to continue from"
        )
    fold = await fold_at(store, thread_id, seq, state_cls)
    state = fold.state.model_copy(deep=True)
    internal = state.execution_meta.internal_data
    for key in (ENTERED_KEY, RESUME_KEY, TOOL_CALLS_KEY, "run_id"):
        internal.pop(key, None)  # a step in flight starts over on the fork
    new_id = new_thread_id or f"{thread_id}-fork-{uuid.uuid4().hex[:8]}"
    if await store.last_seq(new_id):
        raise IllegalTransitionError("forked", f"thread {new_id!r} already exists; pick a new id")
    event = Forked(
        source_thread=thread_id,
        source_seq=fold.seq,
        state=state_data(state),
        fields=state_fields(state_cls),
    )
    decide(state_cls(), [event], seq=0)
    await store.append(new_id, [event], expected_seq=0, actor=actor)
    return new_id


def edit_events(
    state: AgentState,
    values: Mapping[str, Any],
    *,
    source: str = "user",
    reason: str | None = None,
) -> list[Event]:
    """The events of a human edit of `state`, each carrying `reason`.

    Messages (under "messages" or "context", in any form `to_messages` reads) whose id is
    already in the context replace that message; the others are appended. Other keys update
    fields through their reducers, recorded as coming from `source`.
    """
    rest = dict(values)
    known = {m.message_id for m in state.context}
    events: list[Event] = []
    for key in ("messages", "context"):
        if key in rest:
            for message in to_messages(rest.pop(key)):
                data = to_builtins(message)
                if message.message_id in known:
                    events.append(MessageReplaced(message=data, reason=reason))
                else:
                    known.add(message.message_id)
                    events.append(MessageAppended(message=data, reason=reason))
    if rest:
        events.append(state_updated(rest, source=source, reason=reason))
    if not events:
        raise InvalidStateUpdateError("update_state needs at least one value to change")
    return events


async def update_state(
    store: EventStore,
    thread_id: str,
    values: Mapping[str, Any],
    *,
    as_node: str | None = None,
    actor: str = "user",
    reason: str | None = None,
    state_cls: type[AgentState] = AgentState,
    claim: Claim | None = None,
) -> list[EventRecord]:
    """A human edit (see `edit_events`), recorded with who and why, fenced by `claim`."""
    fold = await fold_at(store, thread_id, None, state_cls)
    events = edit_events(fold.state, values, source=as_node or actor, reason=reason)
    decide(fold.state, events, seq=fold.seq)
    return await store.append(thread_id, events, expected_seq=fold.seq, actor=actor, claim=claim)


__all__ = [
    "EventRow",
    "Snapshot",
    "StateDiff",
    "StepEntry",
    "ThreadNotFoundError",
    "compare_states",
    "diff",
    "edit_events",
    "event_history",
    "fork",
    "interrupt_summary",
    "point_seq",
    "state_at_point",
    "state_history",
    "step_seq",
    "summarize",
    "update_state",
]
