"""The fold: events in, state out.

`Fold` applies committed records to a private working state in place (a long replay stays
linear); `apply` and `replay` are its pure faces. The runtime feeds the same `Fold` the
records it has just committed, so the live state is the replayed state by construction.

`decide`, the gate in front of the log, refuses a batch of illegal transitions or invalid
payloads before anything is written; the fold never refuses or drops a committed event.
"""

from __future__ import annotations

import copy
import gc
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter, ValidationError

from agentlog.events.kinds import (
    EVENT_TYPES,
    FACT_KINDS,
    BaseEvent,
    BranchEntered,
    ContextSummarized,
    Event,
    Forked,
    InterruptRaised,
    MessageAppended,
    MessageReplaced,
    MessagesRemoved,
    MessagesReplaced,
    ModelCalled,
    NodeEntered,
    Resumed,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunSuperseded,
    StateUpdated,
    StepAdvanced,
    Stopped,
    StopRequested,
    TasksPlanned,
    ThreadCreated,
    ThreadHidden,
    ToolCallFinished,
    ToolCallStarted,
    kind_of,
)
from agentlog.events.record import EventRecord
from agentlog.projections.copies import copy_meta
from agentlog.projections.errors import (
    IllegalTransitionError,
    InvalidStateUpdateError,
    UnfoldableRecordError,
    _loc_part,
    unfoldable,
)
from agentlog.projections.keys import (
    AWAITING_KEY,
    CREATED_KEY,
    ENTERED_KEY,
    JOINS_KEY,
    RESUME_KEY,
    RUN_KEYS,
    STOP_KEY,
    TASKS_KEY,
    TOOL_CALLS_KEY,
    resumed_with,
)
from agentlog.projections.lifecycle import ended
from agentlog.projections.messages import Message
from agentlog.projections.reducers import add_messages
from agentlog.projections.shared import held_id
from agentlog.projections.state import (
    END,
    AgentState,
    ExecutionState,
    ExecutionStatus,
    StopRequestStatus,
)
from agentlog.projections.transcript import (
    Call,
    OpenCalls,
    calls_of,
    check_pairs,
    results_of,
)

S = TypeVar("S", bound=AgentState)

CONTEXT_FIELDS = frozenset({"context", "messages"})
"""Names under which an update addresses the message context."""

_validate_message = Message.model_validate


_message_id = held_id  # a message's, or a stored one's, read by `_held`


def _held(context: list[Message]) -> Iterator[Message]:
    """The messages of a context as the list holds them, for reading ids: a list type of
    its own (`agentlog.projections.shared.SharedContext`) would copy each message read."""
    return list.__iter__(context)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building many acyclic objects (a replay is 5-6x faster)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@cache
def field_plan(
    state_cls: type[AgentState],
) -> dict[str, tuple[TypeAdapter[Any], Callable[..., Any] | None]]:
    """For each user-updatable field of `state_cls`: its validator and reducer (or None)."""
    plan: dict[str, tuple[TypeAdapter[Any], Callable[..., Any] | None]] = {}
    for name, info in state_cls.model_fields.items():
        if name == "execution_meta":
            continue
        reducer = next((m for m in info.metadata if callable(m)), None)
        plan[name] = (TypeAdapter(info.annotation if info.annotation is not None else Any), reducer)
    return plan


