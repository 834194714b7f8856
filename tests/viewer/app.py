"""What the viewer's browser test serves: the demo's support graph (so a database
`agentlog demo` wrote opens in it), with its entry point."""

from __future__ import annotations

from agentlog.actors.examples.support import support_graph
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import EventStore


def build(store: EventStore) -> AgentRuntime:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support_graph(store))
    runtime.register_entry_point(EntryPoint(id="support", graph_id="support"))
    return runtime
