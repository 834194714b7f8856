"""A runtime process killed with SIGKILL mid-way (50 api runs, an event trigger and a timer in
flight), then started again on the same file: every run completes exactly once, every
thread's log verifies, no timer slot or event fires twice, no committed tool result re-runs."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from agentlog.actors.testing import until_blocking
from agentlog.events import SQLiteEventStore
from tests.helpers import ROOT, spawn_worker, wait_ready

RUNS = 50


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["at-once", "after-a-tool-result"])
def test_a_killed_runtime_restarts_and_every_run_completes_exactly_once(
    tmp_path: Path, moment: str
) -> None:
    """Killed as soon as its runs are accepted (no call has ended: they take 0.2 s at
    least), or once a tool result is committed (most calls are still running)."""
    db, effects = tmp_path / "runtime.db", tmp_path / "effects.log"
    first = spawn_worker("runtime_app", db, effects, "first", str(RUNS))
    wait_ready(first)
    later = moment == "after-a-tool-result"
    if later:
        until_blocking(lambda: tool_results(db) > 0, what="a tool result in the log")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    second = subprocess.run(
        [sys.executable, "-m", "tests.workers.runtime_app",
         str(db), str(effects), "second", str(RUNS)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr[-3000:]
    restart_position = int(second.stdout.split()[0])
    assert second.stdout.split()[-1] == "done"
    asyncio.run(check(db, effects, restart_position, expect_done=later))


def tool_results(db: Path) -> int:
    """How many tool results the live database holds (a read-only look, as another process)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return 0
    try:
        sql = "SELECT count(*) FROM events WHERE kind = 'tool_call_finished'"
        return int(conn.execute(sql).fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


async def check(db: Path, effects: Path, restart_position: int, expect_done: bool) -> None:
    async with SQLiteEventStore(db) as store:
        runtime_records = [r async for r in store.read("__runtime__")]
        accepted = [r.event for r in runtime_records if r.kind == "trigger_accepted"]
        api = [a for a in accepted if a.entry_point == "api"]
        assert sorted(a.idempotency_key for a in api) == sorted(f"k{i}" for i in range(RUNS))
        done_before = {
            r.event.trigger_id
            for r in runtime_records
            if r.kind == "trigger_finished" and r.position <= restart_position
        }
        assert len({a.trigger_id for a in api} - done_before) > 0, "the kill came too late"
        finished = Counter(
            r.event.trigger_id
            for r in runtime_records
            if r.kind == "trigger_finished" and r.event.outcome == "completed"
        )
        for a in api:
            assert finished[a.trigger_id] == 1, f"{a.thread_id} finished {finished[a.trigger_id]}x"
            records = [r async for r in store.read(a.thread_id)]
            assert [r.kind for r in records].count("run_completed") == 1
            assert (await store.verify(a.thread_id)).ok
        slots = [a.slot for a in accepted if a.entry_point == "tick"]
        assert len(slots) == len(set(slots)), "a timer slot fired twice"
        sources = [a.source_position for a in accepted if a.entry_point == "after"]
        assert len(sources) == len(set(sources)), "an event fired its trigger twice"
        completions = [
            r.position
            async for r in store.read_all(0)
            if r.kind == "run_completed" and r.thread_id in {a.thread_id for a in api}
        ]
        assert sorted(sources) == sorted(completions), "an event trigger was missed or extra"
        committed_before = set()
        async for record in store.read_all(0):
            if record.kind == "tool_call_finished" and record.position <= restart_position:
                committed_before.add(record.event.call_id)
    if expect_done:
        assert committed_before, "no tool result was committed before the kill"
    lines = [line.split() for line in effects.read_text().splitlines()]
    again = [call for phase, call in lines if phase == "second" and call in committed_before]
    assert not again, f"committed tool results ran again after the restart: {again[:5]}"
    assert Counter(call for _, call in lines).keys() >= {f"ship-{a.thread_id}" for a in api}
