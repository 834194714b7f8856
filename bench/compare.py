"""Side by side: agentlog against LangGraph and Agentflow, through one driver per system.

Every system has a standalone driver in bench/peers/ run by its own venv's python (agentlog:
.venv; peers: .bench-venvs/<name>, created here when missing or when their pinned packages
changed) and printing one JSON line. The workload is the tool-calling agent loop of
bench/peers/README.md, in two variants (the tool step a plain `def` node, or each system's
`ToolNode`), and a fan-out: a `Send` map-reduce to 8 branches, N runs on fresh threads
(bench/compare_fanout.py; Agentflow has no equivalent and is left out of it). Columns:
agentlog (durable per step), LangGraph with no checkpointer at all, LangGraph `SqliteSaver`
with durability "sync" and "async", Agentflow.

Runs alternate between the systems (A B C ... A B C ...) on fresh temporary databases;
medians are reported per system, and ratios agentlog / peer are taken per round (round i
against round i) and their median reported. agentlog's commits per step and the top of a
cProfile come from two more runs, untimed, each in its own process. The targets
are printed beside the ratios as met / not met, never asserted. A driver that is missing
or fails shows up as such; it never stops the harness.

Results go to bench/results/compare-<benchmark>.json; the tables go to stderr and one JSON
line (the summary: ratios, targets, agentlog's commits and profile, machine and date) to
stdout.

Usage: .venv/bin/python bench/compare.py [--quick] [--rounds R] [--sizes 200,1000] [--no-setup]
           [--variants def-tool,toolnode] [--peers-dir DIR]
           [--workloads steps,concurrency,fault,concurrent,fanout]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import compare_fanout as fanout
from venvs import PACKAGES, VENVS, newest_python, setup_venv

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = [ROOT / "bench" / "peers"]  # --peers-dir replaces it
RESULTS = ROOT / "bench" / "results"
START = time.perf_counter()

SIZES, QUICK_SIZES = (200, 1000), (200, 1000)  # quick: one round, both targets' sizes
VARIANTS = ("def-tool", "toolnode")
WORKLOADS = ("steps", "concurrency", "fault", "concurrent", "fanout")  # steps: loop, load, history
MAIN_VARIANT = "def-tool"  # load, history and concurrency run on it
FAULT_VARIANT = "toolnode"  # each system's ToolNode: what a crash must not run twice
# The targets: (N, peer column, agentlog steps/s at least this many times the peer's).
# Issue 40 restated them against the floor (bench/floor.py): both variants, both sizes.
RATIO_TARGETS = (
    (1000, "langgraph-none", 1.3),
    (1000, "langgraph-sync", 15.0),
    (200, "langgraph-none", 1.3),
)
LOAD_TARGET = ("langgraph-sync", 1.0)  # a fresh process's latest state: time over the peer's
FANOUT_TARGET = ("langgraph-none", 1.3)  # a Send to 8 branches: runs/s over the peer's
TARGET_LAST_FIRST = 1.2
TARGET_COMMITS = 1.5
TIMEOUT = [300.0]  # seconds any one driver run may take (quick: 60); a hung driver is killed


sys.path.insert(0, str(ROOT / "bench"))
import _common as common  # noqa: E402


def log(message: str) -> None:
    print(f"[{time.perf_counter() - START:7.2f}s] {message}", file=sys.stderr, flush=True)


# ---- systems and their interpreters ---------------------------------------------------------


@dataclass
class Contender:
    """One column of the tables: a system's driver, run with some fixed extra arguments."""

    label: str
    system: str
    extra: list[str] = field(default_factory=list)
    python: Path | None = None
    problem: str | None = None  # why it cannot run (missing driver, failed setup)
    persistent: bool = True  # False: keeps nothing, so no load, history, crash or resume

    @property
    def driver(self) -> Path:
        return PEERS_DIR[0] / f"{self.system}_driver.py"


