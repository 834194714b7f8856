"""Time travel on a long thread: the state at any step, the history, diffs and forks.

A thread of N steps (10,000; 2,000 with --quick) is built on a `SQLiteEventStore` by one
`ainvoke` of bench/workload.py's async-scripted agent/tools graph (every step commits; the context
grows by one message a step), twice: with compile's default `snapshot_every` (1,000 events)
and with `snapshot_every=5000`. A separate 1,000-step thread (default snapshots) is built in
a database of its own. Building is timed and bounded (BUILD_LIMIT_S per thread).

Every sample then runs in a fresh event loop on a freshly opened store (opening it and
compiling the graph are not timed) and times one call. Points are steps drawn uniformly from
1..N by a seeded RNG, the same points for both snapshot settings; each round draws a few
points, and the figures are medians over all of them (p90 and max beside them).

* load_at_step: `aget_state(config, at_step=k)` (target: < 20 ms at N), alternated point by
  point with a same-run baseline: a full replay without snapshots at the same step,
  `step_seq` + `agentlog.projections.state_at(..., use_snapshots=False)`. A few points are checked
  first (untimed): both give the same state, at step k.
* history: `aget_state_history` (one entry per step) over the whole N-step thread and over
  the 1,000-step thread (target: < 50 ms), and `ahistory` (one row per event) over the
  latter, each against just reading the thread's records (`store.read`) on a fresh store.
* diff: `adiff(config, a, b)` between two random steps.
* fork: `afork(config, at_step=k)`: a new thread holding the whole state at k (durable).
* bytes: the database after building (TRUNCATE-checkpointed, before any fork), per step,
  with the event payloads and the snapshots broken out: a snapshot is a whole state, so
  more frequent snapshots buy cheaper loads with space.

The peer figure is quoted as context, not measured here: LangGraph listing the
history of a 1,000-step thread in about 11 s.

Usage: .venv/bin/python bench/timetravel.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import random
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

import _common as common
import steps
import workload

from agentlog.actors import StateGraph
from agentlog.actors.engine.compiled import CompiledGraph
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, state_at, step_seq
from agentlog.projections.snapshots import DEFAULT_SNAPSHOT_EVERY

STEPS = 10_000
QUICK_STEPS = 2_000
HISTORY_STEPS = 1_000
SNAPSHOT_SETTINGS = (DEFAULT_SNAPSHOT_EVERY, 5000)
SEED = 20240611
LOAD_POINTS_PER_ROUND = 10
DIFF_POINTS_PER_ROUND = 6
FORK_POINTS_PER_ROUND = 3
HISTORY_PER_ROUND = 2
CHECKED_POINTS = 3
BUILD_LIMIT_S = 60.0
TARGET_LOAD_MS = 20.0
TARGET_HISTORY_1000_MS = 50.0
PEER = {
    "langgraph_history_1000_steps_s": 11,
    "source": "quoted, not measured here",
}

Compiled = CompiledGraph[AgentState]
Probe = Callable[[Compiled, SQLiteEventStore], Awaitable[object]]
P = TypeVar("P")


def config(thread: str) -> dict[str, Any]:
    return {"thread_id": thread}


def label(every: int) -> str:
    return f"snapshot_every_{every}"


# ---- building -------------------------------------------------------------------------------


async def _build(path: Path, thread: str, steps_n: int, snapshot_every: int) -> tuple[float, int]:
    """Seconds one `ainvoke` of `steps_n` steps takes (store opened beforehand), steps taken."""
    graph = workload.Loop("async-scripted", steps_n).graph()
    async with SQLiteEventStore(path) as store:
        compiled = graph.compile(store, recursion_limit=steps_n + 10, snapshot_every=snapshot_every)
        start = time.perf_counter()
        result = await asyncio.wait_for(
            compiled.ainvoke(workload.first_input(), config(thread), include_state=True),
            BUILD_LIMIT_S,
        )
        seconds = time.perf_counter() - start
    state: AgentState = result["state"]
    return seconds, state.execution_meta.step


def build(path: Path, thread: str, steps_n: int, snapshot_every: int) -> dict[str, Any]:
    common.log(f"building {thread!r}: {steps_n} steps, snapshot_every={snapshot_every}")
    seconds, taken = asyncio.run(_build(path, thread, steps_n, snapshot_every))
    assert taken == steps_n, f"{taken} steps taken, expected {steps_n}"
    with closing(sqlite3.connect(path)) as conn:
        (events,) = conn.execute(
            "SELECT count(*) FROM events WHERE thread_id = ?", (thread,)
        ).fetchone()
    common.log(f"  built in {seconds:.2f} s ({events} events)")
    return {
        "steps": taken,
        "events": events,
        "events_per_step": round(events / taken, 2),
        "seconds": round(seconds, 3),
        "steps_per_s": common.per_second(taken, seconds),
        "limit_s": BUILD_LIMIT_S,
    }


def sizes(path: Path, steps_n: int) -> dict[str, Any]:
    """bench/steps.py's byte breakdown of the file, per step, and the largest snapshot."""
    found = steps.db_bytes(path)
    with closing(sqlite3.connect(path)) as conn:
        (largest,) = conn.execute(
            "SELECT coalesce(max(length(state)), 0) FROM snapshots"
        ).fetchone()
    return {
        "per_step": round(found["file"] / steps_n, 1),
        **found,
        "event_payload_per_step": round(found["event_payload"] / steps_n, 1),
        "snapshot_bytes_per_step": round(found["snapshot_bytes"] / steps_n, 1),
        "largest_snapshot_bytes": largest,
    }


