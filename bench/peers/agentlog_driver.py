"""The agentlog driver of the side-by-side benchmark (see README.md in this folder).

Run with agentlog's own venv:

    .venv/bin/python bench/peers/agentlog_driver.py --workload loop --n 200 --db /tmp/a.sqlite

Prints one JSON line on stdout (crash-run first prints "ready"); progress goes to stderr.
The graph is bench/workload.py's loop (`--variant def-tool`, the default, or `toolnode`;
`async-scripted` is the earlier loop): plain `def` nodes, a 200-character assistant message,
two in three with one tool call, the router reading `state.context[-1].tools_calls`.

`--measure commits` and `--measure profile` make the loop workload an untimed run that
reports, besides the usual keys, the SQLite commits per step (`_common.CommitCounter`: a
trace callback counting every COMMIT and every write outside a transaction on the store's
connections, with the store's `append` calls as a cross-check) or the top entries of a
cProfile of the run (`_common.ThreadProfiler`: every thread, merged). Each process does one
of them, so neither distorts the other or the timed runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import sqlite3
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _common as common  # noqa: E402
import fanout  # noqa: E402
import workload  # noqa: E402
from workload import Loop, first_input  # noqa: E402

from agentlog.actors import END, StateGraph  # noqa: E402
from agentlog.events import SQLiteEventStore  # noqa: E402
from agentlog.projections import AgentState, Message  # noqa: E402

SYSTEM = "agentlog"
THREAD = "bench"


def log(message: str) -> None:
    print(f"[agentlog] {message}", file=sys.stderr, flush=True)


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, separators=(",", ":")), flush=True)


def version() -> str:
    try:
        return metadata.version("agentlog")
    except metadata.PackageNotFoundError:
        return "source"


def db_size(path: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(
        Path(f"{path}{s}").stat().st_size for s in ("", "-wal") if Path(f"{path}{s}").exists()
    )


def base(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "system": SYSTEM,
        "version": version(),
        "python": platform.python_version(),
        "workload": args.workload,
        "variant": args.variant,
        "n": args.n,
        "durability": "sync",  # every step commits before the next; there is no async mode
    }


# ---- workloads ------------------------------------------------------------------------------


def w_loop(args: argparse.Namespace) -> dict[str, Any]:
    """The N-step loop; `--measure` makes it an untimed run counting commits or profiling."""
    if args.measure == "profile":
        with common.ThreadProfiler() as profiler:
            result = asyncio.run(workload.run_loop(args.db, args.variant, args.n, args.thread_id))
        extra: dict[str, Any] = {"profile": profiler.report(10)}
    elif args.measure == "commits":
        with common.CommitCounter() as counter:
            result = asyncio.run(
                workload.run_loop(
                    args.db, args.variant, args.n, args.thread_id, commits=lambda: counter.commits
                )
            )
        extra = {
            "commits": result.commits,
            "commits_per_step": round((result.commits or 0) / result.steps, 3),
            "append_calls_per_step": round((result.append_calls or 0) / result.steps, 3),
            "commits_counted_by": "SQLite trace callback on the store's connections: every "
            "COMMIT, and every write outside a transaction, during the ainvoke",
        }
    else:
        result = asyncio.run(workload.run_loop(args.db, args.variant, args.n, args.thread_id))
        extra = {}
    per = result.per_step
    tenth = max(1, len(per) // 10)
    first, last = statistics.median(per[:tenth]), statistics.median(per[-tenth:])
    size = db_size(args.db)
    return {
        **base(args),
        "measure": args.measure,
        "steps": result.steps,
        "messages": result.messages,
        "tool_results": result.tool_results,
        "seconds": round(result.seconds, 4),
        "steps_per_s": round(result.steps / result.seconds, 1),
        "first10_ms": round(first * 1000, 4),
        "last10_ms": round(last * 1000, 4),
        "ratio_last_first": round(last / first, 3) if first else None,
        "db_bytes": size,
        "bytes_per_step": round(size / result.steps, 1),
        **extra,
    }


def w_fanout(args: argparse.Namespace) -> dict[str, Any]:
    """N runs of the fan-out graph (bench/fanout.py), each on a fresh thread; `--measure
    commits` makes it an untimed run counting the appends and commits of each run and of
    each fan-out step. `--front langgraph`: the LangGraph columns' own graph, ported to
    `agentlog.langgraph` (fanout_spec.build), run with sync `invoke` as theirs is."""
    extra: dict[str, Any] = {}
    if args.measure == "commits":
        with common.CommitCounter() as counter:
            result = asyncio.run(
                fanout.run_fanout(
                    args.db, args.n, branches=args.branches, commits=lambda: counter.commits
                )
            )
        assert result.appends is not None
        batches = result.appends.batches
        steps = result.appends.fanout_steps()
        extra = {
            "appends_per_run": round(len(batches) / args.n, 3),
            "commits_per_run": round((batches[-1][2] - batches[0][1]) / args.n, 3),
            "commits_in_appends_per_run": round(sum(b - a for _, a, b in batches) / args.n, 3),
            "appends_per_fanout_step": statistics.median(a for a, _ in steps),
            "commits_per_fanout_step": statistics.median(c for _, c in steps),
            "fanout_steps_seen": len(steps),
            "commits_counted_by": "SQLite trace callback on the store's connections; a fan-out "
            "step spans the append entering its branches to the one with its step_advanced",
        }
    elif args.front == "langgraph":
        result = fanout.run_ported(args.db, args.n, branches=args.branches)
    else:
        result = asyncio.run(fanout.run_fanout(args.db, args.n, branches=args.branches))
    shown = fanout_figures(args, result)
    return {
        **base(args),
        "variant": "send",
        "front": args.front,
        "measure": args.measure,
        **shown,
        **extra,
    }


def fanout_figures(args: argparse.Namespace, result: fanout.FanoutResult) -> dict[str, Any]:
    """The keys every driver reports for `fanout`, and whether every run reduced right."""
    out = fanout.figures(
        result.seconds,
        result.per_run,
        result.finals,
        args.branches,
        result.stored_last,
        db_size(args.db),
    )
    return {**out, "steps_per_run": result.steps_per_run}


async def w_load(args: argparse.Namespace) -> dict[str, Any]:
    """The span LangGraph's driver times as `load_ms` (its `get_state`, after the saver is
    open and the graph compiled), the opening apart as `open_ms`, as there."""
    start = time.perf_counter()
    async with SQLiteEventStore(args.db) as store:  # opened here
        compiled = Loop(args.variant, args.n).graph().compile(store)
        opened = time.perf_counter()
        state = await compiled.aget_state({"thread_id": args.thread_id})
        loaded = time.perf_counter()
    return {
        **base(args),
        "load_ms": round((loaded - opened) * 1000, 3),
        "open_ms": round((opened - start) * 1000, 3),
        "messages": len(state.context),
    }


async def w_history(args: argparse.Namespace) -> dict[str, Any]:
    async with SQLiteEventStore(args.db) as store:
        compiled = Loop(args.variant, args.n).graph().compile(store)
        config = {"thread_id": args.thread_id}
        start = time.perf_counter()
        entries = await compiled.aget_state_history(config)
        history = time.perf_counter() - start
        half = max(1, len(entries) // 2)
        start = time.perf_counter()
        state = await compiled.aget_state(config, at_step=half)
        at_half = time.perf_counter() - start
    return {
        **base(args),
        "history_ms": round(history * 1000, 3),
        "states": len(entries),
        "states_note": "StepEntry per step; each entry's state() loads on demand",
        "state_at_half_ms": round(at_half * 1000, 3),
        "state_at_half_step": state.execution_meta.step,
    }


async def w_concurrency(args: argparse.Namespace) -> dict[str, Any]:
    threads = args.threads
    async with SQLiteEventStore(args.db) as store:
        compiled = Loop(args.variant, args.n).graph().compile(store, recursion_limit=args.n + 10)
        start = time.perf_counter()
        results = await asyncio.gather(
            *(
                compiled.ainvoke(first_input(), {"thread_id": f"t{i}"}, include_state=True)
                for i in range(threads)
            ),
            return_exceptions=True,
        )
        seconds = time.perf_counter() - start
    errors = [r for r in results if isinstance(r, BaseException)]
    steps = sum(r["state"].execution_meta.step for r in results if isinstance(r, dict))
    out = {
        **base(args),
        "threads": threads,
        "completed_steps": steps,
        "failed_threads": len(errors),
        "seconds": round(seconds, 4),
        "steps_per_s": round(steps / seconds, 1),
    }
    if errors:
        out["error"] = f"{type(errors[0]).__name__}: {errors[0]}"
    return out


async def w_crash_run(args: argparse.Namespace) -> dict[str, Any]:
    loop = Loop(args.variant, args.n, side_effects=args.side_effects, ready=True)
    async with SQLiteEventStore(args.db) as store:
        compiled = loop.graph().compile(store, recursion_limit=args.n + 10)
        result = await compiled.ainvoke(
            first_input(), {"thread_id": args.thread_id}, include_state=True
        )
    state: AgentState = result["state"]
    return {
        **base(args),
        "final_step": state.execution_meta.step,
        "messages": len(state.context),
        "completed": state.execution_meta.status.value == "completed",
    }


async def w_resume(args: argparse.Namespace) -> dict[str, Any]:
    loop = Loop(args.variant, args.n, side_effects=args.side_effects)
    async with SQLiteEventStore(args.db) as store:
        compiled = loop.graph().compile(store, recursion_limit=args.n + 10)
        before = await compiled.aget_state({"thread_id": args.thread_id})
        result = await compiled.ainvoke(None, {"thread_id": args.thread_id}, include_state=True)
    state: AgentState = result["state"]
    return {
        **base(args),
        "resumed_from_step": before.execution_meta.step,
        "final_step": state.execution_meta.step,
        "messages": len(state.context),
        "completed": state.execution_meta.status.value == "completed",
    }


def slow_graph() -> StateGraph[AgentState]:
    async def slow(state: AgentState) -> list[Message]:
        await asyncio.sleep(0.3)
        return [Message.text_message(f"reply to {len(state.context)} messages", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("slow", slow)
    graph.set_entry_point("slow")
    graph.add_edge("slow", END)
    return graph


async def _two_runs(path: str, thread: str, separate: bool) -> dict[str, Any]:
    """Two ainvokes on one thread at once: one store (one process) or two (two processes)."""
    stores = [SQLiteEventStore(path) for _ in range(2 if separate else 1)]
    for store in stores:
        await store.open()
    try:
        graphs = [slow_graph().compile(s) for s in stores]
        runs = [graphs[i % len(graphs)] for i in range(2)]
        results = await asyncio.gather(
            *(
                g.ainvoke({"messages": [Message.text_message(f"user {i}")]}, {"thread_id": thread})
                for i, g in enumerate(runs)
            ),
            return_exceptions=True,
        )
        final = await graphs[0].aget_state({"thread_id": thread})
    finally:
        for store in stores:
            await store.close()
    errors = [r for r in results if isinstance(r, BaseException)]
    texts = [m.text() for m in final.context]
    users = sum(t.startswith("user ") for t in texts)
    if len(errors) == 2:
        outcome = "both_failed"
    elif errors:
        outcome = "one_failed_loudly"
    elif users == 2 and len(texts) == 4:
        outcome = "both_succeeded_merged"
    else:
        outcome = "both_succeeded_lost_update"
    out: dict[str, Any] = {"outcome": outcome, "final_messages": len(texts)}
    if errors:
        out["error"] = f"{type(errors[0]).__name__}: {errors[0]}"
    return out


async def w_concurrent(args: argparse.Namespace) -> dict[str, Any]:
    # Two stores on one file stand for two processes; one store is two tasks of one process.
    two = await _two_runs(args.db, "concurrent-a", separate=True)
    one = await _two_runs(args.db, "concurrent-b", separate=False)
    return {
        **base(args),
        **two,
        "mode": "two stores on one file (as two processes), a slow node (0.3 s)",
        "same_process": one,
    }


WORKLOADS = {
    "load": w_load,
    "history": w_history,
    "concurrency": w_concurrency,
    "crash-run": w_crash_run,
    "resume": w_resume,
    "concurrent": w_concurrent,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", required=True, choices=sorted([*WORKLOADS, "loop", "fanout"]))
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--db", required=True)
    parser.add_argument("--durability", choices=("sync", "async"), default="sync")
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--side-effects", default=None)
    parser.add_argument("--thread-id", default=THREAD)
    parser.add_argument("--variant", choices=workload.VARIANTS, default="def-tool")
    parser.add_argument("--measure", choices=("time", "commits", "profile"), default="time")
    parser.add_argument("--branches", type=int, default=fanout.BRANCHES, help="fanout: Sends")
    parser.add_argument(
        "--front",
        choices=("agentlog", "langgraph"),
        default="agentlog",
        help="fanout: agentlog's StateGraph (AgentState), or the LangGraph-shaped front",
    )
    args = parser.parse_args()
    if args.workload == "concurrency" and args.n == 200 and "--n" not in sys.argv:
        args.n = 10
    log(f"{args.workload} {args.variant} n={args.n} db={args.db} measure={args.measure}")
    if args.workload == "loop":
        emit(w_loop(args))
    elif args.workload == "fanout":
        emit(w_fanout(args))
    else:
        emit(asyncio.run(WORKLOADS[args.workload](args)))


if __name__ == "__main__":
    main()
