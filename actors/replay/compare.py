"""Comparing what the code under test wrote with what the log holds, one step at a time.

Both sides are cut into the same chunks: a run's opening (its `run_started` and input), each
step (from `node_entered` to its `step_advanced`), and how a run ends or pauses. Each record
is made comparable first: times and durations left out (they differ on every run), the
fingerprint and code-change notes left out (they describe the code, not what it did), and
every id (of a message, a tool call) replaced by its order of first appearance, so code that
makes fresh ids on each run still compares the same. `Allowed` adds what a user declares
may differ.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentlog.events import EventRecord
from agentlog.events.kinds import (
    BranchEntered,
    InterruptRaised,
    NodeEntered,
    RunStarted,
    StepAdvanced,
    TasksPlanned,
    kinds_where,
)

__all__ = ["CAUSES", "Allowed", "Chunk", "IdMap", "chunks", "comparable", "first_difference"]

CAUSES = {
    "graph_shape": "the run took another path through the graph than the log's",
    "node_output": "a node returned something other than what the log holds",
    "unanswerable_tool_call": "the code asked for a tool call the log does not hold",
    "model_request": "a model was asked something other than what the log's call was asked",
}
"""The cause classes a divergence names, and what each means."""

NOISE = frozenset(
    {
        "duration_ms",
        "latency_ms",
        "timestamp",
        "fingerprint",
        "code_change",
        "in_flight",
        "trigger_id",
        "hash",
    }
)
"""Payload keys left out of every comparison: they differ from run to run."""
ID_KEYS = frozenset({"message_id", "id", "call_id", "tool_call_id", "message_ids"})
"""Payload keys whose values are ids, compared by their order of first appearance."""
ENDING = kinds_where("ENDS_RUN")
ROUTING = (StepAdvanced.KIND, TasksPlanned.KIND, InterruptRaised.KIND, RunStarted.KIND)

Normaliser = Callable[[str, dict[str, Any]], dict[str, Any]]
"""A user's normaliser: given a record's kind and comparable payload, the payload to compare."""


@dataclass(frozen=True)
class Allowed:
    """Differences a replay test lets pass.

    `ignore_fields`: payload keys left out wherever they occur ("usage"), or a dotted path
    from the payload ("message.metadata.trace_id"); `nodes`: nodes whose outputs may differ
    (their steps are compared for routing alone); `normalisers`: functions applied to each
    record's comparable payload, on both sides (to blank ids or timestamps of your own)."""

    ignore_fields: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()
    normalisers: tuple[Normaliser, ...] = ()

    @classmethod
    def of(
        cls,
        ignore_fields: Sequence[str] = (),
        nodes: Sequence[str] = (),
        normalisers: Sequence[Normaliser] = (),
    ) -> Allowed:
        """The allowances from plain lists."""
        return cls(frozenset(ignore_fields), frozenset(nodes), tuple(normalisers))


@dataclass
class IdMap:
    """Ids in their order of first appearance on one side of a comparison."""

    seen: dict[str, str] = field(default_factory=dict)

    def name(self, value: Any) -> Any:
        if not isinstance(value, str | int):
            return value
        key = str(value)
        if key not in self.seen:
            self.seen[key] = f"#{len(self.seen) + 1}"
        return self.seen[key]


def comparable(record: EventRecord, ids: IdMap, allowed: Allowed) -> dict[str, Any]:
    """The record as a comparison sees it: kind and payload, noise and allowed fields out."""
    payload = msgspec.to_builtins(record.event)
    body = _clean(payload, ids, allowed.ignore_fields, "")
    body["kind"] = record.kind
    for normalise in allowed.normalisers:
        body = normalise(record.kind, body)
    return dict(body)


