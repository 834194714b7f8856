"""compare.py's fan-out workload: a `Send` map-reduce to 8 branches, N runs on fresh threads.

Each driver's `--workload fanout --n N` runs the graph of bench/fanout.py (plan, 8 `Send`
branches writing a reducer field, a join, END) N times, one thread each, and reports
`runs_per_s`, the median run (`run_ms`), the first and last 10% of runs, bytes per run,
and whether every run reduced to the expected state (`runs_right`, `stored_right` for the
last run loaded back from its store). The columns: agentlog (its own idiom), the LangGraph
columns' very program ported to `agentlog.langgraph` (`agentlog-langgraph`), and LangGraph
with no checkpointer, `SqliteSaver` sync and async. Runs alternate between the columns as
the loop's do, and the ratios agentlog / peer (and port / LangGraph column) are per round.
agentlog then runs once more, untimed, counting the appends and SQLite commits a run and a
fan-out step cost.

Agentflow is left out: 10xscale-agentflow 0.10.1 routes every step to one next node
(`get_next_node` returns one name) and has no `Send` nor parallel branches of a graph.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

FANOUT_RUNS, QUICK_FANOUT_RUNS = (500,), (100,)
FANOUT_KEYS = [
    "runs_per_s",
    "run_ms",
    "p90_ms",
    "first10_ms",
    "last10_ms",
    "ratio_last_first",
    "bytes_per_run",
    "runs_right",
]
SAME_RESULT = ("runs", "branches", "last_final")
COMMIT_FIGURES = (
    "appends_per_run",
    "commits_per_run",
    "commits_in_appends_per_run",
    "appends_per_fanout_step",
    "commits_per_fanout_step",
)
COMMIT_KEYS = (*COMMIT_FIGURES, "commits_counted_by")
PORTED = "agentlog-langgraph"  # the LangGraph columns' graph, ported to agentlog.langgraph
NO_SEND = {
    "agentflow": "no equivalent: Agentflow 0.10.1 routes each step to one node; "
    "it has no Send nor parallel branches",
}


@dataclass
class Harness:
    """compare.py's own plumbing, handed in (this module does not import compare.py)."""

    run: Callable[..., tuple[dict[str, Any] | None, str | None]]
    alternate: Callable[..., tuple[dict[str, list[dict[str, Any]]], dict[str, list[str]]]]
    summarize: Callable[..., dict[str, Any]]
    fresh_db: Callable[[Path, Any, str], Path]
    log: Callable[[str], None]


