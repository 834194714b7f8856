"""Crash recovery of the graph engine: SIGKILL a real run anywhere, resume it, compare.

A scripted agent graph with tools (tests/workers/graph_run.py) runs on a real SQLite file
in a subprocess. Each kill point kills it with SIGKILL at a moment spread over the run, told
by what the run has done (the records committed to its log, the side effects written), not
by the clock, sometimes kills the resumed process too, then resumes to the end, and checks
what DESIGN.md promises ("The step, and why crashes are harmless"):

- the final state equals that of an uninterrupted run (message timestamps and the run id
  aside), read through the engine (snapshot + tail) and replayed from the whole log;
- the log holds the same events as the uninterrupted run's, step by step: none lost,
  none duplicated; its hash chain verifies;
- a tool call whose `tool_call_finished` had committed at a kill never runs again; one
  that was cut short runs again exactly once per kill that cut it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.testing import until_blocking
from agentlog.events import (
    NodeEntered,
    SQLiteEventStore,
    StepAdvanced,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.projections import Message, replay
from tests.workers.graph_run import build_graph, call_ids, comparable

from .helpers import Worker, fork_worker, normalized, wait_done, wait_ready

ROOT = Path(__file__).resolve().parent.parent
THREAD = "crash-thread"
GROUPS = 6
PER_GROUP = 10
POINTS = GROUPS * PER_GROUP
"""Kill points: point i kills about i/POINTS into the run (groups interleave)."""
SECOND_KILL_EVERY = 3
"""Every third point also kills the first resumed process."""
TIMEOUT = 60.0
pytestmark = pytest.mark.slow


# ---- processes -------------------------------------------------------------------------


def spawn(db: Path, effects: Path, mode: str = "run") -> Worker:
    return fork_worker("graph_run", db, effects, THREAD, mode)


def finish(db: Path, effects: Path, what: str) -> None:
    """Run (or resume) the thread to its end in a new process; it must say "done"."""
    wait_done(spawn(db, effects), what, TIMEOUT)


@dataclass(frozen=True)
class Moment:
    """When to kill: once the thread's log holds `records` records, or the side-effect file
    `effects` lines (0 and 0: as soon as the process is ready)."""

    records: int = 0
    effects: int = 0

    def __str__(self) -> str:
        if self.effects:
            return f"side effect {self.effects}"
        return f"record {self.records}" if self.records else "start"


def logged(db: Path) -> int:
    """How many records the thread's log holds, read behind the writer's back."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    except sqlite3.OperationalError:
        return 0  # not created yet
    try:
        row = conn.execute("SELECT last_seq FROM threads WHERE thread_id = ?", (THREAD,))
        found = row.fetchone()
    except sqlite3.OperationalError:  # no schema yet
        return 0
    finally:
        conn.close()
    return int(found[0]) if found else 0


def kill_at(proc: Worker, moment: Moment, db: Path, effects: Path) -> bool:
    """SIGKILL `proc` as soon as the run reached `moment` (seen by polling its log and its
    side-effect file); False if it had already finished."""
    wait_ready(proc)

    def reached() -> bool:
        if proc.poll() is not None:
            return True
        if moment.effects:
            return sum(executions(effects).values()) >= moment.effects
        return logged(db) >= moment.records

    until_blocking(reached, interval=0.001, what=f"the run to reach {moment}")
    finished_first = proc.poll() is not None
    if not finished_first:
        os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=TIMEOUT)
    if finished_first:
        assert proc.returncode == 0, err
        return False
    assert proc.returncode in (-signal.SIGKILL, 0), (proc.returncode, err)
    return proc.returncode == -signal.SIGKILL


# ---- reading the log -----------------------------------------------------------------


@dataclass
class LogView:
    """What the log of the thread says, read in this process."""

    kinds: list[str] = field(default_factory=list)
    inside: str | None = None
    """The node entered last whose step has not advanced yet."""
    started: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    steps: list[Counter[str]] = field(default_factory=list)
    """Per step (events up to each `step_advanced`), the multiset of normalized events."""
    state: dict[str, Any] | None = None
    replayed: dict[str, Any] | None = None
    verified: str | None = None


