"""The PostgreSQL store next to SQLite, in the same run, on this machine's local server.

* appends: durable appends per second from 1, 2 and 4 writer processes, each one task making
  one-step appends (three events, one commit each, waiting for it: an agent's step) to a
  thread of its own; the same processes on one SQLite file are the peer.
* runs: completed runs per second through 1, 2 and 4 worker processes of `workers_app.py`
  (shared workers, leases in the store) plus this process as a client, on Postgres and on
  SQLite.
* group: 100 concurrent writers in one process, each appending steps to its own thread
  through one store: events/s and appends per transaction (group commit), Postgres and SQLite.
* ordering: how positions get their commit order. `commit_counter` (ours: the one-row counter
  taken by the last statements of a transaction, its row lock held to COMMIT) against
  `table_lock` (LOCK TABLE events IN EXCLUSIVE MODE first, then the same transaction), with
  4 processes of 25 concurrent writers each (transactions from several connections race,
  each carrying a group commit) and 2 processes of one writer each (one append per
  transaction); appends per transaction are reported too.

Every part alternates its contenders round by round; medians. Needs AGENTLOG_PG_DSN (default
postgresql://postgres@127.0.0.1:5432/test); each round uses a fresh schema, dropped after.

Usage: .venv/bin/python bench/postgres.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import _common as common

from agentlog.events import NodeEntered, StateUpdated, StepAdvanced, open_store

HERE = Path(__file__).resolve().parent
DSN = os.environ.get("AGENTLOG_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
COUNTS = (1, 2, 4)
ORDER_SHAPES = ("4x25", "2x1")
"""Processes x concurrent writers each, for the ordering comparison."""


def step(n: int) -> list[Any]:
    """One agent step: three events, about 250 bytes of payload."""
    return [
        NodeEntered(node="agent"),
        StateUpdated(values={"step": n, "note": "x" * 200}, source="agent"),
        StepAdvanced(step=n, next_node="agent"),
    ]


@asynccontextmanager
async def pg_schema() -> AsyncIterator[str]:
    """A fresh schema made by the real upgrade; its URL; dropped after."""
    import asyncpg

    from agentlog.events.stores.postgres_schema import upgrade_schema

    name = f"bench_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(DSN)
    try:
        await upgrade_schema(conn, name)
        yield name
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await conn.close()


def url(schema: str) -> str:
    return f"{DSN}{'&' if '?' in DSN else '?'}schema={schema}"


# ---- child processes: writers that wait for "go" --------------------------------------------


async def child(address: str, name: str, tasks: int, appends: int, ordering: str) -> None:
    """Open the store, print "ready", wait for a line on stdin, append, print "done"."""
    store: Any = open_store(address)
    if ordering != "-":
        store.ordering = ordering
    async with store:
        for t in range(tasks):  # the threads exist before the clock starts
            await store.append(f"{name}-{t}", step(0), expected_seq=0)
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)

        async def writer(thread: str) -> None:
            for n in range(1, appends + 1):
                await store.append(thread, step(n), expected_seq=n * 3)

        await asyncio.gather(*(writer(f"{name}-{t}") for t in range(tasks)))
        commits = getattr(store, "commits", 0) - 1  # less the one that made the threads
    print(f"done {commits}", flush=True)


def through_processes(
    address: str, processes: int, tasks: int, appends: int, ordering: str = "-"
) -> tuple[float, float]:
    """Appends per second from `processes` writer processes started ahead of the clock, and
    appends per transaction (0 when the store does not count its transactions)."""
    procs = [
        common.spawn_ready(
            [str(Path(__file__)), "--child", address, f"p{i}", str(tasks), str(appends), ordering],
            stdin=True,
        )
        for i in range(processes)
    ]
    began = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    commits = 0
    for proc in procs:
        assert proc.stdout is not None
        word, _, count = proc.stdout.readline().strip().partition(" ")
        if word != "done" or proc.wait(120) != 0:
            raise RuntimeError("a writer process failed")
        commits += int(count)
    total = processes * tasks * appends
    return total / (time.perf_counter() - began), total / commits if commits > 0 else 0.0


# ---- the parts -------------------------------------------------------------------------------


async def with_store(kind: str, directory: Path, job: Callable[[str], Any]) -> Any:
    """Run `job(address)` on a fresh Postgres schema or SQLite file."""
    if kind == "postgres":
        async with pg_schema() as schema:
            return await asyncio.to_thread(job, url(schema))
    return await asyncio.to_thread(job, str(common.fresh_path(directory)))


async def group(address: str, writers: int, appends: int) -> tuple[float, float]:
    """Events/s of `writers` concurrent tasks on one store, and appends per transaction."""
    store: Any = open_store(address)
    async with store:
        began = time.perf_counter()

        async def writer(i: int) -> None:
            for n in range(appends):
                await store.append(f"g{i}", step(n), expected_seq=n * 3)

        await asyncio.gather(*(writer(i) for i in range(writers)))
        seconds = time.perf_counter() - began
        commits = getattr(store, "commits", 0)
    per_commit = writers * appends / commits if commits else 0.0  # 0: not counted (SQLite)
    return writers * appends * 3 / seconds, per_commit


def runs_through(address: str, workers: int, runs: int) -> float:
    """Completed runs per second through `workers` worker processes and this client."""
    from workers import through_workers

    return runs / asyncio.run(through_workers(address, workers, runs))


def on(kind: str, directory: Path, job: Callable[[str], Any]) -> Any:
    """`job(address)` on a fresh store of `kind`, from this (loop-less) thread."""
    return asyncio.run(with_store(kind, directory, job))


def one_round(directory: Path, sizes: dict[str, int], add: Callable[[str, float], None]) -> None:
    """Every part once, each contender on a fresh store."""
    for kind in ("postgres", "sqlite"):
        for n in COUNTS:
            rate, _ = on(kind, directory, partial(through_processes, processes=n, tasks=1,
                                                  appends=sizes["appends"]))  # fmt: skip
            add(f"appends_per_s.{kind}.{n}", rate)
            common.log(f"  appends {kind} x{n}: {rate:.0f}/s")
        for n in COUNTS:
            rate = on(kind, directory, partial(runs_through, workers=n, runs=sizes["runs"]))
            add(f"runs_per_s.{kind}.{n}", rate)
            common.log(f"  runs {kind} x{n}: {rate:.0f}/s")
        events, per_commit = on(kind, directory, partial(grouped, appends=sizes["group"]))
        add(f"group.{kind}.events_per_s", events)
        if per_commit:
            add(f"group.{kind}.appends_per_commit", per_commit)
        common.log(f"  group {kind}: {events:.0f} events/s, {per_commit:.1f} appends/commit")
    for ordering in ("commit_counter", "table_lock"):
        for shape in ORDER_SHAPES:
            procs, tasks = map(int, shape.split("x"))
            count = sizes["order"] if tasks > 1 else sizes["appends"]
            rate, per_commit = on("postgres", directory, partial(
                through_processes, processes=procs, tasks=tasks, appends=count, ordering=ordering
            ))  # fmt: skip
            add(f"ordering.{shape}.{ordering}", rate)
            add(f"per_commit.{shape}.{ordering}", per_commit)
            common.log(f"  ordering {ordering} {shape}: {rate:.0f} appends/s, "
                       f"{per_commit:.1f} appends/commit")  # fmt: skip


def grouped(address: str, appends: int) -> tuple[float, float]:
    """`group` with 100 writers, on a loop of its own."""
    return asyncio.run(group(address, 100, appends))


def main() -> None:
    args = common.parse_args(__doc__ or "")
    sizes = {
        "appends": 100 if args.quick else 300,
        "runs": 60 if args.quick else 200,
        "group": 10 if args.quick else 30,
        "order": 10 if args.quick else 30,
    }
    samples: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        samples.setdefault(key, []).append(value)

    with common.temp_dir() as directory:
        for round_no in range(args.rounds):
            common.log(f"round {round_no + 1}/{args.rounds}")
            one_round(directory, sizes, add)
    appends, runs = sizes["appends"], sizes["runs"]
    got = common.medians(samples)

    def table(prefix: str) -> dict[str, float]:
        return {k.removeprefix(prefix): round(v, 1) for k, v in got.items() if k.startswith(prefix)}

    common.emit(
        {
            "benchmark": "postgres",
            **common.environment(),
            "rounds": args.rounds,
            "appends_per_process": appends,
            "runs": runs,
            "appends_per_s": {k: table(f"appends_per_s.{k}.") for k in ("postgres", "sqlite")},
            "runs_per_s": {k: table(f"runs_per_s.{k}.") for k in ("postgres", "sqlite")},
            "postgres_to_sqlite": {
                f"{what}_{n}": common.ratio(
                    got[f"{what}_per_s.postgres.{n}"], got[f"{what}_per_s.sqlite.{n}"]
                )
                for what in ("appends", "runs")
                for n in COUNTS
            },
            "group_100_writers": {k: table(f"group.{k}.") for k in ("postgres", "sqlite")},
            "ordering_appends_per_s": {k: table(f"ordering.{k}.") for k in ORDER_SHAPES},
            "ordering_appends_per_commit": {k: table(f"per_commit.{k}.") for k in ORDER_SHAPES},
            "commit_counter_to_table_lock": {
                k: common.ratio(
                    got[f"ordering.{k}.commit_counter"], got[f"ordering.{k}.table_lock"]
                )
                for k in ORDER_SHAPES
            },
        }
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        address, name, tasks, appends, ordering = sys.argv[2:7]
        asyncio.run(child(address, name, int(tasks), int(appends), ordering))
    else:
        main()
