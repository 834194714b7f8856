"""Durability modes under SIGKILL: a real process runs a graph (a tool call, then plain
steps) in each mode, is killed while its last node runs, and the log holds exactly what
the guarantees page says that mode keeps; resumed, the run ends as an uninterrupted one,
and the tool, whose records are durable in every mode, has run once."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from agentlog.events import (
    NodeEntered,
    SQLiteEventStore,
    StepAdvanced,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.projections import AgentState, replay
from tests.test_crash_recovery import THREAD as AGENT_THREAD
from tests.test_crash_recovery import TIMEOUT, Moment, executions, kill_at
from tests.workers.durability_run import THREAD, Work, build
from tests.workers.graph_run import build_graph as agent_graph
from tests.workers.graph_run import call_ids, comparable

from .helpers import fork_worker, wait_ready


def until(proc: Any, word: str) -> None:
    """Block until the worker prints `word`. Read line by line from the pipe's buffer (a
    `select` on the pipe would miss a line read into the buffer along with an earlier one);
    a worker that ends first ends the wait (the suite's timeout catches one that hangs)."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if line.strip() == word:
            return
        if not line:
            _, err = proc.communicate(timeout=TIMEOUT)
            raise AssertionError(f"the worker ended before printing {word!r}:\n{err}")


def logged(db: Path) -> list[Any]:
    async def go() -> list[Any]:
        async with SQLiteEventStore(db) as store:
            if THREAD not in await store.threads():
                return []
            return [r async for r in store.read(THREAD)]

    return asyncio.run(go())


def final(db: Path) -> tuple[Work, Work, bool]:
    async def go() -> tuple[Work, Work, bool]:
        async with SQLiteEventStore(db) as store:
            log = [r async for r in store.read(THREAD)]
            state = await build(store, "", block=False).aget_state({"thread_id": THREAD})
            return state, replay(log, Work), (await store.verify(THREAD)).ok

    return asyncio.run(go())


def steps_done(log: list[Any]) -> list[str]:
    """The nodes whose step committed, in order."""
    entered: list[str] = []
    done: list[str] = []
    for record in log:
        if isinstance(record.event, NodeEntered):
            entered.append(record.event.node)
        elif isinstance(record.event, StepAdvanced):
            done.append(entered[-1])
    return done


@pytest.mark.parametrize("mode", ["sync", "async", "exit"])
def test_sigkill_keeps_what_the_mode_promises(mode: str, tmp_path: Path) -> None:
    db, effects = tmp_path / "x.db", tmp_path / "effects"
    proc = fork_worker("durability_run", db, effects, mode, "run")
    wait_ready(proc)
    until(proc, "holding")  # node `hold` runs: plan, tools, a and b have returned
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    log = logged(db)
    done = steps_done(log)
    # every mode: the tool call's records are in the log before the tool's result is used
    assert sum(isinstance(r.event, ToolCallStarted) for r in log) == 1
    assert sum(isinstance(r.event, ToolCallFinished) for r in log) == 1
    if mode == "sync":  # every step before the running one
        assert done == ["plan", "tools", "a", "b"]
    elif mode == "async":  # at most the last step lost (its append in flight)
        assert done in (["plan", "tools", "a"], ["plan", "tools", "a", "b"])
    else:  # exit: nothing since the tool call's records (the last durable commit)
        assert done == ["plan"]
    resumed = fork_worker("durability_run", db, effects, mode, "resume")
    wait_ready(resumed)
    until(resumed, "done")
    resumed.wait(timeout=60)
    state, replayed, verified = final(db)
    assert state.done == ["a", "b", "hold"]  # as an uninterrupted run ends
    assert replayed == state and verified
    assert effects.read_text().split() == ["k1"]  # the tool ran once, whatever the mode


KILLS = [Moment(records=n) for n in (2, 9, 20, 33)] + [Moment(effects=n) for n in (1, 4, 8)]
"""Spread over the scripted agent's run (tests/workers/graph_run.py): by records in the log
(fewer moments exist in `exit`, whose log grows at each tool call), and by tool executions."""


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("uninterrupted")
    resume_agent(tmp / "x.db", tmp / "effects", "sync")
    return agent_state(tmp / "x.db")[0]


def resume_agent(db: Path, effects: Path, mode: str) -> None:
    proc = fork_worker("graph_run", db, effects, AGENT_THREAD, "run", mode)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0 and out.split() == ["ready", "done"], (out, err)


def agent_state(db: Path) -> tuple[dict[str, Any], dict[str, Any], bool]:
    async def go() -> tuple[dict[str, Any], dict[str, Any], bool]:
        async with SQLiteEventStore(db) as store:
            log = [r async for r in store.read(AGENT_THREAD)]
            state = await agent_graph(store).aget_state({"thread_id": AGENT_THREAD})
            ok = (await store.verify(AGENT_THREAD)).ok
        return comparable(state), comparable(replay(log, AgentState)), ok

    return asyncio.run(go())


def finished_calls(db: Path) -> set[str]:
    async def go() -> set[str]:
        async with SQLiteEventStore(db) as store:
            if AGENT_THREAD not in await store.threads():
                return set()
            return {
                r.event.call_id
                async for r in store.read(AGENT_THREAD)
                if isinstance(r.event, ToolCallFinished)
            }

    return asyncio.run(go())


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["async", "exit"])
@pytest.mark.parametrize("moment", KILLS, ids=str)
def test_sigkill_anywhere_then_resume_equals_uninterrupted(
    mode: str, moment: Moment, uninterrupted: dict[str, Any], tmp_path: Path
) -> None:
    db, effects = tmp_path / "x.db", tmp_path / "effects"
    proc = fork_worker("graph_run", db, effects, AGENT_THREAD, "run", mode)
    killed = kill_at(proc, moment, db, effects)
    finished = finished_calls(db) if killed else set()
    ran_at_kill = executions(effects)
    resume_agent(db, effects, mode)
    state, replayed, verified = agent_state(db)
    assert state == uninterrupted and replayed == uninterrupted and verified
    ran = executions(effects)
    for call in finished:  # committed, in any mode: answered from the log, never run again
        assert ran[call] == ran_at_kill[call], (call, ran, ran_at_kill)
    for call in call_ids():  # a call cut short by the kill runs again, once
        assert 1 <= ran[call] <= 2, (call, ran)