class Fold(Generic[S]):
    """An incremental fold over one thread; `state` is owned by the fold and mutated by it."""

    def __init__(self, state: S, *, seq: int = 0, copy: bool = True) -> None:
        self.state: S = state.model_copy(deep=True) if copy else state
        self.seq = seq
        self.hash = ""
        """The chain hash (hex) of record `seq`, when the fold has seen it."""
        self.snapshot_seq = 0
        """The seq of the stored snapshot the fold started from (0: from the log's start),
        so a run knows how far the thread is past its latest snapshot."""
        self._ids = set(map(_message_id, _held(self.state.context)))
        self.calls = OpenCalls()
        """The context's open tool calls, read only as far as it grew since last asked."""

    def open_calls(self) -> list[Call]:
        """The tool calls of the context that no later message answers, oldest first."""
        return self.calls.of(self.state.context)

    @classmethod
    def new(cls, state_cls: type[S]) -> Fold[S]:
        """A fold starting from a fresh `state_cls()`."""
        return cls(state_cls(), copy=False)

    def apply(self, record: EventRecord) -> None:
        """Fold one committed record into the state (`UnfoldableRecordError` when its payload
        does not fit the state)."""
        try:
            _HANDLERS[type(record.event)](self, record.event, record)
        except (ValidationError, InvalidStateUpdateError) as exc:
            raise unfoldable(record, exc) from None
        self.seq = record.seq
        self.hash = record.hash

    def apply_all(self, records: Iterable[EventRecord]) -> None:
        """Fold records in order (`UnfoldableRecordError` names the first that does not fit)."""
        handlers = _HANDLERS
        with gc_paused():
            record = None
            try:
                for record in records:
                    handlers[type(record.event)](self, record.event, record)
                    self.seq = record.seq
                    self.hash = record.hash
            except (ValidationError, InvalidStateUpdateError) as exc:
                if record is None or isinstance(exc, UnfoldableRecordError):
                    raise
                raise unfoldable(record, exc) from None

    def apply_decided(self, records: Sequence[EventRecord]) -> None:
        """Fold in records not yet committed, each checked first as `decide` checks it.

        The gate without a shadow copy, for a writer that folds ahead of its append: when
        an event is refused, the records before it are folded in already, so the writer
        must drop this fold (load it again from the log) before it writes anything else.
        """
        with gc_paused():
            _gate(self, records, type(self.state), [])

    def snapshot_state(self) -> S:
        """A deep copy of the state, safe to hand out while the fold goes on."""
        return self.state.model_copy(deep=True)

    # ---- content ---------------------------------------------------------------------

    def _append_messages(self, messages: Iterable[Message]) -> None:
        context, ids = self.state.context, self._ids
        for message in messages:
            if message.delta or message.message_id in ids:
                continue
            ids.add(message.message_id)
            context.append(message)

    def _replace_messages(self, messages: list[Message]) -> None:
        self.state.context = messages
        self._ids = {m.message_id for m in messages}

    def _replace_message(self, message: Message) -> None:
        context = self.state.context
        for index in range(len(context) - 1, -1, -1):
            if _message_id(list.__getitem__(context, index)) == message.message_id:
                context[index] = message
                return
        self._append_messages((message,))  # `decide` lets no such event in; stay total

    def _remove_messages(self, message_ids: Iterable[str | int]) -> None:
        gone = set(message_ids) & self._ids
        if gone:
            context = self.state.context
            kept = [m for m in _held(context) if _message_id(m) not in gone]
            if type(context) is list:
                self.state.context = kept
            else:  # a list of its own kind (a `SharedContext`): keep it, and what it tracks
                context[:] = kept
            self._ids -= gone

    @property
    def message_ids(self) -> frozenset[str | int] | set[str | int]:
        """The ids of the messages in the context (do not change it)."""
        return self._ids

    def _update(self, values: dict[str, Any], *, replace: bool = False) -> None:
        """Merge `values` through each field's reducer (`replace`: set them as they are)."""
        plan = field_plan(type(self.state))
        for name, value in values.items():
            if name in CONTEXT_FIELDS:
                if not isinstance(value, list):
                    raise InvalidStateUpdateError(
                        f"an update of {name!r} must be a list of messages, got "
                        f"{type(value).__name__}"
                    )
                messages = [_validate_message(m) for m in value]
                reducer = plan["context"][1]
                if replace:
                    self._replace_messages(messages)
                elif reducer is None or reducer is add_messages:
                    self._append_messages(messages)
                else:
                    self._replace_messages(list(reducer(self.state.context, messages)))
                continue
            if name not in plan:
                raise InvalidStateUpdateError(
                    f"the log updates field {name!r}, which {type(self.state).__name__} lacks: "
                    "replay with the state class the thread was written with (state_cls=...)"
                )
            adapter, reducer = plan[name]
            try:
                new = adapter.validate_python(value)
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(map(_loc_part, e['loc'])) or 'value'}: {e['msg']}"
                    for e in exc.errors()[:3]
                )
                raise InvalidStateUpdateError(
                    f"field {name!r} of {type(self.state).__name__} cannot take {value!r:.60} "
                    f"({problems})"
                ) from None
            if reducer is None or replace:
                setattr(self.state, name, new)
            else:  # a copy: a reducer that extends its input in place must not reach others
                setattr(self.state, name, reducer(copy.copy(getattr(self.state, name)), new))


