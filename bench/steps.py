"""Whole graph steps, durable on SQLite: an agent/tools loop over a growing message list.

One thread runs N steps (50, 200, 1000; 50 and 200 with --quick) in a single `ainvoke` on a
`SQLiteEventStore` in a temporary directory. The graph has two nodes:

* "agent": async and scripted (no I/O); each step appends one assistant message, every
  other one asking for one tool call (a `ToolCallBlock`), the others plain text of 100-200
  characters. After it: "tools" when its message asks for a call, "agent" otherwise.
* "tools": a `ToolNode` with one trivial async tool; after it: "agent".

Both conditions route to END once the step count reaches N, so the run takes exactly N
steps (recursion_limit = N + 10); every step commits before the next begins.

For each N:

* steps_per_s: N / the seconds `ainvoke` takes (the store is opened beforehand), with N
  read from the final state's `execution_meta.step` (target: >= 3,000 at N=1000). The
  baseline is stdlib `sqlite3` making one durable commit per step, BEGIN IMMEDIATE / head
  SELECT / executemany of the step's rows / head upsert / COMMIT, with the very rows our run
  wrote (same count, same payload bytes; the run's first and last records ride with the first
  and last step), so ratio_to_raw says what the runtime costs on top of SQLite. Our run makes
  several commits per step (`commits_per_step`); the baseline makes one.
* step_ms: per-step time from the log itself, the difference between consecutive
  step_advanced `at`s (the first from the run_started record); the median of the first 10%
  of steps against the median of the last 10% (target: last / first <= 1.2), i.e. whether
  a step gets dearer as the message list grows.
* bytes: the database file after the store is closed and the WAL is checkpointed
  (TRUNCATE), db + WAL, per step (target: <= 1,000 bytes at the largest N, since the empty
  database's pages weigh on small N), with the event payloads and the runtime's snapshots
  (compile's default snapshot_every) broken out, and the bytes each step adds between sizes.
* load: `projections.state_at` on a freshly opened store over the final file, with the
  snapshots the runtime took and without them (use_snapshots=False).

Rounds alternate ours and raw after one untimed run; medians are reported.

Usage: .venv/bin/python bench/steps.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as common

import events.sqlite as sqlite_backend
from actors import END, StateGraph
from actors.tools import ToolNode
from events import SQLiteEventStore
from events.sqlite import _INSERT, _UPSERT_HEAD
from projections import AgentState, Message, ToolCallBlock, state_at

THREAD = "steps"
SIZES = (50, 200, 1000)
QUICK_SIZES = (50, 200)
TARGET_STEPS_PER_S = 3000.0
TARGET_LAST_TO_FIRST = 1.2
TARGET_BYTES_PER_STEP = 1000.0

RawRow = tuple[Any, ...]


# ---- the graph ------------------------------------------------------------------------------


async def lookup(query: str) -> str:
    """Look a query up (instantly).

    Args:
        query: What to look up.
    """
    return f"result for {query}"


async def agent(state: AgentState) -> list[Message]:
    """A scripted model: a tool call after a text answer (or at the start), text after a tool."""
    k = state.execution_meta.step + 1
    last = state.context[-1] if state.context else None
    if last is None or last.role != "tool":
        call = ToolCallBlock(id=f"call-{k}", name="lookup", args={"query": f"question {k}"})
        return [Message(role="assistant", content=[call])]
    text = f"answer at step {k}: ".ljust(100 + (k * 37) % 101, "z")  # 100-200 characters
    return [Message.text_message(text, role="assistant")]


def build_graph(steps: int) -> StateGraph[AgentState]:
    """The agent/tools loop, ending after exactly `steps` steps."""

    def route(state: AgentState) -> str:
        if state.execution_meta.step + 1 >= steps:  # the step being routed is the last one
            return END
        last = state.context[-1]
        return "tools" if last.role == "assistant" and last.tool_calls() else "agent"

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([lookup]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", "agent": "agent", END: END})
    graph.add_conditional_edges("tools", route, {"agent": "agent", END: END})
    return graph


def first_input() -> dict[str, Any]:
    return {"messages": [Message.text_message("Please look a few things up.", role="user")]}


# ---- ours -----------------------------------------------------------------------------------


async def _ours(path: Path, steps: int) -> tuple[float, int]:
    """Seconds one `ainvoke` of `steps` steps takes on a fresh store, and the steps it took."""
    graph = build_graph(steps)
    async with SQLiteEventStore(path) as store:  # opened (and the schema made) before timing
        compiled = graph.compile(store, recursion_limit=steps + 10)
        start = time.perf_counter()
        result = await compiled.ainvoke(first_input(), {"thread_id": THREAD}, include_state=True)
        seconds = time.perf_counter() - start
    state: AgentState = result["state"]
    return seconds, state.execution_meta.step


def step_durations(path: Path) -> list[float]:
    """Each step's seconds, from the log: consecutive step_advanced `at`s (first: run start)."""
    with closing(sqlite3.connect(path)) as conn:
        (origin,) = conn.execute(
            "SELECT at FROM events WHERE thread_id = ? ORDER BY seq LIMIT 1", (THREAD,)
        ).fetchone()
        ats = [
            at
            for (at,) in conn.execute(
                "SELECT at FROM events WHERE thread_id = ? AND kind = 'step_advanced' ORDER BY seq",
                (THREAD,),
            )
        ]
    marks = [origin, *ats]
    return [b - a for a, b in itertools.pairwise(marks)]


