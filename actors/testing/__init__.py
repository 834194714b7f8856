"""Testing toolkit for a user's own agent: doubles, faults, and a graph state machine.

`doubles` (scripted model, recording tools, fake clock, seeded ids) and `faults` (a store that
crashes or pauses at a chosen commit) need nothing beyond agentlog; `graph_machine` needs
hypothesis (`pip install 'agentlog[testing]'`) and is imported only when asked for.
"""

from typing import Any

from .doubles import (
    FakeClock,
    MemoryEventStore,
    RecordedCall,
    RecordingTool,
    ScriptedModel,
    ScriptExhaustedError,
    Seen,
    ask_tool,
    ask_tools,
    recording_tools,
    reply,
    seeded_ids,
    tool_call,
)
from .faults import FaultyStore, SimulatedCrashError, When

__all__ = [
    "FakeClock",
    "FaultyStore",
    "GraphMachine",
    "MachineFailure",
    "MemoryEventStore",
    "RecordedCall",
    "RecordingTool",
    "ScriptExhaustedError",
    "ScriptedModel",
    "Seen",
    "SimulatedCrashError",
    "When",
    "ask_tool",
    "ask_tools",
    "comparable",
    "graph_machine",
    "recording_tools",
    "reply",
    "seeded_ids",
    "tool_call",
]

_LAZY = {
    "GraphMachine": ".machine",
    "graph_machine": ".machine",
    "MachineFailure": ".report",
    "comparable": ".report",
}


def __getattr__(name: str) -> Any:
    """Import the state machine (and hypothesis) only when it is asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
