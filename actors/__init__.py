"""The runtime: actors, the graph engine and the command line.

Every node, tool node and stream is an asyncio actor; one journal actor per store writes
the log. Build a `StateGraph`, `compile` it onto a store, and run threads with
`ainvoke` / `astream`.
"""

from projections import END, REMOVE_ALL_MESSAGES, START, RemoveMessage

from ._actor import Actor, ActorFailed, ActorStoppedError, AskTimeoutError
from .command import Command
from .compiled import CompiledGraph
from .context import NodeContext
from .errors import (
    GraphError,
    GraphInterrupt,
    MissingThreadIdError,
    NodeError,
    NodeReturnError,
    NodeTimeoutError,
    RecursionLimitError,
    ThreadBusyError,
    ToolCommandConflictError,
)
from .graph import StateGraph
from .nodes import interrupt
from .results import ResponseGranularity
from .tools import ToolNode

__all__ = [
    "END",
    "REMOVE_ALL_MESSAGES",
    "START",
    "Actor",
    "ActorFailed",
    "ActorStoppedError",
    "AskTimeoutError",
    "Command",
    "CompiledGraph",
    "GraphError",
    "GraphInterrupt",
    "MissingThreadIdError",
    "NodeContext",
    "NodeError",
    "NodeReturnError",
    "NodeTimeoutError",
    "RecursionLimitError",
    "RemoveMessage",
    "ResponseGranularity",
    "StateGraph",
    "ThreadBusyError",
    "ToolCommandConflictError",
    "ToolNode",
    "interrupt",
]
