"""What a caller asks of one run beyond its input (an Agent Server run body), handed to the
runtime's acceptance by the request being served, as `tracing` hands it the caller's trace
context: breakpoints for that run only, recorded in its `trigger_accepted` (so the log says
why the run paused), and its `context` for the nodes (`Runtime.context`, `get_runtime()`),
never recorded: the process keeps it while the run may still be dispatched, so a run resumed
by another process, or after a restart, runs without it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from agentlog.actors.engine.options import CONTEXT_KEY
from agentlog.events.kinds import TriggerAccepted

Breakpoints = str | list[str] | None
"""Node names, or "*" for every node; None: only the graph's own."""
KEPT = 10_000
"""How many runs' contexts a runtime keeps (the oldest dropped first)."""


@dataclass(frozen=True)
class Ask:
    interrupt_before: Breakpoints = None
    interrupt_after: Breakpoints = None
    context: Any = None
    """Checked against the graph's `context_schema` by the caller, before the run is sent."""


_ASKED: ContextVar[Ask | None] = ContextVar("agentlog_run_ask", default=None)


@contextlib.contextmanager
def asking(ask: Ask) -> Iterator[None]:
    """Within the block, the runs accepted are asked `ask`."""
    token = _ASKED.set(ask)
    try:
        yield
    finally:
        _ASKED.reset(token)


def recorded() -> dict[str, Any]:
    """The fields of the `trigger_accepted` of a run accepted now that say what was asked."""
    ask = _ASKED.get()
    if ask is None:
        return {}
    return {"interrupt_before": ask.interrupt_before, "interrupt_after": ask.interrupt_after}


class Contexts:
    """The contexts of the runs a runtime accepted, by trigger id (never recorded)."""

    def __init__(self) -> None:
        self.by_run: dict[str, Any] = {}

    def keep(self, trigger_id: str) -> None:
        """Keep the context the request being served asks for the run `trigger_id`."""
        ask = _ASKED.get()
        if ask is None or ask.context is None:
            return
        self.by_run[trigger_id] = ask.context
        while len(self.by_run) > KEPT:
            del self.by_run[next(iter(self.by_run))]

    def config_of(self, accepted: TriggerAccepted) -> dict[str, Any]:
        """What the run's config carries of what was asked of it."""
        out: dict[str, Any] = {}
        for name in ("interrupt_before", "interrupt_after"):
            value = getattr(accepted, name)
            if value is not None:
                out[name] = value
        if accepted.trigger_id in self.by_run:
            out[CONTEXT_KEY] = self.by_run[accepted.trigger_id]
        return out
