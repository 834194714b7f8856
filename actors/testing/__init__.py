"""Testing toolkit for a user's own agent: doubles, faults, and a graph state machine.

`doubles` (scripted model, recording tools, fake clock, seeded ids), `faults` (a store that
crashes or pauses at a chosen commit), `waiting` (`until`, `wait_for_record`: wait on what
happened, never on the clock) and `checks` (`assert_replays`, and the steps a
counterexample script takes) need nothing beyond agentlog; `graph_machine` needs hypothesis
(`pip install 'agentlog[testing]'`). Every name loads on first use (PEP 562), so the pytest
plugin (`agentlog.actors.testing.plugin`), which pytest loads in every session, costs nothing until
a
test asks for one of its fixtures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlog.lazy import LazyExports

if TYPE_CHECKING:
    from agentlog.actors.testing.checks import assert_replays, paused_at, restart
    from agentlog.actors.testing.doubles import (
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
    from agentlog.actors.testing.faults import FaultyStore, SimulatedCrashError, When
    from agentlog.actors.testing.machine import GraphMachine, graph_machine
    from agentlog.actors.testing.report import MachineFailure, comparable
    from agentlog.actors.testing.waiting import (
        WaitTimeoutError,
        until,
        until_blocking,
        until_idle,
        wait_all_tasks_blocked,
        wait_for_line,
        wait_for_record,
    )

_HOMES = {
    ".checks": ["assert_replays", "paused_at", "restart"],
    ".doubles": [
        "FakeClock",
        "MemoryEventStore",
        "RecordedCall",
        "RecordingTool",
        "ScriptExhaustedError",
        "ScriptedModel",
        "Seen",
        "ask_tool",
        "ask_tools",
        "recording_tools",
        "reply",
        "seeded_ids",
        "tool_call",
    ],
    ".faults": ["FaultyStore", "SimulatedCrashError", "When"],
    ".machine": ["GraphMachine", "graph_machine"],
    ".report": ["MachineFailure", "comparable"],
    ".waiting": [
        "WaitTimeoutError",
        "until",
        "until_blocking",
        "until_idle",
        "wait_all_tasks_blocked",
        "wait_for_line",
        "wait_for_record",
    ],
}
_LAZY = {name: home for home, names in _HOMES.items() for name in names}

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
    "WaitTimeoutError",
    "When",
    "ask_tool",
    "ask_tools",
    "assert_replays",
    "comparable",
    "graph_machine",
    "paused_at",
    "recording_tools",
    "reply",
    "restart",
    "seeded_ids",
    "tool_call",
    "until",
    "until_blocking",
    "until_idle",
    "wait_all_tasks_blocked",
    "wait_for_line",
    "wait_for_record",
]


_lazy = LazyExports(__name__, _LAZY, globals())


def __getattr__(name: str) -> Any:
    """Import a name's module (and, for the state machine, hypothesis) when it is asked for."""
    return _lazy.load(name)


def __dir__() -> list[str]:
    return _lazy.names()
