"""What a runtime keeps in memory after its runs end: per finished run, after large inputs,
and after a restart over that history (tracemalloc, after a full collection).

One `def` node answers each run on a fresh thread of a SQLite file. Phases: `runs` small
runs (bytes kept per run, measured between two points past the cap so the figure is the
slope, not the fill-up); `large` runs whose input is 100 KB each (bytes kept after they all
ended); then a new runtime on the same store (its start time and the bytes it holds).
`keep_results` is the runtime's cap on finished runs kept for `wait`: 10,000 (1,000 with
`--quick`), and the slope is measured over twice (four times) that many runs past it.

Usage: .venv/bin/python bench/ledger_memory.py [--quick]
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import _common as common

from agentlog.actors import END, StateGraph
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message

KEEP_CONFIGURABLE = "keep_results" in RuntimeConfig.__dataclass_fields__
LARGE = 100_000
"""Bytes of each large input."""


def answer(state: AgentState) -> list[Message]:
    return [Message.text_message("ok", role="assistant")]


def runtime_on(store: SQLiteEventStore, keep: int) -> AgentRuntime:
    graph: StateGraph[AgentState] = StateGraph(name="short")
    graph.add_node("agent", answer)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    config = RuntimeConfig(**({"keep_results": keep} if KEEP_CONFIGURABLE else {}))
    runtime = AgentRuntime(store, config)
    runtime.add_graph("g", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    return runtime


async def run_many(runtime: AgentRuntime, count: int, text: str, batch: int = 250) -> None:
    """`count` runs, `batch` at a time, each waited for (as a caller of `wait` would)."""
    done = 0
    while done < count:
        size = min(batch, count - done)
        threads = await asyncio.gather(*(runtime.trigger("api", text) for _ in range(size)))
        await asyncio.gather(*(runtime.wait(t, timeout=600) for t in threads))
        done += size


def held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def main(quick: bool) -> dict[str, Any]:
    keep = 1_000 if quick else 10_000
    runs = 4 * keep if quick else 2 * keep
    large = 60 if quick else 230
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        tracemalloc.start()
        async with SQLiteEventStore(path) as store:
            runtime = runtime_on(store, keep)
            async with runtime:
                await run_many(runtime, keep + 500, "hello")  # past the cap: the slope next
                before = held()
                await run_many(runtime, runs, "hello")
                after = held()
                common.log(f"{runs} runs: {(after - before) / runs:.0f} B kept per run")
                await run_many(runtime, large, "x" * LARGE, batch=20)
                after_large = held()
                finished = len(runtime.ledger.triggers)
                kept_results = len(runtime.dispatcher.results)
            base = held()
        gc.collect()
        async with SQLiteEventStore(path) as store:
            base = held()
            again = runtime_on(store, keep)
            began = time.perf_counter()
            await again.start()
            restart_s = time.perf_counter() - began
            restart_bytes = held() - base
            history = await store.last_seq("__runtime__")
            snapshot_at = max(await store.snapshot_seqs("__runtime__"), default=0)
            await again.stop()
        tracemalloc.stop()
    total = keep + 500 + runs + large
    return {
        "bench": "ledger_memory",
        "quick": quick,
        "keep_results": keep,
        "runs": total,
        "bytes_kept_per_finished_run": round((after - before) / runs, 1),
        "large_inputs_bytes": large * LARGE,
        "bytes_kept_after_large_inputs": after_large - after,
        "ledger_triggers_kept": finished,
        "results_kept": kept_results,
        "restart_s": round(restart_s, 3),
        "restart_bytes_held": restart_bytes,
        "runtime_thread_records": history,
        "restart_folded_from_seq": snapshot_at + 1,
    }


if __name__ == "__main__":
    args = common.parse_args(__doc__ or "")
    print(json.dumps(asyncio.run(main(args.quick))), flush=True)
    sys.exit(0)
