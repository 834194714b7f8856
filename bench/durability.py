"""What each durability mode saves on steps/s: one run of N plain steps on SQLite per mode,
the modes alternating round by round, ratios against `sync` from the same rounds.

The graph is the one the modes differ on: a node that returns a small state update and
routes back to itself N times (no tool call, whose records land at once in every mode), in
two workloads: "cpu", a plain `def` node (the step is all the engine's own work), and
"io", an async node awaiting 1 ms first (a remote call's wait, which `async` overlaps with
the previous step's append), both on the store's default `synchronous=NORMAL` (a commit
waits for no disk flush), and "io_fsync", the "io" node on `synchronous="FULL"` (every
commit waits for its flush to disk, as a commit that must survive a power loss does: the
wait `async` overlaps). `sync` appends each step before the next starts; `async` appends it
while the next step runs; `exit` appends the whole run once it completes.

Usage: .venv/bin/python bench/durability.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import _common as common

from agentlog.actors import END, StateGraph
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState

MODES = ("sync", "async", "exit")


class Counter(AgentState):
    n: int = 0
    note: str = ""


IO_WAIT_S = 0.001
"""The "io" workload's wait in each step: a remote call's, which no CPU spends."""


def graph(steps: int, workload: str) -> StateGraph[Counter]:
    def cpu(state: Counter) -> dict[str, Any]:
        return {"n": state.n + 1, "note": f"step {state.n + 1}"}

    async def io(state: Counter) -> dict[str, Any]:
        await asyncio.sleep(IO_WAIT_S)
        return {"n": state.n + 1, "note": f"step {state.n + 1}"}

    count = cpu if workload == "cpu" else io

    def again(state: Counter) -> str:
        return "count" if state.n < steps else END

    built = StateGraph(Counter)
    built.add_node("count", count)
    built.set_entry_point("count")
    built.add_conditional_edges("count", again, {"count": "count", END: END})
    return built


def run_once(directory: Path, steps: int, workload: str, mode: str) -> float:
    async def go() -> float:
        with common.scratch_db(directory) as path:
            flush = "FULL" if workload == "io_fsync" else "NORMAL"
            async with SQLiteEventStore(path, synchronous=flush) as store:
                app = graph(steps, workload).compile(checkpointer=store, recursion_limit=steps + 10)
                start = time.perf_counter()
                await app.ainvoke({"n": 0}, {"thread_id": "bench"}, durability=mode)  # type: ignore[arg-type]
                seconds = time.perf_counter() - start
                assert (await app.aget_state({"thread_id": "bench"})).n == steps
                return seconds

    return asyncio.run(go())


def main() -> None:
    args = common.parse_args(__doc__ or "")
    steps = 200 if args.quick else 1000
    result: dict[str, Any] = {"bench": "durability", "steps": steps, "rounds": args.rounds}
    with common.temp_dir() as directory:
        for workload in ("cpu", "io", "io_fsync"):
            common.log(f"{workload}: {steps} steps per run")
            contenders = {
                mode: (lambda m=mode, w=workload: run_once(directory, steps, w, m))
                for mode in MODES
            }
            samples = common.alternate(args.rounds, contenders, warmup=1)
            result[workload] = {
                "steps_per_s": {
                    m: common.per_second(steps, common.median(samples[m])) for m in MODES
                },
                "ratio_to_sync": {
                    m: round(common.paired_ratio(samples["sync"], samples[m]), 3) for m in MODES
                },
            }
    common.emit({**result, **common.environment()})


if __name__ == "__main__":
    main()