def read_log(db: Path, *, full: bool = False) -> LogView:
    async def read() -> LogView:
        view = LogView()
        async with SQLiteEventStore(db) as store:
            if await store.last_seq(THREAD) == 0:
                return view
            records = [r async for r in store.read(THREAD)]
            current: Counter[str] = Counter()
            for record in records:
                event = record.event
                view.kinds.append(record.kind)
                if isinstance(event, NodeEntered):
                    view.inside = event.node
                elif isinstance(event, StepAdvanced):
                    view.inside = None
                elif isinstance(event, ToolCallStarted):
                    view.started.add(event.call_id)
                elif isinstance(event, ToolCallFinished):
                    view.finished.add(event.call_id)
                current[normalized(event)] += 1
                if record.kind == "step_advanced":
                    view.steps.append(current)
                    current = Counter()
            view.steps.append(current)
            if full:
                report = await store.verify(THREAD)
                view.verified = None if report.ok else f"{report.first_bad_seq}: {report.problem}"
                view.state = comparable(await build_graph(store).aget_state({"thread_id": THREAD}))
                view.replayed = comparable(replay(records))
        return view

    return asyncio.run(read())


def executions(effects: Path) -> Counter[str]:
    """How many times each call id ran, from the side-effect file."""
    if not effects.exists():
        return Counter()
    return Counter(effects.read_text().split())


# ---- the uninterrupted run -------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    dump: dict[str, Any]
    log: LogView


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """An uninterrupted run: its final state and log."""
    dumps, logs = [], []
    for attempt in range(2):  # twice: the graph itself must be deterministic
        tmp = tmp_path_factory.mktemp(f"reference-{attempt}")
        db, effects = tmp / "run.db", tmp / "effects.txt"
        proc = spawn(db, effects)
        wait_ready(proc)
        assert proc.stdout is not None
        done = proc.stdout.readline()
        _, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0 and done.strip() == "done", err
        dumper = spawn(db, effects, "dump")
        out, err = dumper.communicate(timeout=TIMEOUT)
        assert dumper.returncode == 0, err
        dumps.append(json.loads(out))
        logs.append(read_log(db, full=True))
        assert executions(effects) == Counter(call_ids()), "each call runs once, uninterrupted"
    assert dumps[0] == dumps[1], "the scripted graph is not deterministic"
    assert logs[0].steps == logs[1].steps, "the scripted graph's log is not deterministic"
    log = logs[0]
    assert log.verified is None, log.verified
    assert log.state == dumps[0] and log.replayed == dumps[0]
    assert dumps[0]["execution_meta"]["status"] == "completed"
    return Reference(dump=dumps[0], log=log)


def test_reference_run_uses_tools_on_every_turn(reference: Reference) -> None:
    tool_messages = [m for m in reference.dump["context"] if m["role"] == "tool"]
    assert [m["content"][0]["call_id"] for m in tool_messages] == call_ids()
    assert reference.log.started == reference.log.finished == set(call_ids())
    assert reference.dump["execution_meta"]["step"] == 13


# ---- kill points -----------------------------------------------------------------------


@dataclass(frozen=True)
class Kill:
    """One SIGKILL and what the log held at that instant."""

    moment: Moment
    last_kind: str | None
    inside: str | None
    """The node whose step had begun and not committed (None: between steps)."""
    in_flight: frozenset[str]
    """Calls started and not finished: the kill cut them short."""
    ran_twice: frozenset[str]
    """Calls cut short after their side effect: they must legitimately run again."""


LANDED: dict[int, list[Kill]] = {}
"""Where the kills of each point landed, for the coverage check at the end."""


