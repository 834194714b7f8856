"""Every name a LangGraph program needs, in one module: a port turns
`from langgraph.<anything> import X` into `from agentlog.langgraph import X`.

`StateGraph` here takes LangGraph's state schemas (a `TypedDict`, a dataclass, a pydantic
model) and its compiled graph answers in LangGraph's shapes; agentlog's own
`agentlog.StateGraph` (AgentState, `context`) compiles to the same engine and log.
"""

from __future__ import annotations

from agentlog.actors import (
    REMOVE_ALL_MESSAGES,
    BaseStore,
    Command,
    GraphError,
    InMemoryStore,
    InvalidUpdateError,
    Item,
    RemoveMessage,
    SearchItem,
    Send,
    ToolNode,
    get_store,
    get_stream_writer,
    tools_condition,
)
from agentlog.actors.engine.errors import RecursionLimitError
from agentlog.actors.langgraph import (
    CompiledStateGraph,
    Interrupt,
    PastCheckpointError,
    PregelTask,
    RetryPolicy,
    Runtime,
    SchemaError,
    StateGraph,
    StateSnapshot,
    UnsupportedOptionError,
    interrupt,
)
from agentlog.actors.langgraph.functional import TaskError, entrypoint, task
from agentlog.actors.langgraph.schema import MessagesState
from agentlog.events import MemoryEventStore, SQLiteEventStore
from agentlog.projections import END, START
from agentlog.projections.reducers import add_messages

InMemorySaver = MemoryEventStore
"""LangGraph's in-memory checkpointer is agentlog's in-memory log: its records are the
checkpoints, so a port keeps `compile(checkpointer=InMemorySaver())` as it is."""
MemorySaver = MemoryEventStore
GraphRecursionError = RecursionLimitError
"""LangGraph's name for the error of a run that reached its recursion limit."""

__all__ = [
    "END",
    "REMOVE_ALL_MESSAGES",
    "START",
    "BaseStore",
    "Command",
    "CompiledStateGraph",
    "GraphError",
    "GraphRecursionError",
    "InMemorySaver",
    "InMemoryStore",
    "Interrupt",
    "InvalidUpdateError",
    "Item",
    "MemoryEventStore",
    "MemorySaver",
    "MessagesState",
    "PastCheckpointError",
    "PregelTask",
    "RemoveMessage",
    "RetryPolicy",
    "Runtime",
    "SQLiteEventStore",
    "SchemaError",
    "SearchItem",
    "Send",
    "StateGraph",
    "StateSnapshot",
    "TaskError",
    "ToolNode",
    "UnsupportedOptionError",
    "add_messages",
    "entrypoint",
    "get_store",
    "get_stream_writer",
    "interrupt",
    "task",
    "tools_condition",
]