def same_result(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Whether every system's last run reduced to the same state, and all runs right."""
    seen = {
        label: {k: runs[-1].get(k) for k in SAME_RESULT} for label, runs in samples.items() if runs
    }
    distinct = {json.dumps(v, sort_keys=True) for v in seen.values()}
    all_right = all(
        r.get("runs_right") == r.get("runs") and r.get("stored_right") is not False
        for runs in samples.values()
        for r in runs
    )
    return {"ok": len(distinct) <= 1 and all_right, "all_runs_right": all_right, "by_system": seen}


def _fan_db(h: Harness, tmp: Path, n: int, c: Any, r: int) -> Path:
    return h.fresh_db(tmp, c, f"fan{n}")


def columns(cs: list[Any]) -> list[Any]:
    """compare.py's columns, with agentlog's second one after agentlog's: the LangGraph
    program ported (`--front langgraph`: the same source as the LangGraph columns run,
    from `agentlog.langgraph`, driven by sync `invoke`)."""
    out: list[Any] = []
    for c in cs:
        out.append(c)
        if c.label == "agentlog":
            out.append(
                dataclasses.replace(c, label=PORTED, extra=[*c.extra, "--front", "langgraph"])
            )
    return out


def ported_over_peers(
    h: Harness, samples: dict[str, list[dict[str, Any]]], errors: dict[str, list[str]]
) -> dict[str, Any]:
    """The ported program's per-round ratios over each LangGraph column (the same pairing
    as agentlog's: compare.py's summarize, with the ported column in agentlog's place)."""
    peers = {k: v for k, v in samples.items() if k.startswith("langgraph")}
    table = h.summarize({"agentlog": samples.get(PORTED, []), **peers}, FANOUT_KEYS, errors)
    return {k: (table.get(k) or {}).get("agentlog_over_this") for k in peers}


def bench_fanout(
    h: Harness, cs: list[Any], sizes: tuple[int, ...], rounds: int, tmp: Path
) -> dict[str, Any]:
    """Per N: the alternating rounds, then agentlog's commits (untimed, own process)."""
    runnable = [c for c in columns(cs) if c.label not in NO_SEND]
    out: dict[str, Any] = {}
    for n in sizes:
        h.log(f"fanout: {n} runs of Send to 8 branches, {rounds} rounds")
        samples, errors = h.alternate(
            runnable,
            rounds,
            "fanout",
            partial(_fan_db, h, tmp, n),
            600,
            "--n",
            str(n),
        )
        table = h.summarize(samples, FANOUT_KEYS, errors)
        table["same_result"] = same_result(samples)
        if PORTED in table:
            table[PORTED]["over_langgraph"] = ported_over_peers(h, samples, errors)
        for label, why in NO_SEND.items():
            table[label] = {"runs": 0, "errors": [], "excluded": why}
        ours = next((c for c in runnable if c.label == "agentlog"), None)
        if ours is not None and not ours.problem:
            h.log(f"fanout: {n} runs, agentlog appends and commits (untimed)")
            db = h.fresh_db(tmp, ours, f"fancommits{n}")
            result, error = h.run(ours, "fanout", db, 600, "--n", str(n), "--measure", "commits")
            extra = {k: (result or {}).get(k) for k in COMMIT_KEYS} if result else {}
            table.setdefault("agentlog", {}).update(extra or {"commits_error": error})
        out[str(n)] = table
    return out


def rows(table: dict[str, Any], labels: list[str], cell: Callable[..., str]) -> list[list[str]]:
    """The table's rows: each key per system, the ratios, agentlog's appends and commits."""

    def one(label: str, key: str) -> str:
        entry = table.get(label) or {}
        return "n/a: no Send" if entry.get("excluded") else cell(entry, key)

    out = [[key, *[one(lbl, key) for lbl in labels]] for key in FANOUT_KEYS]
    ported = (table.get(PORTED) or {}).get("over_langgraph") or {}
    for key in ("runs_per_s", "run_ms"):
        out.append(
            [
                f"agentlog/peer {key}",
                *[cell((table.get(lbl) or {}).get("agentlog_over_this"), key) for lbl in labels],
            ]
        )
        out.append([f"ported/peer {key}", *[cell(ported.get(lbl), key) for lbl in labels]])
    ours = table.get("agentlog") or {}
    for key in COMMIT_FIGURES:
        out.append([key, str(ours.get(key, "-")), *["-"] * (len(labels) - 1)])
    return out


def summary(fan: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """The fan-out part of compare.py's one JSON line."""
    out: dict[str, Any] = {}
    for n, table in fan.items():
        ours = table.get("agentlog") or {}
        peers = [lbl for lbl in order if lbl != "agentlog" and lbl not in NO_SEND]
        ported = (table.get(PORTED) or {}).get("over_langgraph") or {}
        out[n] = {
            "runs_per_s": {lbl: (table.get(lbl) or {}).get("runs_per_s") for lbl in order},
            "run_ms": {lbl: (table.get(lbl) or {}).get("run_ms") for lbl in order},
            "agentlog_over": {
                lbl: ((table.get(lbl) or {}).get("agentlog_over_this") or {}).get("runs_per_s")
                for lbl in peers
            },
            "ported_over": {lbl: (r or {}).get("runs_per_s") for lbl, r in ported.items()},
            **{f"agentlog_{k}": ours.get(k) for k in COMMIT_FIGURES},
            "same_result": table["same_result"]["ok"],
            "excluded": dict(NO_SEND),
        }
    return out
