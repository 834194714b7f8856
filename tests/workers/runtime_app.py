"""A runtime process for the crash test: api runs, an event trigger and a timer on one file.

usage: python -m tests.workers.runtime_app DB EFFECTS PHASE RUNS

Graphs: "support" (an agent asking once for `ship(order)`, a ToolNode running it, the agent
confirming) and "audit" (one node), started by every `run_completed` of "support"; a timer
entry point "tick" (every 0.2 s) starts "audit" runs too. `ship` takes 0.2-1.1 s, then
appends "PHASE call_id" to EFFECTS (fsync'ed) before it returns, so the test can count real
executions.
PHASE "first" triggers RUNS api runs (idempotency keys k0..k{RUNS-1}), prints "ready" and
runs until killed. PHASE "second" prints the log's last position, then the same triggers
(which must start nothing new), waits for every run and prints "done".
"""

from __future__ import annotations

import asyncio
import sys

from agentlog.actors.runtime import AgentRuntime
from agentlog.actors.testing import until_idle
from agentlog.events import SQLiteEventStore
from agentlog.events.follow import last_position
from tests.workers import append_line, shipping_runtime


def build(store: SQLiteEventStore, effects: str, phase: str) -> AgentRuntime:
    async def ship(tool_call_id: str = "") -> str:
        """Ship the order (the calls take from 0.2 s to 1.1 s, so a kill finds some done)."""
        await asyncio.sleep(0.2 + (sum(map(ord, tool_call_id)) % 10) / 10)
        append_line(effects, f"{phase} {tool_call_id}")
        return "ok"

    return shipping_runtime(store, ship, 0.2)


async def main(db: str, effects: str, phase: str, runs: int) -> None:
    async with SQLiteEventStore(db) as store:
        if phase == "second":
            print(await last_position(store), flush=True)
        runtime = build(store, effects, phase)
        async with runtime:
            threads = [
                await runtime.trigger("api", f"order {i}", idempotency_key=f"k{i}")
                for i in range(runs)
            ]
            if phase == "first":
                print("ready", flush=True)
                await asyncio.Event().wait()  # runs until killed
            for thread in threads:
                await runtime.wait(thread, timeout=120)
            await until_idle(runtime)  # the event triggers of the last completions
            runtime.pause_timers()
        print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
