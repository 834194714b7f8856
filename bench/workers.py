"""Shared workers: completed runs per second with 1, 2 and 4 worker processes on one store,
against a lone runtime running the same runs in one process, in the same run.

Each round: a fresh SQLite file (and, with --dsn, a fresh Postgres schema), N worker
processes of `workers_app.py` (a plain `def` node answering the user), started and ready
before the clock starts; this process joins as a worker that runs at most one run at a time
(mostly a client), triggers RUNS runs at once and waits for all of them. The baseline is the
same RUNS runs through a lone `AgentRuntime` in this process on its own fresh file. Rounds
alternate; medians. Reports runs/s per worker count and each one's ratio to the lone runtime
(the price of leases, the shared runtime thread and cross-process commits on a 2-core
machine: more processes than cores compete for them).

Usage: .venv/bin/python bench/workers.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import _common as common
from workers_app import build

from agentlog.events import SQLiteEventStore, open_store

HERE = Path(__file__).resolve().parent


async def through_workers(address: str, count: int, runs: int) -> float:
    """Seconds for `runs` runs through `count` worker processes (and this one) on the store
    `address` names (a SQLite path or a postgresql:// URL)."""
    procs = [
        common.spawn_ready([str(HERE / "workers_app.py"), address, f"w{i}"]) for i in range(count)
    ]
    try:
        async with open_store(address) as store:
            here = build(store, "client", max_runs=1)
            async with here:
                began = time.perf_counter()
                triggers = (here.trigger("api", f"q {i}") for i in range(runs))
                threads = await asyncio.gather(*triggers)
                await asyncio.gather(*(here.wait(t, timeout=300) for t in threads))
                return time.perf_counter() - began
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(60)


async def lone(path: Path, runs: int) -> float:
    """Seconds for the same runs through a lone runtime in this process."""
    async with SQLiteEventStore(path) as store, build(store, None) as runtime:
        began = time.perf_counter()
        threads = await asyncio.gather(*(runtime.trigger("api", f"q {i}") for i in range(runs)))
        await asyncio.gather(*(runtime.wait(t, timeout=300) for t in threads))
        return time.perf_counter() - began


def main() -> None:
    args = common.parse_args(__doc__ or "")
    runs = 100 if args.quick else 300
    counts = (1, 2, 4)
    samples: dict[str, list[float]] = {"lone": [], **{f"workers_{n}": [] for n in counts}}
    with common.temp_dir() as directory:
        for round_no in range(args.rounds):
            common.log(f"round {round_no + 1}/{args.rounds}")
            path = common.fresh_path(directory)
            samples["lone"].append(runs / asyncio.run(lone(path, runs)))
            for n in counts:
                path = common.fresh_path(directory)
                samples[f"workers_{n}"].append(
                    runs / asyncio.run(through_workers(str(path), n, runs))
                )
                common.log(f"  {n} worker(s): {samples[f'workers_{n}'][-1]:.0f} runs/s")
    got = common.medians(samples)
    common.emit(
        {
            "benchmark": "workers",
            **common.environment(),
            "runs": runs,
            "rounds": args.rounds,
            "runs_per_s": {k: round(v, 1) for k, v in got.items()},
            "ratio_to_lone": {
                f"workers_{n}": common.ratio(got[f"workers_{n}"], got["lone"]) for n in counts
            },
        }
    )


if __name__ == "__main__":
    main()
