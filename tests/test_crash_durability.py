"""Durability modes under SIGKILL: a real process runs a graph (a tool call, then plain
steps) in each mode, is killed while its last node runs, and the log holds exactly what
the guarantees page says that mode keeps; resumed, the run ends as an uninterrupted one,
and the tool, whose records are durable in every mode, has run once."""

from __future__ import annotations

import asyncio
import select
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
from agentlog.projections import replay
from tests.workers.durability_run import THREAD, Work, build

from .helpers import spawn_worker, wait_ready


def until(proc: Any, word: str, timeout: float = 60.0) -> None:
    """Block until the worker prints `word` (read line by line from its stdout)."""
    assert proc.stdout is not None
    while True:
        readable, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if readable else ""
        if line.strip() == word:
            return
        if not line:
            proc.kill()
            _, err = proc.communicate(timeout=timeout)
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
    proc = spawn_worker("durability_run", db, effects, mode, "run")
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
    resumed = spawn_worker("durability_run", db, effects, mode, "resume")
    wait_ready(resumed)
    until(resumed, "done")
    resumed.wait(timeout=60)
    state, replayed, verified = final(db)
    assert state.done == ["a", "b", "hold"]  # as an uninterrupted run ends
    assert replayed == state and verified
    assert effects.read_text().split() == ["k1"]  # the tool ran once, whatever the mode
