"""A support agent on a real model (the tests' fake provider) and a SQLite file, for the
crash test: `python -m tests.workers.model_crash DB PORT THREAD` prints "ready" once the
store is open, runs the thread streaming the model's answer, and prints "done"."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import openai

from agentlog.actors.models import ModelNode, ModelRetry
from agentlog.events import SQLiteEventStore
from agentlog.projections import Message
from tests.helpers import agent_with_tools

QUESTION = "My order A-1042 arrived damaged. Can I get my money back?"


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by its id."""
    return {"order_id": order_id, "status": "delivered damaged"}


def build(store: SQLiteEventStore, port: int) -> Any:
    """The graph: a streaming model node and its tool, on `store`."""
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test")
    retry = ModelRetry(attempts=2, base_delay=0.01)
    model = ModelNode(client, model="test-model", tools=[lookup_order], stream=True, retry=retry)
    return agent_with_tools(model, [lookup_order]).compile(checkpointer=store)


async def run(db: str, port: int, thread: str) -> None:
    async with SQLiteEventStore(db) as store:
        print("ready", flush=True)
        graph = build(store, port)
        question = Message.text_message(QUESTION, message_id="q1")
        await graph.ainvoke({"messages": [question]}, {"thread_id": thread})
        print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
