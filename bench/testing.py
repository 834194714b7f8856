"""What the graph state machine costs: examples per second on the demo agent with the memory
store and with SQLite, and the share of the time spent in agentlog (the rules' and the
invariants' work on the log) versus hypothesis and the machine's own bookkeeping.

Rounds alternate the two stores; medians are reported with the SQLite/memory ratio.

Usage: .venv/bin/python bench/testing.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import _common as common
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from agentlog.actors.examples.support import support_graph
from agentlog.actors.testing import GraphMachine, graph_machine


class Meter:
    """Counts examples and the seconds spent inside agentlog, around `GraphMachine._run`."""

    def __init__(self) -> None:
        self.examples = 0
        self.inside = 0.0
        self._run = GraphMachine._run
        self._init = GraphMachine.__init__

    def __enter__(self) -> Meter:
        meter, run, init = self, self._run, self._init

        def timed(machine: GraphMachine, coro: Any, ids: Any) -> Any:
            start = time.perf_counter()
            try:
                return run(machine, coro, ids)
            finally:
                meter.inside += time.perf_counter() - start

        def counted(machine: GraphMachine) -> None:
            meter.examples += 1
            start = time.perf_counter()
            init(machine)
            meter.inside += time.perf_counter() - start

        GraphMachine._run = timed  # type: ignore[method-assign,assignment]
        GraphMachine.__init__ = counted  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        GraphMachine._run = self._run  # type: ignore[method-assign]
        GraphMachine.__init__ = self._init  # type: ignore[method-assign]


def one_round(store: str, examples: int, steps: int) -> dict[str, float]:
    machine = graph_machine(support_graph, name=f"Bench{store}", store=store)  # type: ignore[arg-type]
    chosen = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    with Meter() as meter:
        start = time.perf_counter()
        run_state_machine_as_test(machine, settings=chosen)
        seconds = time.perf_counter() - start
    return {"examples_per_s": meter.examples / seconds, "agentlog_share": meter.inside / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog="Prints one JSON line: examples_per_s and agentlog_share for each store.",
    )
    parser.add_argument("--quick", action="store_true", help="20 examples, 3 rounds")
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds of each store (default 5; 3 quick)"
    )
    args = parser.parse_args()
    examples = 20 if args.quick else 60
    rounds = args.rounds or (3 if args.quick else 5)
    steps = 10
    one_round("memory", 3, 3)  # untimed warm-up
    samples: dict[str, list[dict[str, float]]] = {"memory": [], "sqlite": []}
    """Keyed by store; reported as memory_store and sqlite_store."""
    for _ in range(rounds):
        for store in samples:
            samples[store].append(one_round(store, examples, steps))
    result: dict[str, dict[str, float]] = {}
    for store, rows in samples.items():
        result[f"{store}_store"] = {
            key: round(common.median([row[key] for row in rows]), 3) for key in rows[0]
        }
    common.emit(
        {
            "bench": "testing",
            "graph": "demo support agent",
            "examples": examples,
            "steps_per_example": steps,
            "rounds": rounds,
            **result,
            "sqlite_to_memory": round(
                result["sqlite_store"]["examples_per_s"] / result["memory_store"]["examples_per_s"],
                3,
            ),
            "note": "medians of alternating rounds; agentlog_share is the time inside the "
            "rules' and invariants' work on the log, the rest is hypothesis and the machine",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
