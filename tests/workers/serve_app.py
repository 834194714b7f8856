"""An app for the server tests: `agentlog serve --app tests.workers.serve_app:build`.

Graph "support": an agent asking once for `ship()`, a ToolNode running it (0.3 s), the agent
confirming. Entry points: "chat" (api) and "orders" (a webhook at /hooks/orders, Standard
Webhooks, secret SECRET). `ship` appends its call id to the file AGENTLOG_TEST_EFFECTS names,
when set, so a test can count real executions.
"""

from __future__ import annotations

import asyncio
import os

from actors import END, StateGraph, ToolNode
from actors.runtime import AgentRuntime, EntryPoint
from events import EventStore
from projections import AgentState, Message, TextBlock, ToolCallBlock, ToolResultBlock
from tests.workers import append_line

SECRET = "whsec_c2VydmUtdGVzdC1zZWNyZXQ="


def build(store: EventStore) -> AgentRuntime:
    def agent(state: AgentState) -> list[Message]:
        if any(isinstance(b, ToolResultBlock) for m in state.context for b in m.content):
            return [Message.text_message("shipped", role="assistant")]
        call = ToolCallBlock(id=f"ship-{state.execution_meta.thread_id}", name="ship", args={})
        return [Message(role="assistant", content=[TextBlock(text="shipping"), call])]

    async def ship(tool_call_id: str = "") -> str:
        """Ship the order."""
        await asyncio.sleep(0.3)
        effects = os.environ.get("AGENTLOG_TEST_EFFECTS")
        if effects:
            append_line(effects, tool_call_id)
        return "ok"

    graph: StateGraph[AgentState] = StateGraph(name="support")
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([ship]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent",
        lambda s: "tools" if s.context[-1].tool_calls() else END,
        {"tools": "tools", END: END},
    )
    graph.add_edge("tools", "agent")
    runtime = AgentRuntime(store)
    runtime.add_graph("support", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    runtime.register_entry_point(
        EntryPoint(
            id="orders", graph_id="support", trigger="webhook", path="/hooks/orders",
            secrets=[SECRET],
        )
    )  # fmt: skip
    return runtime
