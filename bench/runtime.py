"""What the runtime costs: 1,000 concurrent short runs through `AgentRuntime` (trigger all,
wait for all) against the same runs as a bare `asyncio.gather` of `ainvoke`, in one run.

Each run is a plain `def` node answering the user on a fresh thread, on a fresh SQLite file
per round; rounds alternate. Reports completed runs per second (medians), the runtime's
overhead (1 - runtime / gather; target <= 10%), the runtime's commit latency p50/p99 and the
lag of a live subscriber (time from a record's commit to its delivery) p99.

Usage: .venv/bin/python bench/runtime.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

from actors import END, StateGraph
from actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig
from events import SQLiteEventStore
from projections import AgentState, Message


def answer(state: AgentState) -> list[Message]:
    """A user-style node: read the last message, answer it."""
    last = state.context[-1].text()
    return [Message.text_message(f"you said {last[:40]}", role="assistant")]


def app_on(store: SQLiteEventStore) -> Any:
    graph: StateGraph[AgentState] = StateGraph(name="short")
    graph.add_node("agent", answer)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    return graph.compile(store)


async def bare(path: Path, runs: int) -> dict[str, float]:
    async with SQLiteEventStore(path) as store:
        app = app_on(store)
        start = time.perf_counter()
        await asyncio.gather(*(app.ainvoke(f"hi {i}", {"thread_id": f"t{i}"}) for i in range(runs)))
        seconds = time.perf_counter() - start
    return {"runs_per_s": runs / seconds}


async def through_runtime(path: Path, runs: int) -> dict[str, float]:
    async with SQLiteEventStore(path) as store:
        runtime = AgentRuntime(store, RuntimeConfig(max_concurrent_runs=runs))
        runtime.add_graph("short", app_on(store))
        runtime.register_entry_point(EntryPoint(id="api", graph_id="short"))
        lags: list[float] = []
        async with runtime:

            async def watch() -> None:
                async for record in runtime.subscribe():
                    lags.append(time.time() - record.at)

            watcher = asyncio.ensure_future(watch())
            start = time.perf_counter()
            threads = [await runtime.trigger("api", f"hi {i}") for i in range(runs)]
            for thread in threads:
                await runtime.wait(thread)
            seconds = time.perf_counter() - start
            stats = runtime.stats()
            await asyncio.sleep(0.2)
            watcher.cancel()
        lags.sort()
    return {
        "runs_per_s": runs / seconds,
        "commit_p50_ms": stats["commit_latency_ms"]["p50"] or 0.0,
        "commit_p99_ms": stats["commit_latency_ms"]["p99"] or 0.0,
        "subscriber_lag_p99_ms": lags[int(0.99 * (len(lags) - 1))] * 1000 if lags else 0.0,
    }


def main() -> None:
    args = common.parse_args(__doc__.splitlines()[0])
    runs = 200 if args.quick else 1000
    samples: dict[str, list[dict[str, float]]] = {"gather": [], "runtime": []}
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bare(Path(tmp) / "warm.db", 20))
        for r in range(args.rounds):
            common.log(f"round {r + 1}/{args.rounds}")
            samples["gather"].append(asyncio.run(bare(Path(tmp) / f"g{r}.db", runs)))
            samples["runtime"].append(asyncio.run(through_runtime(Path(tmp) / f"r{r}.db", runs)))
    medians = {
        kind: {k: round(common.median([s[k] for s in rows]), 3) for k in rows[0]}
        for kind, rows in samples.items()
    }
    overhead = 1 - medians["runtime"]["runs_per_s"] / medians["gather"]["runs_per_s"]
    common.emit(
        {
            "bench": "runtime",
            "runs": runs,
            "rounds": args.rounds,
            **medians,
            "runtime_overhead": round(overhead, 3),
            "target_overhead": 0.10,
            "note": "medians of alternating rounds; each run a def node on a fresh thread",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
