"""The runtime's own projection: its thread of the log folded into what it must remember
(every trigger and how far it got, idempotency keys, where each entry point listens from)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from events import EventRecord
from events.kinds import TriggerAccepted, TriggerDispatched, TriggerFinished, TriggerListening

WORKER_PREFIX = "worker:"
"""How a worker names itself as the writer of its records (`worker:<id>`)."""

ENDED = frozenset({"completed", "interrupted", "cancelled", "rejected"})
"""Outcomes after which a trigger is done (a failure is done unless it will be retried)."""


@dataclass
class TriggerState:
    """One accepted trigger, as its records say."""

    accepted: TriggerAccepted
    position: int
    """Its acceptance's position in the log: the arrival order among equal priorities."""
    attempt: int = 0
    thread_seq: int | None = None
    dispatched: bool = False
    outcome: str | None = None
    error_type: str | None = None
    message: str | None = None
    retry_at: float | None = None
    by: str | None = None
    resumed: bool = False
    """Its last dispatch resumed a run from the log (rather than sending its input)."""
    first_seq: int | None = None
    """The thread's last seq at its first dispatch: anything after it is its run's."""
    finished_position: int | None = None
    """The position of its last `trigger_finished` (where a run's stream ends)."""
    rolled_back_to: int | None = None
    """Cancelled by a rollback: the thread seq its state goes back to."""
    end_seq: int | None = None
    """The thread seq where its last completed or interrupted attempt left the thread
    (None: not recorded, as in logs written before it was)."""
    accepted_at: float = 0.0
    """When its acceptance was recorded (epoch seconds)."""
    updated_at: float = 0.0
    """When its last record (accepted, dispatched or finished) was made."""

    @property
    def id(self) -> str:
        return self.accepted.trigger_id

    @property
    def done(self) -> bool:
        """No more attempts: it ended, or failed for good."""
        return self.outcome in ENDED or (self.outcome == "failed" and self.retry_at is None)

    @property
    def in_flight(self) -> bool:
        """Dispatched and not finished: running now, or cut short by a crash or a stop."""
        return self.dispatched and self.outcome is None


@dataclass
class Ledger:
    """The fold of the runtime thread."""

    triggers: dict[str, TriggerState] = field(default_factory=dict)
    keys: dict[tuple[str, str], str] = field(default_factory=dict)
    """(entry point, idempotency key) -> trigger id."""
    by_thread: dict[str, list[str]] = field(default_factory=dict)
    """Thread -> its trigger ids, oldest first."""
    unfinished: dict[str, dict[str, None]] = field(default_factory=dict)
    """Thread -> the ids of its triggers not done yet, oldest first (a set kept in order)."""
    graph_of: dict[str, str] = field(default_factory=dict)
    """Thread -> graph id, for every thread a trigger named."""
    answered: dict[str, int] = field(default_factory=dict)
    """Event entry point -> the last position it accepted a trigger for (or listens after)."""
    fired: dict[str, float] = field(default_factory=dict)
    """Timer entry point -> the last slot it fired (or listens after)."""
    workers: set[str] = field(default_factory=set)
    """The ids of the workers that have written here (a lone runtime checks they are gone)."""
    seq: int = 0

    def apply_all(self, records: Iterable[EventRecord]) -> None:
        for record in records:
            self.apply(record)

    def apply(self, record: EventRecord) -> None:
        self._apply(record)
        actor = record.actor or ""
        if actor.startswith(WORKER_PREFIX):
            self.workers.add(actor[len(WORKER_PREFIX) :])
        trigger_id = getattr(record.event, "trigger_id", None)
        state = self.triggers.get(trigger_id) if trigger_id is not None else None
        if state is not None:
            thread = self.unfinished.setdefault(state.accepted.thread_id, {})
            if state.done:
                thread.pop(state.id, None)
                if not thread:
                    del self.unfinished[state.accepted.thread_id]
            else:
                thread.setdefault(state.id, None)

    def _apply(self, record: EventRecord) -> None:
        event = record.event
        self.seq = record.seq
        if isinstance(event, TriggerAccepted):
            state = TriggerState(
                event, record.position, accepted_at=record.at, updated_at=record.at
            )
            self.triggers[event.trigger_id] = state
            if event.idempotency_key is not None:
                key = (event.entry_point, event.idempotency_key)
                if key in self.keys:  # the key's first trigger is the one: this never runs
                    state.outcome, state.message = "rejected", "a duplicate of its key's first"
                else:
                    self.keys[key] = event.trigger_id
            self.by_thread.setdefault(event.thread_id, []).append(event.trigger_id)
            self.graph_of.setdefault(event.thread_id, event.graph_id)
            if event.source_position is not None:
                last = self.answered.get(event.entry_point, 0)
                self.answered[event.entry_point] = max(last, event.source_position)
            if event.slot is not None:
                last_slot = self.fired.get(event.entry_point, float("-inf"))
                self.fired[event.entry_point] = max(last_slot, event.slot)
        elif isinstance(event, TriggerDispatched):
            state = self.triggers[event.trigger_id]
            if state.done:  # a dispatch a cancel overtook: the end stands, nothing runs
                return
            state.attempt, state.thread_seq = event.attempt, event.thread_seq
            state.updated_at = record.at
            state.dispatched, state.resumed = True, event.resumed
            if state.first_seq is None:
                state.first_seq = event.thread_seq
            state.outcome = state.retry_at = None
        elif isinstance(event, TriggerFinished):
            state = self.triggers[event.trigger_id]
            state.outcome, state.attempt = event.outcome, max(state.attempt, event.attempt)
            state.error_type, state.message = event.error_type, event.message
            state.retry_at, state.by = event.retry_at, event.by
            state.rolled_back_to = event.rolled_back_to
            state.dispatched = state.dispatched and event.retry_at is None
            state.finished_position = record.position
            state.end_seq = event.thread_seq
            state.updated_at = record.at
        elif isinstance(event, TriggerListening):
            if event.position is not None:
                self.answered.setdefault(event.entry_point, event.position)
            if event.slot is not None:
                self.fired.setdefault(event.entry_point, event.slot)

    def pending(self) -> list[TriggerState]:
        """Triggers not done, in arrival order."""
        return sorted((t for t in self.triggers.values() if not t.done), key=lambda t: t.position)

    def latest_on(self, thread_id: str) -> TriggerState | None:
        ids = self.by_thread.get(thread_id)
        return self.triggers[ids[-1]] if ids else None