def ends(durations: list[float]) -> tuple[float, float]:
    """The median step of the first 10% and of the last 10% of steps."""
    tenth = max(1, len(durations) // 10)
    return common.median(durations[:tenth]), common.median(durations[-tenth:])


# ---- raw sqlite3 ----------------------------------------------------------------------------


def step_rows(path: Path) -> list[list[RawRow]]:
    """The rows our run wrote, one list per step; a record outside any step joins its nearest."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            f"SELECT {sqlite_backend._ROW_COLUMNS} FROM events WHERE thread_id = ? ORDER BY seq",
            (THREAD,),
        ).fetchall()
    steps: list[list[RawRow]] = [[]]
    for row in rows:
        steps[-1].append(row)
        if row[5] == "step_advanced":
            steps.append([])
    trailing = steps.pop()
    steps[-1].extend(trailing)  # run_completed rides with the last step
    return steps


def _raw(path: Path, steps: list[list[RawRow]]) -> float:
    """One durable commit per step, of that step's rows, like the store's; return the seconds."""
    common.create_store_db(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=NORMAL")
    try:
        start = time.perf_counter()
        for rows in steps:
            at = time.time()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("SELECT last_seq, last_hash FROM threads WHERE thread_id=?", (THREAD,))
            conn.executemany(_INSERT, [(*r[:4], at, *r[5:]) for r in rows])
            last = rows[-1]
            conn.execute(_UPSERT_HEAD, (THREAD, last[1], last[8], at, at))
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


# ---- the benchmark --------------------------------------------------------------------------


@dataclass
class OursRuns:
    """What the ours rounds leave behind: databases and per-step times."""

    directory: Path
    steps: int
    paths: list[Path] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    lasts: list[float] = field(default_factory=list)
    taken: list[int] = field(default_factory=list)

    def run(self) -> float:
        path = common.fresh_path(self.directory, f"ours-{self.steps}")
        self.paths.append(path)
        seconds, taken = asyncio.run(_ours(path, self.steps))
        first, last = ends(step_durations(path))
        self.firsts.append(first)
        self.lasts.append(last)
        self.taken.append(taken)
        return seconds

    def cleanup(self) -> None:
        for path in self.paths:
            common.remove_db(path)


def bench_size(directory: Path, steps: int, rounds: int) -> dict[str, Any]:
    common.log(f"N={steps}: a shape run (untimed), then {rounds} rounds of ours/raw")
    ours = OursRuns(directory, steps)
    try:
        with common.scratch_db(directory, f"shape-{steps}") as shape:
            with common.CommitCounter() as counter:
                asyncio.run(_ours(shape, steps))
            raw_steps = step_rows(shape)
        assert len(raw_steps) == steps, f"{len(raw_steps)} steps in the log, expected {steps}"
        rows = sum(len(s) for s in raw_steps)

        def raw() -> float:
            with common.scratch_db(directory, f"raw-{steps}") as path:
                return _raw(path, raw_steps)

        t = common.medians(common.alternate(rounds, {"ours": ours.run, "raw": raw}))
        assert all(n == steps for n in ours.taken), f"steps taken: {ours.taken}"
        kept = ours.paths[-1]
        sizes = db_bytes(kept)
        common.log(f"N={steps}: state_at on the last run's file, with and without snapshots")
        load = bench_load(kept, rounds)
    finally:
        ours.cleanup()

    taken = ours.taken[-1]
    ours_rate = common.per_second(taken, t["ours"])
    raw_rate = common.per_second(taken, t["raw"])
    first, last = common.median(ours.firsts), common.median(ours.lasts)
    per_step = round(sizes["file"] / taken, 1)
    return {
        "steps": taken,
        "rounds": rounds,
        "steps_per_s": ours_rate,
        "ms_per_step": common.ms(t["ours"] / taken),
        "run_ms": common.ms(t["ours"]),
        "raw_steps_per_s": raw_rate,
        "ratio_to_raw": common.ratio(ours_rate, raw_rate),
        "commits_per_step": round(counter.commits / taken, 2),
        "events_per_step": round(rows / taken, 2),
        "step_ms": {
            "first_10pct_median": common.ms(first),
            "last_10pct_median": common.ms(last),
            "ratio_last_to_first": common.ratio(last, first),
            "ok": last <= TARGET_LAST_TO_FIRST * first,
        },
        "bytes": {
            "per_step": per_step,
            **sizes,
            "event_payload_per_step": round(sizes["event_payload"] / taken, 1),
            "snapshot_bytes_per_step": round(sizes["snapshot_bytes"] / taken, 1),
            "ok": per_step <= TARGET_BYTES_PER_STEP,
        },
        "load": load,
    }


def main() -> None:
    args = common.parse_args(__doc__ or "")
    sizes = QUICK_SIZES if args.quick else SIZES
    results: dict[str, dict[str, Any]] = {}
    with common.temp_dir() as directory:
        with common.scratch_db(directory, "empty") as empty:
            common.create_store_db(empty)
            fixed = db_bytes(empty)["file"]
        previous: tuple[int, int] | None = None
        for n in sizes:
            result = results[str(n)] = bench_size(directory, n, args.rounds)
            size = result["bytes"]["file"]
            if previous is not None:  # what each further step adds, fixed costs aside
                extra = (size - previous[1]) / (n - previous[0])
                result["bytes"]["marginal_per_step"] = round(extra, 1)
            previous = (n, size)

    largest = results[str(max(sizes))]
    rate_ok = largest["steps_per_s"] >= TARGET_STEPS_PER_S
    flat_ok = all(r["step_ms"]["ok"] for r in results.values())
    bytes_ok = largest["bytes"]["ok"]
    common.emit(
        {
            "bench": "steps",
            "quick": args.quick,
            "sizes": results,
            "targets": {
                "steps_per_s": {
                    "at_steps": largest["steps"],
                    "value": largest["steps_per_s"],
                    "target": TARGET_STEPS_PER_S,
                    "ok": rate_ok,
                },
                "last_to_first": {
                    "worst": max(r["step_ms"]["ratio_last_to_first"] for r in results.values()),
                    "target": TARGET_LAST_TO_FIRST,
                    "ok": flat_ok,
                },
                "bytes_per_step": {
                    "at_steps": largest["steps"],
                    "value": largest["bytes"]["per_step"],
                    "empty_db_bytes": fixed,
                    "target": TARGET_BYTES_PER_STEP,
                    "ok": bytes_ok,
                },
                "ok": rate_ok and flat_ok and bytes_ok,
            },
            "rounds": args.rounds,
            "median_of": "seconds per round, alternating ours/raw",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
