"""Durable appends through `SQLiteEventStore`, against raw stdlib sqlite3 doing the same commits.

An "agent step" is one append of three events: NodeEntered, MessageAppended (a 200-character
assistant text message) and StepAdvanced.

* single: one task appends N steps to one thread, one commit per append. The baseline is
  synchronous `sqlite3` on a file with the same schema and pragmas running, per step,
  BEGIN IMMEDIATE / head SELECT / executemany of 3 pre-encoded rows / head upsert / COMMIT.
  This is the cost an agent pays per step; the ratio says what asyncio, the writer thread,
  encoding and hashing add on top of SQLite itself (target: ours >= 0.6 x raw).
* group: 100 concurrent tasks each append M steps to their own thread through one store,
  so appends that arrive during a commit are group-committed. The baseline inserts the same
  rows in one transaction per "round" of the 100 writers (target: >= 0.8 x raw). A third
  contender, alternated with both, only encodes the same events, decodes them back (the
  type check every append makes) and chains their hashes: `floor_ratio` = raw / (raw +
  that) is the best ratio a store doing those three things on the event loop's thread could
  reach, whatever else it did not do.

Usage: .venv/bin/python bench/append.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _common as common
import msgspec

from agentlog.events import Event, NodeEntered, SQLiteEventStore, StepAdvanced, kind_of
from agentlog.events.codec import GENESIS_HASH, chain_rows, encode_payloads
from agentlog.events.stores.sqlite import _INSERT, _UPSERT_HEAD
from agentlog.projections import Message, message_appended

EVENTS_PER_STEP = 3
WRITERS = 100
TARGET_RATIO = 0.6
TARGET_GROUP_RATIO = 0.8

Step = list[Event]
RawRow = tuple[Any, ...]
Transaction = tuple[list[str], list[RawRow]]  # the thread ids whose heads it reads, its rows


def agent_steps(count: int) -> list[Step]:
    """`count` agent steps of three events, numbered from 1."""
    return [
        [
            NodeEntered(node="agent"),
            message_appended(Message.text_message("x" * 200, role="assistant")),
            StepAdvanced(step=k),
        ]
        for k in range(1, count + 1)
    ]


def raw_rows(thread_id: str, step: Step, first_seq: int, first_position: int) -> list[RawRow]:
    """A step's rows as the events table stores them, encoded ahead of time."""
    at = time.time()
    return [
        (thread_id, first_seq + i, None, None, at, kind_of(event), event.VERSION,
         msgspec.msgpack.encode(event), bytes(32), first_position + i)
        for i, event in enumerate(step)
    ]  # fmt: skip


# ---- ours -----------------------------------------------------------------------------------


async def _append_steps(store: SQLiteEventStore, thread_id: str, steps: Sequence[Step]) -> None:
    seq = 0
    for step in steps:
        await store.append(thread_id, step, expected_seq=seq)
        seq += len(step)


async def _ours(
    path: Path, threads: dict[str, Sequence[Step]], counter: common.CommitCounter | None = None
) -> float:
    """Seconds for the writers' appends; with `counter`, the commits they made are counted
    into `counter.run_commits` (untimed runs only: the counter costs per statement)."""
    async with SQLiteEventStore(path) as store:  # opened (and the schema made) before timing
        before = counter.commits if counter is not None else 0
        start = time.perf_counter()
        await asyncio.gather(*(_append_steps(store, tid, s) for tid, s in threads.items()))
        seconds = time.perf_counter() - start
        if counter is not None:
            counter.run_commits = counter.commits - before
        return seconds


def _encode_and_chain(threads: dict[str, Sequence[Step]]) -> float:
    """Seconds to encode, check and chain every writer's events, as appends do (and no more)."""
    start = time.perf_counter()
    for thread_id, steps in threads.items():
        seq, prev = 1, GENESIS_HASH
        for step in steps:
            rows = chain_rows(
                thread_id, seq, prev, encode_payloads(thread_id, step), None, None, time.time(), seq
            )
            seq, prev = seq + len(rows), rows[-1].hash
    return time.perf_counter() - start


# ---- raw sqlite3 ----------------------------------------------------------------------------


