"""A worker process for bench/workers.py: one of several sharing a store.

usage: python bench/workers_app.py STORE WORKER_ID

The graph is a plain `def` node answering the user's last message (the code users write).
Prints "ready", runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from agentlog.actors import END, StateGraph
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig
from agentlog.events import EventStore, open_store
from agentlog.projections import AgentState, Message


def answer(state: AgentState) -> list[Message]:
    """Read the last message, answer it."""
    return [Message.text_message(f"you said {state.context[-1].text()[:40]}", role="assistant")]


def build(store: EventStore, worker_id: str | None, max_runs: int = 100) -> AgentRuntime:
    graph: StateGraph[AgentState] = StateGraph(name="short")
    graph.add_node("agent", answer)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    config = RuntimeConfig(worker_id=worker_id, max_concurrent_runs=max_runs)
    runtime = AgentRuntime(store, config)
    runtime.add_graph("short", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="short"))
    return runtime


async def main(address: str, worker_id: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with open_store(address) as store, build(store, worker_id):
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
