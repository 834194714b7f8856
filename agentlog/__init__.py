"""agentlog: an event-sourced agent-graph runtime where the log is the truth.

The everyday names are here: `from agentlog import StateGraph, ToolNode, AgentState, Message,
SQLiteEventStore`. The layers are subpackages: `agentlog.events` (the log and its stores),
`agentlog.projections` (state folded from the log) and `agentlog.actors` (the engine, the
runtime, the command line and the HTTP server).

Every name loads on first use (PEP 562), so `import agentlog` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlog.actors import __all__ as _ACTOR_NAMES
from agentlog.lazy import LazyExports

if TYPE_CHECKING:
    from agentlog.actors import (
        END,
        REMOVE_ALL_MESSAGES,
        START,
        AgentRuntime,
        Command,
        CompiledGraph,
        EntryPoint,
        GraphError,
        GraphInterrupt,
        InvalidUpdateError,
        NodeContext,
        RemoveMessage,
        RuntimeConfig,
        Send,
        StateGraph,
        ToolNode,
        chat_model_node,
        create_agent_runtime,
        current_context,
        get_stream_writer,
        interrupt,
        tools_condition,
    )
    from agentlog.events import (
        AgentlogError,
        EventRecord,
        EventStore,
        MemoryEventStore,
        SQLiteEventStore,
        open_store,
    )
    from agentlog.events.stores.postgres import PostgresEventStore
    from agentlog.projections import (
        AgentState,
        EventStatus,
        Execution,
        ExecutionStatus,
        Message,
        MessagesState,
        add_messages,
        append_items,
        executions,
        replace_messages,
        replace_value,
        state_at,
        state_history,
    )

_HOMES: dict[str, str] = {
    **dict.fromkeys(_ACTOR_NAMES, "agentlog.actors"),
    **dict.fromkeys(
        (
            "AgentState",
            "EventStatus",
            "Execution",
            "ExecutionStatus",
            "Message",
            "MessagesState",
            "add_messages",
            "append_items",
            "executions",
            "replace_messages",
            "replace_value",
            "state_at",
            "state_history",
        ),
        "agentlog.projections",
    ),
    **dict.fromkeys(
        (
            "AgentlogError",
            "EventRecord",
            "EventStore",
            "MemoryEventStore",
            "SQLiteEventStore",
            "open_store",
        ),
        "agentlog.events",
    ),
    "PostgresEventStore": "agentlog.events.stores.postgres",
}
"""Each public name and the module it is imported from on first use."""

__all__ = sorted(set(_HOMES) - {"PostgresEventStore"})
"""`PostgresEventStore` is left out so a star import never needs asyncpg."""


_lazy = LazyExports(__name__, _HOMES, globals())


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first access, then keep it here."""
    return _lazy.load(name)


def __dir__() -> list[str]:
    """The module's attributes with the public names not imported yet."""
    return _lazy.names()
