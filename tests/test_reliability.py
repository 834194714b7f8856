"""Crashes, racing writers and damaged bytes, on real files and real processes."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from agentlog.actors.testing import until_blocking
from agentlog.events import (
    ConcurrencyError,
    NodeEntered,
    SQLiteEventStore,
    StateUpdated,
    StepAdvanced,
)

from .helpers import records_in, spawn_worker, wait_ready

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def spawn(*args: str) -> subprocess.Popen[str]:
    return spawn_worker("appender", *args)


async def assert_whole_steps(db: Path, thread: str) -> int:
    """Every step on the thread is whole (three events of one seq) and the chain verifies."""
    async with SQLiteEventStore(db) as store:
        report = await store.verify(thread)
        assert report.ok, report
        records = [r async for r in store.read(thread)]
    assert len(records) % 3 == 0, f"{len(records)} records: a torn append"
    for i in range(0, len(records), 3):
        node, update, step = (r.event for r in records[i : i + 3])
        assert isinstance(node, NodeEntered) and node.node == f"{thread}-{i}"
        assert isinstance(update, StateUpdated) and update.values["step_of"] == i
        assert isinstance(step, StepAdvanced) and step.step == i // 3 + 1
    return len(records) // 3


async def test_two_stores_on_one_file_one_winner_per_seq(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    async with SQLiteEventStore(db) as a, SQLiteEventStore(db) as b:
        await a.append("t", [NodeEntered(node="t-0")], expected_seq=0)
        wins = {"a": 0, "b": 0}
        losses = 0
        for round_ in range(40):
            seq = await a.last_seq("t")
            assert seq == await b.last_seq("t")
            results = await asyncio.gather(
                a.append("t", [NodeEntered(node=f"a{round_}")], expected_seq=seq),
                b.append("t", [NodeEntered(node=f"b{round_}")], expected_seq=seq),
                return_exceptions=True,
            )
            assert sum(isinstance(r, list) for r in results) == 1, results
            assert sum(isinstance(r, ConcurrencyError) for r in results) == 1, results
            wins["a" if isinstance(results[0], list) else "b"] += 1
            losses += 1
        records = [r async for r in b.read("t")]
        assert [r.seq for r in records] == list(range(1, 42))
        assert (await a.verify("t")).ok and losses == 40


def test_two_processes_race_on_one_thread(tmp_path: Path) -> None:
    db = tmp_path / "procs.db"
    steps = 60
    procs = [spawn(str(db), "shared", str(steps), "--retry") for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    total = asyncio.run(assert_whole_steps(db, "shared"))
    assert total == 2 * steps


@pytest.mark.parametrize("seed", range(12))
def test_sigkill_mid_append_leaves_only_whole_steps(tmp_path: Path, seed: int) -> None:
    db = tmp_path / "crash.db"
    rng = random.Random(seed)
    total = 0
    for attempt in range(2):
        proc = spawn(str(db), "t", "100000")
        wait_ready(proc)
        # killed once it has appended a (seeded) number of records more: mid-append, at a
        # moment told by its progress rather than by a clock a busy machine slows down
        target = records_in(db) + rng.randint(1, 400)
        until_blocking(
            lambda: records_in(db) >= target or proc.poll() is not None,  # noqa: B023
            interval=0.001,
            what=f"{target} records",
        )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        steps = asyncio.run(assert_whole_steps(db, "t"))
        assert steps >= total, "a committed step was lost"
        total = steps
        del attempt
    assert total > 0
    finish = spawn(str(db), "t", "5")
    _, err = finish.communicate(timeout=60)
    assert finish.returncode == 0, err
    assert asyncio.run(assert_whole_steps(db, "t")) == total + 5


def test_bad_database_file_is_refused_untouched(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    before = foreign.read_bytes()
    from agentlog.events import NotAnAgentlogDatabaseError

    async def open_it() -> None:
        async with SQLiteEventStore(foreign) as store:
            await store.threads()

    with pytest.raises(NotAnAgentlogDatabaseError, match="invoices"):
        asyncio.run(open_it())
    assert foreign.read_bytes() == before
    assert not Path(f"{foreign}-wal").exists()
