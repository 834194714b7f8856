"""An app for the server tests: `agentlog serve --app tests.workers.serve_app:build`.

Graph "support": an agent asking once for `ship()`, a ToolNode running it (0.3 s), the agent
confirming. Entry points: "chat" (api) and "orders" (a webhook at /hooks/orders, Standard
Webhooks, secret SECRET). `ship` appends its call id to the file AGENTLOG_TEST_EFFECTS names,
when set, so a test can count real executions; when AGENTLOG_TEST_STARTED names a file, it
first appends "started <call id>" there, and when AGENTLOG_TEST_HOLD names a file, it waits
until that file exists, so a test can kill the server while a call is surely in flight.
"""

from __future__ import annotations

import asyncio
import os

from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.testing import until
from agentlog.events import EventStore
from tests.workers import append_line, shipping_graph

SECRET = "whsec_c2VydmUtdGVzdC1zZWNyZXQ="


def build(store: EventStore) -> AgentRuntime:
    async def ship(tool_call_id: str = "") -> str:
        """Ship the order."""
        started = os.environ.get("AGENTLOG_TEST_STARTED")
        hold = os.environ.get("AGENTLOG_TEST_HOLD")
        if started:
            append_line(started, f"started {tool_call_id}")
        if hold:  # held until the test releases it (or kills the server)
            await until(lambda: os.path.exists(hold), timeout=600, what="the test's release")
        await asyncio.sleep(0.3)  # simulated work: no outcome depends on its length
        effects = os.environ.get("AGENTLOG_TEST_EFFECTS")
        if effects:
            append_line(effects, tool_call_id)
        return "ok"

    graph = shipping_graph(ship)
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
