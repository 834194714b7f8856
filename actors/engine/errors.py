"""Typed errors of the graph engine: each names the node, thread or edge at fault."""

from __future__ import annotations

from typing import Any

from agentlog.actors.engine.actor import ControlSignal
from agentlog.events.errors import AgentlogError, ThreadBusyError

__all__ = [
    "BlockingCallError",
    "GraphError",
    "GraphInterrupt",
    "InvalidUpdateError",
    "MissingThreadIdError",
    "NodeError",
    "NodeReportedError",
    "NodeReturnError",
    "NodeTimeoutError",
    "NothingToResumeError",
    "RecursionLimitError",
    "ThreadBusyError",
    "ThreadStillBusyError",
    "ToolCommandConflictError",
    "UnreadResumeValueError",
]


class GraphError(AgentlogError, ValueError):
    """The graph is malformed; the message names the node or edge at fault."""


class TracingConfigError(GraphError):
    """A call's config asks for tracing that agentlog does not do as asked: LangChain
    `callbacks` (never silently ignored), or a `traceparent` that is not a W3C one."""


class InvalidUpdateError(GraphError):
    """Two branches of one superstep wrote the same state field, and the field has no
    reducer to merge their values: the step fails (nothing of it is committed). Give the
    field a reducer (`Annotated[list[str], operator.add]`), or let one branch write it."""


class NothingToResumeError(GraphError):
    """`ainvoke(None)` on a thread whose run was cancelled: it is over; send new input."""


class UnreadResumeValueError(GraphError):
    """A resume value sent where no node asked for one (a breakpoint, a stop, a failure):
    nothing would read it and the run would go on as if approved, so it is refused and
    nothing is written. Approve with None, reject with new input, or ask with `interrupt()`."""


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


class BlockingCallError(AgentlogError, RuntimeError):
    """A blocking method (`invoke`, `stream`, ...) was called inside a running event loop."""


class RecursionLimitError(AgentlogError):
    """A run took more steps than its recursion limit allows."""


class GraphInterrupt(ControlSignal):
    """Raised inside a node to pause the run; see `agentlog.actors.interrupt`.

    A BaseException, as in Agentflow: a node that wraps its work in `try: ... except
    Exception:` still pauses.
    """

    def __init__(self, reason: str, data: dict[str, Any] | None = None) -> None:
        self.reason = reason
        self.data = data
        super().__init__(reason)


class NodeTimeoutError(NodeError):
    """A node ran past its time limit (`node_timeout`); recorded as failed and retryable.

    An async node is cancelled; a sync one is abandoned on its worker thread (its result is
    discarded, and the thread stays owned until it returns).
    """

    def __init__(self, node: str, timeout: float) -> None:
        self.node = node
        self.timeout = timeout
        AgentlogError.__init__(
            self,
            f"node {node!r} ran past its timeout of {timeout:g}s and was cut short (a sync "
            "node finishes on its worker thread, its result discarded); the failure is in the "
            "log and invoking the thread again retries the node",
        )


class ThreadStillBusyError(ThreadBusyError, TimeoutError):
    """`await_idle` ran out of time: the thread is still owned (the message says by what)."""


class ToolCommandConflictError(GraphError):
    """Tool calls of one step returned `Command`s that disagree (two `goto` targets, or two
    values for one field); the step fails, recorded, and nothing of it is applied."""


class NodeReportedError(AgentlogError):
    """A node reported its own failure with `state.error(message)`: the step fails with it."""
