"""The fan-out workload for LangGraph (imported by langgraph_driver.py; no agentlog here).

The graph of bench/fanout.py in plain LangGraph: a ``TypedDict`` state whose ``results``
has a reducer (``Annotated[list[str], operator.add]``); ``plan`` (a plain ``def``) plans 8
items from the input's ``topic``; a condition returns one ``Send("work", {"item": i})`` per
item; ``work`` (a plain ``def``) returns a 200-character result; ``join`` (a plain ``def``)
reduces them to ``summary``; END. N runs, each ``graph.invoke`` on a fresh thread id, with
no checkpointer or with ``SqliteSaver`` at ``durability="sync"|"async"``.
"""

from __future__ import annotations

import operator
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from fanout_spec import digest, expected, item, result_text, right, summary_of, topic
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send


class FanState(TypedDict, total=False):
    topic: str
    items: list[str]
    results: Annotated[list[str], operator.add]
    summary: str


def builder(branches: int) -> StateGraph:
    def plan(state: FanState) -> dict[str, Any]:
        return {"items": [item(state["topic"], i) for i in range(branches)]}

    def route(state: FanState) -> list[Send]:
        return [Send("work", {"item": planned}) for planned in state["items"]]

    def work(state: dict[str, Any]) -> dict[str, Any]:
        return {"results": [result_text(state["item"])]}

    def join(state: FanState) -> dict[str, Any]:
        return {"summary": summary_of(state["results"])}

    graph = StateGraph(FanState)
    graph.add_node("plan", plan)
    graph.add_node("work", work)
    graph.add_node("join", join)
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", route, ["work"])
    graph.add_edge("work", "join")
    graph.add_edge("join", END)
    return graph


def run_fanout(path: str, runs: int, branches: int, checkpointer: str, durability: str) -> dict:
    """The timed runs and what they left; the same keys as agentlog's driver reports."""
    conn = None
    if checkpointer == "sqlite":
        conn = sqlite3.connect(path, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        graph = builder(branches).compile(checkpointer=saver)
        options: dict[str, Any] = {"durability": durability}
    else:
        graph = builder(branches).compile()
        options = {}
    per_run: list[float] = []
    finals: list[dict[str, Any]] = []
    start = time.perf_counter()
    for k in range(runs):
        began = time.perf_counter()
        config = {"configurable": {"thread_id": f"fan-{k}"}}
        out = graph.invoke({"topic": topic(k)}, config, **options)
        per_run.append(time.perf_counter() - began)
        finals.append(out)
    seconds = time.perf_counter() - start
    stored: dict[str, Any] | None = None
    size: int | None = None
    if conn is not None:
        last = graph.get_state({"configurable": {"thread_id": f"fan-{runs - 1}"}})
        stored = {"results": last.values.get("results"), "summary": last.values.get("summary")}
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        size = sum(Path(path + s).stat().st_size for s in ("", "-wal") if Path(path + s).exists())
    tenth = max(1, len(per_run) // 10)
    first, last10 = statistics.median(per_run[:tenth]), statistics.median(per_run[-tenth:])
    return {
        "runs": runs,
        "branches": branches,
        "steps_per_run": 3,  # plan, the branches, join: LangGraph's supersteps
        "seconds": round(seconds, 4),
        "runs_per_s": round(runs / seconds, 1),
        "run_ms": round(statistics.median(per_run) * 1000, 4),
        "p90_ms": round(statistics.quantiles(per_run, n=10)[-1] * 1000, 4)
        if len(per_run) > 1
        else None,
        "first10_ms": round(first * 1000, 4),
        "last10_ms": round(last10 * 1000, 4),
        "ratio_last_first": round(last10 / first, 3) if first else None,
        "db_bytes": size,
        "bytes_per_run": round(size / runs, 1) if size is not None else None,
        "runs_right": right(finals, branches),
        "stored_right": None if stored is None else stored == expected(runs - 1, branches),
        "last_final": digest(finals[-1]),
        **({} if conn is not None else {"note": "no checkpointer: nothing is stored"}),
    }