def contenders(setup: bool) -> list[Contender]:
    """agentlog, LangGraph (no checkpointer; SqliteSaver sync and async), Agentflow."""
    out = [
        Contender("agentlog", "agentlog", python=ROOT / ".venv" / "bin" / "python"),
        Contender("langgraph-none", "langgraph", ["--checkpointer", "none"], persistent=False),
        Contender("langgraph-sync", "langgraph", ["--durability", "sync"]),
        Contender("langgraph-async", "langgraph", ["--durability", "async"]),
        Contender("agentflow", "agentflow"),
    ]
    base: str | None = None
    venvs: dict[str, tuple[Path | None, str | None]] = {}
    for c in out:
        if not c.driver.exists():
            c.problem = "missing driver"
            continue
        if c.python is not None:
            if not c.python.exists():
                c.problem = f"missing {c.python}"
            continue
        if c.system not in venvs:
            existing = VENVS / c.system / "bin" / "python"
            stamp = VENVS / c.system / ".installed"
            if not setup and existing.exists():
                if not stamp.exists() or stamp.read_text().strip() != " ".join(PACKAGES[c.system]):
                    log(f"{c.system}: its venv is not of the pinned versions (--no-setup)")
                venvs[c.system] = (existing, None)
            elif not setup:
                venvs[c.system] = (None, "no venv (--no-setup)")
            else:
                base = base or newest_python()
                venvs[c.system] = setup_venv(c.system, base)
        c.python, c.problem = venvs[c.system]
    return out


# ---- running a driver -----------------------------------------------------------------------


def last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def run(
    c: Contender, workload: str, db: Path, timeout: float, *more: str
) -> tuple[dict[str, Any] | None, str | None]:
    """Run a driver once: its JSON result, or None and why not."""
    if c.problem:
        return None, c.problem
    timeout = min(timeout, TIMEOUT[0])
    cmd = [str(c.python), str(c.driver), "--workload", workload, "--db", str(db), *c.extra, *more]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return None, f"could not start: {exc}"
    result = last_json(out.stdout)
    if out.returncode != 0 or result is None:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"failed (exit {out.returncode}): {tail[:200]}"
    return result, None


def fresh_db(directory: Path, c: Contender, what: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"{c.label}-{what}-", dir=directory)) / "bench.sqlite"
    return path


def median_of(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def summarize(
    samples: dict[str, list[dict[str, Any]]], keys: list[str], errors: dict[str, list[str]]
) -> dict[str, Any]:
    """Medians per system and key, and the median of per-round ratios agentlog / peer.

    A round's ratio pairs agentlog's run of that round with the peer's run of that round
    (each result carries its `round`); a round either of them lost is left out.
    """
    out: dict[str, Any] = {}
    for label, runs in samples.items():
        entry: dict[str, Any] = {"runs": len(runs), "errors": errors.get(label, [])}
        for key in keys:
            vals = [r[key] for r in runs if isinstance(r.get(key), int | float)]
            entry[key] = median_of(vals)
        if runs:
            entry["version"] = runs[-1].get("version")
            entry["python"] = runs[-1].get("python")
            entry["last_result"] = runs[-1]
        out[label] = entry
    ours = {r["round"]: r for r in samples.get("agentlog", [])}
    for label, runs in samples.items():
        if label == "agentlog":
            continue
        ratios: dict[str, float | None] = {}
        for key in keys:
            per_round = [
                ours[b["round"]][key] / b[key]
                for b in runs
                if b["round"] in ours
                and isinstance(ours[b["round"]].get(key), int | float)
                and isinstance(b.get(key), int | float)
                and b[key]
            ]
            ratios[key] = median_of(per_round)
        out[label]["agentlog_over_this"] = ratios
    return out


def alternate(
    cs: list[Contender],
    rounds: int,
    workload: str,
    make_db: Any,
    timeout: float,
    *more: str,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[str]]]:
    """A B C A B C ... for `rounds` rounds; `make_db(c, round)` names each run's database."""
    samples: dict[str, list[dict[str, Any]]] = {c.label: [] for c in cs}
    errors: dict[str, list[str]] = {c.label: [] for c in cs}
    for r in range(rounds):
        for c in cs:
            result, error = run(c, workload, make_db(c, r), timeout, *more)
            if result is None:
                errors[c.label].append(error or "failed")
            else:
                samples[c.label].append({**result, "round": r})
        log(f"  {workload} {' '.join(more)} round {r + 1}/{rounds} done")
    return samples, errors


# ---- the benchmarks -------------------------------------------------------------------------


LOOP_KEYS = [
    "steps_per_s",
    "first10_ms",
    "last10_ms",
    "ratio_last_first",
    "bytes_per_step",
    "messages",
    "tool_results",
]
SAME_WORK = ("steps", "messages", "tool_results")


