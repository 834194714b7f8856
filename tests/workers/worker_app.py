"""One of several worker processes sharing one store, for the shared-workers tests.

usage: python -m tests.workers.worker_app STORE EFFECTS WORKER_ID

STORE is a SQLite path or a postgresql:// address. Graphs as in `runtime_app`: "support" (an
agent asking once for `ship()`, a ToolNode running it, the agent confirming), "audit" started
by every `run_completed` of "support" and by a timer every 0.3 s. `ship` takes 0.05-0.5 s,
then appends "WORKER_ID PID call_id" to EFFECTS (fsync'ed) before it returns. Prints "ready",
then runs until SIGTERM (a clean stop: running steps commit, the runs are left to the other
workers) or SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from agentlog.actors.runtime import AgentRuntime, RuntimeConfig
from agentlog.events import EventStore, open_store
from tests.workers import append_line, shipping_runtime


def build(store: EventStore, effects: str, worker_id: str, max_runs: int = 100) -> AgentRuntime:
    async def ship(tool_call_id: str = "") -> str:
        """Ship the order (slow enough that a kill finds some calls in flight)."""
        await asyncio.sleep(0.05 + (sum(map(ord, tool_call_id)) % 10) / 20)
        append_line(effects, f"{worker_id} {os.getpid()} {tool_call_id}")
        return "ok"

    config = RuntimeConfig(worker_id=worker_id, lease_s=3.0, max_concurrent_runs=max_runs)
    runtime: AgentRuntime = shipping_runtime(store, ship, 0.3, config)
    return runtime


async def main(address: str, effects: str, worker_id: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with open_store(address) as store:
        runtime = build(store, effects, worker_id)
        async with runtime:
            print("ready", flush=True)
            await stop.wait()
    print("stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
