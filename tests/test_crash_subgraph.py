"""Crash recovery of subgraphs: SIGKILL a real run whose steps run subgraphs (a compiled
graph as a node, with `Send` branches and a ToolNode inside it; a `def` node calling another
graph with mapped input) at points spread over it, resume the parent, compare.

The worker is tests/workers/subgraph_run.py; the kill helpers are those of
tests/test_crash_recovery.py. Checked:

- the final state of the parent and of each subgraph's thread equals that of an
  uninterrupted run, read through the engine and replayed from the log, and `verify_tree`
  finds every chain intact and every link the parent recorded still there;
- a tool call inside the subgraph whose `tool_call_finished` had committed at the kill never
  runs again.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentlog.events import SQLiteEventStore, ToolCallFinished, verify_tree
from agentlog.projections import replay
from tests.test_crash_recovery import THREAD, TIMEOUT, Moment, executions, kill_at
from tests.workers.graph_run import comparable
from tests.workers.subgraph_run import CALLS, SUBJECTS, Draft, Report, Research, build_graph

from .helpers import Worker, fork_worker

pytestmark = pytest.mark.slow


def spawn(db: Path, effects: Path) -> Worker:
    return fork_worker("subgraph_run", db, effects, THREAD, "run")


def finish(db: Path, effects: Path, what: str) -> None:
    proc = spawn(db, effects)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{what}: the resumed run hung for {TIMEOUT}s\n{out}\n{err}")
    assert proc.returncode == 0 and out.split() == ["ready", "done"], (
        f"{what}: the resumed run failed (exit {proc.returncode})\n{out}\n{err}"
    )


@dataclass(frozen=True)
class Outcome:
    state: dict[str, Any]
    replayed: dict[str, Any]
    children: dict[str, dict[str, Any]]
    finished: frozenset[str]
    verified: bool


def read(db: Path) -> Outcome:
    async def go() -> Outcome:
        async with SQLiteEventStore(db) as store:
            graph = build_graph(store)
            log = [r async for r in store.read(THREAD)]
            state = await graph.aget_state({"thread_id": THREAD})
            children: dict[str, dict[str, Any]] = {}
            finished: set[str] = set()
            for thread in await store.threads():
                if thread.startswith(f"{THREAD}|"):
                    records = [r async for r in store.read(thread)]
                    state_cls = Research if "|research:" in thread else Draft
                    children[thread] = comparable(replay(records, state_cls))
                    finished |= {
                        r.event.call_id for r in records if isinstance(r.event, ToolCallFinished)
                    }
            reports = await verify_tree(store, THREAD) if log else []
        return Outcome(
            comparable(state) if log else {},
            comparable(replay(log, Report)) if log else {},
            children,
            frozenset(finished),
            bool(reports) and all(r.ok for r in reports),
        )

    return asyncio.run(go())


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    tmp = tmp_path_factory.mktemp("reference")
    finish(tmp / "x.db", tmp / "effects", "the uninterrupted run")
    outcome = read(tmp / "x.db")
    assert outcome.state == outcome.replayed and outcome.verified
    assert outcome.state["text"] == "; ".join(f"{s} done" for s in SUBJECTS).upper()
    assert len(outcome.children) == 2
    assert executions(tmp / "effects") == Counter(
        {**{f"work-{s}": 1 for s in SUBJECTS}, "draft": 1} | dict.fromkeys(CALLS, 1)
    )
    return outcome


POINTS = [Moment(records=n) for n in (3, 6, 8)] + [Moment(effects=n) for n in range(1, 8)]
"""By the parent's records: its first step, the subgraph node entered, the second subgraph
node entered (the parent's log does not grow while a subgraph runs); by side effects, inside
each subgraph: each `Send` branch, each tool call, the draft."""


@pytest.mark.parametrize("moment", POINTS, ids=str)
def test_sigkill_in_a_subgraph_then_resume_equals_uninterrupted(
    moment: Moment, reference: Outcome, tmp_path: Path
) -> None:
    db, effects = tmp_path / "x.db", tmp_path / "effects"
    killed = kill_at(spawn(db, effects), moment, db, effects)
    at_kill = read(db) if db.exists() and killed else None
    ran_at_kill = executions(effects)
    finish(db, effects, f"the run resumed after a kill at {moment}")
    after = read(db)
    assert after.state == reference.state
    assert after.replayed == reference.state
    assert after.children == reference.children
    assert after.verified
    ran = executions(effects)
    if at_kill is not None:
        for call in at_kill.finished:  # committed: answered from the log, never run again
            assert ran[call] == ran_at_kill[call], (call, ran, ran_at_kill)
    for call in CALLS:  # a call cut short runs again at most once per kill
        assert 1 <= ran[call] <= 2