def _clean(value: Any, ids: IdMap, ignored: frozenset[str], path: str) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key in NOISE or key in ignored or where in ignored:
                continue
            if key in ID_KEYS:
                out[key] = [ids.name(v) for v in item] if isinstance(item, list) else ids.name(item)
            else:
                out[key] = _clean(item, ids, ignored, where)
        return out
    if isinstance(value, list):
        return [_clean(v, ids, ignored, path) for v in value]
    return value


@dataclass
class Chunk:
    """A run's opening, one step, or a run's end, as records."""

    records: list[EventRecord] = field(default_factory=list)

    @property
    def step(self) -> int | None:
        for record in self.records:
            if isinstance(record.event, StepAdvanced):
                return record.event.step
        return None

    @property
    def nodes(self) -> list[str]:
        return [
            r.event.node
            for r in self.records
            if isinstance(r.event, NodeEntered | BranchEntered | InterruptRaised)
        ]

    @property
    def run_id(self) -> str | None:
        return next((r.run_id for r in self.records if r.run_id), None)


def chunks(records: Sequence[EventRecord]) -> list[Chunk]:
    """`records` cut into openings, steps and endings (see the module)."""
    out: list[Chunk] = []
    current = Chunk()
    for record in records:
        entering = isinstance(record.event, NodeEntered | BranchEntered)
        if (
            entering
            and current.records
            and not any(isinstance(r.event, NodeEntered | BranchEntered) for r in current.records)
        ):
            out.append(current)
            current = Chunk()
        current.records.append(record)
        if isinstance(record.event, StepAdvanced) or record.kind in ENDING:
            out.append(current)
            current = Chunk()
    if current.records:
        out.append(current)
    return out


@dataclass(frozen=True)
class Difference:
    """The first chunk where the two sides part, as comparable records."""

    index: int
    log: Chunk | None
    produced: Chunk | None
    log_view: list[dict[str, Any]]
    produced_view: list[dict[str, Any]]
    cause: str

    def diff(self) -> str:
        """A unified diff of the two sides, one record per line."""
        left = [json.dumps(r, sort_keys=True, default=repr) for r in self.log_view]
        right = [json.dumps(r, sort_keys=True, default=repr) for r in self.produced_view]
        return "\n".join(difflib.unified_diff(left, right, "log", "new code", lineterm="", n=1))


def first_difference(
    log: Sequence[Chunk],
    produced: Sequence[Chunk],
    ids: tuple[IdMap, IdMap],
    allowed: Allowed,
) -> Difference | None:
    """The first chunk that differs between the log and what the code wrote, or None."""
    for index in range(max(len(log), len(produced))):
        left = log[index] if index < len(log) else None
        right = produced[index] if index < len(produced) else None
        lv = [comparable(r, ids[0], allowed) for r in (left.records if left else [])]
        rv = [comparable(r, ids[1], allowed) for r in (right.records if right else [])]
        routing_only = bool(left and set(left.nodes) & allowed.nodes)
        same = _routing(lv) == _routing(rv) if routing_only else lv == rv
        if not same:
            return Difference(index, left, right, lv, rv, _cause(lv, rv))
    return None


def _routing(view: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a step's records say of the path: nodes entered, where it goes, where it paused."""
    keep = (NodeEntered.KIND, BranchEntered.KIND, *ROUTING)
    return [r for r in view if r["kind"] in keep]


def _cause(log: list[dict[str, Any]], produced: list[dict[str, Any]]) -> str:
    """`node_output` when the same nodes ran and wrote something else (whatever the path
    then took), else `graph_shape`: other nodes ran, or the same outputs went elsewhere (the
    next node, the tasks planned, where the run paused or began)."""
    entered = (NodeEntered.KIND, BranchEntered.KIND)
    nodes = [[r for r in side if r["kind"] in entered] for side in (log, produced)]
    keep = (*entered, *ROUTING)
    outputs = [[r for r in side if r["kind"] not in keep] for side in (log, produced)]
    if nodes[0] == nodes[1] and outputs[0] != outputs[1]:
        return "node_output"
    return "graph_shape"
