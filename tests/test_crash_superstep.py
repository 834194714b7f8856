"""Crash recovery of supersteps: SIGKILL a real run of a branching graph (`Send` map-reduce,
a ToolNode and a plain node in one step, a join) at points spread over it, resume, compare.

The worker is tests/workers/superstep_run.py; the kill helpers are those of
tests/test_crash_recovery.py. Checked, as DESIGN.md promises for a step:

- the final state equals that of an uninterrupted run, read through the engine and replayed
  from the whole log, and the hash chain verifies;
- a tool call whose `tool_call_finished` had committed at the kill never runs again.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentlog.events import SQLiteEventStore, ToolCallFinished
from agentlog.projections import replay
from tests.test_crash_recovery import THREAD, TIMEOUT, Moment, executions, kill_at
from tests.workers.graph_run import comparable
from tests.workers.superstep_run import CALLS, Report, build_graph

from .helpers import Worker, fork_worker, wait_done

pytestmark = pytest.mark.slow


def spawn(db: Path, effects: Path) -> Worker:
    return fork_worker("superstep_run", db, effects, THREAD, "run")


def finish(db: Path, effects: Path, what: str) -> None:
    wait_done(spawn(db, effects), what, TIMEOUT)


@dataclass(frozen=True)
class Outcome:
    state: dict[str, Any]
    replayed: dict[str, Any]
    finished: frozenset[str]
    records: int
    verified: bool


def read(db: Path) -> Outcome:
    async def go() -> Outcome:
        async with SQLiteEventStore(db) as store:
            log = [r async for r in store.read(THREAD)]
            state = await build_graph(store).aget_state({"thread_id": THREAD})
            report = await store.verify(THREAD)
        return Outcome(
            comparable(state),
            comparable(replay(log, Report)),
            frozenset(r.event.call_id for r in log if isinstance(r.event, ToolCallFinished)),
            len(log),
            report.ok,
        )

    return asyncio.run(go())


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    tmp = tmp_path_factory.mktemp("reference")
    finish(tmp / "x.db", tmp / "effects", "the uninterrupted run")
    outcome = read(tmp / "x.db")
    assert outcome.state == outcome.replayed and outcome.verified
    assert json.dumps(outcome.state["items"]) == json.dumps(
        [f"{s} done" for s in ("ants", "bees", "cats", "dogs", "eels")]
    )
    assert executions(tmp / "effects") == Counter(
        {**{f"work-{s}": 1 for s in ("ants", "bees", "cats", "dogs", "eels")}, "audit": 1}
        | dict.fromkeys(CALLS, 1)
    )
    return outcome


POINTS = [Moment(records=n) for n in (3, 7, 12, 18, 22, 24, 27, 28, 30, 34)] + [
    Moment(effects=n) for n in (2, 5, 6, 7, 8)
]
"""Spread over the reference run's 38 records: the map's branches entered (7) and merged
(12), the fan-out entered (22), its tool calls started (24), finished one by one (27, 28),
its outputs (30); and by side effects, inside the branches themselves."""


@pytest.mark.parametrize("moment", POINTS, ids=str)
def test_sigkill_in_a_superstep_then_resume_equals_uninterrupted(
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
    assert after.verified
    ran = executions(effects)
    if at_kill is not None:
        for call in at_kill.finished:  # committed: answered from the log, never run again
            assert ran[call] == ran_at_kill[call], (call, ran, ran_at_kill)
    for call in CALLS:  # a call cut short runs again at most once per kill
        assert 1 <= ran[call] <= 2
