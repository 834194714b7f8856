"""The runtime's fold of the facts runs record beside their steps: shared writes and goal
outcomes, in commit order. One pass over the log serves both, incrementally; a fresh fold
up to a past position answers "as of then"."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from agentlog.actors.runtime.spec import AgentRuntimeError
from agentlog.events import EventRecord, EventStore
from agentlog.events.kinds import OutcomeRecorded, SharedWritten


class SharedStateError(AgentRuntimeError):
    """A shared key was used where the run's entry point does not allow it, or wrongly."""


def apply_op(current: Any, op: str, value: Any, key: str) -> Any:
    """The key's value after one operation; refused (typed) when the value cannot take it."""
    if op == "set":
        return value
    if op == "increment":
        base = 0 if current is None else current
        if isinstance(base, bool) or not isinstance(base, int | float):
            raise SharedStateError(f"shared key {key!r} holds {base!r}: it cannot be incremented")
        return base + value
    if op == "append":
        return [*(current or []), value]
    if op == "merge":
        if current is not None and not isinstance(current, dict):
            raise SharedStateError(f"shared key {key!r} holds {current!r}: it cannot merge a dict")
        return {**(current or {}), **value}
    raise SharedStateError(f"unknown shared operation {op!r}: set, increment, append or merge")


@dataclass
class Metric:
    """Every value recorded for one metric, summarised."""

    count: int = 0
    last: Any = None
    total: float = 0.0
    least: float | None = None
    most: float | None = None

    def add(self, value: Any) -> None:
        self.count += 1
        self.last = value
        if isinstance(value, int | float) and not isinstance(value, bool):
            self.total += value
            self.least = value if self.least is None else min(self.least, value)
            self.most = value if self.most is None else max(self.most, value)

    def summary(self) -> dict[str, Any]:
        mean = self.total / self.count if self.count and self.least is not None else None
        return {
            "count": self.count,
            "last": self.last,
            "sum": self.total,
            "min": self.least,
            "max": self.most,
            "mean": mean,
        }


@dataclass
class Facts:
    """Shared key values and outcome metrics, folded up to `position`."""

    values: dict[str, Any] = field(default_factory=dict)
    applied: dict[str, Any] = field(default_factory=dict)
    """Each synchronized write seen (by op id) and the value it left: a write made again
    is not applied again, and its writer learns the value its own write made."""
    metrics: dict[tuple[str | None, str], Metric] = field(default_factory=dict)
    """(goal id or None, metric name) -> its values."""
    writes: int = 0
    position: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)

    def apply(self, record: EventRecord) -> None:
        self.position = record.position
        event = record.event
        if isinstance(event, OutcomeRecorded):
            self.metrics.setdefault((event.goal_id, event.metric), Metric()).add(event.value)
        elif isinstance(event, SharedWritten):
            self._write(event)

    def _write(self, event: SharedWritten) -> None:
        if event.op_id is not None and event.op_id in self.applied:
            return
        try:
            new = apply_op(self.values.get(event.key), event.op, event.value, event.key)
        except SharedStateError:
            return  # a shared write its value could not take: checked when made, kept inert
        self.values[event.key] = new
        self.writes += 1
        if event.op_id is not None:
            self.applied[event.op_id] = new

    async def catch_up(self, store: EventStore, to: int | None = None) -> None:
        """Fold the records committed since `position` (up to `to`, when given); one
        catch-up at a time, so no record is folded twice."""
        async with self.lock:
            async for record in store.read_all(self.position):
                if to is not None and record.position > to:
                    break
                self.apply(record)

    @classmethod
    async def as_of(cls, store: EventStore, position: int | None) -> Facts:
        """A fresh fold up to `position` (None: the head)."""
        facts = cls()
        await facts.catch_up(store, position)
        return facts
