"""The runtime's own projection: its thread of the log folded into what it must remember
(every unfinished trigger and how far it got, the last finished ones, idempotency keys,
where each entry point listens from).

What is kept does not grow with history beyond one small entry per thread and per
idempotency key: a trigger's input is dropped once it is done (nothing runs it again), and
only the last `keep` done triggers are kept (for `wait`, `cancel` and the stats); an older
one is counted, and its key, if any, still names it.
"""

from __future__ import annotations

import math
import sys
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

import msgspec

from agentlog.actors.runtime.keys import request_digest
from agentlog.events import EventRecord
from agentlog.events.kinds import (
    ResourcesNamed,
    TriggerAccepted,
    TriggerDispatched,
    TriggerFinished,
    TriggerListening,
    WebhookSent,
)

SNAPSHOT_TYPE = "agentlog.runtime.Ledger/1"
"""The state type of the ledger's snapshots (a new shape takes a new version: an older
snapshot is then ignored and the thread folded from its start)."""

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
    keys: dict[tuple[str, str | None, str], str] = field(default_factory=dict)
    """(entry point, caller, idempotency key) -> trigger id: a key is its caller's own."""
    requests: dict[str, bytes] = field(default_factory=dict)
    """Keyed trigger id -> `request_digest` of its input, so a repeated key is told a retry
    from another request without keeping the input."""
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
    keep: int = 10_000
    """How many done triggers are kept (`RuntimeConfig.keep_results`)."""
    ttl_s: float | None = None
    """How long a done trigger is kept, in the log's time (`RuntimeConfig.keep_results_ttl_s`)."""
    finished: OrderedDict[str, float] = field(default_factory=OrderedDict)
    """The ids of the done triggers kept, the earliest done first, with when each was done."""
    forgotten: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """(graph id, entry point, outcome) -> done triggers no longer kept."""
    resources: dict[str, Any] | None = None
    """The resource names the log last holds (`resources_named`); None: never recorded."""
    keyed: dict[str, TriggerAccepted] = field(default_factory=dict)
    """Trigger id -> its acceptance (without input), for keyed triggers no longer kept: a
    repeated key still answers with the trigger it names."""
    outbox: dict[str, str] = field(default_factory=dict)
    """Trigger id -> the webhook its result goes to, until a `webhook_sent` record says it
    was delivered or given up (a restart sends the ones of ended runs)."""

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
                self._finish(state, record.at)
            else:
                thread.setdefault(state.id, None)
                self.finished.pop(state.id, None)

    def _finish(self, state: TriggerState, at: float) -> None:
        """A trigger is done: drop its input, and forget the oldest done past `keep` (and
        those done longer than `ttl_s` before `at`)."""
        if state.accepted.input is not None:
            state.accepted = msgspec.structs.replace(state.accepted, input=None)
        self.finished[state.id] = at
        self.finished.move_to_end(state.id)
        self._trim(at)

    def _trim(self, now: float | None = None) -> None:
        """Forget the oldest done triggers past `keep`, or done longer than `ttl_s` ago."""
        while self.finished and (
            len(self.finished) > self.keep
            or (
                self.ttl_s is not None
                and now is not None
                and next(iter(self.finished.values())) < now - self.ttl_s
            )
        ):
            old_id, _ = self.finished.popitem(last=False)
            old = self.triggers.pop(old_id)
            accepted = old.accepted
            self.forgotten[(accepted.graph_id, accepted.entry_point, old.outcome or "")] += 1
            if accepted.idempotency_key is not None:
                self.keyed[old_id] = accepted
            ids = self.by_thread.get(accepted.thread_id)
            if ids is not None:
                ids.remove(old_id)
                if not ids:
                    del self.by_thread[accepted.thread_id]

    def to_snapshot(self) -> dict[str, Any]:
        """The ledger as builtins (`from_snapshot` reads it back): a restart loads it and
        folds only the records after it, so its time does not grow with history."""
        states = [{f.name: getattr(s, f.name) for f in fields(s)} for s in self.triggers.values()]
        data: dict[str, Any] = msgspec.to_builtins(
            {
                "triggers": states,
                "keys": [[*key, trigger_id] for key, trigger_id in self.keys.items()],
                "requests": {tid: digest.hex() for tid, digest in self.requests.items()},
                "by_thread": self.by_thread,
                "unfinished": {thread: list(ids) for thread, ids in self.unfinished.items()},
                "graph_of": self.graph_of,
                "answered": self.answered,
                "fired": self.fired,
                "workers": sorted(self.workers),
                "seq": self.seq,
                "finished": [[tid, at] for tid, at in self.finished.items()],
                "forgotten": [[*key, count] for key, count in self.forgotten.items()],
                "keyed": list(self.keyed.values()),
                "resources": self.resources,
                "outbox": self.outbox,
            }
        )
        return data

    @classmethod
    def from_snapshot(cls, data: dict[str, Any], keep: int, ttl_s: float | None = None) -> Ledger:
        """The ledger `to_snapshot` gave, trimmed to `keep` done triggers."""
        ledger = cls(
            keep=keep,
            ttl_s=ttl_s,
            seq=data["seq"],
            by_thread=data["by_thread"],
            graph_of=data["graph_of"],
            answered=data["answered"],
            fired=data["fired"],
            workers=set(data["workers"]),
            resources=data.get("resources"),  # absent from snapshots written before it
            outbox=data.get("outbox", {}),
        )
        for raw in data["triggers"]:
            state = msgspec.convert(raw, TriggerState)
            ledger.triggers[state.id] = state
        ledger.keys = {(entry, by, key): tid for entry, by, key, tid in data["keys"]}
        ledger.requests = {tid: bytes.fromhex(hexed) for tid, hexed in data["requests"].items()}
        ledger.unfinished = {t: dict.fromkeys(ids) for t, ids in data["unfinished"].items()}
        ledger.finished = OrderedDict(  # a snapshot before done times were kept: no time
            (item, math.inf) if isinstance(item, str) else (item[0], item[1])
            for item in data["finished"]
        )
        ledger.forgotten = Counter({(g, e, o): n for g, e, o, n in data["forgotten"]})
        for raw in data["keyed"]:
            accepted = msgspec.convert(raw, TriggerAccepted)
            ledger.keyed[accepted.trigger_id] = accepted
        ledger._trim()
        return ledger

    def restore(self, other: Ledger) -> None:
        """Become `other` (a ledger loaded from a snapshot), in place: the runtime, its
        journal and its dispatcher share this object."""
        for f in fields(self):
            setattr(self, f.name, getattr(other, f.name))

    def accepted_of(self, trigger_id: str) -> TriggerAccepted:
        """The acceptance of a trigger the ledger knows or whose key it keeps."""
        state = self.triggers.get(trigger_id)
        return state.accepted if state is not None else self.keyed[trigger_id]

    def _apply(self, record: EventRecord) -> None:
        event = record.event
        self.seq = record.seq
        if isinstance(event, TriggerAccepted):
            event = msgspec.structs.replace(event, graph_id=sys.intern(event.graph_id),
                                            entry_point=sys.intern(event.entry_point))  # fmt: skip
            state = TriggerState(
                event, record.position, accepted_at=record.at, updated_at=record.at
            )
            self.triggers[event.trigger_id] = state
            if event.idempotency_key is not None:
                key = (event.entry_point, event.by, event.idempotency_key)
                if key in self.keys:  # the key's first trigger is the one: this never runs
                    state.outcome, state.message = "rejected", "a duplicate of its key's first"
                else:
                    self.keys[key] = event.trigger_id
                    self.requests[event.trigger_id] = request_digest(event.input, event.resume)
            self.by_thread.setdefault(event.thread_id, []).append(event.trigger_id)
            state.retry_at = event.due_at  # held until due, as a retry is
            if event.webhook is not None and state.outcome is None:
                self.outbox[event.trigger_id] = event.webhook
            self.graph_of.setdefault(event.thread_id, event.graph_id)
            if event.source_position is not None:
                last = self.answered.get(event.entry_point, 0)
                self.answered[event.entry_point] = max(last, event.source_position)
            if event.slot is not None:
                last_slot = self.fired.get(event.entry_point, float("-inf"))
                self.fired[event.entry_point] = max(last_slot, event.slot)
        elif isinstance(event, TriggerDispatched):
            dispatched = self.triggers.get(event.trigger_id)
            if dispatched is None or dispatched.done:  # a cancel overtook it: nothing runs
                return
            state = dispatched
            state.attempt, state.thread_seq = event.attempt, event.thread_seq
            state.updated_at = record.at
            state.dispatched, state.resumed = True, event.resumed
            if state.first_seq is None:
                state.first_seq = event.thread_seq
            state.outcome = state.retry_at = None
        elif isinstance(event, TriggerFinished):
            found = self.triggers.get(event.trigger_id)
            if found is None:
                return  # a late word on a trigger done long ago and no longer kept
            state = found
            state.outcome, state.attempt = event.outcome, max(state.attempt, event.attempt)
            state.error_type, state.message = event.error_type, event.message
            state.retry_at, state.by = event.retry_at, event.by
            state.rolled_back_to = event.rolled_back_to
            state.dispatched = state.dispatched and event.retry_at is None
            state.finished_position = record.position
            state.end_seq = event.thread_seq
            state.updated_at = record.at
        elif isinstance(event, WebhookSent):
            if event.outcome != "failed":
                self.outbox.pop(event.run_id, None)
        elif isinstance(event, ResourcesNamed):
            self.resources = dict(event.names)
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
