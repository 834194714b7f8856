"""A worker process for the evidence crash tests: writes an evidence bundle of thread "t".

usage: python -m tests.workers.evidence_run DB OUT PEM POINT

Prints "ready" once its store is open. POINT is where it stops to be killed: "before" the
whole temporary file is renamed over OUT, or "after"; there it prints POINT and waits on
its stdin, which the test never answers (it SIGKILLs the process instead).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from agentlog.events import SQLiteEventStore
from agentlog.events.evidence import write_evidence


async def main(db: str, out: str, pem: bytes, point: str) -> None:
    replace = os.replace

    def replace_and_stop(src: str, dst: str) -> None:
        if point == "before":
            print("before", flush=True)
            sys.stdin.readline()
        replace(src, dst)
        if point == "after":
            print("after", flush=True)
            sys.stdin.readline()

    os.replace = replace_and_stop  # type: ignore[assignment]
    async with SQLiteEventStore(db) as store:
        print("ready", flush=True)
        await write_evidence(store, "t", out, pem, overwrite=True)
    print("done", flush=True)


if __name__ == "__main__":
    db, out, pem, point = sys.argv[1:5]
    asyncio.run(main(db, out, Path(pem).read_bytes(), point))