def _loop_db(dbs: dict[str, Path], tmp: Path, n: int, c: Contender, r: int) -> Path:
    """A fresh database for a loop run, remembered as the system's latest."""
    dbs[c.label] = fresh_db(tmp, c, f"loop{n}")
    return dbs[c.label]


def _kept_db(dbs: dict[str, Path], c: Contender, r: int) -> Path:
    return dbs[c.label]


def same_work(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Whether every system did the same work: steps, messages and tool results."""
    seen = {
        label: {k: runs[-1].get(k) for k in SAME_WORK} for label, runs in samples.items() if runs
    }
    distinct = {json.dumps(v, sort_keys=True) for v in seen.values()}
    return {"ok": len(distinct) <= 1, "by_system": seen}


def agentlog_extras(c: Contender, n: int, variant: str, tmp: Path) -> dict[str, Any]:
    """agentlog's commits per step and the top of a cProfile: one untimed run each."""
    out: dict[str, Any] = {}
    for measure in ("commits", "profile"):
        db = fresh_db(tmp, c, f"{measure}{n}")
        more = ["--n", str(n), "--variant", variant, "--measure", measure]
        result, error = run(c, "loop", db, 600, *more)
        if result is None:
            out[f"{measure}_error"] = error
        elif measure == "commits":
            for key in ("commits_per_step", "append_calls_per_step", "commits_counted_by"):
                out[key] = result.get(key)
        else:
            out["profile"] = result.get("profile")
    return out


def bench_steps(
    cs: list[Contender], sizes: tuple[int, ...], variants: list[str], rounds: int, tmp: Path
) -> dict[str, Any]:
    """loop (per N and variant); then load and history on the main variant's last databases."""
    loop: dict[str, Any] = {}
    load: dict[str, Any] = {}
    history: dict[str, Any] = {}
    ours = next(c for c in cs if c.label == "agentlog")
    for n in sizes:
        loop[str(n)] = {}
        main_dbs: dict[str, Path] = {}
        main_ok: list[Contender] = []
        for variant in variants:
            log(f"loop N={n} {variant}: {rounds} rounds")
            dbs: dict[str, Path] = {}
            more = ("--n", str(n), "--variant", variant)
            make_db = partial(_loop_db, dbs, tmp, n)
            samples, errors = alternate(cs, rounds, "loop", make_db, 600, *more)
            table = summarize(samples, LOOP_KEYS, errors)
            table["same_work"] = same_work(samples)
            if not ours.problem:
                log(f"loop N={n} {variant}: agentlog commits and profile (untimed)")
                table.setdefault("agentlog", {}).update(agentlog_extras(ours, n, variant, tmp))
            loop[str(n)][variant] = table
            if variant == MAIN_VARIANT or not main_dbs:
                main_dbs = dbs
                main_ok = [c for c in cs if samples[c.label] and c.persistent]
        kept = partial(_kept_db, main_dbs)
        skipped = {
            c.label: [c.problem or ("no checkpointer" if not c.persistent else "no loop database")]
            for c in cs
            if c not in main_ok
        }
        s, e = alternate(main_ok, rounds, "load", kept, 300, "--n", str(n))
        load[str(n)] = summarize(s, ["load_ms", "open_ms", "messages"], {**e, **skipped})
        s, e = alternate(main_ok, rounds, "history", kept, 300, "--n", str(n))
        history[str(n)] = summarize(
            s, ["history_ms", "states", "state_at_half_ms"], {**e, **skipped}
        )
        for c in cs:
            for t in (load, history):
                t[str(n)].setdefault(c.label, {"runs": 0, "errors": skipped.get(c.label, [])})
    return {"loop": loop, "load": load, "history": history}


def bench_concurrency(cs: list[Contender], rounds: int, tmp: Path, threads: int) -> dict[str, Any]:
    log(f"concurrency: {threads} threads x 10 steps, {rounds} rounds")
    samples, errors = alternate(
        cs,
        rounds,
        "concurrency",
        lambda c, r: fresh_db(tmp, c, "conc"),
        600,
        "--n",
        "10",
        "--threads",
        str(threads),
        "--variant",
        MAIN_VARIANT,
    )
    return summarize(samples, ["completed_steps", "steps_per_s"], errors)


def _crash_once(
    c: Contender, n: int, tmp: Path, kill_after: float | None, timeout: float
) -> dict[str, Any]:
    """One crash-run (killed after `kill_after` s from "ready", or to the end), then resume."""
    db = fresh_db(tmp, c, "crash")
    effects = db.parent / "side-effects.txt"
    effects.touch()
    thread = "crash-thread"
    cmd = [
        str(c.python),
        str(c.driver),
        "--workload",
        "crash-run",
        "--n",
        str(n),
        "--db",
        str(db),
        "--side-effects",
        str(effects),
        "--thread-id",
        thread,
        "--variant",
        FAULT_VARIANT,
        *c.extra,
    ]
    out: dict[str, Any] = {}
    with open(db.parent / "crash.stderr", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            assert proc.stdout is not None
            waiting = select.select([proc.stdout], [], [], timeout)[0]
            line = proc.stdout.readline() if waiting else ""  # "ready" (or the end)
            ready = time.perf_counter()
            if line.strip() != "ready":
                proc.kill()
                proc.wait()
                return {"error": f"no 'ready' line (got {line.strip()[:80]!r})"}
            if kill_after is None:
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    return {"error": f"timed out after {timeout:.0f} s"}
                out["run_s"] = time.perf_counter() - ready
            else:
                time.sleep(kill_after)
                out["finished_before_kill"] = proc.poll() is not None
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    before = effects.read_text().split()
    out["side_effects_before_resume"] = len(before)
    more = ["--n", str(n), "--side-effects", str(effects), "--thread-id", thread]
    result, error = run(c, "resume", db, timeout, *more, "--variant", FAULT_VARIANT)
    if result is None:
        out["error"] = f"resume {error}"
        return out
    calls = effects.read_text().split()
    out.update(
        final_step=result.get("final_step"),
        messages=result.get("messages"),
        completed=result.get("completed"),
        tool_calls=len(calls),
        duplicate_calls=sorted({x for x in calls if calls.count(x) > 1}),
    )
    return out


def bench_fault(cs: list[Contender], n: int, rounds: int, tmp: Path) -> dict[str, Any]:
    """Uninterrupted reference, then `rounds` SIGKILLs at 40% of the run, each resumed."""
    log(f"fault: crash-run N={n}, SIGKILL at 40% of an uninterrupted run, resume")
    table: dict[str, Any] = {}
    for c in cs:
        if c.problem or not c.persistent:
            table[c.label] = {"error": c.problem or "no checkpointer: nothing to resume"}
            continue
        ref = _crash_once(c, n, tmp, None, TIMEOUT[0])
        if "error" in ref:
            table[c.label] = {"error": f"uninterrupted run: {ref['error']}"}
            continue
        kill_after = 0.4 * ref["run_s"]
        crashes = [_crash_once(c, n, tmp, kill_after, TIMEOUT[0]) for _ in range(rounds)]
        errors = [x["error"] for x in crashes if "error" in x]
        good = [x for x in crashes if "error" not in x]
        right = [
            x
            for x in good
            if x["final_step"] == ref["final_step"] and x["messages"] == ref["messages"]
        ]
        table[c.label] = {
            "n": n,
            "uninterrupted": {k: ref.get(k) for k in ("run_s", "final_step", "messages")},
            "kill_after_s": round(kill_after, 4),
            "crashes": crashes,
            "resumed_right": f"{len(right)}/{len(crashes)}",
            "duplicate_side_effects": sum(bool(x["duplicate_calls"]) for x in good),
            "killed_mid_run": sum(x.get("finished_before_kill") is False for x in crashes),
            "errors": errors,
        }
        log(f"  fault {c.label}: resumed right {len(right)}/{len(crashes)}")
    return table


def bench_concurrent(cs: list[Contender], tmp: Path) -> dict[str, Any]:
    log("concurrent: two invocations on one thread at once")
    table: dict[str, Any] = {}
    for c in cs:
        if not c.persistent:
            table[c.label] = {"outcome": "-", "error": "no checkpointer: no shared thread"}
            continue
        result, error = run(c, "concurrent", fresh_db(tmp, c, "same"), 300)
        failed = {"outcome": "driver failed", "error": error}
        table[c.label] = result if result is not None else failed
    return table


# ---- targets and output -------------------------------------------------------------------


def verdict(value: float | None, ok: bool) -> str:
    return "not measured" if value is None else ("met" if ok else "not met")


def targets(loop: dict[str, Any]) -> dict[str, Any]:
    """The targets against this run's figures, per variant: met, not met, or not
    measured (e.g. N = 1000 under --quick)."""
    out: dict[str, Any] = {}
    variants = sorted({v for by_variant in loop.values() for v in by_variant})
    for variant in variants:
        rows: list[dict[str, Any]] = []
        for size, peer, want in RATIO_TARGETS:
            table = loop.get(str(size), {}).get(variant, {})
            value = ((table.get(peer) or {}).get("agentlog_over_this") or {}).get("steps_per_s")
            rows.append(
                {
                    "what": f"agentlog steps/s over {peer}, N={size}",
                    "value": value,
                    "target": f">= {want:g}",
                    "verdict": verdict(value, value is not None and value >= want),
                }
            )
        for n, by_variant in loop.items():
            ours = by_variant.get(variant, {}).get("agentlog", {})
            flat = ours.get("ratio_last_first")
            rows.append(
                {
                    "what": f"agentlog last 10% / first 10% step cost, N={n}",
                    "value": flat,
                    "target": f"<= {TARGET_LAST_FIRST:g}",
                    "verdict": verdict(flat, flat is not None and flat <= TARGET_LAST_FIRST),
                }
            )
            commits = ours.get("commits_per_step")
            rows.append(
                {
                    "what": f"agentlog commits per loop step, N={n}",
                    "value": commits,
                    "target": f"<= {TARGET_COMMITS:g}",
                    "verdict": verdict(commits, commits is not None and commits <= TARGET_COMMITS),
                }
            )
        out[variant] = rows
    return out


def write(name: str, body: dict[str, Any], meta: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"compare-{name}.json"
    path.write_text(json.dumps({"bench": name, **meta, "results": body}, indent=2) + "\n")
    log(f"wrote {path.relative_to(ROOT)}")


def cell(entry: dict[str, Any] | None, key: str) -> str:
    if not entry:
        return "-"
    value = entry.get(key)
    if value is None and entry.get("runs"):  # the driver ran but did not report this key
        last = entry.get("last_result") or {}
        why = last.get("note") or last.get("error") or last.get("unsupported") or "not reported"
        return f"n/a: {str(why)[:38]}"
    if value is None:
        errors = entry.get("errors") or [entry.get("error") or "no data"]
        if not errors:
            return "-"
        first = str(errors[0])
        if first.startswith("no checkpointer"):
            return "n/a: no checkpointer"
        return "MISSING driver" if first == "missing driver" else f"FAILED: {first[:38]}"
    return f"{value:,.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [columns, *rows]) for i in range(len(columns))]
    say = partial(print, file=sys.stderr)
    say(f"\n{title}")
    say("  ".join(h.ljust(w) for h, w in zip(columns, widths, strict=True)))
    say("  ".join("-" * w for w in widths))
    for row in rows:
        say("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def report(
    cs: list[Contender],
    steps: dict[str, Any],
    conc: dict[str, Any],
    fault: dict[str, Any],
    same: dict[str, Any],
    goals: dict[str, Any],
) -> None:
    """The tables, on stderr."""
    labels = [c.label for c in cs]
    header = ["system", *labels]
    say = partial(print, file=sys.stderr)
    say("\nSide-by-side (medians; ratio = agentlog / peer, median of per-round ratios)")
    say("status: " + ", ".join(f"{c.label}: {c.problem or 'ok'}" for c in cs))
    for n, by_variant in steps["loop"].items():
        for variant, table in by_variant.items():
            rows = [[key, *[cell(table.get(lbl), key) for lbl in labels]] for key in LOOP_KEYS]
            rows.append(
                [
                    "agentlog/peer steps/s",
                    *[
                        cell((table.get(lbl) or {}).get("agentlog_over_this"), "steps_per_s")
                        for lbl in labels
                    ],
                ]
            )
            ours = table.get("agentlog") or {}
            rows.append(
                ["commits/step", str(ours.get("commits_per_step", "-")), *["-"] * (len(labels) - 1)]
            )
            work = "same" if table["same_work"]["ok"] else f"DIFFERENT: {table['same_work']}"
            print_table(f"loop N={n}, {variant} (work done: {work})", header, rows)
        rows = []
        for key in ("load_ms", "open_ms", "messages"):
            rows.append([key, *[cell(steps["load"][n].get(lbl), key) for lbl in labels]])
        for key in ("history_ms", "states", "state_at_half_ms"):
            rows.append([key, *[cell(steps["history"][n].get(lbl), key) for lbl in labels]])
        print_table(f"load / history, N={n} ({MAIN_VARIANT})", header, rows)
    if conc:
        rows = [[k, *[cell(conc.get(lbl), k) for lbl in labels]] for k in ("completed_steps",)]
        rows.append(["steps_per_s", *[cell(conc.get(lbl), "steps_per_s") for lbl in labels]])
        print_table("concurrency (200 threads x 10 steps, one store)", header, rows)
    if fault:
        rows = []
        for key in ("resumed_right", "duplicate_side_effects", "killed_mid_run", "kill_after_s"):
            rows.append([key, *[cell(fault.get(lbl), key) for lbl in labels]])
        print_table(f"fault: SIGKILL mid-run, then resume ({FAULT_VARIANT})", header, rows)
    if same:
        rows = [
            ["outcome", *[str((same.get(lbl) or {}).get("outcome", "-")) for lbl in labels]],
            ["error", *[str((same.get(lbl) or {}).get("error", "-"))[:40] for lbl in labels]],
        ]
        print_table("concurrent: two invocations of one thread at once", header, rows)
    for variant, rows_ in goals.items():
        say(f"\ntargets, {variant}:")
        for row in rows_:
            value = "-" if row["value"] is None else row["value"]
            say(f"  {row['what']}: {value} (target {row['target']}): {row['verdict']}")


def _over_peer(
    by_n: dict[str, Any], peer: str, key: str, what: str, bound: float, at_most: bool
) -> list[dict[str, Any]]:
    """One target row per size: agentlog's `key` over `peer`'s (the median of per-round
    ratios) against `bound`, met when at most (`at_most`) or at least it."""
    rows: list[dict[str, Any]] = []
    for n, table in by_n.items():
        value = ((table.get(peer) or {}).get("agentlog_over_this") or {}).get(key)
        met = value is not None and (value <= bound if at_most else value >= bound)
        rows.append(
            {
                "what": what.format(n=n, peer=peer),
                "value": value,
                "target": f"{'<=' if at_most else '>='} {bound:g}",
                "verdict": verdict(value, met),
            }
        )
    return rows


def load_targets(load: dict[str, Any]) -> list[dict[str, Any]]:
    """The latest-state target: a fresh process's load (the store's opening apart) takes
    at most LangGraph `SqliteSaver`'s `get_state` time, as a median of per-round ratios."""
    peer, most = LOAD_TARGET
    what = "agentlog latest-state load time over {peer}'s, N={n}"
    return _over_peer(load, peer, "load_ms", what, most, at_most=True)


def fanout_targets(fan: dict[str, Any]) -> list[dict[str, Any]]:
    """The fan-out target against this run's figures: agentlog's runs/s over the peer's."""
    peer, want = FANOUT_TARGET
    what = "agentlog fan-out runs/s over {peer}, {n} runs"
    return _over_peer(fan, peer, "runs_per_s", what, want, at_most=False)


def report_fanout(cs: list[Contender], fan: dict[str, Any]) -> None:
    """The fan-out tables, on stderr."""
    labels = [c.label for c in fanout.columns(cs)]
    for n, table in fan.items():
        same = table["same_result"]
        work = "same" if same["ok"] else f"DIFFERENT: {same}"
        title = f"fanout: {n} runs of Send to 8 branches, fresh threads (result: {work})"
        print_table(title, ["system", *labels], fanout.rows(table, labels, cell))


def summary(steps: dict[str, Any], goals: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """The one JSON line: per N and variant, each column's steps/s and agentlog's ratio
    over it; agentlog's commits, step-cost ratio and profile top; the targets."""
    loop: dict[str, Any] = {}
    for n, by_variant in steps["loop"].items():
        for variant, table in by_variant.items():
            ours = table.get("agentlog") or {}
            profile = ours.get("profile") or {}
            loop.setdefault(n, {})[variant] = {
                "steps_per_s": {
                    label: (table.get(label) or {}).get("steps_per_s") for label in meta["order"]
                },
                "agentlog_over": {
                    label: ((table.get(label) or {}).get("agentlog_over_this") or {}).get(
                        "steps_per_s"
                    )
                    for label in meta["order"]
                    if label != "agentlog"
                },
                "agentlog_last_over_first": ours.get("ratio_last_first"),
                "agentlog_commits_per_step": ours.get("commits_per_step"),
                "agentlog_append_calls_per_step": ours.get("append_calls_per_step"),
                "agentlog_profile_top": {
                    k: profile.get(k)
                    for k in ("wall_s", "main_thread_waiting_s", "top_cumulative", "top_own")
                },
                "same_work": table["same_work"]["ok"],
            }
    ratios = {
        f"{variant}_n{n}_over_{peer}": row["agentlog_over"].get(peer)
        for n, by_variant in loop.items()
        for variant, row in by_variant.items()
        for peer in ("langgraph-none", "langgraph-sync")
    }
    return {"bench": "compare", "ratios": ratios, **meta, "loop": loop, "targets": goals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one round, smaller fan-out")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    parser.add_argument("--no-setup", action="store_true", help="do not create peer venvs")
    parser.add_argument("--sizes", help="comma-separated loop lengths (default 200,1000)")
    parser.add_argument("--peers-dir", type=Path, help="where the drivers are (bench/peers)")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated, from def-tool,toolnode"
    )
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"comma-separated, from {WORKLOADS}"
    )
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or any(v not in VARIANTS for v in variants):
        parser.error(f"--variants: use some of {', '.join(VARIANTS)}")
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not chosen or any(w not in WORKLOADS for w in chosen):
        parser.error(f"--workloads: use some of {', '.join(WORKLOADS)}")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.peers_dir is not None:
        PEERS_DIR[0] = args.peers_dir.resolve()
    TIMEOUT[0] = 60.0 if args.quick else 300.0
    rounds = args.rounds or (1 if args.quick else 3)
    sizes = QUICK_SIZES if args.quick else SIZES
    if args.sizes:
        try:
            sizes = tuple(int(n) for n in args.sizes.split(",") if n.strip())
        except ValueError:
            parser.error("--sizes: comma-separated whole numbers, e.g. 200,1000")
        if not sizes or min(sizes) < 1:
            parser.error("--sizes: at least one loop length of 1 or more")
    cs = contenders(setup=not args.no_setup)
    for c in cs:
        log(f"{c.label}: {c.problem or c.python}")
    meta = {
        "quick": args.quick,
        "rounds": rounds,
        "variants": variants,
        "workloads": chosen,
        "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "machine": common.machine(),
        "date": common.now(),
        "packages": PACKAGES,
        "status": {c.label: c.problem or "ok" for c in cs},
        "order": [c.label for c in cs],
    }
    steps: dict[str, Any] = {"loop": {}, "load": {}, "history": {}}
    conc: dict[str, Any] = {}
    fault: dict[str, Any] = {}
    same: dict[str, Any] = {}
    fan: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentlog-compare-") as name:
        tmp = Path(name)
        if "steps" in chosen:
            steps = bench_steps(cs, sizes, variants, rounds, tmp)
            for key, body in steps.items():
                write(key, body, meta)
        if "concurrency" in chosen:
            conc = bench_concurrency(cs, rounds, tmp, 200)
            write("concurrency", conc, meta)
        if "fault" in chosen:
            fault = bench_fault(cs, max(sizes), 1 if args.quick else 3, tmp)
            write("fault", fault, meta)
        if "concurrent" in chosen:
            same = bench_concurrent(cs, tmp)
            write("concurrent", same, meta)
        if "fanout" in chosen:
            harness = fanout.Harness(run, alternate, summarize, fresh_db, log)
            fan_sizes = fanout.QUICK_FANOUT_RUNS if args.quick else fanout.FANOUT_RUNS
            fan = fanout.bench_fanout(harness, cs, fan_sizes, rounds, tmp)
            write("fanout", fan, meta)
    goals = targets(steps["loop"])
    if steps["load"]:
        goals["load"] = load_targets(steps["load"])
    if fan:
        goals["fanout"] = fanout_targets(fan)
    report(cs, steps, conc, fault, same, goals)
    report_fanout(cs, fan)
    fan_order = [c.label for c in fanout.columns(cs)]
    result = {**summary(steps, goals, meta), "fanout": fanout.summary(fan, fan_order)}
    write("summary", result, {})
    print(json.dumps(result, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
