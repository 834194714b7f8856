"""A worker process for the PostgreSQL tests: appends to threads of its own, fast.

usage: python -m tests.workers.pg_writer DSN SCHEMA NAME THREADS APPENDS

Runs THREADS concurrent writers (threads NAME-0 ...), each making APPENDS appends of one or
two events, so the store's group commit and the commit counter are exercised from several
processes at once. A lost connection (the tests terminate backends) is reported and the
append retried after re-reading the thread, as an application would. Prints "done".
"""

from __future__ import annotations

import asyncio
import sys

from agentlog.events import NodeEntered, StepAdvanced, StoreUnavailableError
from agentlog.events.stores.postgres import PostgresEventStore


async def writer(store: PostgresEventStore, thread: str, appends: int) -> None:
    done = 0
    while done < appends:
        events = [NodeEntered(node=f"{thread}:{done}")]
        if done % 2:
            events.append(StepAdvanced(step=done, next_node="agent"))
        try:
            seq = await store.last_seq(thread)
            await store.append(thread, events, expected_seq=seq)
        except StoreUnavailableError as exc:
            print(f"unavailable {exc}", flush=True)
            await asyncio.sleep(0.05)
            continue
        done += 1


async def main(dsn: str, schema: str, name: str, threads: int, appends: int) -> None:
    for _ in range(50):  # a backend killed while the store opens fails the open, typed
        store = PostgresEventStore(dsn, schema=schema, pool_size=2)
        try:
            await store.open()
        except StoreUnavailableError as exc:
            print(f"unavailable {exc}", flush=True)
            await store.close()
            await asyncio.sleep(0.05)
            continue
        break
    async with store:
        print("ready", flush=True)
        await asyncio.gather(*(writer(store, f"{name}-{i}", appends) for i in range(threads)))
        print("done", flush=True)


if __name__ == "__main__":
    dsn, schema, name, threads, appends = sys.argv[1:6]
    asyncio.run(main(dsn, schema, name, int(threads), int(appends)))
