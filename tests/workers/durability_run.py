"""A worker for the durability tests: a run on SQLite in one durability mode, killed while
its last node runs.

usage: python -m tests.workers.durability_run DB SIDE_EFFECTS MODE run|resume

The graph: plan (asks for one tool call) -> tools (a ToolNode; the tool appends its call id
to SIDE_EFFECTS) -> a -> b -> hold -> END. With `run`, `hold` prints "holding" and waits
forever (the test kills the process there); with `resume`, the thread is resumed
(`ainvoke(None)`) and `hold` returns at once. Prints "ready" once the store is open and
"done" when the run has completed.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from agentlog.actors import END, CompiledGraph, StateGraph, ToolNode
from agentlog.events import EventStore, SQLiteEventStore
from agentlog.projections import AgentState, Message, ToolCallBlock
from tests.workers import append_line

THREAD = "durability"


class Work(AgentState):
    done: list[str] = []


def build(store: EventStore, side_effects: str, *, block: bool) -> CompiledGraph[Work]:
    async def lookup(key: str) -> str:
        """Look a key up (the side effect a test counts).

        Args:
            key: what to look up.
        """
        append_line(side_effects, key)
        return f"value of {key}"

    async def plan(state: Work) -> list[Message]:
        call = ToolCallBlock(id="c1", name="lookup", args={"key": "k1"})
        return [Message(message_id="plan-1", role="assistant", content=[call], timestamp=0.0)]

    def step(name: str) -> Any:
        async def node(state: Work) -> dict[str, Any]:
            return {"done": [*state.done, name]}

        return node

    async def hold(state: Work) -> dict[str, Any]:
        if block:
            print("holding", flush=True)
            await asyncio.Event().wait()  # killed here
        return {"done": [*state.done, "hold"]}

    graph = StateGraph(Work)
    graph.add_node("plan", plan)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_node("a", step("a"))
    graph.add_node("b", step("b"))
    graph.add_node("hold", hold)
    graph.set_entry_point("plan")
    for a, b in [("plan", "tools"), ("tools", "a"), ("a", "b"), ("b", "hold"), ("hold", END)]:
        graph.add_edge(a, b)
    return graph.compile(checkpointer=store)


async def main(db: str, side_effects: str, mode: str, action: str) -> None:
    async with SQLiteEventStore(db) as store:
        app = build(store, side_effects, block=action == "run")
        print("ready", flush=True)
        config = {"thread_id": THREAD}
        if action == "run":
            await app.ainvoke("go", config, durability=mode)  # type: ignore[arg-type]
        else:
            exists = THREAD in await store.threads()
            await app.ainvoke(None if exists else "go", config, durability=mode)  # type: ignore[arg-type]
        print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
