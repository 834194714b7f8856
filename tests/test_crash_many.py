"""Crash recovery with many threads in flight: SIGKILL a process running 100 threads at once.

A worker process (tests/workers/many_threads.py) runs 100 threads concurrently on one SQLite
file (30 steps each, nodes and tools that await random sleeps, group commit batching their
appends; even threads call a tool on each turn, and the tool appends its call id to a
side-effect file). It is killed with SIGKILL somewhere in the middle of the run; a new
process then resumes every thread once, either one after the other or all at once. What
DESIGN.md promises ("The step, and why crashes are harmless") must hold for every thread:

- the first resume completes it (no error, status completed);
- its messages are exactly those of an uninterrupted run, and its log holds the same events
  step by step (none lost, none duplicated), with seqs 1..n and a hash chain that verifies;
- a tool call whose `tool_call_finished` had committed at the kill never runs again; one the
  kill cut short runs once more (at-least-once for a crash); every other call runs once.

The same rounds run with `snapshot_every=7`, so kills also land during background snapshot
writes and resumes load `snapshot + tail`.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.testing import until_blocking
from agentlog.events import SQLiteEventStore
from agentlog.projections import Message
from tests.workers.many_threads import STEPS, build_graph, call_ids, thread_ids, uses_tools

from .helpers import Worker, fork_worker, normalized, records_in, wait_ready

ROOT = Path(__file__).resolve().parent.parent
THREADS = 100
RUN_DELAY_MS = 4
"""Nodes and tools of the killed process sleep up to this long: steps overlap and wait."""
TIMEOUT = 120.0
KILL_WINDOW = (0.25, 0.7)
"""A kill lands between these fractions of an uninterrupted run's duration: mid-run."""
pytestmark = pytest.mark.slow


# ---- processes -------------------------------------------------------------------------


def spawn(db: Path, effects: Path, every: int, delay_ms: int, mode: str) -> Worker:
    return fork_worker("many_threads", db, effects, str(THREADS), str(every), str(delay_ms), mode)


def outcomes(proc: Worker, what: str) -> dict[str, str | None]:
    """Wait for a worker to end; per thread, the error its run raised (None: none)."""
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{what}: the worker hung for {TIMEOUT}s\n{out[-2000:]}\n{err[-2000:]}")
    lines = out.splitlines()
    assert proc.returncode == 0 and lines and lines[-1] == "done", (
        f"{what}: the worker failed (exit {proc.returncode})\n{out[-2000:]}\n{err[-4000:]}"
    )
    reports = [json.loads(line) for line in lines if line.startswith("{")]
    return {r["thread"]: r["error"] for r in reports}


# ---- reading a log -----------------------------------------------------------------------


