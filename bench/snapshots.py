"""Snapshots on a long thread: the state at any step, what snapshots cost, a fresh load.

A thread of N agent steps (10,000; 2,000 with --quick) is built directly with
`SQLiteEventStore.append`, one append per step: `node_entered`, the assistant's message of
200 characters, `step_advanced`; every other step the message asks for a tool (a
`ToolCallBlock` and the `tools_calls` form) and `tool_call_started`, `tool_call_finished`
and the tool's result message follow. One `run_started` and the user's message come first.
It is built three times, each with the engine's snapshot policy (one snapshot at the first
commit past every multiple of `every` records) and a different writer:

* "refs": referencing snapshots (`agentlog.projections.snapshots.SnapshotWriter`) every
  `DEFAULT_SNAPSHOT_EVERY` records, the format and default proposed now;
* "whole": whole-state snapshots (`agentlog.projections.snapshot_of`) every 5,000 records, what the
  engine writes today;
* the "refs" file read with `use_snapshots=False` is the fold from the start.

Figures:

* at_step: `state_at` at ~20 random steps (seeded), point by point alternating refs, whole and
  the fold from the start on the same points; medians (target: < 20 ms at N = 10,000).
  "refs" reads with the messages `state_at` kept (`agentlog.projections.views`) from the point read
  just before (by "refs_cold", which empties that cache first: what a process's first read
  of the thread pays), so it is what a process that has read one other point pays.
  "validate_only" is the floor any reader pays: the state at the point validated from its
  builtins already in memory (`AgentState.model_validate`, the GC paused as the fold does),
  so nothing read or decoded.
* bytes: per step, the snapshots table (pages, from SQLite's dbstat) and the whole database
  after a TRUNCATE checkpoint (target: snapshots <= 300 bytes per step).
* first_read: `state_at` at each of the same points, as the first read of a new process (nothing
  of the thread read or cached before), then the fold from the start at that point in that
  same process; medians, and the ratio of the two (target: <= 0.12).
  `--first-read` builds only the "refs" thread and reports this figure alone.
* fresh: the latest state of an N = 200 and an N = 1,000 thread loaded in a new process: the
  store opened and `state_at` called, the interpreter's start and imports not timed;
  alternating the policy's snapshots, the same plus one taken when the run ended, and the
  load without snapshots (today's engine takes none below 5,000 records).

Usage: .venv/bin/python bench/snapshots.py [--quick] [--rounds N] [--first-read]
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import _common as common

from agentlog.events import (
    Event,
    NodeEntered,
    RunStarted,
    SQLiteEventStore,
    StepAdvanced,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.projections import (
    AgentState,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    message_appended,
    snapshot_of,
    state_at,
    state_data,
)
from agentlog.projections.fold import Fold, gc_paused
from agentlog.projections.snapshots import DEFAULT_SNAPSHOT_EVERY, SnapshotWriter
from agentlog.projections.views import clear_message_cache

STEPS = 10_000
QUICK_STEPS = 2_000
POINTS = 20
FRESH_SIZES = (200, 1_000)
TODAY_EVERY = 5_000
TARGET_AT_STEP_MS = 20.0
TARGET_SNAPSHOT_BYTES_PER_STEP = 300.0
TARGET_FIRST_READ_RATIO = 0.12
THREAD = "long"
FILLER = (
    "The agent weighs what it has gathered so far and writes its next thought down in a "
    "sentence long enough to look like real model output, then decides whether to call a "
    "tool. "
) * 2


def step_events(k: int) -> list[Event]:
    """Agent step `k`: an assistant message of 200 characters; on odd steps a tool call.

    Ids and timestamps are fixed, so every build of the thread holds the same state.
    """
    text = f"Step {k}: {FILLER}"[:200]
    events: list[Event] = [NodeEntered(node="agent")]
    stamp = 1_780_000_000.0 + k
    if k % 2 == 0:
        said = Message(
            message_id=f"a{k}", role="assistant", content=[TextBlock(text=text)], timestamp=stamp
        )
        events.append(message_appended(said))
    else:
        call_id, args = f"call_{k}", {"query": f"question {k}"}
        asked = Message(
            message_id=f"a{k}",
            timestamp=stamp,
            role="assistant",
            content=[TextBlock(text=text), ToolCallBlock(id=call_id, name="lookup", args=args)],
            tools_calls=[
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "lookup", "arguments": json.dumps(args)},
                }
            ],
        )
        output = f"result for question {k}"
        result = Message.tool_message(
            [ToolResultBlock(call_id=call_id, output=output)], message_id=f"t{k}"
        ).model_copy(update={"timestamp": stamp})
        events += [
            message_appended(asked),
            ToolCallStarted(call_id=call_id, name="lookup", args=args, node="tools"),
            ToolCallFinished(call_id=call_id, name="lookup", output=output),
            message_appended(result),
        ]
    events.append(StepAdvanced(step=k, next_node="agent"))
    return events


async def build(path: Path, steps: int, writer: str, *, at_end: bool = False) -> float:
    """Write the N-step thread with snapshots by `writer` ("refs", "whole" or "none"), and
    one more after the last step when `at_end`; the seconds it took.

    The referencing writer is fed every commit, as the engine would feed it.
    """
    start = time.perf_counter()
    async with SQLiteEventStore(path) as store:
        fold = Fold.new(AgentState)
        refs = SnapshotWriter(store, THREAD)
        every = DEFAULT_SNAPSHOT_EVERY if writer == "refs" else TODAY_EVERY
        first: list[Event] = [
            RunStarted(entry_node="agent"),
            message_appended(
                Message.text_message("Please look a few things up.", message_id="u0").model_copy(
                    update={"timestamp": 1_780_000_000.0}
                )
            ),
        ]
        records = await store.append(THREAD, first, expected_seq=0)
        fold.apply_all(records)
        refs.observe(records)
        last_snapshot = 0
        for k in range(1, steps + 1):
            records = await store.append(THREAD, step_events(k), expected_seq=fold.seq)
            fold.apply_all(records)
            refs.observe(records)
            if writer == "none" or fold.seq // every <= last_snapshot // every:
                continue
            last_snapshot = fold.seq
            if writer == "refs":
                await refs.snapshot(fold.seq, fold.state, hash=fold.hash)
            else:
                await store.save_snapshot(snapshot_of(THREAD, fold.seq, fold.state, hash=fold.hash))
        if at_end and last_snapshot != fold.seq:
            await refs.snapshot(fold.seq, fold.state, hash=fold.hash)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return time.perf_counter() - start


def sizes(path: Path, steps: int) -> dict[str, Any]:
    """Bytes per step: the snapshots (pages, and the stored columns alone) and the file."""
    with closing(sqlite3.connect(path)) as conn:
        try:
            pages = dict(conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
            table = pages.get("snapshots", 0) + pages.get("sqlite_autoindex_snapshots_1", 0)
        except sqlite3.OperationalError:  # SQLite built without dbstat
            table = None
        stored = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(state) + COALESCE(LENGTH(refs), 0) + "
            "COALESCE(LENGTH(hash), 0) + COALESCE(LENGTH(anchor), 0)), 0) FROM snapshots"
        ).fetchone()
    return {
        "snapshots": stored[0],
        "snapshot_bytes_per_step": None if table is None else round(table / steps, 1),
        "snapshot_stored_bytes_per_step": round(stored[1] / steps, 1),
        "total_bytes_per_step": round(os.path.getsize(path) / steps, 1),
    }


async def step_seqs(path: Path) -> list[int]:
    async with SQLiteEventStore(path, readonly=True) as store:
        return await store.seqs_of_kind(THREAD, StepAdvanced.KIND)


async def at_steps(
    refs: Path, whole: Path, points: list[int], seqs: list[int]
) -> dict[str, list[float]]:
    """`state_at` at each point, alternating the three readers; seconds per call."""
    samples: dict[str, list[float]] = {
        "refs": [],
        "refs_cold": [],
        "whole": [],
        "from_start": [],
        "validate_only": [],
    }
    async with (
        SQLiteEventStore(refs, readonly=True) as on_refs,
        SQLiteEventStore(whole, readonly=True) as on_whole,
    ):
        readers: dict[str, Callable[[int], Awaitable[AgentState]]] = {
            "refs": lambda seq: state_at(on_refs, THREAD, seq),
            "refs_cold": lambda seq: state_at(on_refs, THREAD, seq),
            "whole": lambda seq: state_at(on_whole, THREAD, seq),
            "from_start": lambda seq: state_at(on_refs, THREAD, seq, use_snapshots=False),
        }
        for k in points[:3]:  # untimed: the three agree, at step k
            states = [await read(seqs[k - 1]) for read in readers.values()]
            assert all(s == states[0] for s in states), f"the readers disagree at step {k}"
            assert states[0].execution_meta.step == k
        for n, k in enumerate(points, 1):
            for name, read in readers.items():
                if name == "refs_cold":
                    clear_message_cache()
                gc.collect()
                start = time.perf_counter()
                state: AgentState | None = await read(seqs[k - 1])
                samples[name].append(time.perf_counter() - start)
                del state  # freeing it is the caller's business, not the read's
            data = state_data(await readers["refs"](seqs[k - 1]))
            gc.collect()
            start = time.perf_counter()
            with gc_paused():
                state = AgentState.model_validate(data)
            samples["validate_only"].append(time.perf_counter() - start)
            del state, data
            common.log(f"  point {n}/{len(points)} step {k}: " + ", ".join(
                f"{name}={common.ms(s[-1])} ms" for name, s in samples.items()
            ))  # fmt: skip
    return samples


def fresh_load(path: Path, use_snapshots: bool) -> dict[str, float]:
    """Open the store and load the latest state in a new interpreter; its timings."""
    argv = [sys.executable, __file__, "--load", str(path)]
    if not use_snapshots:
        argv.append("--no-snapshots")
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout)
    return result


async def load_once(path: Path, use_snapshots: bool) -> dict[str, float]:
    """The `--load` side: time opening the store and loading its latest state."""
    start = time.perf_counter()
    store = SQLiteEventStore(path)
    await store.open()
    opened = time.perf_counter()
    state: AgentState = await state_at(store, THREAD, use_snapshots=use_snapshots)
    loaded = time.perf_counter()
    await store.close()
    assert state.execution_meta.step > 0
    return {"open_and_load_s": loaded - start, "load_s": loaded - opened}


async def read_once(path: Path, seq: int) -> dict[str, float]:
    """The `--at` side: a new process's first `state_at` at `seq`, then the fold from the
    start there; seconds each."""
    async with SQLiteEventStore(path, readonly=True) as store:
        gc.collect()
        start = time.perf_counter()
        state: AgentState | None = await state_at(store, THREAD, seq)
        first = time.perf_counter() - start
        del state
        gc.collect()
        start = time.perf_counter()
        state = await state_at(store, THREAD, seq, use_snapshots=False)
        from_start = time.perf_counter() - start
        del state
    return {"first_s": first, "from_start_s": from_start}


def first_reads(path: Path, points: list[int], seqs: list[int]) -> dict[str, Any]:
    """`read_once` at each point, each in a new process; medians and the ratio."""
    runs: list[dict[str, float]] = []
    for k in points:
        argv = [sys.executable, __file__, "--at", str(path), "--seq", str(seqs[k - 1])]
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout))
        common.log(f"  first read at step {k}: " + ", ".join(
            f"{name}={common.ms(s)} ms" for name, s in runs[-1].items()
        ))  # fmt: skip
    first = [r["first_s"] for r in runs]
    from_start = [r["from_start_s"] for r in runs]
    return {
        "median_ms": {
            "first": common.ms(common.median(first)),
            "from_start": common.ms(common.median(from_start)),
        },
        "ratio_first_over_from_start": common.ratio(
            common.median(first), common.median(from_start)
        ),
        "paired_ratio": round(common.paired_ratio(first, from_start), 3),
        "points": len(points),
        "target_ratio": TARGET_FIRST_READ_RATIO,
    }


def fresh(directory: Path, rounds: int) -> dict[str, Any]:
    """The latest state of N-step threads loaded in new processes: with the snapshots of the
    policy, with one more taken when the run ended, and folded from the start (what today's
    engine does below 5,000 records)."""
    out: dict[str, Any] = {}
    for n in FRESH_SIZES:
        path = common.fresh_path(directory, f"fresh-{n}")
        asyncio.run(build(path, n, "refs"))
        at_end = common.fresh_path(directory, f"fresh-{n}-end")
        asyncio.run(build(at_end, n, "refs", at_end=True))
        loads = {"snapshots": (path, True), "snapshot_at_end": (at_end, True)}
        loads["from_start"] = (path, False)
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in loads}
        for i in range(rounds + 1):
            for name, (db, use_snapshots) in loads.items():
                result = fresh_load(db, use_snapshots)
                if i:  # the first round warms the file cache
                    samples[name].append(result)
        figures: dict[str, Any] = {
            name: {
                key.replace("_s", "_ms"): common.ms(common.median([r[key] for r in runs]))
                for key in ("open_and_load_s", "load_s")
            }
            for name, runs in samples.items()
        }
        for name in ("snapshots", "snapshot_at_end"):
            figures[f"ratio_load_{name}_over_from_start"] = common.ratio(
                figures[name]["load_ms"], figures["from_start"]["load_ms"]
            )
        figures["records"] = asyncio.run(last_seq(path))
        out[f"n{n}"] = figures
        common.log(f"fresh N={n}: {figures}")
    return out


async def last_seq(path: Path) -> int:
    async with SQLiteEventStore(path, readonly=True) as store:
        return await store.last_seq(THREAD)


def main() -> None:
    parser = common.argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--load", help="(internal) load the latest state of this file and exit")
    parser.add_argument("--no-snapshots", action="store_true", help="(internal) with --load")
    parser.add_argument("--at", help="(internal) time a first read of this file at --seq")
    parser.add_argument("--seq", type=int, help="(internal) with --at")
    parser.add_argument(
        "--first-read", action="store_true", help="only the first read of a new process"
    )
    args = common.checked(parser)
    if args.load:
        timings = asyncio.run(load_once(Path(args.load), not args.no_snapshots))
        print(json.dumps(timings))
        return
    if args.at:
        print(json.dumps(asyncio.run(read_once(Path(args.at), args.seq))))
        return
    steps = QUICK_STEPS if args.quick else STEPS
    points = random.Random(20260518).sample(range(1, steps + 1), POINTS)
    if args.first_read:
        with common.temp_dir() as directory:
            path = directory / "refs.sqlite"
            asyncio.run(build(path, steps, "refs"))
            seqs = asyncio.run(step_seqs(path))
            figures = first_reads(path, points, seqs)
        common.emit(
            {
                "benchmark": "snapshots_first_read",
                "steps": steps,
                "records": seqs[-1],
                "first_read": figures,
                "environment": common.environment(),
            }
        )
        return
    with common.temp_dir() as directory:
        paths = {name: directory / f"{name}.sqlite" for name in ("refs", "whole")}
        built = {}
        for name, path in paths.items():
            built[name] = round(asyncio.run(build(path, steps, name)), 2)
            common.log(f"built {name}: {steps} steps in {built[name]} s")
        seqs = asyncio.run(step_seqs(paths["refs"]))
        samples = asyncio.run(at_steps(paths["refs"], paths["whole"], points, seqs))
        first_read = first_reads(paths["refs"], points, seqs)
        medians = {name: common.ms(common.median(s)) for name, s in samples.items()}
        bytes_refs = sizes(paths["refs"], steps)
        bytes_whole = sizes(paths["whole"], steps)
        fresh_figures = fresh(directory, max(args.rounds, 5))
    common.emit(
        {
            "benchmark": "snapshots",
            "steps": steps,
            "records": len(seqs) and seqs[-1],
            "snapshot_every": {"refs": DEFAULT_SNAPSHOT_EVERY, "whole": TODAY_EVERY},
            "at_step_ms": {
                "median": medians,
                "p90": {
                    name: common.ms(sorted(s)[int(0.9 * (len(s) - 1))])
                    for name, s in samples.items()
                },
                "points": len(points),
                "target_ms": TARGET_AT_STEP_MS,
                "ratio_refs_over_whole": common.ratio(medians["refs"], medians["whole"]),
                "ratio_refs_over_from_start": common.ratio(medians["refs"], medians["from_start"]),
                "ratio_refs_cold_over_from_start": common.ratio(
                    medians["refs_cold"], medians["from_start"]
                ),
                "ratio_whole_over_from_start": common.ratio(
                    medians["whole"], medians["from_start"]
                ),
            },
            "first_read": first_read,
            "bytes": {
                "refs": bytes_refs,
                "whole": bytes_whole,
                "target_snapshot_bytes_per_step": TARGET_SNAPSHOT_BYTES_PER_STEP,
            },
            "build_s": built,
            "fresh_process": fresh_figures,
            "environment": common.environment(),
        }
    )


if __name__ == "__main__":
    main()
