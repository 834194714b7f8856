"""What the fan-out workload computes, in plain Python: every driver's graph builds it in
its own system's idiom and imports this (no system is imported here), so what each branch
returns, what the join reduces to and what a right run ends with are written once."""

from __future__ import annotations

import hashlib
import json
from typing import Any

BRANCHES = 8
RESULT_CHARS = 200
FILLER = (
    "The branch looks its item up, weighs what it found and writes a short finding down "
    "in a sentence long enough to look like real model output for the join to reduce. "
) * 2


def topic(run: int) -> str:
    """The input of run `run`: what its plan splits into items."""
    return f"run {run}"


def item(run_topic: str, i: int) -> str:
    """The plan's `i`-th item of a topic."""
    return f"{run_topic} / item {i}"


def result_text(planned: str) -> str:
    """What a branch returns for its item: exactly 200 characters."""
    return f"Result for {planned}: {FILLER}"[:RESULT_CHARS]


def summary_of(results: list[str]) -> str:
    """The join's reduction of the branches' results."""
    return f"{len(results)} results, {sum(len(r) for r in results)} characters"


def expected(run: int, branches: int = BRANCHES) -> dict[str, Any]:
    """The final `results` and `summary` of run `run`, in every system."""
    results = [result_text(item(topic(run), i)) for i in range(branches)]
    return {"results": results, "summary": summary_of(results)}


def digest(final: dict[str, Any]) -> dict[str, Any]:
    """A run's final `results` and `summary` in short: what `compare.py` checks agrees."""
    results = json.dumps(final.get("results"), separators=(",", ":")).encode()
    return {
        "results": len(final.get("results") or []),
        "results_sha256": hashlib.sha256(results).hexdigest()[:16],
        "summary": final.get("summary"),
    }


def right(finals: list[dict[str, Any]], branches: int) -> int:
    """How many runs (run k = finals[k]) ended with the expected `results` and `summary`."""
    return sum(
        {"results": f.get("results"), "summary": f.get("summary")} == expected(k, branches)
        for k, f in enumerate(finals)
    )
