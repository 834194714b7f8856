"""An entrypoint whose tasks append to a side-effect file, for the crash test:
`python -m tests.workers.functional_crash DB EFFECTS THREAD HOLD` runs the thread; with HOLD
`after-b` it prints "ready" once tasks a and b have committed, with `in-b` once task b has
started, and then waits to be killed; with `none` it runs to the end and prints the result."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from agentlog.events import SQLiteEventStore
from agentlog.langgraph import entrypoint, task


def build(store: SQLiteEventStore, effects: Path, hold: str) -> Any:
    def effect(name: str) -> None:
        with effects.open("a") as out:
            out.write(name + "\n")

    @task
    def a(x: int) -> int:
        effect("a")
        return x + 1

    @task
    def b(x: int) -> int:
        effect("b")
        if hold == "in-b":
            print("ready", flush=True)
            threading.Event().wait()
        return x * 10

    @task
    def c(x: int) -> int:
        effect("c")
        return x - 3

    @entrypoint(checkpointer=store)
    def workflow(x: int) -> dict[str, int]:
        first = a(x).result()
        second = b(first).result()
        if hold == "after-b":
            print("ready", flush=True)
            threading.Event().wait()
        return {"a": first, "b": second, "c": c(second).result()}

    return workflow


def main(db: str, effects: str, thread: str, hold: str) -> None:
    store = SQLiteEventStore(db)
    graph = build(store, Path(effects), hold)
    config = {"configurable": {"thread_id": thread}}
    state = graph.get_state(config)
    result = graph.invoke(None if state.next else 4, config)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
