"""A worker the background-task tests kill: a node starts a task that writes a side effect
and, in `run` mode, then never returns; `recover` mode starts the unfinished tasks again.

usage: python -m tests.workers.background_task DB EFFECTS run|recover

`run` prints "ready", then "task running" once the task wrote its side effect (the test
kills the process there). `recover` prints the ids `recover` started again, one line, then
"done" once they finished.
"""

from __future__ import annotations

import asyncio
import sys

from agentlog import END, Message, SQLiteEventStore, StateGraph
from agentlog.actors.engine.tasks import BackgroundTaskManager
from agentlog.projections import AgentState
from tests.workers import append_line


def build(store: SQLiteEventStore, effects: str, hang: bool) -> object:
    async def send_receipt(order: str) -> str:
        append_line(effects, order)
        if hang:
            print("task running", flush=True)
            await asyncio.Event().wait()  # never set: the test kills the process here
        return f"receipt for {order}"

    async def checkout(state: AgentState, task_manager: BackgroundTaskManager) -> list[Message]:
        await task_manager.create_task(send_receipt, "A-1")
        return [Message.text_message("ordered", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("checkout", checkout)
    graph.set_entry_point("checkout")
    graph.add_edge("checkout", END)
    graph.add_task(send_receipt)
    return graph.compile(checkpointer=store)


async def main(db: str, effects: str, mode: str) -> None:
    store = SQLiteEventStore(db)
    await store.open()
    app = build(store, effects, hang=mode == "run")
    print("ready", flush=True)
    if mode == "run":
        await app.ainvoke("buy", {"thread_id": "t"})  # type: ignore[attr-defined]
        await asyncio.Event().wait()
    manager: BackgroundTaskManager = app.task_manager  # type: ignore[attr-defined]
    print(" ".join(await manager.recover("t")), flush=True)
    await manager.wait_for_all()
    await store.close()
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
