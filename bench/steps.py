"""Whole graph steps, durable on SQLite: a tool-calling agent loop over a growing context.

One thread runs N steps (50, 200, 1000; 50 and 200 with --quick) in a single `ainvoke` on a
`SQLiteEventStore` in a temporary directory; every step commits before the next begins. The
loop is bench/workload.py's, in three variants:

* "def-tool" (the main loop): plain `def` nodes throughout. The agent reads
  `len(state.context)` and `state.context[-1]` and returns one 200-character assistant
  message; two in three carry one tool call (a `ToolCallBlock` and the Agentflow-style
  `tools_calls` dict). The router reads `state.context[-1].tools_calls`; the tool step is a
  plain `def` node appending the result.
* "toolnode": the same with the tool step a `ToolNode` holding one sync tool.
* "async-scripted": the earlier loop (an async scripted agent, a `ToolNode` with an async
  tool, a bare call every other message), kept so old and new figures can be told apart.

For each variant and N:

* steps_per_s: N / the seconds `ainvoke` takes (the store is opened beforehand). The
  baseline is stdlib `sqlite3` making one durable commit per step (BEGIN IMMEDIATE / head
  SELECT / executemany of the step's rows / head row / COMMIT) with the very rows our run
  wrote, so ratio_to_raw says what the runtime costs on top of SQLite.
* commits_per_step: SQLite transactions committed during the run / N, counted by
  `_common.CommitCounter` (a trace callback on the store's connections: every COMMIT, and
  every write run outside a transaction) in an untimed run; append_calls_per_step counts
  the store's `append` calls in the same run, as a cross-check (they differ by the
  ownership claim's own commits). Target: <= 1.5.
* step_ms: each step's time from its start to the next one's (perf_counter stamps in the
  nodes and tools); the median of the first 10% of steps against that of the last 10%
  (target: last / first <= 1.2), i.e. whether a step gets dearer as the context grows.
* bytes: the database file after the store is closed and the WAL is checkpointed
  (TRUNCATE), db + WAL, per step, with the event payloads and snapshots broken out.
* load: `agentlog.projections.state_at` on a freshly opened store over the final file, with the
  snapshots the runtime took and without them.
* profile (largest N of each variant): the top entries of a cProfile of one more run, in a
  separate process (bench/peers/agentlog_driver.py --measure profile) so that it is
  untimed and sees every thread from the start.

Rounds alternate ours and raw; medians are reported. Absolute figures depend on the
machine: the JSON names it (`machine`, `date`); the ratios are what carries over.

Usage: .venv/bin/python bench/steps.py [--quick] [--rounds N] [--variants a,b]
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as common
import workload

from agentlog.events import SQLiteEventStore, StepAdvanced
from agentlog.projections import AgentState, state_at

THREAD = "steps"
SIZES = (50, 200, 1000)
QUICK_SIZES = (50, 200)
TARGET_STEPS_PER_S = 3000.0
TARGET_LAST_TO_FIRST = 1.2
TARGET_BYTES_PER_STEP = 1000.0
TARGET_COMMITS_PER_STEP = 1.5
DRIVER = Path(__file__).resolve().parent / "peers" / "agentlog_driver.py"

Row = dict[str, Any]


def met(ok: bool) -> str:
    """A target's verdict as printed: reported, never asserted."""
    return "met" if ok else "not met"


# ---- raw sqlite3 ----------------------------------------------------------------------------


@dataclass
class Shape:
    """What a run wrote: the events table's columns, its rows per step, its head row."""

    columns: list[str]
    steps: list[list[tuple[Any, ...]]]
    head_columns: list[str]
    head: tuple[Any, ...]


