"""The fan-out workload for LangGraph (imported by langgraph_driver.py; no agentlog here).

The graph of fanout_spec.py (`build`) from LangGraph's own names: a ``TypedDict`` state
whose ``results`` has a reducer (``Annotated[list[str], operator.add]``), plain ``def``
nodes, a condition returning one ``Send`` per planned item. N runs, each ``graph.invoke``
on a fresh thread id, with no checkpointer or with ``SqliteSaver`` at
``durability="sync"|"async"``.
"""

from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fanout_spec import build, figures, final_of, thread_of, time_runs
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

API = SimpleNamespace(StateGraph=StateGraph, Send=Send, START=START, END=END)


def run_fanout(
    path: str, runs: int, branches: int, checkpointer: str, durability: str
) -> dict[str, Any]:
    """The timed runs and what they left; the same keys as agentlog's driver reports."""
    if checkpointer == "none":
        graph = build(API, branches).compile()
        seconds, per_run, finals = time_runs(graph.invoke, runs)
        out = figures(seconds, per_run, finals, branches, None, None)
        return {**out, "note": "no checkpointer: nothing is stored"}
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    graph = build(API, branches).compile(checkpointer=saver)
    seconds, per_run, finals = time_runs(partial(graph.invoke, durability=durability), runs)
    last = graph.get_state({"configurable": {"thread_id": thread_of(runs - 1)}})
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    size = sum(Path(path + s).stat().st_size for s in ("", "-wal") if Path(path + s).exists())
    return figures(seconds, per_run, finals, branches, final_of(last.values), size)
