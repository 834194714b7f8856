"""Names a log recorded for code, read by today's code.

A record names the reducers of a state's fields (`RunStarted.fields`, `Forked.fields`) and a
snapshot the class of its state, as `module.qualname`, inside the hash chain: they cannot be
rewritten. Logs written before the package was installed as `agentlog` name the library's
code by the old top-level modules (`projections.reducers.add_messages`,
`projections.state.AgentState`); `current_name` maps such a name to today's, and leaves any
other name (a user's own module) as it is.
"""

from __future__ import annotations

__all__ = ["LEGACY_MODULES", "current_name"]

_ENGINE = [
    "callbacks",
    "command",
    "committing",
    "compiled",
    "context",
    "ending",
    "errors",
    "graph",
    "guard",
    "journal",
    "nodes",
    "offload",
    "portal",
    "redact",
    "results",
    "run",
    "steps",
    "stream",
    "threads",
    "view",
]

LEGACY_MODULES: dict[str, str] = {
    "actors._actor": "agentlog.actors.engine.actor",
    "actors.tools": "agentlog.actors.tools.node",
    "actors.mcp": "agentlog.actors.tools.mcp",
    "actors.serve": "agentlog.actors.http",
    "actors.cli.demo": "agentlog.actors.examples.support",
    "events._sqlite_thread": "agentlog.events.stores.sqlite_thread",
    "events.sqlite": "agentlog.events.stores.sqlite",
    "events.postgres_loop": "agentlog.events.stores.postgres_loop",
    "events.postgres_schema": "agentlog.events.stores.postgres_schema",
    "events.postgres": "agentlog.events.stores.postgres",
    "events.memory": "agentlog.events.stores.memory",
    **{f"actors.{name}": f"agentlog.actors.engine.{name}" for name in _ENGINE},
    "actors": "agentlog.actors",
    "events": "agentlog.events",
    "projections": "agentlog.projections",
}
"""Each module a log may name by its old path, and where that code lives now (the longest
matching prefix wins)."""


def current_name(recorded: str) -> str:
    """Today's `module.qualname` for a name a log recorded (unchanged unless it is legacy)."""
    parts = recorded.split(".")
    for n in range(len(parts) - 1, 0, -1):
        home = LEGACY_MODULES.get(".".join(parts[:n]))
        if home is not None:
            return ".".join([home, *parts[n:]])
    return recorded
