"""`agentlog verify` of one long thread: linear in its records, snapshots included.

The tool-calling thread of bench/snapshots.py (4.5 records a step) is built directly with
`SQLiteEventStore.append` at 10,000 and 100,000 records (2,000 and 20,000 with --quick), with
referencing snapshots by the engine's policy (one at the first commit past every multiple of
`--every` records; default `DEFAULT_SNAPSHOT_EVERY`, 1,000; `SNAPSHOT_AT_REST`, 64, is the
densest a thread gets from runs coming to rest). Then, in a fresh store, the two checks
`agentlog verify --snapshots` makes of it are timed: the chain (`store.verify`) and every
snapshot against the log's fold (`verify_snapshots`), with what the latter read through a
counting wrapper: records, and messages resolved out of snapshots (quadratic before: every
snapshot's whole context was read and validated).

"per_1000_records_s" is the seconds per 1,000 records; "ratio_large_over_small_per_record"
near 1 means linear (it was about the ratio of the sizes when each snapshot cost its whole
context).

Usage: .venv/bin/python bench/verify.py [--quick] [--every N]
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import _common as common
from snapshots import THREAD, step_events

from agentlog.events import EventRecord, RunStarted, Snapshot, SQLiteEventStore
from agentlog.projections import AgentState, Message, message_appended
from agentlog.projections.fold import Fold
from agentlog.projections.snapshots import DEFAULT_SNAPSHOT_EVERY, SnapshotWriter, verify_snapshots

SIZES, QUICK_SIZES = (10_000, 100_000), (2_000, 20_000)


class Counting:
    """A store that counts what a reader takes from it."""

    def __init__(self, inner: SQLiteEventStore) -> None:
        self.inner = inner
        self.records = 0
        self.resolved = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def read(self, *args: Any, **kwargs: Any) -> AsyncIterator[EventRecord]:
        async for record in self.inner.read(*args, **kwargs):
            self.records += 1
            yield record

    async def load_snapshot(self, *args: Any, **kwargs: Any) -> Snapshot | None:
        snapshot = await self.inner.load_snapshot(*args, **kwargs)
        if snapshot is not None:
            context = snapshot.state.get("context")
            self.resolved += len(context) if isinstance(context, list) else 0
            self.resolved += len(getattr(snapshot, "record_hashes", None) or ())
        return snapshot


async def build(path: Path, records: int, every: int) -> int:
    """Write a thread of about `records` records with snapshots every `every`; its length."""
    async with SQLiteEventStore(path) as store:
        fold = Fold.new(AgentState)
        writer = SnapshotWriter(store, THREAD)
        first = [
            RunStarted(entry_node="agent"),
            message_appended(Message.text_message("Please look a few things up.")),
        ]
        written = await store.append(THREAD, first, expected_seq=0)
        fold.apply_all(written)
        writer.observe(written)
        last_snapshot, k = 0, 0
        while fold.seq < records:
            k += 1
            written = await store.append(THREAD, step_events(k), expected_seq=fold.seq)
            fold.apply_all(written)
            writer.observe(written)
            if fold.seq // every > last_snapshot // every:
                last_snapshot = fold.seq
                await writer.snapshot(fold.seq, fold.state, hash=fold.hash)
        return fold.seq


async def measure(path: Path) -> dict[str, Any]:
    async with SQLiteEventStore(path, readonly=True) as store:
        snapshots = len(await store.snapshot_seqs(THREAD))
        start = time.perf_counter()
        report = await store.verify(THREAD)
        chain = time.perf_counter() - start
        counting = Counting(store)
        start = time.perf_counter()
        findings = await verify_snapshots(counting, THREAD)  # type: ignore[arg-type]
        compared = time.perf_counter() - start
    assert report.ok and not [f for f in findings if f.problem], findings
    return {
        "records": report.records_checked,
        "snapshots": snapshots,
        "chain_s": round(chain, 3),
        "snapshots_s": round(compared, 3),
        "total_s": round(chain + compared, 3),
        "per_1000_records_s": round((chain + compared) / report.records_checked * 1000, 4),
        "records_read": counting.records,
        "messages_resolved": counting.resolved,
    }


def main() -> None:
    parser = common.argument_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--every", type=int, default=DEFAULT_SNAPSHOT_EVERY, help="records between snapshots"
    )
    args = common.checked(parser)
    sizes = QUICK_SIZES if args.quick else SIZES
    figures: dict[str, Any] = {}
    with common.temp_dir() as directory:
        for size in sizes:
            path = common.fresh_path(directory, f"verify-{size}")
            start = time.perf_counter()
            length = asyncio.run(build(path, size, args.every))
            common.log(f"built {length} records in {time.perf_counter() - start:.1f} s")
            figures[str(size)] = asyncio.run(measure(path))
            common.log(f"verify of {length} records: {figures[str(size)]}")
    small, large = (figures[str(s)] for s in sizes)
    common.emit(
        {
            "benchmark": "verify",
            "snapshot_every": args.every,
            "sizes": figures,
            "ratio_large_over_small_per_record": common.ratio(
                large["per_1000_records_s"], small["per_1000_records_s"]
            ),
            "environment": common.environment(),
        }
    )


if __name__ == "__main__":
    main()
