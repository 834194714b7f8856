"""Typed errors of the graph engine: each names the node, thread or edge at fault."""

from __future__ import annotations

from typing import Any

from events.errors import AgentlogError, ThreadBusyError

from ._actor import ControlSignal

__all__ = [
    "GraphError",
    "GraphInterrupt",
    "MissingThreadIdError",
    "NodeError",
    "NodeReturnError",
    "RecursionLimitError",
    "ThreadBusyError",
]


class GraphError(AgentlogError, ValueError):
    """The graph is malformed; the message names the node or edge at fault."""


class MissingThreadIdError(GraphError):
    """A call that works on a thread was given no thread id."""


class NodeError(AgentlogError):
    """A node raised; the run is recorded as failed and a later invoke retries the node.

    The original exception is the `__cause__`.
    """

    def __init__(self, node: str, error: BaseException) -> None:
        self.node = node
        super().__init__(
            f"node {node!r} raised {type(error).__name__}: {error}; the failure is in the log "
            "and invoking the thread again retries the node"
        )


class NodeReturnError(AgentlogError, TypeError):
    """A node returned something the runtime cannot turn into events."""

    def __init__(self, node: str, value: object) -> None:
        self.node = node
        super().__init__(
            f"node {node!r} returned {type(value).__name__}; a node may return a list of "
            "Message, a dict of state fields, an AgentState, a Command or None"
        )


class RecursionLimitError(AgentlogError):
    """A run took more steps than its recursion limit allows."""


class GraphInterrupt(ControlSignal):
    """Raised inside a node to pause the run; see `actors.interrupt`.

    A BaseException, as in Agentflow: a node that wraps its work in `try: ... except
    Exception:` still pauses.
    """

    def __init__(self, reason: str, data: dict[str, Any] | None = None) -> None:
        self.reason = reason
        self.data = data
        super().__init__(reason)
