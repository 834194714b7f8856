"""The execution record of every action, lionagi's `EventStatus` and `Execution`, derived
from a thread's log: one `Execution` per run, node step and tool call (and per trigger, over
an agent runtime's own thread).

Nothing here is stored twice. What was queued is in the log before anything runs (a model's
tool calls in its message, the next node in the step before, a runtime's accepted trigger),
what was handed over is recorded before it begins (`node_entered`, `tool_call_started`,
`trigger_dispatched`), and every end is a record of its own. So a reader of a log whose
process died sees `pending` for what waited and `processing` for what was running.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from agentlog.events import EventRecord
from agentlog.events.errors import InvalidArgumentError
from agentlog.events.kinds import (
    BranchEntered,
    InterruptRaised,
    MessageAppended,
    MessageReplaced,
    NodeEntered,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepAdvanced,
    Stopped,
    TasksPlanned,
    ToolCallFinished,
    ToolCallStarted,
    TriggerAccepted,
    TriggerDispatched,
    TriggerFinished,
)
from agentlog.events.statuses import STATUSES
from agentlog.projections.lifecycle import status_after
from agentlog.projections.state import END, START, ExecutionStatus


class EventStatus(StrEnum):
    """Where an action stands (lionagi's `EventStatus`): the statuses of agentlog's one
    vocabulary (`agentlog.events.statuses.STATUS_MEANINGS` says what each means), from
    PENDING through PROCESSING to how it ended. `str(EventStatus.PENDING)` is "pending"."""

    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"
    TIMED_OUT = "timed_out"
    ANSWERED_BY_CLIENT = "answered_by_client"
    INTERRUPTED = "interrupted"


Action = Literal["run", "step", "tool_call", "trigger"]

_OPEN = ("pending", "processing")


@dataclass
class Execution:
    """One action's execution record (lionagi's `Execution`): its status, how long it took
    in seconds (None while unknown), its response and its error message.

    Built by hand as in lionagi (`Execution(duration=3.5, response={...},
    status=EventStatus.COMPLETED)`), or derived from a log by `executions`, which also fills
    the keyword fields: which `action` it is, its `name` (node, tool or entry point), its
    `id` (run id, step number, call id or trigger id), the `node` it ran in, its `run_id`,
    and the seqs of the records that opened and last changed it.
    """

    duration: float | None = None
    response: Any = None
    status: EventStatus = EventStatus.PENDING
    error: str | None = None
    action: Action | None = field(default=None, kw_only=True)
    name: str | None = field(default=None, kw_only=True)
    id: str | None = field(default=None, kw_only=True)
    node: str | None = field(default=None, kw_only=True)
    run_id: str | None = field(default=None, kw_only=True)
    first_seq: int | None = field(default=None, kw_only=True)
    last_seq: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.status, EventStatus):
            if self.status not in STATUSES:
                raise InvalidArgumentError(
                    f"{self.status!r} is not an EventStatus: use one of {', '.join(STATUSES)}"
                )
            self.status = EventStatus(self.status)

    def __str__(self) -> str:
        """`Execution(status=..., duration=..., response=..., error=...)`, as lionagi prints
        it; the response and the error are shown by `repr`, so stored text cannot pass for
        anything else on a terminal."""
        return (
            f"Execution(status={self.status.value}, duration={self.duration}, "
            f"response={self.response!r}, error={self.error!r})"
        )

    @property
    def finished(self) -> bool:
        """Whether it ended (neither pending nor processing)."""
        return self.status.value not in _OPEN


def executions(records: Iterable[EventRecord]) -> list[Execution]:
    """The execution of every run, node step and tool call a thread's `records` hold (and
    of every trigger, over an agent runtime's own thread), in the order each first appears.

    A run is `processing` from its `run_started` (or `resumed`) to the record that ends or
    pauses it; a step from `node_entered` (or `branch_entered`) to its `step_advanced`; a
    tool call from `tool_call_started` to its result. Before that, a node the run goes to
    next and a call a model asked for are `pending`. A run that paused is `interrupted`,
    and so is the step that asked for input; a step cut short by a stop is `abandoned` (it
    runs again on resume). What is still open at the end of the records was queued or
    running when its writer stopped writing: a live run, or a process that died.
    """
    reader = _Reader()
    for record in records:
        reader.read(record)
    return reader.found


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


class _Reader:
    """One pass over the records, keeping what is open."""

    def __init__(self) -> None:
        self.found: list[Execution] = []
        self.run: Execution | None = None
        self.steps: list[Execution] = []
        """The run's steps not yet ended: pending ones, then the one (or branches) running."""
        self.calls: dict[str, Execution] = {}
        self.triggers: dict[str, Execution] = {}
        self.messages: list[Any] = []
        self.remote: set[str] = set()
        """Calls of tools that run elsewhere (a client answers them)."""

    def new(self, record: EventRecord, action: Action, name: str | None, **kw: Any) -> Execution:
        execution = Execution(
            action=action,
            name=name,
            run_id=record.run_id,
            first_seq=record.seq,
            last_seq=record.seq,
            **kw,
        )
        self.found.append(execution)
        return execution

    @staticmethod
    def set(
        execution: Execution, record: EventRecord, status: str, error: str | None = None
    ) -> None:
        execution.status = EventStatus(status)
        execution.last_seq = record.seq
        if error is not None:
            execution.error = error

    def read(self, record: EventRecord) -> None:
        event = record.event
        if type(event).OPENS_RUN:
            self.run = self.new(record, "run", None, id=record.run_id, status="processing")
            if isinstance(event, RunStarted):
                self.run.name = event.graph
                self.plan(record, event.entry_node)
        elif isinstance(event, NodeEntered | BranchEntered):
            self.enter(record, event.node)
        elif isinstance(event, TasksPlanned):
            self.steps = [
                self.new(record, "step", str(t["node"]), node=str(t["node"])) for t in event.tasks
            ]
        elif isinstance(event, StepAdvanced):
            self.advance(record, event)
        elif isinstance(event, MessageAppended | MessageReplaced):
            self.message(record, event.message)
        elif isinstance(event, ToolCallStarted):
            call = self.call(record, event.call_id, event.name)
            call.node = event.node
            self.set(call, record, "processing")
        elif isinstance(event, ToolCallFinished):
            call = self.call(record, event.call_id, event.name)
            call.duration = _seconds(event.duration_ms) if event.duration_ms else None
            call.response = event.output
            self.set(call, record, event.status, event.error)
        elif type(event).ENDS_RUN:
            self.end(record)
        elif isinstance(event, TriggerAccepted | TriggerDispatched | TriggerFinished):
            self.trigger(record, event)

    def enter(self, record: EventRecord, node: str) -> None:
        step = next((s for s in self.steps if s.status == "pending" and s.node == node), None)
        if step is None:
            step = self.new(record, "step", node, node=node)
            self.steps.append(step)
        step.run_id = record.run_id
        self.set(step, record, "processing")
        self.messages = []

    def advance(self, record: EventRecord, event: StepAdvanced) -> None:
        running = [s for s in self.steps if s.status == "processing"]
        for step in running:
            step.id = str(event.step)
            step.duration = _seconds(event.duration_ms)
            if len(running) == 1:
                step.response = self.messages or None
            self.set(step, record, "completed")
        self.steps = [s for s in self.steps if s.status == "pending"]
        if event.next_node is not None and not self.steps:
            self.plan(record, event.next_node)

    def plan(self, record: EventRecord, node: str) -> None:
        """`node` runs next: pending until entered (START and END are no steps)."""
        if node not in (START, END):
            self.steps = [self.new(record, "step", node, node=node)]

    def message(self, record: EventRecord, message: dict[str, Any]) -> None:
        self.messages.append(message)
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind in ("tool_call", "remote_tool_call"):
                self.call(record, str(block.get("id")), str(block.get("name")))
                if kind == "remote_tool_call":
                    self.remote.add(str(block.get("id")))
            elif kind == "tool_result" and str(block.get("call_id")) in self.calls:
                call = self.calls[str(block["call_id"])]
                if call.finished:
                    continue  # its `tool_call_finished` said how it ended
                status = block.get("status") or ("failed" if block.get("is_error") else None)
                if status is None:
                    remote = call.id in self.remote
                    status = "answered_by_client" if remote else "completed"
                call.response = block.get("output")
                self.set(call, record, str(status))

    def call(self, record: EventRecord, call_id: str, name: str) -> Execution:
        if call_id not in self.calls:
            self.calls[call_id] = self.new(record, "tool_call", name, id=call_id)
        return self.calls[call_id]

    def end(self, record: EventRecord) -> None:
        event = record.event
        after = status_after(event)
        error: str | None = None
        status: str
        if isinstance(event, RunFailed):
            status, error = event.status, f"{event.error_type}: {event.message}"
        elif after == ExecutionStatus.CANCELLED:
            status = "cancelled"
            error = event.reason if isinstance(event, RunCancelled) else None
        elif after == ExecutionStatus.COMPLETED:
            status = "completed"
        else:
            status = "interrupted"
        step_status: str = status
        if isinstance(event, Stopped):
            error, step_status = event.reason, "abandoned"
        elif isinstance(event, InterruptRaised):
            step_status = "interrupted" if event.by_node else "pending"
        for step in self.steps:
            if step.status == "processing" or status == "cancelled":
                self.set(step, record, step_status, error)
        self.steps = [s for s in self.steps if s.status == "pending"]
        if status == "cancelled":
            for call in self.calls.values():
                if not call.finished:
                    self.set(call, record, "cancelled")
        if self.run is not None:
            duration = getattr(event, "duration_ms", None)
            self.run.duration = _seconds(duration)
            if isinstance(event, RunCompleted) and self.messages:
                self.run.response = self.messages[-1]
            self.set(self.run, record, status, error)
            self.run = None

    def trigger(
        self, record: EventRecord, event: TriggerAccepted | TriggerDispatched | TriggerFinished
    ) -> None:
        if isinstance(event, TriggerAccepted):
            found = self.new(record, "trigger", event.entry_point, id=event.trigger_id)
            found.response = None
            self.triggers[event.trigger_id] = found
            return
        trigger = self.triggers.get(event.trigger_id)
        if trigger is None:
            return  # accepted before the records read
        if isinstance(event, TriggerDispatched):
            self.set(trigger, record, "processing")
            return
        outcome = event.outcome if event.outcome in STATUSES else "failed"
        if event.retry_at is not None:
            outcome = "pending"  # failed, and queued again for `retry_at`
        error = f"{event.error_type}: {event.message}" if event.error_type else event.message
        self.set(trigger, record, outcome, error)
