"""hive's `SharedStateManager` over the log: the shared keys as the runtime has folded them,
and its statistics (`runtime.state_manager.get_stats()`)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentlog.actors.runtime.ledger import TriggerState
    from agentlog.actors.runtime.runtime import AgentRuntime, Counts


class StateManager:
    """The runtime's shared keys: read them (`get`, `values`) and count them (`get_stats`).

    Writes belong to nodes (`shared_state()`), recorded in the log; this reads what the
    runtime folded from it, so the figures are the same after a restart.
    """

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime

    def get(self, key: str, graph_id: str, default: Any = None) -> Any:
        """A key's value as last folded (`await catch_up()` folds every commit so far)."""
        return self.runtime.facts.values.get(self.runtime.shared_key(graph_id, key), default)

    async def values(
        self, graph_id: str | None = None, *, at_position: int | None = None
    ) -> dict[str, Any]:
        """The values now (every commit folded) or as of a past position of the log."""
        return await self.runtime.shared_values(graph_id, at_position=at_position)

    async def catch_up(self) -> None:
        await self.runtime.catch_up()

    def get_stats(self) -> dict[str, Any]:
        """Keys held (global, per graph), writes folded, synchronized writes applied, the
        log position folded up to, and each entry point's isolation where it is not
        isolated."""
        facts = self.runtime.facts
        by_graph = Counter(key.split("/", 1)[0] for key in facts.values)
        global_keys = by_graph.pop("*", 0)
        return {
            "keys": len(facts.values),
            "global_keys": global_keys,
            "graph_keys": dict(by_graph),
            "writes": facts.writes,
            "synchronized_writes": len(facts.applied),
            "position": facts.position,
            "isolation": {
                e.id: e.isolation
                for e in self.runtime.entries.values()
                if e.isolation != "isolated"
            },
        }


def count_into(counts: Counts, state: TriggerState, running: set[str]) -> None:
    """Count one trigger where it stands (running, queued, or how it ended)."""
    if state.id in running:
        counts.active += 1
    elif not state.done:
        counts.queued += 1
    elif state.outcome in ("completed", "failed", "interrupted", "cancelled"):
        setattr(counts, state.outcome, getattr(counts, state.outcome) + 1)


def percentile(values: list[float], q: float) -> float | None:
    """The `q` quantile of sorted seconds, in milliseconds (None: no values)."""
    if not values:
        return None
    return round(values[min(int(q * len(values)), len(values) - 1)] * 1000, 3)


def ended_as_logged(state: TriggerState) -> dict[str, Any]:
    """How an ended run's trigger reads from the log alone (no result kept in memory)."""
    error = None
    if state.outcome == "failed":
        error = {"type": state.error_type, "message": state.message}
    elif state.outcome == "cancelled":
        error = {"type": "cancelled", "message": state.message, "by": state.by}
    return {
        "thread_id": state.accepted.thread_id,
        "status": state.outcome,
        "success": state.outcome in ("completed", "interrupted"),
        "attempt": state.attempt,
        "error": error,
    }


__all__ = ["StateManager", "count_into", "ended_as_logged", "percentile"]
