"""A worker the execution-record tests kill: an agent asks for `lookup`, which returns, then
for `hang`, which tells the test it is running and then never returns.

usage: python -m tests.workers.tool_in_flight DB

Prints "ready" once the store is open and "hanging" when the `hang` tool has begun, after
`lookup`'s result committed (the test then SIGKILLs the process).
"""

from __future__ import annotations

import asyncio
import sys

from agentlog import END, Message, SQLiteEventStore, StateGraph, ToolNode
from agentlog.projections import AgentState, ToolCallBlock


async def lookup(topic: str) -> str:
    return f"notes on {topic}"


async def hang() -> str:
    print("hanging", flush=True)
    await asyncio.Event().wait()  # never set: the test kills the process here
    return "unreachable"


def agent(state: AgentState) -> list[Message]:
    if state.context[-1].role == "tool":
        call = ToolCallBlock(id="call-hang", name="hang", args={})
    else:
        call = ToolCallBlock(id="call-lookup", name="lookup", args={"topic": "tides"})
    return [Message(role="assistant", content=[call])]


async def main(db: str) -> None:
    store = SQLiteEventStore(db)
    await store.open()
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([lookup, hang]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent", lambda s: "tools" if s.context[-1].tool_calls() else END, ["tools", END]
    )
    graph.add_edge("tools", "agent")
    app = graph.compile(checkpointer=store)
    print("ready", flush=True)
    await app.ainvoke(
        {"messages": [Message.text_message("go")]}, {"configurable": {"thread_id": "t"}}
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
