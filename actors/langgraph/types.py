"""The values LangGraph's API hands back, in its shapes: `Interrupt`, `StateSnapshot`,
`PregelTask`, `Runtime`, and `interrupt(value)` with LangGraph's signature."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from agentlog.actors.engine.nodes import interrupt as pause
from agentlog.actors.engine.options import Runtime as Runtime  # the engine's: nodes take it
from agentlog.projections import to_builtins

C = TypeVar("C")

INTERRUPT_REASON = "interrupt"
"""The reason agentlog's log records for a LangGraph-style `interrupt(value)`."""


@dataclass(frozen=True)
class Interrupt:
    """A pause a node asked for: the value it showed, and the id that resumes it."""

    value: Any
    id: str
    response_schema: Any = None
    """LangGraph's field, for a schema the answer should follow; None here."""


class PregelTask(NamedTuple):
    """A node the thread goes on to, and the pause or error it holds, if any."""

    id: str
    name: str
    path: tuple[Any, ...] = ()
    error: Exception | None = None
    interrupts: tuple[Interrupt, ...] = ()
    state: Any = None
    result: Any = None


class StateSnapshot(NamedTuple):
    """A thread's state at one point of its log, as LangGraph's `get_state` shows it."""

    values: dict[str, Any]
    next: tuple[str, ...]
    config: dict[str, Any]
    metadata: dict[str, Any] | None
    created_at: str | None
    parent_config: dict[str, Any] | None
    tasks: tuple[PregelTask, ...]
    interrupts: tuple[Interrupt, ...]


def interrupt(value: Any) -> Any:
    """Pause the run inside a node and show `value`; resumed by `Command(resume=...)`, this
    call returns the resume value instead (the node runs again from its start)."""
    shown = value if isinstance(value, str) else None
    return pause(shown or INTERRUPT_REASON, {"value": to_builtins(value)})


def interrupt_id(thread_id: str, node: str, step: int, answered: int) -> str:
    """A pause's id: the same for the same pause of the same thread, whoever reads it."""
    key = f"{thread_id}|{node}|{step}|{answered}".encode()
    return hashlib.sha256(key).hexdigest()[:32]
