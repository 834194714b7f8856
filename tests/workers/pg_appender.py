"""A worker process for the PostgreSQL tests: races other processes on one thread.

usage: python -m tests.workers.pg_appender DSN SCHEMA THREAD STEPS NAME

Each step is one append of three events naming the step's writer; a ConcurrencyError
(another process took that seq) re-reads the thread and tries again. It prints "ready" once
its store is open, "lost" per race lost, and "done N" at the end.
"""

from __future__ import annotations

import asyncio
import sys

from agentlog.events import ConcurrencyError, NodeEntered, StateUpdated, StepAdvanced
from agentlog.events.stores.postgres import PostgresEventStore


async def main(dsn: str, schema: str, thread: str, steps: int, name: str) -> None:
    async with PostgresEventStore(dsn, schema=schema, pool_size=1) as store:
        print("ready", flush=True)
        done = lost = 0
        while done < steps:
            seq = await store.last_seq(thread)
            events = [
                NodeEntered(node=name),
                StateUpdated(values={"writer": name, "step": done}, source="worker"),
                StepAdvanced(step=seq // 3 + 1, next_node="agent"),
            ]
            try:
                await store.append(thread, events, expected_seq=seq, actor=name)
            except ConcurrencyError:
                lost += 1
                continue
            done += 1
        print(f"done {done} lost {lost}", flush=True)


if __name__ == "__main__":
    dsn, schema, thread, steps, name = sys.argv[1:6]
    asyncio.run(main(dsn, schema, thread, int(steps), name))
