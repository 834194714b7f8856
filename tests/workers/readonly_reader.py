"""A worker process for the read-only tests: reads a database with `readonly=True`.

usage: python -m tests.workers.readonly_reader DB

It prints one JSON object: the threads, each thread's record count, seqs read and verify
verdict, its claim holder, and for each write it then attempts (append, claim,
save_snapshot) the name of the error it got, or "wrote" if the write went through. Any
error while reading is printed as {"error": type, "message": ...} with exit code 2. The
tests run it where the file cannot be written (a read-only bind mount), which needs a
process of its own.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agentlog.events import AgentlogError, NodeEntered, Snapshot, SQLiteEventStore


async def main(db: str) -> dict[str, Any]:
    report: dict[str, Any] = {}
    async with SQLiteEventStore(db, readonly=True) as store:
        threads = await store.threads()
        report["threads"] = threads
        report["read"] = {t: [r.seq async for r in store.read(t)] for t in threads}
        report["verify"] = {t: (await store.verify(t)).ok for t in threads}
        report["last_seq"] = {t: await store.last_seq(t) for t in threads}
        report["holder"] = {t: (await store.holder(t)) is not None for t in threads}
        attempts = {
            "append": lambda: store.append(
                threads[0], [NodeEntered(node="x")], expected_seq=report["last_seq"][threads[0]]
            ),
            "claim": lambda: store.claim(threads[0]),
            "save_snapshot": lambda: store.save_snapshot(
                Snapshot(thread_id=threads[0], seq=1, state={})
            ),
        }
        outcomes: dict[str, str] = {}
        for name, attempt in attempts.items():
            try:
                await attempt()
            except AgentlogError as exc:
                outcomes[name] = type(exc).__name__
            else:
                outcomes[name] = "wrote"
        report["writes"] = outcomes
    return report


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    try:
        result = asyncio.run(main(sys.argv[1]))
    except AgentlogError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        sys.exit(2)
    print(json.dumps(result))
