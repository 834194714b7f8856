"""A worker process for the prune crash tests: prunes threads t0, t1, ... to their last run.

usage: python -m tests.workers.prune_run DB COUNT

Prints "ready" once its store is open, then "start tN" just before pruning each thread, so
the test can kill it in the middle of a prune, at a point told by its progress.
"""

from __future__ import annotations

import asyncio
import sys

from agentlog.actors.engine.retention import prune_thread
from agentlog.events import SQLiteEventStore


async def main(db: str, count: int) -> None:
    async with SQLiteEventStore(db) as store:
        print("ready", flush=True)
        for i in range(count):
            print(f"start t{i}", flush=True)
            await prune_thread(store, f"t{i}", keep_runs=1, by="ops")
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
