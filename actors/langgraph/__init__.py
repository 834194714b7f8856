"""LangGraph's API over agentlog's engine: state schemas as LangGraph writes them, and a
compiled graph that answers in LangGraph's shapes (`agentlog.langgraph` re-exports it with
every other name a port needs)."""

from agentlog.actors.langgraph.compiled import (
    CompiledStateGraph,
    PastCheckpointError,
    UnsupportedOptionError,
)
from agentlog.actors.langgraph.graph import StateGraph
from agentlog.actors.langgraph.retry import RetryPolicy, default_retry_on
from agentlog.actors.langgraph.schema import SchemaError
from agentlog.actors.langgraph.types import (
    Interrupt,
    PregelTask,
    Runtime,
    StateSnapshot,
    interrupt,
)

__all__ = [
    "CompiledStateGraph",
    "Interrupt",
    "PastCheckpointError",
    "PregelTask",
    "RetryPolicy",
    "Runtime",
    "SchemaError",
    "StateGraph",
    "StateSnapshot",
    "UnsupportedOptionError",
    "default_retry_on",
    "interrupt",
]