def comparable(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages as JSON builtins without their timestamps (tool messages carry the clock)."""
    out = []
    for message in messages:
        data = message.model_dump(mode="json")
        data.pop("timestamp", None)
        out.append(data)
    return out


@dataclass
class ThreadLog:
    """What the log says about one thread."""

    seqs: list[int] = field(default_factory=list)
    steps: list[Counter[str]] = field(default_factory=list)
    """Per step (events up to each `step_advanced`), the multiset of normalized events."""
    started: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    verified: str | None = None
    status: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)


def read_logs(db: Path, *, full: bool) -> dict[str, ThreadLog]:
    """Every thread's log; with `full`, also its verification and state (via the engine)."""

    async def read() -> dict[str, ThreadLog]:
        logs: dict[str, ThreadLog] = {}
        async with SQLiteEventStore(db) as store:
            graph = build_graph(store)
            for thread in thread_ids(THREADS):
                log = logs[thread] = ThreadLog()
                if await store.last_seq(thread) == 0:
                    continue
                current: Counter[str] = Counter()
                async for record in store.read(thread):
                    log.seqs.append(record.seq)
                    current[normalized(record.event)] += 1
                    if record.kind == "tool_call_started":
                        log.started.add(record.event.call_id)  # type: ignore[union-attr]
                    elif record.kind == "tool_call_finished":
                        log.finished.add(record.event.call_id)  # type: ignore[union-attr]
                    elif record.kind == "step_advanced":
                        log.steps.append(current)
                        current = Counter()
                log.steps.append(current)
                if full:
                    report = await store.verify(thread)
                    log.verified = (
                        None if report.ok else f"{report.first_bad_seq}: {report.problem}"
                    )
                    state = await graph.aget_state({"thread_id": thread})
                    log.status = state.execution_meta.status.value
                    log.messages = comparable(list(state.context))
        return logs

    return asyncio.run(read())


def read_copy(db: Path, scratch: Path) -> dict[str, ThreadLog]:
    """Read a copy of a killed process's database, leaving the file itself as the kill left
    it (opening it here would recover and checkpoint its WAL before the resume does)."""
    scratch.mkdir()
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{db}{suffix}")
        if source.exists():
            shutil.copyfile(source, scratch / f"{db.name}{suffix}")
    return read_logs(scratch / db.name, full=False)


def executions(effects: Path) -> Counter[str]:
    """How many times each call id ran, from the side-effect file."""
    return Counter(effects.read_text().split()) if effects.exists() else Counter()


# ---- the uninterrupted run -------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    duration: float
    logs: dict[str, ThreadLog]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """An uninterrupted run of all threads at once: its duration and every thread's log."""
    tmp = tmp_path_factory.mktemp("reference")
    db, effects = tmp / "run.db", tmp / "effects.txt"
    proc = spawn(db, effects, 0, RUN_DELAY_MS, "all")
    wait_ready(proc)
    begin = time.perf_counter()
    errors = outcomes(proc, "the uninterrupted run")
    duration = time.perf_counter() - begin
    assert errors == dict.fromkeys(thread_ids(THREADS)), errors
    logs = read_logs(db, full=True)
    every_call = Counter(c for t in thread_ids(THREADS) for c in call_ids(t))
    assert executions(effects) == every_call, "uninterrupted, each call runs exactly once"
    for thread, log in logs.items():
        assert log.verified is None and log.status == "completed", (thread, log.verified)
        assert len(log.steps) == STEPS + 1, f"{thread}: {len(log.steps) - 1} steps"
        tools = [m for m in log.messages if m["role"] == "tool"]
        assert [m["content"][0]["call_id"] for m in tools] == call_ids(thread)
    return Reference(duration=duration, logs=logs)


def test_reference_run_has_tool_and_talk_threads(reference: Reference) -> None:
    assert reference.duration > 0.5, "the run is too short for kills to land mid-run"
    with_tools = [t for t in thread_ids(THREADS) if uses_tools(t)]
    assert len(with_tools) == THREADS // 2
    assert all(reference.logs[t].finished == set(call_ids(t)) for t in with_tools)


# ---- kills -------------------------------------------------------------------------------


@dataclass
class Landed:
    """Where one kill landed, across the threads."""

    in_step: int = 0
    """Threads whose log ended inside a step (node entered, outputs not committed)."""
    unfinished: int = 0
    """Threads that had not completed."""
    in_flight_calls: int = 0
    """Tool calls started and not finished."""


def kill_and_resume(reference: Reference, tmp: Path, seed: int, every: int, mode: str) -> Landed:
    rng = random.Random(seed)
    db, effects = tmp / "run.db", tmp / "effects.txt"
    total = sum(len(log.seqs) for log in reference.logs.values())
    target = int(total * rng.uniform(*KILL_WINDOW))
    where = f"kill {seed} ({mode}, snapshot_every={every or 'default'}, at record {target})"

    proc = spawn(db, effects, every, RUN_DELAY_MS, "all")
    wait_ready(proc)
    # Kill once the log holds that share of an uninterrupted run's records: the kill lands
    # mid-run however loaded the machine is (a fixed delay could miss the run entirely).
    until_blocking(
        lambda: records_in(db) >= target or proc.poll() is not None,
        timeout=TIMEOUT,
        interval=0.002,
        what=f"the log to hold {target} records",
    )
    assert proc.poll() is None, f"{where}: the run ended before the kill"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == -signal.SIGKILL

    at_kill = read_copy(db, tmp / "at-kill")
    ran_at_kill = executions(effects)
    landed = Landed()
    for thread, log in at_kill.items():
        landed.unfinished += len(log.steps) < STEPS + 1 or bool(log.steps[-1])
        landed.in_step += bool(log.steps and log.steps[-1])
        landed.in_flight_calls += len(log.started - log.finished)
        assert set(ran_at_kill) >= log.finished, f"{where}: {thread} finished calls never ran"
    assert not set(ran_at_kill) - {c for log in at_kill.values() for c in log.started}, (
        f"{where}: a tool ran before its tool_call_started committed"
    )
    assert landed.unfinished > 0, f"{where}: every thread had completed: not mid-run"

    resumer = spawn(db, effects, every, 0 if mode == "each" else 1, mode)
    wait_ready(resumer)
    errors = outcomes(resumer, where)
    failed = {t: e for t, e in errors.items() if e is not None}
    assert not failed, (
        f"{where}: {len(failed)} threads failed on their first resume, e.g. "
        f"{next(iter(failed.items()))}"
    )

    final = read_logs(db, full=True)
    ran = executions(effects)
    for thread in thread_ids(THREADS):
        log, ref, before = final[thread], reference.logs[thread], at_kill[thread]
        what = f"{where}, thread {thread}"
        assert log.status == "completed", f"{what}: status {log.status}"
        assert log.seqs == list(range(1, len(log.seqs) + 1)), f"{what}: seqs have gaps"
        assert log.verified is None, f"{what}: the hash chain does not verify: {log.verified}"
        assert log.messages == ref.messages, f"{what}: messages differ from an uninterrupted run"
        assert log.steps == ref.steps, f"{what}: the log's steps differ (lost/duplicated events)"
        for call in call_ids(thread):
            if call in before.finished:
                expected = 1  # its result was in the log: answered from there, never re-run
            elif call in before.started:
                expected = ran_at_kill[call] + 1  # cut short: runs again (at-least-once)
            else:
                expected = 1
            assert ran[call] == expected, (
                f"{what}: call {call} ran {ran[call]} times, expected {expected} "
                f"(finished at the kill: {call in before.finished}, ran before it: "
                f"{ran_at_kill[call]})"
            )
    return landed


LANDED: dict[tuple[str, int], Landed] = {}
"""Where the kills of each round landed, for the coverage check at the end."""

ROUNDS = [
    pytest.param("each", 0, 3, id="resume-each"),
    pytest.param("all", 0, 3, id="resume-all"),
    pytest.param("each", 7, 2, id="resume-each-snapshots"),
    pytest.param("all", 7, 2, id="resume-all-snapshots"),
]


@pytest.mark.parametrize(("mode", "every", "kills"), ROUNDS)
def test_sigkill_with_100_threads_in_flight_then_resume(
    mode: str, every: int, kills: int, reference: Reference, tmp_path: Path
) -> None:
    landed = Landed()
    for k in range(kills):
        seed = 1000 * every + 100 * (mode == "all") + k  # each round its own kill points
        tmp = tmp_path / f"kill-{k}"
        tmp.mkdir()
        this = kill_and_resume(reference, tmp, seed, every, mode)
        landed.in_step += this.in_step
        landed.unfinished += this.unfinished
        landed.in_flight_calls += this.in_flight_calls
    print(f"{mode}, snapshot_every={every or 'default'}: {kills} kills; {landed}")
    LANDED[(mode, every)] = landed
    assert landed.in_step > 0, f"the kills never landed inside a step: {landed}"


def test_kills_landed_inside_tool_calls() -> None:
    """Across the rounds, some kill cut a tool call short (its window is a few ms)."""
    if len(LANDED) < len(ROUNDS):
        pytest.skip("needs every kill round above in this session")
    cut_short = sum(landed.in_flight_calls for landed in LANDED.values())
    assert cut_short > 0, f"no kill landed inside a tool call: {LANDED}"