# ---- sampling -------------------------------------------------------------------------------


async def _timed(path: Path, probe: Probe) -> float:
    """Seconds `probe` takes on a freshly opened store (opening, compiling, freeing untimed)."""
    async with SQLiteEventStore(path) as store:
        # reads only: no node runs
        compiled = workload.Loop("async-scripted", 1).graph().compile(store)
        start = time.perf_counter()
        result = await probe(compiled, store)
        seconds = time.perf_counter() - start
        del result  # freeing a large state is not the call's cost
        return seconds


def sample(path: Path, probe: Probe) -> float:
    """One sample: a fresh event loop, a fresh store, one timed call."""
    return asyncio.run(_timed(path, probe))


def alternate_points(
    rounds: int,
    per_round: int,
    draw: Callable[[], P],
    contenders: Mapping[str, Callable[[P], float]],
    what: str,
) -> dict[str, list[float]]:
    """Each round draws `per_round` points; every contender runs at each point in turn.

    One point runs first, untimed. The garbage of one run is collected before the next.
    """
    warmup = draw()
    for run in contenders.values():
        run(warmup)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for i in range(rounds):
        for _ in range(per_round):
            point = draw()
            for name, run in contenders.items():
                gc.collect()
                samples[name].append(run(point))
        shown = ", ".join(f"{n}={common.ms(common.median(s))} ms" for n, s in samples.items())
        common.log(f"  {what} round {i + 1}/{rounds}: medians so far {shown}")
    return samples


def spread(values: list[float]) -> dict[str, Any]:
    """Median, p90 and max in ms, and the sample count."""
    p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]
    return {
        "median_ms": common.ms(common.median(values)),
        "p90_ms": common.ms(p90),
        "max_ms": common.ms(max(values)),
        "samples": len(values),
    }


# ---- the measurements -----------------------------------------------------------------------


async def _check_points(path: Path, thread: str, points: list[int]) -> bool:
    """Untimed: `aget_state(at_step=k)` is the full replay's state, and stands at step k."""
    async with SQLiteEventStore(path) as store:
        compiled = workload.Loop("async-scripted", 1).graph().compile(store)
        for k in points:
            ours = await compiled.aget_state(config(thread), at_step=k)
            seq = await step_seq(store, thread, k)
            replayed: AgentState = await state_at(store, thread, seq, use_snapshots=False)
            if ours.execution_meta.step != k or ours.model_dump() != replayed.model_dump():
                return False
    return True


