"""A worker process for the lifecycle tests: programs that end in the ways users write them.

usage: python -m tests.workers.exit_check noclose|raise|asyncwith|appclose DB

`noclose` compiles a graph on `SQLiteEventStore(DB)`, awaits `ainvoke` and returns without
closing the store: the process must still exit. `raise` does the same and then raises, so
the interpreter must print the traceback and exit non-zero. `asyncwith` runs inside
`async with SQLiteEventStore(DB)` and, after the block, prints "threads: <names>" of the
agentlog threads still alive. `appclose` uses the blocking `invoke`, then `app.close()` and
closes the store from a fresh event loop, and prints the agentlog threads still alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from typing import Any

from agentlog.actors import END, CompiledGraph, StateGraph
from agentlog.actors.testing import WaitTimeoutError, until_blocking
from agentlog.events import EventStore, SQLiteEventStore
from agentlog.projections import AgentState, Message

FAILURE = "failure raised after ainvoke returned"


def build(store: EventStore) -> CompiledGraph[AgentState]:
    """A one-node graph that answers every input once."""

    def echo(state: AgentState) -> dict[str, Any]:
        text = f"echo of {len(state.context)} messages"
        return {"messages": [Message.text_message(text, role="assistant")]}

    graph: StateGraph[AgentState] = StateGraph(name="exit-check")
    graph.add_node("echo", echo)
    graph.set_entry_point("echo")
    graph.add_edge("echo", END)
    return graph.compile(store)


def agentlog_threads(wait: float = 30.0) -> list[str]:
    """The names of this process's agentlog threads still alive once only the shared
    executor's ("agentlog-sync", which may stay) are left, or after `wait` s (a failure
    guard, below the test's own timeout: a busy machine may take a while to end them)."""

    def names() -> list[str]:
        return sorted(t.name for t in threading.enumerate() if t.name.startswith("agentlog"))

    with contextlib.suppress(WaitTimeoutError):  # the guard ran out: say who is left
        until_blocking(
            lambda: all(n.startswith("agentlog-sync") for n in names()),
            timeout=wait,
            what="agentlog's threads to end",
        )
    return names()


INPUT = {"messages": [Message.text_message("hello", message_id="u-1")]}
CONFIG = {"thread_id": "t"}


async def unclosed(db: str, fail: bool) -> None:
    app = build(SQLiteEventStore(db))
    await app.ainvoke(INPUT, CONFIG)
    print("invoked", flush=True)
    if fail:
        raise RuntimeError(FAILURE)


async def with_block(db: str) -> None:
    async with SQLiteEventStore(db) as store:
        await build(store).ainvoke(INPUT, CONFIG)
        print("invoked", flush=True)
    await asyncio.sleep(0)


def blocking(db: str) -> None:
    store = SQLiteEventStore(db)
    app = build(store)
    app.invoke(INPUT, CONFIG)
    print("invoked", flush=True)
    app.close()
    asyncio.run(store.close())  # the store is the caller's: closed from a fresh loop


def main(mode: str, db: str) -> None:
    if mode in ("noclose", "raise"):
        asyncio.run(unclosed(db, fail=mode == "raise"))
    elif mode == "asyncwith":
        asyncio.run(with_block(db))
        print("threads:", ",".join(agentlog_threads()), flush=True)
    elif mode == "appclose":
        blocking(db)
        print("threads:", ",".join(agentlog_threads()), flush=True)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
