"""A worker process for the erasure crash tests: erases subjects s0, s1, ... in turn.

usage: python -m tests.workers.erase_run DB COUNT

Prints "ready" once its store is open, then "start sN" just before erasing each subject, so
the test can kill it in the middle of an erasure, at a point told by its progress.
"""

from __future__ import annotations

import asyncio
import sys

from agentlog.actors.engine.erasure import erase_subject
from agentlog.events import SQLiteEventStore


async def main(db: str, count: int) -> None:
    async with SQLiteEventStore(db) as store:
        print("ready", flush=True)
        for i in range(count):
            print(f"start s{i}", flush=True)
            await erase_subject(store, f"s{i}", by="dpo", reason=f"request {i}")
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
