"""Replay tests: run today's graph code against recorded threads, and name the first
divergence.

    report = await replay_test("myapp.graph:build", db="prod.db", limit=200)
    assert report.ok, report.render()

Each thread is replayed from its start into a fresh in-memory log, with every tool call and
model call answered from the recorded one (no tool runs, no model is called), every human
input, resume, edit and cancel played again where it happened; each step's outputs are
compared with the log's (`agentlog.actors.replay.compare`). A thread is "same", or has a
`Divergence`: run, step, node, both sides, a diff and the cause class. `agentlog
replay-test` is the command line of it; `agentlog.actors.replay.plugin` the pytest form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlog.lazy import LazyExports

if TYPE_CHECKING:
    from agentlog.actors.replay.api import (
        ReplayReport,
        ReplaySourceError,
        load_app,
        read_export,
        replay_test,
        replay_test_sync,
    )
    from agentlog.actors.replay.compare import CAUSES, Allowed
    from agentlog.actors.replay.runner import (
        Divergence,
        ThreadResult,
        bind_graph,
        replay_records,
    )

_HOMES = {
    ".api": [
        "ReplayReport",
        "ReplaySourceError",
        "load_app",
        "read_export",
        "replay_test",
        "replay_test_sync",
    ],
    ".compare": ["CAUSES", "Allowed"],
    ".runner": ["Divergence", "ThreadResult", "bind_graph", "replay_records"],
}
_LAZY = {name: home for home, names in _HOMES.items() for name in names}

__all__ = [
    "CAUSES",
    "Allowed",
    "Divergence",
    "ReplayReport",
    "ReplaySourceError",
    "ThreadResult",
    "bind_graph",
    "load_app",
    "read_export",
    "replay_records",
    "replay_test",
    "replay_test_sync",
]

_lazy = LazyExports(__name__, _LAZY, globals())


def __getattr__(name: str) -> Any:
    """Import a name's module when it is asked for: the pytest plugin loads nothing else."""
    return _lazy.load(name)


def __dir__() -> list[str]:
    return _lazy.names()