def read_shape(path: Path) -> Shape:
    """The rows our run wrote, one list per step (cut after each step_advanced record; a
    record outside any step joins its nearest), and the thread's head row."""
    with closing(sqlite3.connect(path)) as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(events)")]
        kind = columns.index("kind")
        rows = conn.execute(
            f"SELECT {', '.join(columns)} FROM events WHERE thread_id = ? ORDER BY seq", (THREAD,)
        ).fetchall()
        head_columns = [r[1] for r in conn.execute("PRAGMA table_info(threads)")]
        head = conn.execute(
            f"SELECT {', '.join(head_columns)} FROM threads WHERE thread_id = ?", (THREAD,)
        ).fetchone()
    steps: list[list[tuple[Any, ...]]] = [[]]
    for row in rows:
        steps[-1].append(row)
        if row[kind] == StepAdvanced.KIND:
            steps.append([])
    trailing = steps.pop()
    steps[-1].extend(trailing)  # run_completed rides with the last step
    return Shape(columns, steps, head_columns, tuple(head))


def _raw(path: Path, shape: Shape) -> float:
    """One durable commit per step, of that step's rows, like the store's; return the seconds."""
    common.create_store_db(path)
    cols = shape.columns
    at = cols.index("at") if "at" in cols else None
    insert = f"INSERT INTO events ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    hcols = shape.head_columns
    upsert = (
        f"INSERT OR REPLACE INTO threads ({', '.join(hcols)}) "
        f"VALUES ({', '.join('?' * len(hcols))})"
    )
    updated = hcols.index("updated_at") if "updated_at" in hcols else None
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    try:
        start = time.perf_counter()
        for rows in shape.steps:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("SELECT * FROM threads WHERE thread_id=?", (THREAD,))
            if at is None:
                conn.executemany(insert, rows)
            else:
                conn.executemany(insert, [(*r[:at], now, *r[at + 1 :]) for r in rows])
            head = list(shape.head)
            if updated is not None:
                head[updated] = now
            conn.execute(upsert, head)
            conn.execute("COMMIT")
        return time.perf_counter() - start
    finally:
        conn.close()


# ---- size and load --------------------------------------------------------------------------


