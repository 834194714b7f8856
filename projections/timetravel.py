"""Time travel over a thread's log: any past point, the history, differences, forks, edits.

Points are steps (the state right after step N committed) or seqs (the state right after
record S). Every answer comes from the log, never from re-running nodes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from pydantic import ValidationError

from agentlog.events import EventRecord, EventStore, Forked, Snapshot, ThreadNotFoundError
from agentlog.events.errors import InvalidArgumentError
from agentlog.events.kinds import (
    ENDING_KINDS,
    OPENING_KINDS,
    TIMED_KINDS,
    BaseEvent,
    BranchEntered,
    ContextSummarized,
    Event,
    MessageAppended,
    MessageReplaced,
    MessagesRemoved,
    MessagesReplaced,
    ModelCalled,
    NodeEntered,
    OutcomeRecorded,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunSuperseded,
    SharedWritten,
    StateUpdated,
    StepAdvanced,
    Stopped,
    StoreItemDeleted,
    StoreItemPut,
    ThreadCreated,
    ToolCallFinished,
)
from agentlog.events.store import brief
from agentlog.projections.commits import COMMIT_PARTS, inside_commits
from agentlog.projections.edge import state_updated
from agentlog.projections.errors import InvalidStateUpdateError, unfoldable
from agentlog.projections.lifecycle import status_after
from agentlog.projections.messages import (
    ErrorBlock,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    context_items,
)
from agentlog.projections.state import AgentState, ExecutionState, ExecutionStatus
from agentlog.projections.transcript import calls_of, context_events
from agentlog.projections.usage import counted, tokens_of
from agentlog.projections.views import PointOutOfRangeError, fold_at, state_at

S = TypeVar("S", bound=AgentState)


def step_status(event: BaseEvent) -> str | None:
    """What a step's history says of a run that `event` ends or pauses, as the one fold
    decides it (`status_after`): "completed", "error", "cancelled", "interrupted", or
    "stopped" for a pause a stop made; None for a kind that neither ends nor pauses a run."""
    status = status_after(event)
    if status not in _PAUSED:
        return None if status is None else status.value
    return "stopped" if isinstance(event, Stopped) else "interrupted"


_PAUSED = (ExecutionStatus.INTERRUPTED_BEFORE, ExecutionStatus.INTERRUPTED_AFTER)
_STEP = StepAdvanced.KIND


async def step_seq(store: EventStore, thread_id: str, step: int) -> int:
    """The seq after which the thread stood at `step` (its step_advanced record).

    The step a thread starts from (0, or the source's step for a fork) names the state
    before its first node ran.
    """
    seqs = await store.seqs_of_kind(thread_id, StepAdvanced.KIND)
    base = await _base_step(store, thread_id)
    if step == base:
        found = await store.seqs_of_kind(thread_id, NodeEntered.KIND)
        entered = found + await store.seqs_of_kind(thread_id, BranchEntered.KIND)
        return min(entered) - 1 if entered else await store.last_seq(thread_id)
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
    for name, value in (("at_step", at_step), ("at_seq", at_seq)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidArgumentError(
                f"{name} is a step or seq number (an int), or None; got {type(value).__name__} "
                f"{brief(value)}"
            )
    if at_step is not None and at_seq is not None:
        raise InvalidArgumentError("name a point by at_step or by at_seq, not both")
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
    """One row of a thread's timeline.

    `duration_ms` and `status` are the execution record the event carries (a step, a run's
    end, a tool call's end), None when it carries none; `tool` names the tool of a tool
    call's record; `fork_point` is False for a record inside a commit (`inside_commits`).
    """

    seq: int
    at: float
    kind: str
    actor: str | None
    node: str | None
    summary: str
    duration_ms: float | None = None
    status: str | None = None
    tool: str | None = None
    fork_point: bool = True


def execution_record(record: EventRecord) -> tuple[float | None, str | None]:
    """The duration (ms) and status a record carries as its execution record, if any.

    A step's status is "completed" (it committed); a run's end says how the run ended; a
    stop is a pause, with a duration and no status; a tool call abandoned before it was
    measured has no duration.
    """
    event = record.event
    if isinstance(event, StepAdvanced):
        return event.duration_ms, "completed"
    if isinstance(event, RunCompleted):
        return event.duration_ms, "completed"
    if isinstance(event, RunFailed):
        return event.duration_ms, event.status
    if isinstance(event, Stopped):
        return event.duration_ms, None  # a pause, not an end: `reason` says why
    if isinstance(event, ToolCallFinished):
        measured = event.status != "abandoned" or event.duration_ms > 0
        return (event.duration_ms if measured else None), event.status
    return None, None


def slowest(rows: Sequence[EventRow], n: int) -> list[EventRow]:
    """The `n` slowest node steps and tool calls among `rows`, slowest first (ties by seq)."""
    if n < 0:
        raise InvalidArgumentError(f"the number of slowest records must be 0 or more, not {n}")
    timed = [r for r in rows if r.kind in TIMED_KINDS and r.duration_ms is not None]
    timed.sort(key=lambda r: (-(r.duration_ms or 0.0), r.seq))
    return timed[:n]


_STEP_BOUNDARY = frozenset({NodeEntered.KIND, BranchEntered.KIND, Forked.KIND, *OPENING_KINDS})
"""Kinds after which a step's status is no longer what the records after the step say."""


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
        if not isinstance(record.event, StepAdvanced):
            continue
        status = after[i]
        span = records[start : i + 1]
        messages = [_message_of(r) for r in span if isinstance(r.event, MessageAppended)]
        entries.append(
            StepEntry(
                step=record.event.step if isinstance(record.event, StepAdvanced) else 0,
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
        record = records[i]
        kind = record.kind
        if kind == _STEP:
            statuses[i] = status or "running"
        if kind in _STEP_BOUNDARY:
            status = None
        elif status is None and kind in ENDING_KINDS:
            status = step_status(record.event)
    return statuses


async def event_history(
    store: EventStore,
    thread_id: str,
    kinds: Sequence[str] | None = None,
    *,
    first: int = 1,
    last: int | None = None,
) -> list[EventRow]:
    """One row per event (seq, time, kind, actor, node, a one-line summary).

    `first` and `last` bound the rows to a range of seqs; the node a row names is still the
    one entered last before it, even when that was before `first`.
    """
    rows: list[EventRow] = []
    node: str | None = None
    messages = _Messages()
    records: list[EventRecord] = []
    async for record in store.read(thread_id, 1, last):
        records.append(record)
        event = record.event
        if isinstance(event, NodeEntered | BranchEntered):
            node = event.node
        elif isinstance(event, Forked):
            node = None
        replaced = messages.follow(record)
        if record.seq < first or (kinds and record.kind not in kinds):
            continue
        duration, status = execution_record(record)
        tool = event.name if isinstance(event, ToolCallFinished) else None
        rows.append(
            EventRow(
                record.seq,
                record.at,
                record.kind,
                record.actor,
                node,
                summarize(record, replaced=replaced),
                duration,
                status,
                tool,
            )
        )
    if last is not None and records:  # the commit of the last row may go on past it
        async for record in store.read(thread_id, last + 1):
            records.append(record)
            if record.kind not in COMMIT_PARTS:
                break
    inside = inside_commits(records)
    return [replace(r, fork_point=False) if r.seq in inside else r for r in rows]


async def step_span(store: EventStore, thread_id: str, step: int) -> tuple[int, int]:
    """The seqs of the records that led to `step`: after the previous step's last record,
    up to this step's (for the step a thread starts from, its records before any node ran).

    The span can be empty (first > last) when nothing was recorded before the first node.
    """
    last = await step_seq(store, thread_id, step)
    if step == await _base_step(store, thread_id):
        return 1, last
    return await step_seq(store, thread_id, step - 1) + 1, last


SUMMARY_CHARS = 60
"""Characters of a message's text in a one-line summary."""

SUMMARY_IDS = 10
"""Message ids named in a one-line summary before the rest are counted."""


def message_text(message: Message) -> str:
    """What a person is shown of a message: its text, reasoning summaries, errors, and the
    outputs of its tool results (a non-string output as JSON), in block order.

    `Message.text()` is narrower (text and string outputs, as the seed defines it); every
    view made for people summarises a message through this function instead. The text is
    stored text: make it inert where it is shown.
    """
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolResultBlock) and block.output is not None:
            output = block.output
            parts.append(output if isinstance(output, str) else _json(output))
        elif isinstance(block, ReasoningBlock):
            parts.append(block.summary)
        elif isinstance(block, ErrorBlock):
            parts.append(block.message)
    return "".join(parts)


def message_brief(message: Message, chars: int = SUMMARY_CHARS) -> str:
    """A message in a few words: role, the start of its text, the tools it calls."""
    calls = ", ".join(c.name for c in calls_of(message))
    text = message_text(message)[:chars]
    return f"{message.role}: {text}" + (f" [calls {calls}]" if calls else "")


def _json(value: Any) -> str:
    """A value as one line of JSON (str() for what JSON cannot hold)."""
    return json.dumps(value, ensure_ascii=False, default=str)


def quoted_id(message_id: str | int) -> str:
    """A message id as summaries name it: a str in quotes, an int bare (left raw: the
    view that shows it makes it inert, so it is escaped once)."""
    return f"'{message_id}'" if isinstance(message_id, str) else str(message_id)


def _ids(ids: Sequence[str | int]) -> str:
    """Message ids quoted, the first `SUMMARY_IDS` of them and a count of the rest."""
    shown = ", ".join(quoted_id(i) for i in ids[:SUMMARY_IDS])
    rest = len(ids) - SUMMARY_IDS
    return shown + (f" and {rest} more" if rest > 0 else "")


def _count(n: int, what: str = "message") -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _why(reason: str | None) -> str:
    return f" ({reason})" if reason else ""


class _Messages:
    """The raw messages of a thread by id, as its records go, so the row of a replacement
    (a human edit) can say what changed rather than repeat the whole message."""

    def __init__(self) -> None:
        self.by_id: dict[Any, dict[str, Any]] = {}

    def follow(self, record: EventRecord) -> dict[str, Any] | None:
        """Take `record` in; for a replacement, the message it replaced (None if unknown)."""
        event = record.event
        if isinstance(event, MessageAppended | MessageReplaced):
            key = event.message.get("message_id")
            old = self.by_id.get(key) if isinstance(event, MessageReplaced) else None
            self.by_id[key] = event.message
            return old
        if isinstance(event, MessagesRemoved):
            for key in event.message_ids:
                self.by_id.pop(key, None)
        elif isinstance(event, MessagesReplaced) or (
            isinstance(event, ContextSummarized) and event.messages is not None
        ):
            kept = event.messages or []
            self.by_id = {m.get("message_id"): m for m in kept if isinstance(m, dict)}
        elif isinstance(event, Forked):
            context = event.state.get("context") or []
            self.by_id = {m.get("message_id"): m for m in context if isinstance(m, dict)}
        return None


def _message_view(message: Message) -> str:
    """A message as one line, whole: role, text and each tool call with its arguments."""
    calls = "; ".join(f"{c.name}({_json(getattr(c, 'args', {}))})" for c in calls_of(message))
    return f"{message.role}: {message_text(message)}" + (f" [calls {calls}]" if calls else "")


def changed_text(old: str, new: str, context: int = 16) -> str:
    """Where two texts differ, with a little context each side: `"…100 EUR…" -> "…10 EUR…"`."""
    if old == new:
        return "its text unchanged"
    room = min(len(old), len(new))
    prefix = next((i for i in range(room) if old[i] != new[i]), room)
    suffix, room = 0, room - prefix
    while suffix < room and old[len(old) - 1 - suffix] == new[len(new) - 1 - suffix]:
        suffix += 1
    start = max(prefix - context, 0)
    floor = max(start - context, 0)
    while floor < start < prefix and not old[start - 1].isspace():
        start -= 1  # begin the context at a word (within a few more characters)

    def part(text: str) -> str:
        end = min(len(text) - suffix + context, len(text))
        ceiling = min(end + context, len(text))
        while len(text) - suffix < end < ceiling and not text[end].isspace():
            end += 1  # and end it at one
        body = text[start:end]
        if len(body) > SUMMARY_CHARS:
            body, end = body[:SUMMARY_CHARS], start + SUMMARY_CHARS
        return ("…" if start else "") + body + ("…" if end < len(text) else "")

    return f'"{part(old)}" -> "{part(new)}"'


def _message_of(record: EventRecord) -> Message:
    """The message a `message_appended` record carries (`UnfoldableRecordError` when it is
    not one)."""
    assert isinstance(record.event, MessageAppended)
    try:
        return Message.model_validate(record.event.message)
    except ValueError as exc:
        raise unfoldable(record, exc) from None


def summarize(record: EventRecord, *, replaced: dict[str, Any] | None = None) -> str:
    """What a record says, in a few words (stored text included as it is: show it inert).

    `replaced`: for a message replacement, the message it replaced; the summary then says
    what changed instead of repeating the message. A message that does not validate raises
    `UnfoldableRecordError`, naming the record, as the fold does."""
    try:
        return _summarize(record, replaced)
    except ValidationError as exc:
        raise unfoldable(record, exc) from None


def _summarize(record: EventRecord, replaced: dict[str, Any] | None) -> str:
    event = record.event
    if isinstance(event, MessageAppended):
        return message_brief(Message.model_validate(event.message))
    if isinstance(event, MessageReplaced):
        message = Message.model_validate(event.message)
        said = message_brief(message)
        if replaced is not None:
            with contextlib.suppress(ValueError):
                before = _message_view(Message.model_validate(replaced))
                said = changed_text(before, _message_view(message))
        return f"replaced message {quoted_id(message.message_id)}: {said}{_why(event.reason)}"
    if isinstance(event, MessagesRemoved):
        ids = event.message_ids
        return f"removed {_count(len(ids))}: {_ids(ids)}{_why(event.reason)}"
    if isinstance(event, MessagesReplaced):
        return f"context replaced: now {_count(len(event.messages))}"
    if isinstance(event, ContextSummarized):
        said = f"context summarized: {event.summary[:SUMMARY_CHARS]}"
        if event.messages is not None:
            said += f"; context now {_count(len(event.messages))}"
        return said
    if isinstance(event, Stopped):
        node = event.node or "?"
        said = (
            f"stopped after node {node}"
            if event.when == "after"
            else f"stopped before node {node} (cancelled)"
        )
        if event.reason:
            said += f": {event.reason}"
        if event.in_flight:
            said += f"; still running on worker threads: {', '.join(event.in_flight)}"
        return said
    if isinstance(event, ToolCallFinished):
        return _tool_finished(event)
    if isinstance(event, StateUpdated):
        keys = ", ".join(sorted(event.values))
        return f"{event.source} set {keys}{_why(event.reason)}"
    if isinstance(event, StepAdvanced):
        return f"step {event.step} -> {event.next_node}"
    if isinstance(event, RunFailed):
        return f"{event.node}: {event.error_type}: {event.message}"[:100]
    if isinstance(event, Forked):
        return f"from {event.source_thread}@{event.source_seq}"
    if isinstance(event, ModelCalled):
        return _model_called(event)
    if isinstance(event, SharedWritten):
        value = repr(event.value)[:SUMMARY_CHARS]
        return f"{event.isolation} {event.op} {event.key} {value}"
    if isinstance(event, OutcomeRecorded):
        goal = f" (goal {event.goal_id})" if event.goal_id else ""
        return f"outcome {event.metric} = {event.value!r}{goal}"
    if isinstance(event, ThreadCreated):
        said = f"created by {event.by}" + (f" for graph {event.graph_id}" if event.graph_id else "")
        if event.metadata:
            said += f"; metadata {_json(event.metadata)[:SUMMARY_CHARS]}"
        return said
    if isinstance(event, RunCancelled):
        said = f"cancelled by {event.by}{_why(event.reason)}"
        if event.node:
            said += f" at node {event.node}"
        if event.in_flight:
            said += f"; cut short: {', '.join(event.in_flight)}"
        return said
    if isinstance(event, StoreItemPut | StoreItemDeleted):
        where = f"{'/'.join(event.namespace)} {event.key}"
        if isinstance(event, StoreItemPut):
            return f"put {where} {_json(event.value)[:SUMMARY_CHARS]}"
        return f"deleted {where}"
    if isinstance(event, RunSuperseded):
        return f"run {event.run_id} rolled back by {event.by} to seq {event.started_seq - 1}"
    fields = event.__struct_fields__
    for name in ("name", "node", "next_node", "entry_node", "reason"):
        if name in fields and getattr(event, name):
            return f"{name}={getattr(event, name)}"
    return ""


def _model_called(event: ModelCalled) -> str:
    """A model call: which model, how it ended, tokens and latency."""
    said = f"{event.provider}:{event.model} attempt {event.attempt} {event.status}"
    if event.params.get("answered_from_log"):
        return said + ", answered from the log"
    if counted(event.usage):
        said += f", {tokens_of(event.usage).total} tokens"
    said += f", {event.latency_ms:.0f} ms"
    if event.error:
        said += f": {event.error}"[:SUMMARY_CHARS]
    return said


def _tool_finished(event: ToolCallFinished) -> str:
    """A tool call's end: status or error, the message it returned, the Command it gave."""
    error = event.error or ""
    error = error.removeprefix(f"{event.status}: ")  # the closing texts begin with the status
    said = f"{event.name} {event.status}" + (f": {error}" if error else "")
    if event.message is not None:
        try:
            text = message_text(Message.model_validate(event.message))[:SUMMARY_CHARS]
        except ValueError:
            text = "(unreadable)"
        if text:
            said += f"; returned a tool message: {text}"
    command = []
    if event.goto is not None:
        command.append(f"goto {event.goto}")
    if event.update:
        command.append(f"updated fields {', '.join(sorted(event.update))}")
    if command:
        said += f"; returned a Command: {', '.join(command)}"
    return said


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
        raise InvalidArgumentError(f"by must be 'step' or 'seq', got {by!r}")
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


def edit_events(
    state: AgentState,
    values: Mapping[str, Any],
    *,
    source: str = "user",
    reason: str | None = None,
) -> list[Event]:
    """The events of a human edit of `state`, each carrying `reason`.

    Messages (under "messages" or "context", in any form `to_messages` reads) whose id is
    already in the context replace that message; the others are appended; `RemoveMessage`
    markers remove messages (the log keeps them). Other keys update
    fields through their reducers, recorded as coming from `source`.
    """
    rest = dict(values)
    known = {m.message_id for m in state.context}
    events: list[Event] = []
    for key in ("messages", "context"):
        if key in rest:
            events.extend(
                context_events(context_items(rest.pop(key)), known=known, edit=True, reason=reason)
            )
    if rest:
        events.append(state_updated(rest, source=source, reason=reason))
    if not events:
        raise InvalidStateUpdateError("update_state needs at least one value to change")
    return events


__all__ = [
    "TIMED_KINDS",
    "EventRow",
    "Snapshot",
    "StateDiff",
    "StepEntry",
    "ThreadNotFoundError",
    "compare_states",
    "diff",
    "edit_events",
    "event_history",
    "execution_record",
    "interrupt_summary",
    "message_brief",
    "message_text",
    "point_seq",
    "quoted_id",
    "slowest",
    "state_at_point",
    "state_history",
    "step_seq",
    "step_span",
    "summarize",
]