def _raw(path: Path, transactions: Sequence[Transaction]) -> float:
    """Commit each (thread ids, rows) transaction like the store does; return the seconds."""
    common.create_store_db(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    try:
        start = time.perf_counter()
        for thread_ids, rows in transactions:
            at = time.time()
            conn.execute("BEGIN IMMEDIATE")
            if len(thread_ids) == 1:
                conn.execute(
                    "SELECT last_seq, last_hash FROM threads WHERE thread_id=?", thread_ids
                ).fetchone()
            else:
                marks = ",".join("?" * len(thread_ids))
                conn.execute(
                    "SELECT thread_id, last_seq, last_hash FROM threads "
                    f"WHERE thread_id IN ({marks})",
                    thread_ids,
                ).fetchall()
            conn.executemany(_INSERT, rows)
            heads = {row[0]: (row[1], row[8]) for row in rows}
            conn.executemany(_UPSERT_HEAD, [(t, *h, at, at) for t, h in heads.items()])
            conn.execute("COMMIT")
        return time.perf_counter() - start
    finally:
        conn.close()


def single_transactions(steps: Sequence[Step]) -> list[Transaction]:
    """One transaction per step on one thread."""
    out: list[Transaction] = []
    for k, step in enumerate(steps):
        first = k * EVENTS_PER_STEP + 1
        out.append((["single"], raw_rows("single", step, first, first)))
    return out


def group_transactions(threads: dict[str, Sequence[Step]], per_thread: int) -> list[Transaction]:
    """One transaction per round of the writers, each contributing its next step."""
    out: list[Transaction] = []
    position = 1
    for k in range(per_thread):
        rows: list[RawRow] = []
        for tid, steps in threads.items():
            rows.extend(raw_rows(tid, steps[k], k * EVENTS_PER_STEP + 1, position))
            position += EVENTS_PER_STEP
        out.append((list(threads), rows))
    return out


# ---- the benchmark --------------------------------------------------------------------------


def run_pair(
    directory: Path,
    rounds: int,
    ours: Callable[[Path], float],
    raw: Callable[[Path], float],
    **more: Callable[[], float],
) -> dict[str, list[float]]:
    """Alternate ours and raw (and `more`), each on a fresh database file deleted afterwards."""

    def fresh(fn: Callable[[Path], float]) -> Callable[[], float]:
        def run() -> float:
            with common.scratch_db(directory) as path:
                return fn(path)

        return run

    return common.alternate(rounds, {"ours": fresh(ours), "raw": fresh(raw), **more})


def main() -> None:
    args = common.parse_args(__doc__ or "")
    n_single = 800 if args.quick else 3000
    per_writer = 30 if args.quick else 100
    rounds = args.rounds

    common.log(f"building {n_single} steps for single, {per_writer} x {WRITERS} for group")
    single_steps = agent_steps(n_single)
    single_raw = single_transactions(single_steps)
    shared = agent_steps(per_writer)  # every writer appends the same events to its own thread
    threads: dict[str, Sequence[Step]] = {f"writer-{i:03d}": shared for i in range(WRITERS)}
    group_raw = group_transactions(threads, per_writer)

    with common.temp_dir() as directory:
        common.log(f"single: {n_single} steps, one commit per append")
        single = common.medians(
            run_pair(
                directory,
                rounds,
                lambda p: asyncio.run(_ours(p, {"single": single_steps})),
                lambda p: _raw(p, single_raw),
            )
        )
        common.log(f"group: {WRITERS} writers x {per_writer} steps")
        group = common.medians(
            run_pair(
                directory,
                rounds,
                lambda p: asyncio.run(_ours(p, threads)),
                lambda p: _raw(p, group_raw),
                encode_and_chain=lambda: _encode_and_chain(threads),
            )
        )
        common.log("group: one more run, untimed, counting its commits")
        with common.scratch_db(directory) as path, common.CommitCounter() as counter:
            asyncio.run(_ours(path, threads, counter))
        commits_per_round = counter.run_commits

    ours_steps = common.per_second(n_single, single["ours"])
    raw_steps = common.per_second(n_single, single["raw"])
    group_events = WRITERS * per_writer * EVENTS_PER_STEP
    ours_group = common.per_second(group_events, group["ours"])
    raw_group = common.per_second(group_events, group["raw"])
    common.emit(
        {
            "bench": "append",
            "quick": args.quick,
            "single": {
                "steps": n_single,
                "ours_steps_per_s": ours_steps,
                "ours_events_per_s": common.per_second(n_single * EVENTS_PER_STEP, single["ours"]),
                "raw_steps_per_s": raw_steps,
                "ratio": common.ratio(ours_steps, raw_steps),
                "target_ratio": TARGET_RATIO,
                "ok": ours_steps >= TARGET_RATIO * raw_steps,
            },
            "group": {
                "writers": WRITERS,
                "steps_per_writer": per_writer,
                "ours_events_per_s": ours_group,
                "ours_commits": round(commits_per_round, 1),
                "raw_events_per_s": raw_group,
                "raw_commits": per_writer,
                "ratio_to_raw": common.ratio(ours_group, raw_group),
                "target_ratio": TARGET_GROUP_RATIO,
                "ok": ours_group >= TARGET_GROUP_RATIO * raw_group,
                "encode_and_chain_ms": round(group["encode_and_chain"] * 1000, 1),
                "raw_ms": round(group["raw"] * 1000, 1),
                "floor_ratio": round(group["raw"] / (group["raw"] + group["encode_and_chain"]), 3),
            },
            "rounds": rounds,
            "median_of": "seconds per round, alternating ours/raw (group: and encode_and_chain)",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
