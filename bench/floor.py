"""The floor of a durable step: what no engine change can remove, against LangGraph's step.

A durable step of the def-tool loop (bench/workload.py) runs one plain `def` node off the
event loop and commits its records before the next node may run, so it costs at least one
thread hop plus one durable append, in series. Measured here, in one process, alternating
round by round (A B C ... A B C ...), medians reported:

* hop_us: one thread hop as the engine makes it for a `def` node: `InFlight.run` (submit to
  the engine's own executor with the context copied, await the result on the loop) of a
  function that does nothing. hop_raw_us: `loop.run_in_executor` on the same executor.
* append_us: one durable append of one step's records (the very batches the engine commits
  in the def-tool loop, captured from an in-memory run) through `SQLiteEventStore.append`
  from the loop, as runs commit (no journal actor in between: the store group-commits).
  sqlite_raw_us: the same rows committed by stdlib sqlite3 on the calling thread (BEGIN
  IMMEDIATE, head SELECT, INSERTs, head row, COMMIT: bench/steps.py's baseline), no hop.
* engine_memory_async_us: a whole step of the loop on `MemoryEventStore` with the nodes made
  `async` (no hop, no disk): the engine's pure-Python bookkeeping plus the nodes' own work.
  engine_memory_def_us: the same with the plain `def` nodes (bookkeeping + hop).
* agentlog_us: the real thing, the def-tool loop durable on SQLite (`workload.run_loop`).
* langgraph_none_us: LangGraph with no checkpointer, the same loop, through its driver in
  its own venv (bench/peers/langgraph_driver.py), one process per round.

The floor is hop x nodes per step (1: the router runs on the loop) + append; the best
ratio against LangGraph a durable engine can reach on this machine is
langgraph_none_us / floor_us. floor_ideal_us puts a store that costs nothing beyond SQLite
in its place (two hops, the node's and the writer's, + sqlite_raw_us); with today's
bookkeeping (engine_memory_async_us) added, floor_with_bookkeeping_us is what the engine
reaches when nothing overlaps (the GIL serialises the Python of all three threads).

Usage: .venv/bin/python bench/floor.py [--rounds R] [--n N] [--ops K] [--no-peer]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common
import steps
import workload

from agentlog.actors.engine.offload import InFlight, executor
from agentlog.events import MemoryEventStore, SQLiteEventStore
from agentlog.events.kinds import Event
from agentlog.projections import AgentState, Message

ROOT = Path(__file__).resolve().parents[1]
LANGGRAPH_PYTHON = ROOT / ".bench-venvs" / "langgraph" / "bin" / "python"
LANGGRAPH_DRIVER = ROOT / "bench" / "peers" / "langgraph_driver.py"
NODES_PER_STEP = 1  # one node runs per step; its router runs inline on the loop
STEP_OVER_FLOOR_TARGET = 1.6  # a whole durable step at most 1.6 floors


def _nothing() -> None:
    return None


async def hop_inflight(ops: int) -> float:
    """Seconds per hop: `InFlight.run` of a no-op, awaited from the loop, one at a time."""
    in_flight = InFlight()
    await in_flight.run("floor", _nothing)  # the worker threads exist before timing
    start = time.perf_counter()
    for _ in range(ops):
        await in_flight.run("floor", _nothing)
    return (time.perf_counter() - start) / ops


async def hop_raw(ops: int) -> float:
    """Seconds per hop: `run_in_executor` of a no-op on the engine's executor."""
    loop, pool = asyncio.get_running_loop(), executor()
    await loop.run_in_executor(pool, _nothing)
    start = time.perf_counter()
    for _ in range(ops):
        await loop.run_in_executor(pool, _nothing)
    return (time.perf_counter() - start) / ops