def bench_load(path: Path, thread: str, steps_n: int, rounds: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    same = asyncio.run(
        _check_points(path, thread, [rng.randint(1, steps_n) for _ in range(CHECKED_POINTS)])
    )
    cfg = config(thread)

    def ours(k: int) -> float:
        return sample(path, lambda c, s: c.aget_state(cfg, at_step=k))

    def replay(k: int) -> float:
        async def full(c: Compiled, store: SQLiteEventStore) -> AgentState:
            seq = await step_seq(store, thread, k)
            return await state_at(store, thread, seq, use_snapshots=False)

        return sample(path, full)

    t = alternate_points(
        rounds,
        LOAD_POINTS_PER_ROUND,
        lambda: rng.randint(1, steps_n),
        {"aget_state": ours, "replay": replay},
        "load_at_step",
    )
    median = common.median(t["aget_state"])
    return {
        **spread(t["aget_state"]),
        "replay_without_snapshots": spread(t["replay"]),
        "ratio_replay_to_ours": common.ratio(common.median(t["replay"]), median),
        "same_state": same,
        "target_ms": TARGET_LOAD_MS,
        "ok": median * 1000 < TARGET_LOAD_MS,
    }


def bench_history(path: Path, thread: str, rounds: int, *, events: bool) -> dict[str, Any]:
    """`aget_state_history` (and `ahistory` when `events`) against reading the records."""
    cfg = config(thread)
    counts: dict[str, int] = {}

    async def read_all(c: Compiled, store: SQLiteEventStore) -> None:
        counts["records"] = len([r async for r in store.read(thread)])

    async def history(c: Compiled, store: SQLiteEventStore) -> None:
        counts["entries"] = len(await c.aget_state_history(cfg))

    async def rows(c: Compiled, store: SQLiteEventStore) -> None:
        counts["rows"] = len(await c.ahistory(cfg))

    probes: dict[str, Probe] = {"state_history": history, "read": read_all}
    if events:
        probes["event_history"] = rows
    contenders = {name: (lambda _, p=probe: sample(path, p)) for name, probe in probes.items()}
    t = alternate_points(rounds, HISTORY_PER_ROUND, lambda: None, contenders, "history")
    m = common.medians(t)
    result: dict[str, Any] = {
        "steps": counts["entries"],
        "state_history": spread(t["state_history"]),
        "read_only_ms": common.ms(m["read"]),
        "ratio_to_read": common.ratio(m["state_history"], m["read"]),
        "records": counts["records"],
    }
    if events:
        result["event_history"] = {
            **spread(t["event_history"]),
            "rows": counts["rows"],
            "ratio_to_read": common.ratio(m["event_history"], m["read"]),
        }
    return result


def bench_diff(path: Path, thread: str, steps_n: int, rounds: int) -> dict[str, Any]:
    rng = random.Random(SEED + 1)
    cfg = config(thread)
    gaps: list[int] = []

    def draw() -> tuple[int, int]:
        a, b = sorted(rng.sample(range(1, steps_n + 1), 2))
        gaps.append(b - a)
        return a, b

    def run(point: tuple[int, int]) -> float:
        return sample(path, lambda c, s: c.adiff(cfg, *point))

    t = alternate_points(rounds, DIFF_POINTS_PER_ROUND, draw, {"adiff": run}, "diff")
    apart = [float(g) for g in gaps[1:]]  # the first pair was the warmup's
    return {**spread(t["adiff"]), "median_steps_apart": common.median(apart)}


def bench_fork(path: Path, thread: str, steps_n: int, rounds: int) -> dict[str, Any]:
    rng = random.Random(SEED + 2)
    cfg = config(thread)
    forks: list[tuple[str, int]] = []

    def run(k: int) -> float:
        new_id = f"{thread}-fork-{len(forks) + 1}"
        forks.append((new_id, k))
        return sample(path, lambda c, s: c.afork(cfg, at_step=k, new_thread_id=new_id))

    t = alternate_points(
        rounds, FORK_POINTS_PER_ROUND, lambda: rng.randint(1, steps_n), {"afork": run}, "fork"
    )

    async def check() -> bool:  # untimed: the last fork stands where its source did
        new_id, k = forks[-1]
        async with SQLiteEventStore(path) as store:
            compiled = workload.Loop("async-scripted", 1).graph().compile(store)
            state = await compiled.aget_state(config(new_id))
        return state.execution_meta.step == k and len(state.context) == k + 1

    return {**spread(t["afork"]), "fork_state_ok": asyncio.run(check())}


def bench_setting(directory: Path, steps_n: int, every: int, rounds: int) -> dict[str, Any]:
    path = common.fresh_path(directory, label(every))
    thread = "timetravel"
    try:
        built = build(path, thread, steps_n, every)
        size = sizes(path, steps_n)
        common.log(f"{label(every)}: {size['per_step']} bytes/step, {size['snapshots']} snapshots")
        load = bench_load(path, thread, steps_n, rounds)
        history = bench_history(path, thread, rounds, events=False)
        diff = bench_diff(path, thread, steps_n, rounds)
        fork = bench_fork(path, thread, steps_n, rounds)  # last: forks add to the file
    finally:
        common.remove_db(path)
    return {
        "snapshot_every": every,
        "build": built,
        "bytes": size,
        "load_at_step": load,
        "history": history,
        "diff": diff,
        "fork": fork,
    }


def compile_default() -> object:
    return inspect.signature(StateGraph.compile).parameters["snapshot_every"].default


def main() -> None:
    args = common.parse_args(__doc__ or "")
    steps_n = QUICK_STEPS if args.quick else STEPS
    default = compile_default()
    assert default == DEFAULT_SNAPSHOT_EVERY, f"compile's snapshot_every default is {default}"
    settings: dict[str, dict[str, Any]] = {}
    with common.temp_dir() as directory:
        with common.scratch_db(directory, "history-1000") as path:
            built = build(path, "history", HISTORY_STEPS, DEFAULT_SNAPSHOT_EVERY)
            common.log(f"history of the {HISTORY_STEPS}-step thread")
            history_1000 = {
                "build": built,
                **bench_history(path, "history", args.rounds, events=True),
            }
        for every in SNAPSHOT_SETTINGS:
            settings[label(every)] = bench_setting(directory, steps_n, every, args.rounds)

    ours = settings[label(DEFAULT_SNAPSHOT_EVERY)]
    load_ok = ours["load_at_step"]["ok"]
    history_ms = history_1000["state_history"]["median_ms"]
    history_ok = history_ms < TARGET_HISTORY_1000_MS
    checks_ok = all(
        s["load_at_step"]["same_state"] and s["fork"]["fork_state_ok"] for s in settings.values()
    )
    common.emit(
        {
            "bench": "timetravel",
            "quick": args.quick,
            "steps": steps_n,
            "settings": settings,
            "history_1000_steps": history_1000,
            "peer": PEER,
            "targets": {
                "load_at_step_ms": {
                    "at_steps": steps_n,
                    "target": TARGET_LOAD_MS,
                    **{
                        name: {
                            "value": s["load_at_step"]["median_ms"],
                            "ok": s["load_at_step"]["ok"],
                        }
                        for name, s in settings.items()
                    },
                    "ok": load_ok,  # with compile's default snapshot_every
                },
                "history_1000_steps_ms": {
                    "value": history_ms,
                    "target": TARGET_HISTORY_1000_MS,
                    "ok": history_ok,
                },
                "history_at_steps_ms": {
                    "at_steps": steps_n,
                    "value": ours["history"]["state_history"]["median_ms"],
                },
                "checks_ok": checks_ok,
                "ok": load_ok and history_ok and checks_ok,
            },
            "rounds": args.rounds,
            "median_of": "random points (seeded), each on a freshly opened store",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