def db_bytes(path: Path) -> dict[str, int]:
    """File bytes after a TRUNCATE checkpoint (db + WAL), and what the tables hold."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (payload,) = conn.execute("SELECT coalesce(sum(length(payload)), 0) FROM events").fetchone()
        snapshots, snapshot_bytes = conn.execute(
            "SELECT count(*), coalesce(sum(length(state)), 0) FROM snapshots"
        ).fetchone()
        wal = Path(f"{path}-wal")
        files = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return {
        "file": files,
        "event_payload": payload,
        "snapshots": snapshots,
        "snapshot_bytes": snapshot_bytes,
    }


async def timed_state(path: Path, *, use_snapshots: bool) -> tuple[float, float, AgentState]:
    """Seconds to open a fresh store on `path` and for `state_at` on it, and the state."""
    store = SQLiteEventStore(path)
    try:
        start = time.perf_counter()
        await store.open()
        opened = time.perf_counter()
        state: AgentState = await state_at(store, THREAD, use_snapshots=use_snapshots)
        return opened - start, time.perf_counter() - opened, state
    finally:
        await store.close()


def bench_load(path: Path, rounds: int) -> dict[str, Any]:
    """`state_at` with and without snapshots on a fresh store, alternating."""
    opens: list[float] = []

    def contender(use_snapshots: bool) -> Callable[[], float]:
        def run() -> float:
            open_s, state_s, _ = asyncio.run(timed_state(path, use_snapshots=use_snapshots))
            opens.append(open_s)
            return state_s

        return run

    _, _, with_state = asyncio.run(timed_state(path, use_snapshots=True))
    _, _, without_state = asyncio.run(timed_state(path, use_snapshots=False))
    same = with_state.model_dump() == without_state.model_dump()
    messages = len(with_state.context)
    del with_state, without_state
    t = common.medians(
        common.alternate(rounds, {"with": contender(True), "without": contender(False)}, warmup=1)
    )
    return {
        "with_snapshots_ms": common.ms(t["with"]),
        "without_snapshots_ms": common.ms(t["without"]),
        "ratio_without_to_with": common.ratio(t["without"], t["with"]),
        "open_store_ms": common.ms(common.median(opens)),
        "messages": messages,
        "same_state": same,
    }


# ---- the profile ----------------------------------------------------------------------------


def profile(variant: str, steps: int, directory: Path) -> dict[str, Any]:
    """The cProfile top entries of one untimed run, taken by the agentlog driver in a fresh
    process (so every thread is profiled from its start)."""
    with common.scratch_db(directory, f"profile-{variant}") as path:
        cmd = [
            sys.executable,
            str(DRIVER),
            "--workload",
            "loop",
            "--variant",
            variant,
            "--n",
            str(steps),
            "--db",
            str(path),
            "--measure",
            "profile",
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"profile run failed (exit {out.returncode}): {tail[:300]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return {"steps": steps, **result.get("profile", {})}


# ---- the benchmark --------------------------------------------------------------------------


def ends(durations: list[float]) -> tuple[float, float]:
    """The median step of the first 10% and of the last 10% of steps."""
    tenth = max(1, len(durations) // 10)
    return common.median(durations[:tenth]), common.median(durations[-tenth:])


@dataclass
class OursRuns:
    """What the ours rounds leave behind: databases and per-step times."""

    directory: Path
    variant: str
    steps: int
    paths: list[Path] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    lasts: list[float] = field(default_factory=list)
    taken: list[int] = field(default_factory=list)

    def run(self) -> float:
        path = common.fresh_path(self.directory, f"ours-{self.variant}-{self.steps}")
        self.paths.append(path)
        result = asyncio.run(workload.run_loop(path, self.variant, self.steps, THREAD))
        first, last = ends(result.per_step)
        self.firsts.append(first)
        self.lasts.append(last)
        self.taken.append(result.steps)
        return result.seconds

    def cleanup(self) -> None:
        for path in self.paths:
            common.remove_db(path)


def bench_size(directory: Path, variant: str, steps: int, rounds: int) -> dict[str, Any]:
    """One variant at one N: a counted shape run, then rounds of ours/raw, then load."""
    common.log(f"{variant} N={steps}: a counted run (untimed), then {rounds} rounds of ours/raw")
    ours = OursRuns(directory, variant, steps)
    try:
        with common.scratch_db(directory, f"shape-{variant}-{steps}") as path:
            with common.CommitCounter() as counter:
                counted = asyncio.run(
                    workload.run_loop(path, variant, steps, THREAD, commits=lambda: counter.commits)
                )
            shape = read_shape(path)
        if len(shape.steps) != steps:
            raise RuntimeError(f"{len(shape.steps)} steps in the log, expected {steps}")
        rows = sum(len(s) for s in shape.steps)

        def raw() -> float:
            with common.scratch_db(directory, f"raw-{variant}-{steps}") as path:
                return _raw(path, shape)

        t = common.medians(common.alternate(rounds, {"ours": ours.run, "raw": raw}))
        if any(n != steps for n in ours.taken):
            raise RuntimeError(f"steps taken: {ours.taken}, expected {steps} each")
        kept = ours.paths[-1]
        sizes = db_bytes(kept)
        common.log(f"{variant} N={steps}: state_at on the last run's file, with/without snapshots")
        load = bench_load(kept, rounds)
    finally:
        ours.cleanup()

    ours_rate = common.per_second(steps, t["ours"])
    raw_rate = common.per_second(steps, t["raw"])
    first, last = common.median(ours.firsts), common.median(ours.lasts)
    per_step = round(sizes["file"] / steps, 1)
    commits = round((counted.commits or 0) / steps, 3)
    last_first = common.ratio(last, first)
    return {
        "steps": steps,
        "messages": counted.messages,
        "tool_results": counted.tool_results,
        "rounds": rounds,
        "steps_per_s": ours_rate,
        "ms_per_step": common.ms(t["ours"] / steps),
        "run_ms": common.ms(t["ours"]),
        "raw_steps_per_s": raw_rate,
        "ratio_to_raw": common.ratio(ours_rate, raw_rate),
        "commits_per_step": commits,
        "commits_per_step_target": f"<= {TARGET_COMMITS_PER_STEP}: "
        f"{met(commits <= TARGET_COMMITS_PER_STEP)}",
        "append_calls_per_step": round((counted.append_calls or 0) / steps, 3),
        "events_per_step": round(rows / steps, 2),
        "step_ms": {
            "first_10pct_median": common.ms(first),
            "last_10pct_median": common.ms(last),
            "ratio_last_to_first": last_first,
            "target": f"<= {TARGET_LAST_TO_FIRST}: {met(last <= TARGET_LAST_TO_FIRST * first)}",
        },
        "bytes": {
            "per_step": per_step,
            **sizes,
            "event_payload_per_step": round(sizes["event_payload"] / steps, 1),
            "snapshot_bytes_per_step": round(sizes["snapshot_bytes"] / steps, 1),
        },
        "load": load,
    }


def bench_variant(
    directory: Path, variant: str, sizes: tuple[int, ...], rounds: int, fixed: int
) -> dict[str, Any]:
    """Every N of one variant, its targets (at the largest N, where fixed costs such as the
    ownership claim's commits weigh least), and the profile of one run at the largest N."""
    results: dict[str, dict[str, Any]] = {}
    previous: tuple[int, int] | None = None
    for n in sizes:
        result = results[str(n)] = bench_size(directory, variant, n, rounds)
        size = result["bytes"]["file"]
        if previous is not None:  # what each further step adds, fixed costs aside
            extra = (size - previous[1]) / (n - previous[0])
            result["bytes"]["marginal_per_step"] = round(extra, 1)
        previous = (n, size)
    largest = results[str(max(sizes))]
    common.log(f"{variant}: profile of one untimed run at N={max(sizes)} (separate process)")
    flat = largest["step_ms"]["ratio_last_to_first"]
    commits = largest["commits_per_step"]
    return {
        "sizes": results,
        "targets": {
            "commits_per_step": {
                "at_steps": largest["steps"],
                "value": commits,
                "target": f"<= {TARGET_COMMITS_PER_STEP}",
                "verdict": met(commits <= TARGET_COMMITS_PER_STEP),
            },
            "last_to_first": {
                "at_steps": largest["steps"],
                "value": flat,
                "target": f"<= {TARGET_LAST_TO_FIRST}",
                "verdict": met(flat <= TARGET_LAST_TO_FIRST),
            },
            "steps_per_s": {
                "at_steps": largest["steps"],
                "value": largest["steps_per_s"],
                "target": f">= {TARGET_STEPS_PER_S:g} (absolute: this machine only)",
                "verdict": met(largest["steps_per_s"] >= TARGET_STEPS_PER_S),
            },
            "bytes_per_step": {
                "at_steps": largest["steps"],
                "value": largest["bytes"]["per_step"],
                "empty_db_bytes": fixed,
                "target": f"<= {TARGET_BYTES_PER_STEP:g}",
                "verdict": met(largest["bytes"]["per_step"] <= TARGET_BYTES_PER_STEP),
            },
        },
        "profile": profile(variant, max(sizes), directory),
    }


def main() -> None:
    parser = common.argument_parser(__doc__ or "")
    parser.add_argument(
        "--variants",
        default=",".join(workload.VARIANTS),
        help=f"comma-separated, from {', '.join(workload.VARIANTS)} (default: all)",
    )
    args = common.checked(parser)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in workload.VARIANTS]
    if unknown or not variants:
        parser.error(f"--variants: unknown {unknown}; use some of {', '.join(workload.VARIANTS)}")
    sizes = QUICK_SIZES if args.quick else SIZES
    out: dict[str, Any] = {}
    with common.temp_dir() as directory:
        with common.scratch_db(directory, "empty") as empty:
            common.create_store_db(empty)
            fixed = db_bytes(empty)["file"]
        for variant in variants:
            out[variant] = bench_variant(directory, variant, sizes, args.rounds, fixed)
    main_variant = variants[0]
    common.emit(
        {
            "bench": "steps",
            "quick": args.quick,
            "main_variant": main_variant,
            "summary": {
                v: {
                    n: {
                        "steps_per_s": r["steps_per_s"],
                        "ratio_to_raw": r["ratio_to_raw"],
                        "commits_per_step": r["commits_per_step"],
                        "last_to_first": r["step_ms"]["ratio_last_to_first"],
                        "bytes_per_step": r["bytes"]["per_step"],
                    }
                    for n, r in body["sizes"].items()
                }
                for v, body in out.items()
            },
            "variants": out,
            "rounds": args.rounds,
            "median_of": "seconds per round, alternating ours/raw",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
