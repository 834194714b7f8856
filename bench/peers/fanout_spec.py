"""The fan-out workload in plain Python, for every driver (no system is imported here).

What each branch returns, what the join reduces to, what a right run ends with, and the
figures every driver reports are written once. The LangGraph-shaped graph is written once
too, `build(api, branches)`, over the names a LangGraph program imports (`StateGraph`,
`Send`, `START`, `END`): LangGraph's driver builds it from `langgraph`, agentlog's from
`agentlog.langgraph`, so the `agentlog-langgraph` column runs the very code the LangGraph
columns run, ported as a LangGraph user ports it. agentlog's own idiom (an `AgentState`
subclass) is in bench/fanout.py.
"""

from __future__ import annotations

import hashlib
import json
import operator
import statistics
import time
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

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


def final_of(values: dict[str, Any]) -> dict[str, Any]:
    """The part of a run's final state that `expected` describes."""
    return {"results": values.get("results"), "summary": values.get("summary")}


def digest(final: dict[str, Any]) -> dict[str, Any]:
    """A run's final `results` and `summary` in short: what `compare.py` checks agrees."""
    results = json.dumps(final.get("results"), separators=(",", ":")).encode()
    return {
        "results": len(final.get("results") or []),
        "results_sha256": hashlib.sha256(results).hexdigest()[:16],
        "summary": final.get("summary"),
    }


# ---- the graph, as a LangGraph program writes it ----------------------------------------


class FanState(TypedDict, total=False):
    topic: str
    items: list[str]
    results: Annotated[list[str], operator.add]
    summary: str


def build(api: Any, branches: int = BRANCHES) -> Any:
    """plan -> one `Send` per item to `work` -> join -> END, with `api`'s names."""

    def plan(state: FanState) -> dict[str, Any]:
        return {"items": [item(state["topic"], i) for i in range(branches)]}

    def route(state: FanState) -> list[Any]:
        return [api.Send("work", {"item": planned}) for planned in state["items"]]

    def work(state: dict[str, Any]) -> dict[str, Any]:  # a Send's branch gets its input
        return {"results": [result_text(state["item"])]}

    def join(state: FanState) -> dict[str, Any]:
        return {"summary": summary_of(state["results"])}

    graph = api.StateGraph(FanState)
    graph.add_node("plan", plan)
    graph.add_node("work", work)
    graph.add_node("join", join)
    graph.add_edge(api.START, "plan")
    graph.add_conditional_edges("plan", route, ["work"])
    graph.add_edge("work", "join")
    graph.add_edge("join", api.END)
    return graph


# ---- timing and figures -------------------------------------------------------------------


def thread_of(run: int) -> str:
    """Each run's own, fresh thread."""
    return f"fan-{run}"


def time_runs(
    invoke: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]], runs: int
) -> tuple[float, list[float], list[dict[str, Any]]]:
    """`runs` sync invocations, LangGraph's way (`invoke(input, config)`): the total
    seconds, each run's, and each run's final values."""
    per_run: list[float] = []
    finals: list[dict[str, Any]] = []
    start = time.perf_counter()
    for k in range(runs):
        began = time.perf_counter()
        out = invoke({"topic": topic(k)}, {"configurable": {"thread_id": thread_of(k)}})
        per_run.append(time.perf_counter() - began)
        finals.append(final_of(out))
    return time.perf_counter() - start, per_run, finals


def figures(
    seconds: float,
    per_run: list[float],
    finals: list[dict[str, Any]],
    branches: int,
    stored_last: dict[str, Any] | None,
    size: int | None,
) -> dict[str, Any]:
    """The keys every driver reports for `fanout`; `stored_last` is the last run's state
    loaded back from its store (None: nothing is stored), `size` the store's bytes."""
    runs = len(per_run)
    tenth = max(1, runs // 10)
    first, last = statistics.median(per_run[:tenth]), statistics.median(per_run[-tenth:])
    p90 = statistics.quantiles(per_run, n=10)[-1] if runs > 1 else per_run[0]
    return {
        "runs": runs,
        "branches": branches,
        "seconds": round(seconds, 4),
        "runs_per_s": round(runs / seconds, 1),
        "run_ms": round(statistics.median(per_run) * 1000, 4),
        "p90_ms": round(p90 * 1000, 4),
        "first10_ms": round(first * 1000, 4),
        "last10_ms": round(last * 1000, 4),
        "ratio_last_first": round(last / first, 3) if first else None,
        "db_bytes": size,
        "bytes_per_run": round(size / runs, 1) if size is not None else None,
        "runs_right": sum(f == expected(k, branches) for k, f in enumerate(finals)),
        "stored_right": None
        if stored_last is None
        else stored_last == expected(runs - 1, branches),
        "last_final": digest(finals[-1]),
    }
