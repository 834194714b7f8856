"""The runtime: actors, the graph engine and the command line.

Every node, tool node and stream is an asyncio actor; every write reaches the log through
one commit path (`agentlog.actors.engine.commit`). Build a `StateGraph`, `compile` it onto
a store, and run threads with `ainvoke` / `astream`.

The names below load on first use (PEP 562), so `import agentlog.actors.cli` does not build
the graph engine and the state models: the command line starts quickly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlog.lazy import LazyExports

if TYPE_CHECKING:
    from agentlog.actors.engine.actor import Actor, ActorFailed, ActorStoppedError, AskTimeoutError
    from agentlog.actors.engine.callbacks import (
        Callbacks,
        HookError,
        InputRejectedError,
        Invocation,
        InvocationType,
        Occurrence,
    )
    from agentlog.actors.engine.command import Command, Send
    from agentlog.actors.engine.compiled import CompiledGraph
    from agentlog.actors.engine.context import NodeContext, NotInNodeError, current_context
    from agentlog.actors.engine.erasure import erase_subject
    from agentlog.actors.engine.errors import (
        GraphError,
        GraphInterrupt,
        InvalidUpdateError,
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
    from agentlog.actors.engine.graph import StateGraph
    from agentlog.actors.engine.longterm import (
        BaseStore,
        InMemoryStore,
        InvalidNamespaceError,
        Item,
        LogStore,
        LongTermStoreError,
        SearchItem,
        get_store,
    )
    from agentlog.actors.engine.modes import InvalidStreamModeError, StreamMode
    from agentlog.actors.engine.nodes import interrupt
    from agentlog.actors.engine.options import (
        Durability,
        InvalidContextError,
        InvalidDurabilityError,
        Runtime,
    )
    from agentlog.actors.engine.persistence import PersistenceError
    from agentlog.actors.engine.results import ResponseGranularity
    from agentlog.actors.engine.retention import prune_thread
    from agentlog.actors.engine.subgraph import SubgraphForkError, SubgraphStateError
    from agentlog.actors.engine.tasks import BackgroundTaskManager, TaskNotRegisteredError
    from agentlog.actors.engine.writer import (
        StreamWriterOutsideNodeError,
        emit_message_chunk,
        get_stream_writer,
    )
    from agentlog.actors.runtime import (
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
    from agentlog.actors.tools.condition import tools_condition
    from agentlog.actors.tools.langchain import chat_model_node
    from agentlog.actors.tools.node import ToolNode, ToolUnusableError
    from agentlog.projections import END, REMOVE_ALL_MESSAGES, START, RemoveMessage

_HOMES: dict[str, str] = {
    "END": "agentlog.projections",
    "REMOVE_ALL_MESSAGES": "agentlog.projections",
    "START": "agentlog.projections",
    "RemoveMessage": "agentlog.projections",
    "Actor": "agentlog.actors.engine.actor",
    "ActorFailed": "agentlog.actors.engine.actor",
    "ActorStoppedError": "agentlog.actors.engine.actor",
    "AskTimeoutError": "agentlog.actors.engine.actor",
    "Callbacks": "agentlog.actors.engine.callbacks",
    "HookError": "agentlog.actors.engine.callbacks",
    "InputRejectedError": "agentlog.actors.engine.callbacks",
    "Invocation": "agentlog.actors.engine.callbacks",
    "InvocationType": "agentlog.actors.engine.callbacks",
    "Occurrence": "agentlog.actors.engine.callbacks",
    "Command": "agentlog.actors.engine.command",
    "Send": "agentlog.actors.engine.command",
    "InvalidUpdateError": "agentlog.actors.engine.errors",
    "SubgraphForkError": "agentlog.actors.engine.subgraph",
    "SubgraphStateError": "agentlog.actors.engine.subgraph",
    "CompiledGraph": "agentlog.actors.engine.compiled",
    "NodeContext": "agentlog.actors.engine.context",
    "NotInNodeError": "agentlog.actors.engine.context",
    "current_context": "agentlog.actors.engine.context",
    "GraphError": "agentlog.actors.engine.errors",
    "GraphInterrupt": "agentlog.actors.engine.errors",
    "MissingThreadIdError": "agentlog.actors.engine.errors",
    "NodeError": "agentlog.actors.engine.errors",
    "NodeReturnError": "agentlog.actors.engine.errors",
    "NodeTimeoutError": "agentlog.actors.engine.errors",
    "NothingToResumeError": "agentlog.actors.engine.errors",
    "RecursionLimitError": "agentlog.actors.engine.errors",
    "ThreadBusyError": "agentlog.actors.engine.errors",
    "ThreadStillBusyError": "agentlog.actors.engine.errors",
    "ToolCommandConflictError": "agentlog.actors.engine.errors",
    "UnreadResumeValueError": "agentlog.actors.engine.errors",
    "StateGraph": "agentlog.actors.engine.graph",
    "erase_subject": "agentlog.actors.engine.erasure",
    "prune_thread": "agentlog.actors.engine.retention",
    "BaseStore": "agentlog.actors.engine.longterm",
    "InMemoryStore": "agentlog.actors.engine.longterm",
    "InvalidNamespaceError": "agentlog.actors.engine.longterm",
    "Item": "agentlog.actors.engine.longterm",
    "LogStore": "agentlog.actors.engine.longterm",
    "LongTermStoreError": "agentlog.actors.engine.longterm",
    "SearchItem": "agentlog.actors.engine.longterm",
    "get_store": "agentlog.actors.engine.longterm",
    "PersistenceError": "agentlog.actors.engine.persistence",
    "interrupt": "agentlog.actors.engine.nodes",
    "Durability": "agentlog.actors.engine.options",
    "InvalidContextError": "agentlog.actors.engine.options",
    "InvalidDurabilityError": "agentlog.actors.engine.options",
    "Runtime": "agentlog.actors.engine.options",
    "ResponseGranularity": "agentlog.actors.engine.results",
    "InvalidStreamModeError": "agentlog.actors.engine.modes",
    "StreamMode": "agentlog.actors.engine.modes",
    "StreamWriterOutsideNodeError": "agentlog.actors.engine.writer",
    "emit_message_chunk": "agentlog.actors.engine.writer",
    "get_stream_writer": "agentlog.actors.engine.writer",
    "AgentRuntime": "agentlog.actors.runtime",
    "EntryPoint": "agentlog.actors.runtime",
    "RetryPolicy": "agentlog.actors.runtime",
    "RuntimeConfig": "agentlog.actors.runtime",
    "Goal": "agentlog.actors.runtime",
    "SuccessCriterion": "agentlog.actors.runtime",
    "Constraint": "agentlog.actors.runtime",
    "create_agent_runtime": "agentlog.actors.runtime",
    "record_outcome": "agentlog.actors.runtime",
    "shared_state": "agentlog.actors.runtime",
    "BackgroundTaskManager": "agentlog.actors.engine.tasks",
    "TaskNotRegisteredError": "agentlog.actors.engine.tasks",
    "ToolNode": "agentlog.actors.tools.node",
    "ToolUnusableError": "agentlog.actors.tools.node",
    "tools_condition": "agentlog.actors.tools.condition",
    "chat_model_node": "agentlog.actors.tools.langchain",
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
    "BackgroundTaskManager",
    "BaseStore",
    "Callbacks",
    "Command",
    "CompiledGraph",
    "Constraint",
    "Durability",
    "EntryPoint",
    "Goal",
    "GraphError",
    "GraphInterrupt",
    "HookError",
    "InMemoryStore",
    "InputRejectedError",
    "InvalidContextError",
    "InvalidDurabilityError",
    "InvalidNamespaceError",
    "InvalidStreamModeError",
    "InvalidUpdateError",
    "Invocation",
    "InvocationType",
    "Item",
    "LogStore",
    "LongTermStoreError",
    "MissingThreadIdError",
    "NodeContext",
    "NodeError",
    "NodeReturnError",
    "NodeTimeoutError",
    "NotInNodeError",
    "NothingToResumeError",
    "Occurrence",
    "PersistenceError",
    "RecursionLimitError",
    "RemoveMessage",
    "ResponseGranularity",
    "RetryPolicy",
    "Runtime",
    "RuntimeConfig",
    "SearchItem",
    "Send",
    "StateGraph",
    "StreamMode",
    "StreamWriterOutsideNodeError",
    "SubgraphForkError",
    "SubgraphStateError",
    "SuccessCriterion",
    "TaskNotRegisteredError",
    "ThreadBusyError",
    "ThreadStillBusyError",
    "ToolCommandConflictError",
    "ToolNode",
    "ToolUnusableError",
    "UnreadResumeValueError",
    "chat_model_node",
    "create_agent_runtime",
    "current_context",
    "emit_message_chunk",
    "erase_subject",
    "get_store",
    "get_stream_writer",
    "interrupt",
    "prune_thread",
    "record_outcome",
    "shared_state",
    "tools_condition",
]


_lazy = LazyExports(__name__, _HOMES, globals())


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first access, then keep it here."""
    return _lazy.load(name)


def __dir__() -> list[str]:
    """The module's attributes with the public names not imported yet."""
    return _lazy.names()
