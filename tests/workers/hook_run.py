"""A worker process for the callbacks tests: a line graph of slow steps with hooks journaled.

usage: python -m tests.workers.hook_run DB JOURNAL run|resume

Every hook call appends one durable line to JOURNAL ("after <node>", "on_run_start", ...).
`run` starts thread "t" and prints "ready" once the store is open; `resume` carries the
thread on after a crash (`ainvoke(None)`) and prints "done".
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

from agentlog.actors import Callbacks, Invocation, Occurrence
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message
from tests.helpers import line
from tests.workers import append_line

STEPS = 12


class Journaled(Callbacks):
    """Hooks that write down every call, durably, before returning."""

    def __init__(self, journal: str) -> None:
        super().__init__()
        self.journal = journal

    def after(self, invocation: Invocation, output: Any) -> None:
        append_line(self.journal, f"after {invocation.name}")

    def on_run_start(self, occurrence: Occurrence) -> None:
        append_line(self.journal, "on_run_start")

    def on_run_end(self, occurrence: Occurrence) -> None:
        append_line(self.journal, "on_run_end")


HELD_FROM = 6
"""In `run` mode, the steps from this one on never end (the test kills the process before
them): the kill lands mid-run however long the steps before take."""


def step(name: str, held: bool) -> Any:
    def node(state: AgentState) -> list[Message]:
        if held:
            threading.Event().wait()  # until killed
        return [Message.text_message(name, role="assistant", message_id=f"m-{name}")]

    return node


def graph(mode: str = "resume") -> Any:
    steps = ((f"n{i}", step(f"n{i}", mode == "run" and i >= HELD_FROM)) for i in range(STEPS))
    return line(*steps)


async def main(db: str, journal: str, mode: str) -> None:
    async with SQLiteEventStore(db) as store:
        app = graph(mode).compile(store, callbacks=Journaled(journal))
        if mode == "run":
            print("ready", flush=True)
            await app.ainvoke(Message.text_message("go", message_id="m-go"), {"thread_id": "t"})
        else:
            await app.ainvoke(None, {"thread_id": "t"})
        print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