def kill_point(point: int, reference: Reference, tmp: Path) -> None:
    rng = random.Random(point)
    db, effects = tmp / f"p{point}.db", tmp / f"p{point}.effects"
    # Spread over the run: odd points after a side effect (between it and its result),
    # even ones after a record, up to the last (a few kills land after the run ended);
    # point 0 kills at once, most likely before the run's first commit.
    records, calls = len(reference.log.kinds), len(call_ids())
    if point == 0:
        first = Moment()
    elif point % 2:
        first = Moment(effects=1 + (point * calls) // POINTS)
    else:
        first = Moment(records=1 + (point * records) // POINTS)
    moments = [first]
    kills: list[Kill] = []
    ran_at_kill: dict[str, int] = {}
    """Per call cut short: how many times it had run when it was last cut short."""
    runs_when_finished: dict[str, int] = {}
    """Per call whose tool_call_finished had committed at a kill: its runs by then."""

    def check_no_rerun(what: str, log_tail: list[str]) -> None:
        ran = executions(effects)
        rerun = sorted(c for c, n in runs_when_finished.items() if ran[c] != n)
        assert not rerun, (
            f"{what}: tool calls whose tool_call_finished had committed ran again: {rerun}; "
            f"log at the kill before ended with {log_tail}"
        )

    log_tail: list[str] = []
    log = LogView()
    for number in range(2 if point % SECOND_KILL_EVERY == 0 else 1):
        if number:  # also kill the process resuming it, a few records further on
            moment = Moment(records=len(log.kinds) + rng.randint(1, max(records // 4, 1)))
            moments.append(moment)
        moment = moments[-1]
        what = f"point {point}, process {number + 1} killed at {moment}"
        killed = kill_at(spawn(db, effects), moment, db, effects)
        check_no_rerun(what, log_tail)
        if not killed:
            break  # it ran to the end before the kill
        log, ran = read_log(db), executions(effects)
        in_flight = frozenset(log.started - log.finished)
        last = log.kinds[-1] if log.kinds else None
        again = frozenset(c for c in in_flight if ran[c])
        kills.append(Kill(moment, last, log.inside, in_flight, again))
        assert not set(ran) - log.started, f"{what}: a call ran before it was recorded started"
        assert all(ran[c] >= 1 for c in log.finished), f"{what}: finished without running"
        for call in in_flight:
            ran_at_kill[call] = ran[call]
        for call in log.finished:
            runs_when_finished.setdefault(call, ran[call])
        log_tail = log.kinds[-6:]
    finish(db, effects, f"point {point}, the last resume")  # a no-op if it had ended
    check_no_rerun(f"point {point}, the last resume", log_tail)
    LANDED[point] = kills
    where = f"point {point} (kills at {[str(k.moment) for k in kills]})"
    final = read_log(db, full=True)
    assert final.verified is None, f"{where}: the hash chain does not verify: {final.verified}"
    assert final.state == reference.dump, f"{where}: final state differs from the reference"
    assert final.replayed == reference.dump, f"{where}: the replayed log differs"
    assert final.steps == reference.log.steps, (
        f"{where}: the log's steps differ from an uninterrupted run's (lost or duplicated "
        f"events); kinds: {final.kinds}"
    )
    expected = Counter({c: ran_at_kill.get(c, 0) + 1 for c in call_ids()})
    assert executions(effects) == expected, (
        f"{where}: tool executions differ from one per call plus one per cut-short run"
    )


@pytest.mark.parametrize("group", range(GROUPS))
def test_sigkill_anywhere_then_resume_equals_uninterrupted(
    group: int, reference: Reference, tmp_path: Path
) -> None:
    for point in range(group, POINTS, GROUPS):
        kill_point(point, reference, tmp_path)


def test_kills_landed_in_every_phase_of_the_run() -> None:
    """The kill points really covered the run: inside nodes, inside tool calls, between."""
    if len(LANDED) < POINTS:
        pytest.skip("needs every kill point of the groups above in this session")
    kills = [k for ks in LANDED.values() for k in ks]
    landed = Counter(k.last_kind for k in kills)
    inside = Counter(k.inside for k in kills)
    twice = sum(1 for k in kills if k.ran_twice)
    report = (
        f"{len(kills)} kills; last event at the kills: {dict(landed)}; open step: "
        f"{dict(inside)}; {twice} cut a call short after its side effect"
    )
    print(report)
    assert len(kills) >= POINTS, report
    assert sum(1 for k in kills if k.in_flight) >= 5, f"few kills inside tool calls; {report}"
    assert inside["agent"] >= 5 and inside["tools"] >= 5, f"few kills inside steps; {report}"
    assert landed["tool_call_finished"] >= 3, f"few kills between tool results; {report}"
    assert twice >= 1, f"no kill fell between a side effect and its result; {report}"


async def test_resume_after_the_final_commit_changes_nothing(tmp_path: Path) -> None:
    """A kill after `run_completed` committed, then `ainvoke(None)`: nothing may change."""
    config = {"thread_id": THREAD}
    async with SQLiteEventStore(tmp_path / "done.db") as store:
        graph = build_graph(store, str(tmp_path / "effects.txt"))
        start = Message.text_message("start", message_id="u-1")
        await graph.ainvoke({"messages": [start]}, config)
        before, seq = comparable(await graph.aget_state(config)), await store.last_seq(THREAD)
        await graph.ainvoke(None, config)  # what a process restarted after the crash does
        tail = [r.kind async for r in store.read(THREAD, seq + 1)]
        assert tail == [], f"resuming a completed run appended {tail}"
        assert comparable(await graph.aget_state(config)) == before
