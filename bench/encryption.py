"""What sealing a data subject's fields costs the agent loop: steps/s with and without a subject.

One thread runs N steps (200; 100 with --quick) of bench/workload.py's "def-tool" loop (plain
`def` nodes, a 200-character assistant message per step, two in three with a tool call) in
a single `ainvoke` on a `SQLiteEventStore` in a temporary directory, twice per round:

* plain: `config={"thread_id": ...}`;
* subject: `config={"thread_id": ..., "subject": "user-42"}`: every message, tool argument
  and tool result sealed with AES-GCM under the subject's key (agentlog.events.sealing).

Rounds alternate the two; the result is each one's median steps/s and `cost`, 1 - the median
of the per-round ratios subject/plain (target: at most 0.15), on CPU time of the process
(all its threads: a shared machine's other load moves wall-clock time several-fold from one
round to the next), with the wall-clock steps/s beside it. A last untimed run checks that
the subject's run stored no message text in the clear.

Then the rate of retention: one thread of R records (1,000,000; 100,000 with --quick) in
runs of 10 (`run_started` then nine `node_entered`) is pruned to its last run
(`prune_thread(keep_runs=1)`: a fold to the cut for its snapshot, the `pruned` record, the
delete), against stdlib `sqlite3` deleting the same rows from a copy of the file (one
DELETE, committed): `prune_records_per_s`, `raw_delete_records_per_s` and their ratio.

Usage: .venv/bin/python bench/encryption.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import sqlite3
import time
from pathlib import Path

import _common as common
import workload

from agentlog.actors.engine.retention import prune_thread
from agentlog.events import NodeEntered, RunStarted, SQLiteEventStore

TARGET_COST = 0.15


WALL: dict[str | None, list[float]] = {None: [], "user-42": []}


async def _run(path: Path, steps: int, subject: str | None) -> float:
    """CPU seconds (every thread of the process) of one `ainvoke` of the loop, the store
    opened before timing; its wall-clock seconds go to `WALL`."""
    loop = workload.Loop("def-tool", steps)
    config: dict[str, object] = {"thread_id": "bench"}
    if subject is not None:
        config["subject"] = subject
    async with SQLiteEventStore(path) as store:
        compiled = loop.graph().compile(store, recursion_limit=steps + 10)
        start, cpu = time.perf_counter(), time.process_time()
        await compiled.ainvoke(workload.first_input(), config)
        used = time.process_time() - cpu
        WALL[subject].append(time.perf_counter() - start)
        return used


async def _fill(path: Path, records: int) -> None:
    """One thread of `records` records, in runs of 10, appended 1,000 at a time."""
    run = [RunStarted(), *(NodeEntered(node=f"n{i}") for i in range(9))]
    async with SQLiteEventStore(path) as store:
        for seq in range(0, records, 1000):
            await store.append("long", run * 100, expected_seq=seq)


async def _prune(path: Path) -> tuple[float, int]:
    async with SQLiteEventStore(path) as store:
        start = time.perf_counter()
        report = await prune_thread(store, "long", keep_runs=1)
        assert report is not None and (await store.verify("long")).ok
        return time.perf_counter() - start, report.removed


def _raw_delete(path: Path, through: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        start = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM events WHERE thread_id = 'long' AND seq <= ?", (through,))
        conn.execute("COMMIT")
        return time.perf_counter() - start
    finally:
        conn.close()


def prune_rate(tmp: Path, records: int) -> dict[str, float]:
    """Records pruned per second, and stdlib sqlite3's delete of the same rows beside it."""
    path, copy = tmp / "prune.sqlite", tmp / "raw.sqlite"
    asyncio.run(_fill(path, records))
    for suffix in ("", "-wal"):
        if Path(f"{path}{suffix}").exists():
            shutil.copy(f"{path}{suffix}", f"{copy}{suffix}")
    seconds, removed = asyncio.run(_prune(path))
    raw = _raw_delete(copy, removed)
    return {
        "prune_records": removed,
        "prune_seconds": round(seconds, 3),
        "prune_records_per_s": common.per_second(removed, seconds),
        "raw_delete_records_per_s": common.per_second(removed, raw),
        "prune_ratio_to_raw_delete": common.ratio(raw, seconds),
    }


def main() -> None:
    args = common.parse_args(__doc__ or "")
    os.environ.setdefault("AGENTLOG_MASTER_KEY", base64.urlsafe_b64encode(os.urandom(32)).decode())
    steps = 100 if args.quick else 200
    with common.temp_dir() as tmp:

        def contender(subject: str | None):  # type: ignore[no-untyped-def]
            def run() -> float:
                with common.scratch_db(tmp) as path:
                    return asyncio.run(_run(path, steps, subject))

            return run

        samples = common.alternate(
            args.rounds, {"plain": contender(None), "subject": contender("user-42")}, warmup=1
        )
        walls = {k: v[-args.rounds :] for k, v in WALL.items()}  # the warmup's left out
        common.log("prune rate")
        pruning = prune_rate(tmp, 100_000 if args.quick else 1_000_000)
        with common.scratch_db(tmp) as path:
            asyncio.run(_run(path, steps, "user-42"))
            clear = workload.FILLER[:60].encode() in Path(path).read_bytes()
    plain, sealed = common.median(samples["plain"]), common.median(samples["subject"])
    cost = 1 - common.paired_ratio(samples["plain"], samples["subject"])
    wall_plain, wall_sealed = common.median(walls[None]), common.median(walls["user-42"])
    common.emit(
        {
            "bench": "encryption",
            "steps": steps,
            "rounds": args.rounds,
            "plain_steps_per_cpu_s": common.per_second(steps, plain),
            "subject_steps_per_cpu_s": common.per_second(steps, sealed),
            "plain_steps_per_s": common.per_second(steps, wall_plain),
            "subject_steps_per_s": common.per_second(steps, wall_sealed),
            "ratio_subject_to_plain": common.ratio(plain, sealed),
            "cost": round(cost, 3),
            "target_cost": TARGET_COST,
            "within_target": cost <= TARGET_COST,
            "plaintext_in_file": clear,
            **pruning,
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