# ---- the handlers: one per kind, each the record of one transition method ----------------

Handler = Callable[["Fold[Any]", Any, EventRecord], None]
_HANDLERS: dict[type[BaseEvent], Handler] = {}


def _handles(kind: type[BaseEvent]) -> Callable[[Handler], Handler]:
    """Register the decorated function as the fold handler of `kind`."""

    def register(handler: Handler) -> Handler:
        _HANDLERS[kind] = handler
        return handler

    return register


# They set fields directly: the methods of `ExecutionState` are the same transitions, for
# users, and guard against being called inside a node.


def _set_interrupt(
    meta: ExecutionState,
    node: str,
    reason: str,
    status: ExecutionStatus,
    data: dict[str, Any] | None = None,
) -> None:
    meta.interrupted_node = node
    meta.interrupt_reason = reason
    meta.status = status
    meta.interrupt_data = data


def _clear_interrupt(meta: ExecutionState) -> None:
    meta.interrupted_node = None
    meta.interrupt_reason = None
    meta.interrupt_data = None
    meta.status = ExecutionStatus.RUNNING


@_handles(RunStarted)
def _run_started(fold: Fold[Any], e: RunStarted, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    _clear_interrupt(meta)
    meta.stop_current_execution = StopRequestStatus.NONE
    meta.internal_data.pop("error", None)
    meta.internal_data.pop("failed_node", None)
    for key in RUN_KEYS:
        meta.internal_data.pop(key, None)  # a paused run that new input superseded ends here
    meta.internal_data["run_id"] = r.run_id
    meta.thread_id = r.thread_id
    meta.current_node = e.entry_node


@_handles(NodeEntered)
def _node_entered(fold: Fold[Any], e: NodeEntered, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    meta.current_node = e.node
    entered = meta.internal_data.get(ENTERED_KEY)
    if not (entered and entered["node"] == e.node):  # re-entering keeps the step's start
        meta.internal_data[ENTERED_KEY] = {"node": e.node, "seq": r.seq}


@_handles(BranchEntered)
def _branch_entered(fold: Fold[Any], e: BranchEntered, r: EventRecord) -> None:
    meta = fold.state.execution_meta  # the superstep's start is its first branch's record
    meta.internal_data.setdefault(ENTERED_KEY, {"node": meta.current_node, "seq": r.seq})


@_handles(TasksPlanned)
def _tasks_planned(fold: Fold[Any], e: TasksPlanned, r: EventRecord) -> None:
    data = fold.state.execution_meta.internal_data  # kept until step `e.step` advances
    data[TASKS_KEY] = {"step": e.step, "tasks": [dict(t) for t in e.tasks]}
    data[JOINS_KEY] = {k: list(v) for k, v in e.joins.items()}


@_handles(StepAdvanced)
def _step_advanced(fold: Fold[Any], e: StepAdvanced, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    meta.internal_data.pop(ENTERED_KEY, None)
    meta.internal_data.pop(RESUME_KEY, None)
    meta.step += 1
    if (meta.internal_data.get(TASKS_KEY) or {}).get("step") != meta.step + 1:
        meta.internal_data.pop(TASKS_KEY, None)  # none planned for the step that follows
    if e.next_node is not None:
        meta.current_node = e.next_node


@_handles(MessageAppended)
def _message_appended(fold: Fold[Any], e: MessageAppended, r: EventRecord) -> None:
    fold._append_messages((_validate_message(e.message),))


@_handles(MessagesReplaced)
def _messages_replaced(fold: Fold[Any], e: MessagesReplaced, r: EventRecord) -> None:
    fold._replace_messages([_validate_message(m) for m in e.messages])


@_handles(MessageReplaced)
def _message_replaced(fold: Fold[Any], e: MessageReplaced, r: EventRecord) -> None:
    fold._replace_message(_validate_message(e.message))


@_handles(MessagesRemoved)
def _messages_removed(fold: Fold[Any], e: MessagesRemoved, r: EventRecord) -> None:
    fold._remove_messages(e.message_ids)


@_handles(StateUpdated)
def _state_updated(fold: Fold[Any], e: StateUpdated, r: EventRecord) -> None:
    fold._update(e.values, replace=e.replace)


@_handles(InterruptRaised)
def _interrupt_raised(fold: Fold[Any], e: InterruptRaised, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    _set_interrupt(meta, e.node, e.reason, ended(e), e.data)
    if e.by_node:
        meta.internal_data[AWAITING_KEY] = True if e.branch is None else {"branch": e.branch}
    else:
        meta.internal_data.pop(RESUME_KEY, None)


@_handles(Resumed)
def _resumed(fold: Fold[Any], e: Resumed, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    data = meta.internal_data
    if awaiting := data.pop(AWAITING_KEY, False):
        data[RESUME_KEY] = resumed_with(data.get(RESUME_KEY), awaiting, e.value)
    _clear_interrupt(meta)
    meta.stop_current_execution = StopRequestStatus.NONE
    meta.internal_data.pop("error", None)
    meta.internal_data.pop("failed_node", None)
    meta.internal_data.pop(STOP_KEY, None)


@_handles(StopRequested)
def _stop_requested(fold: Fold[Any], e: StopRequested, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    meta.stop_current_execution = StopRequestStatus.STOP_REQUESTED
    request = {k: v for k, v in (("by", e.by), ("reason", e.reason)) if v is not None}
    meta.internal_data[STOP_KEY] = request


@_handles(Stopped)
def _stopped(fold: Fold[Any], e: Stopped, r: EventRecord) -> None:
    """A stop pauses the run, as Agentflow's does: after the node it followed, or before the
    node it cancelled (which runs again on resume)."""
    meta = fold.state.execution_meta
    meta.stop_current_execution = StopRequestStatus.STOPPED
    data: dict[str, Any] = {"source": "stop", **meta.internal_data.pop(STOP_KEY, {})}
    if e.in_flight:
        data["in_flight"] = list(e.in_flight)
    reason = e.reason or StopRequestStatus.STOP_REQUESTED.value
    _set_interrupt(meta, e.node or meta.current_node, reason, ended(e), data)


@_handles(ToolCallStarted)
def _tool_call_started(fold: Fold[Any], e: ToolCallStarted, r: EventRecord) -> None:
    pending = fold.state.execution_meta.internal_data.setdefault(TOOL_CALLS_KEY, {})
    pending[e.call_id] = e.name


@_handles(ToolCallFinished)
def _tool_call_finished(fold: Fold[Any], e: ToolCallFinished, r: EventRecord) -> None:
    data = fold.state.execution_meta.internal_data
    pending = data.get(TOOL_CALLS_KEY)
    if pending is not None:
        pending.pop(e.call_id, None)
        if not pending:
            del data[TOOL_CALLS_KEY]


@_handles(ContextSummarized)
def _context_summarized(fold: Fold[Any], e: ContextSummarized, r: EventRecord) -> None:
    fold.state.context_summary = e.summary
    if e.messages is not None:
        fold._replace_messages([_validate_message(m) for m in e.messages])


@_handles(RunCompleted)
def _run_completed(fold: Fold[Any], e: RunCompleted, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    meta.current_node = END
    meta.status = ended(e)


@_handles(RunFailed)
def _run_failed(fold: Fold[Any], e: RunFailed, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    meta.status = ended(e)
    meta.internal_data["error"] = f"{e.error_type}: {e.message}"
    meta.internal_data["failed_node"] = e.node


@_handles(RunCancelled)
def _run_cancelled(fold: Fold[Any], e: RunCancelled, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    _clear_interrupt(meta)
    meta.status = ended(e)
    meta.stop_current_execution = StopRequestStatus.NONE
    meta.internal_data.pop(STOP_KEY, None)
    meta.internal_data["cancelled"] = {"by": e.by, "reason": e.reason, "node": e.node}


@_handles(ThreadCreated)
def _thread_created(fold: Fold[Any], e: ThreadCreated, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    meta.internal_data[CREATED_KEY] = {"by": e.by, "metadata": e.metadata}
    meta.status = ExecutionStatus.IDLE


@_handles(ThreadHidden)
def _thread_hidden(fold: Fold[Any], e: ThreadHidden, r: EventRecord) -> None:
    fold.state.execution_meta.internal_data["hidden"] = {"by": e.by, "reason": e.reason}


def _own_thread_record(fold: Fold[Any], e: BaseEvent, r: EventRecord) -> None:
    """A record of a runtime's own thread, or of a long-term store's: no agent state changes."""


for _kind in [t for t in EVENT_TYPES if t.RUNTIME_ONLY or t.STORE_WRITE or t.ABOUT_LOG]:
    _handles(_kind)(_own_thread_record)


def _fact(fold: Fold[Any], e: BaseEvent, r: EventRecord) -> None:
    """A fact recorded beside a step (a model call, an outcome, a shared write): the log
    keeps it for audit and for its own projections; the thread's state does not change."""


for _fact_kind in FACT_KINDS:
    _handles(_fact_kind)(_fact)


@_handles(RunSuperseded)
def _run_superseded(fold: Fold[Any], e: RunSuperseded, r: EventRecord) -> None:
    meta = fold.state.execution_meta
    meta.internal_data["superseded"] = [*meta.internal_data.get("superseded", ()), e.run_id]


@_handles(Forked)
def _forked(fold: Fold[Any], e: Forked, r: EventRecord) -> None:
    state = type(fold.state).model_validate(e.state)
    state.execution_meta.thread_id = r.thread_id
    state.execution_meta.internal_data["forked_from"] = {
        "thread_id": e.source_thread,
        "seq": e.source_seq,
    }
    fold.state = state
    fold._ids = {m.message_id for m in state.context}


_missing = [t.__name__ for t in EVENT_TYPES if t not in _HANDLERS]
if _missing:  # a kind declared without its fold handler: fail at import, not on replay
    raise ImportError(f"event kinds without a fold handler: {', '.join(_missing)}")


# ---- decide: the gate in front of the log ------------------------------------------------


def _check(meta: ExecutionState, event: Event, seq: int, state_cls: type[AgentState]) -> None:
    """Raise when `event` is not a legal transition from `meta` at thread position `seq`."""
    if isinstance(event, _CONTEXT_ONLY):
        return  # legal in any state: `_gate` checks them against the context
    kind = kind_of(event)
    status = meta.status
    finished = status in _FINISHED
    paused = meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED

    def refuse(why: str) -> None:
        raise IllegalTransitionError(kind, why)

    match event:
        case RunStarted():
            if (
                status == ExecutionStatus.RUNNING
                and seq > 0
                and not paused
                and not before_first_run(meta)
            ):
                refuse("a run is already in progress on this thread; resume or finish it first")
        case (
            NodeEntered()
            | StepAdvanced()
            | InterruptRaised()
            | ToolCallStarted()
            | BranchEntered()
            | TasksPlanned()
        ):
            if finished:
                refuse(f"the run is {status.value}; start a new run first")
            if paused:
                refuse(f"the run is paused ({_pause_of(meta)}); resume it first")
            if isinstance(event, StepAdvanced) and event.step != meta.step + 1:
                refuse(f"step {event.step} does not follow step {meta.step}")
        case Resumed():
            if not (paused or status == ExecutionStatus.ERROR):
                refuse("there is no interrupt, stop or failure to resume from")
        case StopRequested():
            if finished:
                refuse(f"the run is already {status.value}")
            if meta.stop_current_execution != StopRequestStatus.NONE:
                refuse(f"a stop is already {meta.stop_current_execution.value}")
        case Stopped():
            if meta.stop_current_execution != StopRequestStatus.STOP_REQUESTED:
                refuse("no stop was requested")
        case ToolCallFinished():
            pending = meta.internal_data.get(TOOL_CALLS_KEY, {})
            if event.call_id not in pending:
                refuse(f"tool call {event.call_id!r} was never started or already finished")
        case RunCompleted() | RunFailed():
            if finished:
                refuse(f"the run is already {status.value}")
            if paused:
                refuse(f"the run is paused ({_pause_of(meta)}); resume it first")
        case RunCancelled():
            if seq == 0:
                refuse("there is no run on this thread to cancel")
            if status in (ExecutionStatus.COMPLETED, ExecutionStatus.CANCELLED):
                refuse(f"the run is already {status.value}: there is nothing to cancel")
        case ModelCalled():
            if finished:
                refuse(f"the run is {status.value}: a model call belongs to a running step")
        case RunSuperseded():
            if status != ExecutionStatus.CANCELLED:
                refuse("only a cancelled run can be rolled back; cancel it first")
        case Forked():  # a new thread's first event, or a branch back to its own past
            if seq != 0 and (event.source_thread != meta.thread_id or event.source_seq >= seq):
                refuse("a fork is a new thread's first event, or a branch of its own past")
            if seq and status == ExecutionStatus.RUNNING and not (paused or before_first_run(meta)):
                refuse("a run is in progress on this thread: wait for it or cancel it first")
        case ThreadCreated():
            if seq != 0:
                refuse("a thread is created once, as its first event")
        case StateUpdated():
            plan = field_plan(state_cls)
            for name in event.values:
                if name not in plan and name not in CONTEXT_FIELDS:
                    why = (
                        "execution status changes only through transitions"
                        if name == "execution_meta"
                        else "check the name, or declare the field on the state class"
                    )
                    raise InvalidStateUpdateError(
                        f"{state_cls.__name__} has no field {name!r} "
                        f"(fields: {', '.join(sorted(set(plan) | CONTEXT_FIELDS))}); {why}"
                    )
        case _:
            pass


def _check_replaced(fold: Fold[Any], event: MessageReplaced) -> None:
    message_id = event.message.get("message_id")
    if message_id in fold._ids:
        return
    raise InvalidStateUpdateError(
        f"no message with id {message_id!r} is in the context to replace: send it without "
        "that id to append it instead"
    )


def before_first_run(meta: ExecutionState) -> bool:
    """Whether the thread was created before its first run (`thread_created`) and no run
    has begun on it yet: new input starts its first run."""
    return CREATED_KEY in meta.internal_data and "run_id" not in meta.internal_data


def _pause_of(meta: ExecutionState) -> str:
    if meta.is_interrupted():
        return f"{meta.status.value} at {meta.interrupted_node!r}"
    return "stopped"


def decide(state: S, events: Sequence[Event], *, seq: int | None = None) -> list[Event]:
    """Check that `events`, in order, are legal from `state` and that their payloads validate.

    `seq` is the thread's last seq (0 for a new thread); it defaults to "not new". Nothing is
    changed; the events are returned for convenience.
    """
    # A shallow copy is enough: handlers replace field values rather than mutate them,
    # except execution_meta, which is copied deeply. The context is left out unless an
    # event needs it checked: one that removes or replaces messages, or ends the run.
    meta = copy_meta(state.execution_meta)
    whole = any(isinstance(e, _NEEDS_CONTEXT) for e in events)
    shadow = Fold(
        state.model_copy(
            update={"context": list(state.context) if whole else [], "execution_meta": meta}
        ),
        seq=1 if seq is None else seq,
        copy=False,
    )
    base, thread_id = shadow.seq, state.execution_meta.thread_id
    records = [uncommitted_record(e, base + i + 1, thread_id) for i, e in enumerate(events)]
    _gate(shadow, records, type(state), [] if whole else state.context)
    return list(events)


def _gate(
    fold: Fold[Any],
    records: Sequence[EventRecord],
    state_cls: type[AgentState],
    earlier: list[Message],
) -> None:
    """Check each record's event against `fold` as it stands, then fold it in.

    `earlier` holds the messages before the fold's own context that a tool result may
    answer (a shadow fold of `decide` leaves them out). On a refusal the records before it
    are folded in already: the caller drops the fold.
    """
    handlers = _HANDLERS
    for record in records:
        event = record.event
        _check(fold.state.execution_meta, event, record.seq - 1, state_cls)
        if isinstance(event, MessageReplaced):
            _check_replaced(fold, event)
        elif isinstance(event, MessagesRemoved):
            _check_removed(fold, event)
        elif isinstance(event, RunCompleted | RunCancelled):
            _check_closed(fold.open_calls(), kind_of(event))
        elif isinstance(event, MessageAppended):
            _check_answers(earlier, fold.state.context, event)
        before = list(fold.state.context) if isinstance(event, _CHANGES_CONTEXT) else None
        try:
            handlers[type(event)](fold, event, record)
        except InvalidStateUpdateError:
            raise
        except (ValidationError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise InvalidStateUpdateError(
                f"{kind_of(event)!r} carries a value its field rejects: {exc}"
            ) from exc
        if before is not None:
            check_pairs(before, fold.state.context, f"{kind_of(event)!r}")
        fold.seq = record.seq
        fold.hash = record.hash


_CHANGES_CONTEXT = (MessagesRemoved, MessagesReplaced, MessageReplaced, ContextSummarized)
"""The events whose change of the context is checked to keep each call with its result."""
_NEEDS_CONTEXT = (*_CHANGES_CONTEXT, RunCompleted, RunCancelled)
"""The events `decide` checks against the whole context (those ending a run: no call open)."""
_CONTEXT_ONLY = (*_CHANGES_CONTEXT, MessageAppended)  # no transition: `_check` passes them
_FINISHED = (ExecutionStatus.COMPLETED, ExecutionStatus.ERROR, ExecutionStatus.CANCELLED)


def _check_removed(shadow: Fold[Any], event: MessagesRemoved) -> None:
    missing = [i for i in event.message_ids if i not in shadow._ids]
    if missing:
        raise InvalidStateUpdateError(
            f"no message with id(s) {', '.join(map(repr, missing))} is in the context to "
            "remove: RemoveMessage takes the message_id of a message the context holds"
        )


def _check_answers(context: list[Message], batch: list[Message], event: MessageAppended) -> None:
    """A tool result joins the context only answering a call before it, once.

    The search goes back from the end, where the call almost always is, so the cost of a
    tool step does not grow with the conversation.
    """
    content = event.message.get("content") or ()
    ids = [
        b.get("call_id") for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    for call_id in ids:
        found = None
        for message in itertools.chain(reversed(batch), reversed(context)):
            if any(c.id == call_id for c in calls_of(message)):
                found = "call"
                break
            if any(r.call_id == call_id for r in results_of(message)):
                found = "answered"
                break
        if found != "call":
            why = "already has its result" if found else "was never made in this context"
            raise InvalidStateUpdateError(
                f"a tool result answers call {call_id!r}, which {why}: every tool call ends "
                "in exactly one result, after the assistant message that asks for it"
            )


def _check_closed(waiting: list[Call], kind: str = RunCompleted.KIND) -> None:
    if waiting:
        names = ", ".join(f"{c.name} ({c.id})" for c in waiting)
        raise IllegalTransitionError(
            kind,
            f"tool call(s) {names} have no result: a run cannot end with a call open; "
            "route the assistant message to a ToolNode, or answer the calls",
        )


def uncommitted_record(
    event: Event, seq: int, thread_id: str | None, run_id: str | None = None
) -> EventRecord:
    """A record for folding an event before (or without) committing it."""
    return EventRecord(
        thread_id=thread_id or "",
        seq=seq,
        position=0,
        run_id=run_id,
        actor=None,
        at=0.0,
        kind=kind_of(event),
        version=event.VERSION,
        event=event,
        hash="",
    )


# ---- the pure faces --------------------------------------------------------------------


def apply(state: S, record: EventRecord) -> S:
    """The state after `record`; `state` itself is left unchanged."""
    fold = Fold(state)
    fold.apply(record)
    return fold.state


def replay(
    records: Iterable[EventRecord],
    state_cls: type[S] = AgentState,  # type: ignore[assignment]
    *,
    state: S | None = None,
) -> S:
    """Fold `records` over `state` (or a fresh `state_cls()`) and return the result."""
    fold = Fold(state) if state is not None else Fold.new(state_cls)
    fold.apply_all(records)
    return fold.state
