"""What the runtime costs: 1,000 concurrent short runs through `AgentRuntime` (trigger all at
once, wait for all) against the same runs as a bare `asyncio.gather` of `ainvoke`, in one run.

Each run is a plain `def` node answering the user on a fresh thread, on a fresh SQLite file
per round; rounds alternate. Both sides start every run at once: the runtime's triggers are
gathered too (triggers awaited one after the other would time 1,000 trigger round trips, not
the runtime's overhead), and the bare runs' thread ids are as long as the runtime's (a thread
id is checked character by character on every store call). Reports completed runs per second
(medians), the runtime's overhead (1 - runtime / gather, the median of the per-round
ratios; target <= 10%) and the runtime's
commit latency p50/p99 (its own thread's appends), then the same runtime rounds with a live
subscriber reading every record: their rate and the subscription lag p99 (from a record's
`at`, stamped as its commit is built, to its delivery; every record counted, to the last).

Usage: .venv/bin/python bench/runtime.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

from agentlog.actors import END, StateGraph
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig
from agentlog.events import SQLiteEventStore
from agentlog.events.follow import last_position
from agentlog.projections import AgentState, Message

SETTLE_S = 60.0
"""The longest the subscriber may take to reach the last record before the round fails."""


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
        threads = [f"short-{i:032x}" for i in range(runs)]  # as long as the runtime's ids
        await asyncio.gather(*(app.ainvoke(f"hi {t}", {"thread_id": t}) for t in threads))
        seconds = time.perf_counter() - start
    return {"runs_per_s": runs / seconds}


async def through_runtime(path: Path, runs: int, subscribed: bool = False) -> dict[str, float]:
    """The same runs through a runtime; with `subscribed`, a live subscriber reads every
    record meanwhile and its lag is measured."""
    async with SQLiteEventStore(path) as store:
        runtime = AgentRuntime(store, RuntimeConfig(max_concurrent_runs=runs))
        runtime.add_graph("short", app_on(store))
        runtime.register_entry_point(EntryPoint(id="api", graph_id="short"))
        lags: list[float] = []
        seen = [0]
        async with runtime:

            async def watch() -> None:
                async for record in runtime.subscribe():
                    lags.append(time.time() - record.at)
                    seen[0] = record.position

            watcher = asyncio.ensure_future(watch()) if subscribed else None
            async with asyncio.timeout(SETTLE_S):
                while subscribed and not runtime.subscribers:
                    await asyncio.sleep(0.001)
            start = time.perf_counter()
            triggers = (runtime.trigger("api", f"hi {i}") for i in range(runs))
            threads = await asyncio.gather(*triggers)
            await asyncio.gather(*(runtime.wait(thread) for thread in threads))
            seconds = time.perf_counter() - start
            stats = runtime.stats()
            if watcher is not None:
                head = await last_position(store)
                async with asyncio.timeout(SETTLE_S):
                    while seen[0] < head:
                        await asyncio.sleep(0.005)
                watcher.cancel()
    result = {"runs_per_s": runs / seconds}
    if subscribed:
        lags.sort()
        result["subscriber_lag_p99_ms"] = lags[int(0.99 * (len(lags) - 1))] * 1000
        result["records_delivered"] = len(lags)
    else:
        result["commit_p50_ms"] = stats["commit_latency_ms"]["p50"] or 0.0
        result["commit_p99_ms"] = stats["commit_latency_ms"]["p99"] or 0.0
    return result


def main() -> None:
    args = common.parse_args(__doc__.split("\n\n")[0])  # the first paragraph, whole
    runs = 200 if args.quick else 1000
    samples: dict[str, list[dict[str, float]]] = {"gather": [], "runtime": [], "subscribed": []}
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bare(Path(tmp) / "warm.db", 20))
        asyncio.run(through_runtime(Path(tmp) / "warm-runtime.db", 20, subscribed=True))
        for r in range(args.rounds):
            common.log(f"round {r + 1}/{args.rounds}")
            for kind in samples:
                gc.collect()
                path = Path(tmp) / f"{kind}{r}.db"
                if kind == "gather":
                    sample = asyncio.run(bare(path, runs))
                else:
                    sample = asyncio.run(through_runtime(path, runs, kind == "subscribed"))
                samples[kind].append(sample)
    medians = {
        kind: {k: round(common.median([s[k] for s in rows]), 3) for k in rows[0]}
        for kind, rows in samples.items()
    }
    rates = {kind: [s["runs_per_s"] for s in rows] for kind, rows in samples.items()}
    gather = medians["gather"]["runs_per_s"]
    common.emit(
        {
            "bench": "runtime",
            "runs": runs,
            "rounds": args.rounds,
            "gather": medians["gather"],
            "runtime": medians["runtime"],
            "runtime_subscribed": medians["subscribed"],
            "runtime_overhead": round(
                1 - common.paired_ratio(rates["runtime"], rates["gather"]), 3
            ),
            "runtime_overhead_subscribed": round(
                1 - common.paired_ratio(rates["subscribed"], rates["gather"]), 3
            ),
            "runtime_overhead_of_medians": round(1 - medians["runtime"]["runs_per_s"] / gather, 3),
            "runtime_overhead_per_round": [
                round(1 - r / g, 3) for r, g in zip(rates["runtime"], rates["gather"], strict=True)
            ],
            "target_overhead": 0.10,
            "note": "medians of alternating rounds; overheads: median of per-round ratios "
            "(round i against round i); each run a def node on a fresh thread; "
            "triggers gathered, as the baseline's runs are; commit latency: the runtime "
            "thread's appends; lag: record at -> delivery, every record",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
