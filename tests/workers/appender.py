"""A worker process for the reliability tests: appends agent steps to a shared log.

usage: python -m tests.workers.appender DB THREAD STEPS [--retry]

Each step is one append of three events whose payloads name the step, so a reader can
tell a whole step from a torn one. With --retry, a ConcurrencyError re-reads the thread
and tries again (two processes racing on one thread); otherwise the worker owns the
thread. It prints "ready" once its store is open, and one line per lost race.
"""

from __future__ import annotations

import asyncio
import sys

from agentlog.events import (
    ConcurrencyError,
    NodeEntered,
    SQLiteEventStore,
    StateUpdated,
    StepAdvanced,
)


async def main(db: str, thread: str, steps: int, retry: bool) -> None:
    async with SQLiteEventStore(db) as store:
        print("ready", flush=True)
        done = 0
        while done < steps:
            seq = await store.last_seq(thread)
            events = [
                NodeEntered(node=f"{thread}-{seq}"),
                StateUpdated(values={"step_of": seq, "pad": "x" * 200}, source="worker"),
                StepAdvanced(step=seq // 3 + 1, next_node="agent"),
            ]
            try:
                await store.append(thread, events, expected_seq=seq, actor=sys.argv[0])
            except ConcurrencyError:
                if not retry:
                    raise
                print("lost", flush=True)
                continue
            done += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), "--retry" in sys.argv))
