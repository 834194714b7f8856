"""What the viewer's browser test serves: the demo's support graph (so a database
`agentlog demo` wrote opens in it), with its entry point, and a graph whose run goes on
until it is cancelled (`held`)."""

from __future__ import annotations

import asyncio

from agentlog.actors import END, StateGraph
from agentlog.actors.examples.support import support_graph
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import EventStore
from agentlog.projections import AgentState, Message


async def hold(state: AgentState) -> list[Message]:
    """Waits for an answer that never comes: the run ends when it is cancelled."""
    await asyncio.Event().wait()
    return [Message.text_message("unreachable", role="assistant")]


def build(store: EventStore) -> AgentRuntime:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support_graph(store))
    runtime.register_entry_point(EntryPoint(id="support", graph_id="support"))
    held: StateGraph[AgentState] = StateGraph(name="held")
    held.add_node("wait", hold)
    held.set_entry_point("wait")
    held.add_edge("wait", END)
    runtime.add_graph("held", held.compile(store))
    runtime.register_entry_point(EntryPoint(id="held", graph_id="held"))
    return runtime
