"""What callbacks cost: the agent loop of `workload.py` with no callbacks, with an empty
`Callbacks` object, and with one that overrides every hook (each doing nothing), in one run.

Rounds alternate the three on fresh SQLite files; medians of steps/s are reported with the
ratios to the run without callbacks (target: an empty object costs nothing measurable).

Usage: .venv/bin/python bench/callbacks.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common
from workload import Loop, first_input

from agentlog.actors import Callbacks, Invocation, Occurrence
from agentlog.events import SQLiteEventStore


class Busy(Callbacks):
    """Overrides every hook, doing nothing in each: the price of the calls themselves."""

    def before(self, invocation: Invocation) -> None:
        return None

    def after(self, invocation: Invocation, output: Any) -> None:
        return None

    def on_run_start(self, occurrence: Occurrence) -> None:
        return None

    def on_run_end(self, occurrence: Occurrence) -> None:
        return None


KINDS: dict[str, Callbacks | None] = {"none": None, "empty": Callbacks(), "every_hook": Busy()}


async def one_run(path: Path, steps: int, callbacks: Callbacks | None) -> float:
    """Steps per second of one `ainvoke` of the loop (the store opened beforehand)."""
    async with SQLiteEventStore(path) as store:
        graph = Loop("def-tool", steps).graph()
        app = graph.compile(store, recursion_limit=steps + 10, callbacks=callbacks)
        start = time.perf_counter()
        result = await app.ainvoke(first_input(), {"thread_id": "t"}, include_state=True)
        seconds = time.perf_counter() - start
    return float(result["state"].execution_meta.step) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 200, 3 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    steps = 200 if args.quick else 1000
    rounds = args.rounds or (3 if args.quick else 7)
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(one_run(Path(tmp) / "warm.db", 20, None))  # untimed warm-up
        for r in range(rounds):
            for kind, callbacks in KINDS.items():
                path = Path(tmp) / f"{kind}-{r}.db"
                samples[kind].append(asyncio.run(one_run(path, steps, callbacks)))
    medians = {kind: round(common.median(values), 1) for kind, values in samples.items()}
    ratios = {kind: round(medians[kind] / medians["none"], 3) for kind in KINDS if kind != "none"}
    common.emit(
        {
            "bench": "callbacks",
            "steps": steps,
            "rounds": rounds,
            "steps_per_s": medians,
            "ratio_to_none": ratios,
            "note": "ratios of medians in one run, rounds alternating none / empty / every_hook",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
