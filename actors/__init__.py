"""The runtime: actors, the graph engine and the command line.

Every node, tool node and stream is an asyncio actor; one journal actor per store writes
the log. Build a `StateGraph`, `compile` it onto a store, and run threads with
`ainvoke` / `astream`.

The names below load on first use (PEP 562), so `import actors.cli` or `import actors._actor`
does not build the graph engine and the state models: the command line starts quickly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from projections import END, REMOVE_ALL_MESSAGES, START, RemoveMessage

    from ._actor import Actor, ActorFailed, ActorStoppedError, AskTimeoutError
    from .callbacks import (
        Callbacks,
        HookError,
        InputRejectedError,
        Invocation,
        InvocationType,
        Occurrence,
    )
    from .command import Command
    from .compiled import CompiledGraph
    from .context import NodeContext, NotInNodeError, current_context
    from .errors import (
        GraphError,
        GraphInterrupt,
        MissingThreadIdError,
        NodeError,
        NodeReturnError,
        NodeTimeoutError,
        NothingToResumeError,
        RecursionLimitError,
        ThreadBusyError,
        ThreadStillBusyError,
        ToolCommandConflictError,
        UnreadResumeValueError,
    )
    from .graph import StateGraph
    from .nodes import interrupt
    from .results import ResponseGranularity
    from .runtime import (
        AgentRuntime,
        Constraint,
        EntryPoint,
        Goal,
        RetryPolicy,
        RuntimeConfig,
        SuccessCriterion,
        create_agent_runtime,
        record_outcome,
        shared_state,
    )
    from .tools import ToolNode, ToolUnusableError

_HOMES: dict[str, str] = {
    "END": "projections",
    "REMOVE_ALL_MESSAGES": "projections",
    "START": "projections",
    "RemoveMessage": "projections",
    "Actor": "actors._actor",
    "ActorFailed": "actors._actor",
    "ActorStoppedError": "actors._actor",
    "AskTimeoutError": "actors._actor",
    "Callbacks": "actors.callbacks",
    "HookError": "actors.callbacks",
    "InputRejectedError": "actors.callbacks",
    "Invocation": "actors.callbacks",
    "InvocationType": "actors.callbacks",
    "Occurrence": "actors.callbacks",
    "Command": "actors.command",
    "CompiledGraph": "actors.compiled",
    "NodeContext": "actors.context",
    "NotInNodeError": "actors.context",
    "current_context": "actors.context",
    "GraphError": "actors.errors",
    "GraphInterrupt": "actors.errors",
    "MissingThreadIdError": "actors.errors",
    "NodeError": "actors.errors",
    "NodeReturnError": "actors.errors",
    "NodeTimeoutError": "actors.errors",
    "NothingToResumeError": "actors.errors",
    "RecursionLimitError": "actors.errors",
    "ThreadBusyError": "actors.errors",
    "ThreadStillBusyError": "actors.errors",
    "ToolCommandConflictError": "actors.errors",
    "UnreadResumeValueError": "actors.errors",
    "StateGraph": "actors.graph",
    "interrupt": "actors.nodes",
    "ResponseGranularity": "actors.results",
    "AgentRuntime": "actors.runtime",
    "EntryPoint": "actors.runtime",
    "RetryPolicy": "actors.runtime",
    "RuntimeConfig": "actors.runtime",
    "Goal": "actors.runtime",
    "SuccessCriterion": "actors.runtime",
    "Constraint": "actors.runtime",
    "create_agent_runtime": "actors.runtime",
    "record_outcome": "actors.runtime",
    "shared_state": "actors.runtime",
    "ToolNode": "actors.tools",
    "ToolUnusableError": "actors.tools",
}
"""Each public name and the module it is imported from on first use."""

__all__ = [
    "END",
    "REMOVE_ALL_MESSAGES",
    "START",
    "Actor",
    "ActorFailed",
    "ActorStoppedError",
    "AgentRuntime",
    "AskTimeoutError",
    "Callbacks",
    "Command",
    "CompiledGraph",
    "Constraint",
    "EntryPoint",
    "Goal",
    "GraphError",
    "GraphInterrupt",
    "HookError",
    "InputRejectedError",
    "Invocation",
    "InvocationType",
    "MissingThreadIdError",
    "NodeContext",
    "NodeError",
    "NodeReturnError",
    "NodeTimeoutError",
    "NotInNodeError",
    "NothingToResumeError",
    "Occurrence",
    "RecursionLimitError",
    "RemoveMessage",
    "ResponseGranularity",
    "RetryPolicy",
    "RuntimeConfig",
    "StateGraph",
    "SuccessCriterion",
    "ThreadBusyError",
    "ThreadStillBusyError",
    "ToolCommandConflictError",
    "ToolNode",
    "ToolUnusableError",
    "UnreadResumeValueError",
    "create_agent_runtime",
    "current_context",
    "interrupt",
    "record_outcome",
    "shared_state",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first access, then keep it here."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The module's attributes with the public names not imported yet."""
    return sorted(set(globals()) | set(__all__))