class _Capture(MemoryEventStore):
    """A memory store that keeps every batch appended to it, with its actors."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[tuple[list[Event], Any]] = []

    async def append(self, thread_id: str, events: Any, **kwargs: Any) -> Any:
        self.batches.append((list(events), kwargs.get("actor")))
        return await super().append(thread_id, events, **kwargs)


async def step_batches(n: int) -> list[tuple[list[Event], Any]]:
    """The batches the engine commits in the def-tool loop of `n` steps (the run's opening
    and closing commits left out: only the steps')."""
    store = _Capture()
    compiled = workload.Loop("def-tool", n).graph().compile(store, recursion_limit=n + 10)
    await compiled.ainvoke(workload.first_input(), {"thread_id": "t"})
    return store.batches[1:-1]


async def append_each(path: Path, batches: list[tuple[list[Event], Any]]) -> float:
    """Seconds per append: each step batch appended in turn to a fresh SQLite store."""
    thread = steps.THREAD
    async with SQLiteEventStore(path) as store:
        claim = await store.claim(thread)
        append = store.append
        seq = 0
        start = time.perf_counter()
        for events, actor in batches:
            records = await append(thread, events, expected_seq=seq, actor=actor, claim=claim)
            seq = records[-1].seq
        seconds = time.perf_counter() - start
        await store.release(claim)
    return seconds / len(batches)


def sqlite_raw(written: Path, path: Path) -> float:
    """Seconds per commit: the rows of `written` (a store `append_each` filled), one
    transaction per step batch, by stdlib sqlite3 on this thread."""
    shape = steps.read_shape(written)
    return steps._raw(path, shape) / len(shape.steps)


class _AsyncLoop(workload.Loop):
    """The def-tool loop with its two nodes made `async` (same work, no thread hop)."""

    async def async_agent(self, state: AgentState) -> list[Message]:
        return self.agent(state)

    async def async_tools(self, state: AgentState) -> list[Message]:
        return self.tools(state)

    def graph(self) -> Any:
        graph = super().graph()
        graph.nodes["agent"] = self.async_agent
        graph.nodes["tools"] = self.async_tools
        return graph


async def engine_memory(n: int, *, sync_nodes: bool) -> float:
    """Seconds per step of the loop on a memory store, `def` nodes or `async` ones."""
    loop = workload.Loop("def-tool", n) if sync_nodes else _AsyncLoop("def-tool", n)
    compiled = loop.graph().compile(MemoryEventStore(), recursion_limit=n + 10)
    start = time.perf_counter()
    result = await compiled.ainvoke(workload.first_input(), {"thread_id": "t"}, include_state=True)
    seconds = time.perf_counter() - start
    steps = result["state"].execution_meta.step
    assert steps == n, f"the loop ran {steps} steps, not {n}"
    return seconds / steps


async def agentlog_sqlite(path: Path, n: int) -> float:
    """Seconds per step of the real def-tool loop, durable on SQLite."""
    result = await workload.run_loop(path, "def-tool", n, "t")
    return result.seconds / result.steps


def langgraph_none(path: Path, n: int) -> float | None:
    """Seconds per step of LangGraph without a checkpointer, via its driver (None: absent)."""
    if not LANGGRAPH_PYTHON.exists():
        return None
    args = ["--workload", "loop", "--n", str(n), "--db", str(path), "--variant", "def-tool"]
    out = subprocess.run(
        [str(LANGGRAPH_PYTHON), str(LANGGRAPH_DRIVER), *args, "--checkpointer", "none"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        common.log(f"langgraph driver failed: {out.stderr.strip()[-400:]}")
        return None
    return 1.0 / float(json.loads(out.stdout.strip().splitlines()[-1])["steps_per_s"])


def main() -> None:
    parser = common.argument_parser(__doc__ or "")
    parser.add_argument("--n", type=int, default=1000, help="steps per loop run (default 1000)")
    parser.add_argument("--ops", type=int, default=2000, help="hops / appends per sample")
    parser.add_argument("--no-peer", action="store_true", help="leave LangGraph out")
    args = common.checked(parser)
    n, ops = (200, 500) if args.quick else (args.n, args.ops)
    samples: dict[str, list[float]] = {}

    def add(name: str, seconds: float | None) -> None:
        if seconds is not None:
            samples.setdefault(name, []).append(seconds)

    with tempfile.TemporaryDirectory(prefix="agentlog-floor-") as name:
        tmp = Path(name)
        batches = asyncio.run(step_batches(max(n, ops // 2)))[:ops]
        common.log(f"{len(batches)} step batches captured, {n} steps per loop run")
        for r in range(args.rounds):
            add("hop", asyncio.run(hop_inflight(ops)))
            add("hop_raw", asyncio.run(hop_raw(ops)))
            add("append", asyncio.run(append_each(tmp / f"a{r}.db", batches)))
            add("sqlite_raw", sqlite_raw(tmp / f"a{r}.db", tmp / f"raw{r}.db"))
            add("engine_memory_async", asyncio.run(engine_memory(n, sync_nodes=False)))
            add("engine_memory_def", asyncio.run(engine_memory(n, sync_nodes=True)))
            add("agentlog", asyncio.run(agentlog_sqlite(tmp / f"s{r}.db", n)))
            if not args.no_peer:
                add("langgraph_none", langgraph_none(tmp / f"lg{r}.db", n))
            shown = ", ".join(f"{k}={v[-1] * 1e6:.1f}us" for k, v in samples.items())
            common.log(f"round {r + 1}/{args.rounds}: {shown}")

    us = {f"{k}_us": round(statistics.median(v) * 1e6, 1) for k, v in samples.items()}
    floor = us["hop_us"] * NODES_PER_STEP + us["append_us"]
    ideal = us["hop_us"] * (NODES_PER_STEP + 1) + us["sqlite_raw_us"]
    with_bookkeeping = floor + us["engine_memory_async_us"]
    per_round = zip(samples["agentlog"], samples["hop"], samples["append"], strict=True)
    over_floor = statistics.median(a / (h * NODES_PER_STEP + p) for a, h, p in per_round)
    result: dict[str, Any] = {
        "bench": "floor",
        "n": n,
        "ops": ops,
        "rounds": args.rounds,
        **us,
        "nodes_per_step": NODES_PER_STEP,
        "floor_us": round(floor, 1),
        "floor_ideal_us": round(ideal, 1),
        "floor_with_bookkeeping_us": round(with_bookkeeping, 1),
        "agentlog_steps_per_s": round(1e6 / us["agentlog_us"], 1),
        # the first target: a whole durable step costs at most this many floors
        # (the median of per-round ratios: round r's step over round r's floor)
        "step_over_floor": round(over_floor, 3),
        "step_over_floor_target": STEP_OVER_FLOOR_TARGET,
        "step_over_floor_met": over_floor <= STEP_OVER_FLOOR_TARGET,
    }
    lg = us.get("langgraph_none_us")
    if lg is not None:
        result |= {
            "langgraph_none_steps_per_s": round(1e6 / lg, 1),
            "ratio_now": round(lg / us["agentlog_us"], 3),
            "ratio_best_possible": round(lg / floor, 3),
            "ratio_best_ideal_store": round(lg / ideal, 3),
            "ratio_best_with_bookkeeping": round(lg / with_bookkeeping, 3),
        }
    result |= {"machine": common.machine(), "date": common.now()}
    common.emit(result)


if __name__ == "__main__":
    sys.exit(main())
