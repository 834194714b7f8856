"""A PostgreSQL worker posing as a host of its own, with its own clock, for the fencing tests.

usage: python -m tests.workers.posing_worker DSN DIR WORKER_ID

Environment (set by the test): AGENTLOG_TEST_HOST, the host name this process poses as (so
two processes on one machine judge each other by heartbeats alone, as two hosts do);
AGENTLOG_TEST_CLOCK_OFFSET, seconds added to this process's wall clock (a host whose clock
is off); AGENTLOG_TEST_LEASE, the workers' lease in seconds; AGENTLOG_TEST_HOLD, seconds the
middle node sleeps once its gate is open.

Graph "g", entry point "api": "one" appends "one THREAD WORKER" to DIR/effects, "hold" appends
"hold THREAD WORKER PID" to DIR/marks and waits for the file DIR/go-THREAD, "two" appends
"two THREAD WORKER" to DIR/effects (each line fsync'ed). A trigger given up because its claim
was taken over appends "gave-up THREAD WORKER" to DIR/marks. Reads "trigger THREAD" lines on
stdin (answering "ok THREAD"); prints "ready", and stops cleanly on SIGTERM or end of input.
"""

from __future__ import annotations

import os
import socket
import sys
import time

_offset = float(os.environ.get("AGENTLOG_TEST_CLOCK_OFFSET", "0"))
_real_time = time.time
time.time = lambda: _real_time() + _offset  # before anything reads the clock
_host = os.environ.get("AGENTLOG_TEST_HOST")
if _host:
    socket.gethostname = lambda: _host

import asyncio  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from agentlog.actors import END, StateGraph  # noqa: E402
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig  # noqa: E402
from agentlog.actors.testing import until  # noqa: E402
from agentlog.events import open_store  # noqa: E402
from agentlog.projections import AgentState, Message  # noqa: E402
from tests.workers import append_line  # noqa: E402


class _GaveUp(logging.Handler):
    """Notes each trigger the dispatcher gave up, so the test waits on it."""

    def __init__(self, marks: str, worker_id: str) -> None:
        super().__init__()
        self.marks, self.worker_id = marks, worker_id

    def emit(self, record: logging.LogRecord) -> None:
        if "gave up" in record.getMessage():
            append_line(self.marks, f"gave-up {record.args[1]} {self.worker_id}")  # type: ignore[index]


def build(store: Any, folder: Path, worker_id: str) -> AgentRuntime:
    effects, marks = str(folder / "effects"), str(folder / "marks")
    hold_s = float(os.environ.get("AGENTLOG_TEST_HOLD", "0"))

    def one(state: AgentState) -> list[Message]:
        append_line(effects, f"one {state.execution_meta.thread_id} {worker_id}")
        return [Message.text_message("one", role="assistant")]

    async def hold(state: AgentState) -> list[Message]:
        thread = state.execution_meta.thread_id
        append_line(marks, f"hold {thread} {worker_id} {os.getpid()}")
        await until((folder / f"go-{thread}").exists, timeout=600, what=f"go-{thread}")
        await asyncio.sleep(hold_s)
        return [Message.text_message("held", role="assistant")]

    def two(state: AgentState) -> list[Message]:
        append_line(effects, f"two {state.execution_meta.thread_id} {worker_id}")
        return [Message.text_message("two", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph(name="g")
    graph.add_node("one", one)
    graph.add_node("hold", hold)
    graph.add_node("two", two)
    graph.set_entry_point("one")
    graph.add_edge("one", "hold")
    graph.add_edge("hold", "two")
    graph.add_edge("two", END)
    lease = float(os.environ.get("AGENTLOG_TEST_LEASE", "1.5"))
    config = RuntimeConfig(worker_id=worker_id, lease_s=lease, poll_s=0.05)
    runtime = AgentRuntime(store, config)
    runtime.add_graph("g", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    logging.getLogger("agentlog.actors.runtime.dispatch").addHandler(_GaveUp(marks, worker_id))
    return runtime


async def main(dsn: str, folder: str, worker_id: str) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with open_store(dsn) as store:
        runtime = build(store, Path(folder), worker_id)
        async with runtime:
            print("ready", flush=True)
            stopping = asyncio.ensure_future(stop.wait())
            while True:
                reading = asyncio.ensure_future(asyncio.to_thread(sys.stdin.readline))
                await asyncio.wait([reading, stopping], return_when=asyncio.FIRST_COMPLETED)
                if stop.is_set() or not reading.result():
                    break  # SIGTERM, or end of input: the test is done with this worker
                _, thread = reading.result().split()
                await runtime.trigger("api", "go", thread_id=thread)
                print(f"ok {thread}", flush=True)
    print("stopped", flush=True)
    os._exit(0)  # a stdin read may still be waiting on its thread


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
