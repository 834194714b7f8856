"""hive's webhook deliveries on the bus (issue 33, row 4): a delivery is an event that event
entry points answer, several at once, each once (a repeated delivery, a restart: no more),
beside the webhook's own run."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog import END, StateGraph
from agentlog.actors.http import create_app
from agentlog.actors.http.webhooks import sign_standard
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RegistrationError
from agentlog.actors.testing import until, until_idle
from agentlog.events import MemoryEventStore, SQLiteEventStore
from agentlog.projections import AgentState, Message

SECRET = "whsec_" + base64.b64encode(b"a key of at least some bytes").decode()


class TicketState(AgentState):
    event: dict[str, Any] = {}


def noted(state: TicketState) -> list[Message]:
    return [Message.text_message("noted", role="assistant")]


def graph_named(store: Any, name: str) -> Any:
    graph = StateGraph(TicketState, name=name)
    graph.add_node("process-webhook", noted)
    graph.set_entry_point("process-webhook")
    graph.add_edge("process-webhook", END)
    return graph.compile(checkpointer=store)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with SQLiteEventStore(tmp_path / "hooks.db") as s:
        yield s


def build(store: Any) -> AgentRuntime:
    runtime = AgentRuntime(store)
    for name in ("support", "billing", "audit"):
        runtime.add_graph(name, graph_named(store, name))
    runtime.register_entry_point(
        EntryPoint(
            id="zendesk",
            graph_id="support",
            trigger="webhook",
            path="/hooks/zendesk",
            secrets=[SECRET],
        )
    )
    for graph in ("billing", "audit"):  # two listeners: a delivery fans out to both
        runtime.register_entry_point(
            EntryPoint(id=f"{graph}-on-ticket", graph_id=graph, trigger="event", webhook="zendesk")
        )
    return runtime


def signed(body: bytes, delivery: str) -> dict[str, str]:
    stamp = int(time.time())
    return {
        "content-type": "application/json",
        "webhook-id": delivery,
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign_standard(SECRET, delivery, stamp, body),
    }


async def accepted_by(store: Any, entry: str) -> list[Any]:
    return [
        r.event
        async for r in store.read("__runtime__")
        if r.kind == "trigger_accepted" and r.event.entry_point == entry
    ]


async def test_a_delivery_is_an_event_every_listener_answers_once(store: Any) -> None:
    body = json.dumps({"ticket_id": "123", "text": "refund please"}).encode()
    runtime = build(store)
    async with runtime:
        transport = httpx.ASGITransport(app=create_app(runtime))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            first = await http.post("/hooks/zendesk", content=body, headers=signed(body, "msg_1"))
            assert first.status_code == 202, first.text
            again = await http.post("/hooks/zendesk", content=body, headers=signed(body, "msg_1"))
            assert again.json()["duplicate"] is True
        for listener in ("billing-on-ticket", "audit-on-ticket"):
            await until(lambda lst=listener: runtime.stats()["entry_points"][lst]["completed"])
        await until_idle(runtime)
        for graph in ("billing", "audit"):
            [answer] = await accepted_by(store, f"{graph}-on-ticket")
            state = await runtime.graphs[graph].app.aget_state({"thread_id": answer.thread_id})
            assert state.event["type"] == "webhook_received"
            assert state.event["source_id"] == "zendesk" and state.event["delivery_id"] == "msg_1"
            assert state.event["body"] == {"ticket_id": "123", "text": "refund please"}
        assert len(await accepted_by(store, "zendesk")) == 1  # the webhook's own run, once
    async with build(store) as later:  # a restart answers nothing again
        await until_idle(later)
    for graph in ("billing", "audit"):
        assert len(await accepted_by(store, f"{graph}-on-ticket")) == 1


def test_a_listener_names_a_registered_webhook() -> None:
    store = MemoryEventStore()
    runtime = AgentRuntime(store)
    runtime.add_graph("billing", graph_named(store, "billing"))
    with pytest.raises(RegistrationError, match="no registered webhook entry point"):
        runtime.register_entry_point(
            EntryPoint(id="on-ticket", graph_id="billing", trigger="event", webhook="zendesk")
        )
    with pytest.raises(RegistrationError, match="register one entry point for each"):
        EntryPoint(
            id="x", graph_id="billing", trigger="event", webhook="zendesk", kinds=["run_failed"]
        ).check()
    with pytest.raises(RegistrationError, match="belong to trigger='event'"):
        EntryPoint(id="x", graph_id="billing", webhook="zendesk").check()
