"""A node that writes the long-term store, for the crash test: `python -m
tests.workers.store_crash DB THREAD` runs the thread, and its node prints "ready" once its
three store writes have committed, then waits to be killed."""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

from agentlog.actors import LogStore, get_store
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message
from tests.helpers import line


def build(store: SQLiteEventStore, *, hold: bool, more: bool = False) -> Any:
    """The graph on `store`, its long-term store on the same log; `hold`: the node hangs
    after its writes; `more`: it makes a fourth write (a second life that differs)."""

    def remember(state: AgentState) -> list[Message]:
        memory = get_store()
        memory.put(("notes",), "a", {"v": 1})
        memory.delete(("notes",), "gone")
        memory.put(("notes",), "b", {"v": 2})
        if hold:
            print("ready", flush=True)
            threading.Event().wait()
        if more:
            memory.put(("notes",), "c", {"v": 3})
        return [Message.text_message("noted", role="assistant")]

    return line(("remember", remember)).compile(checkpointer=store, store=LogStore(store))


async def run(db: str, thread: str) -> None:
    async with SQLiteEventStore(db) as store:
        await build(store, hold=True).ainvoke("note it", {"thread_id": thread})


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], sys.argv[2]))
