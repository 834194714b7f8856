"""`agentlog verify THREAD` compares every snapshot with the log by default: a forged one
(right hash, wrong content) fails the check, named, and stays inert on screen."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from agentlog.events import SQLiteEventStore
from agentlog.projections import fold_at, write_snapshot
from tests.helpers import agentlog, step_events


async def build(db: Path) -> None:
    async with SQLiteEventStore(db) as store:
        seq = 0
        for step in range(1, 21):
            records = await store.append("t", step_events(step), expected_seq=seq)
            seq = records[-1].seq
            if step == 10:
                fold = await fold_at(store, "t")
                await write_snapshot(store, "t", fold.seq, fold.state, hash=fold.hash)


def test_verify_compares_snapshots_and_catches_a_forged_one(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    asyncio.run(build(db))
    clean = agentlog("verify", "t", "--db", db)
    assert clean.returncode == 0, clean.stderr
    assert "snapshots: all 1 agree with the log" in clean.stdout
    quiet = agentlog("verify", "--db", db, "--json")
    assert "snapshots" not in json.loads(quiet.stdout)  # off by default for every thread

    conn = sqlite3.connect(db)
    with conn:
        (state,) = conn.execute("SELECT state FROM snapshots WHERE thread_id = 't'").fetchone()
        forged = bytes(state).replace(b"agent", b"evil\x1b")
        assert forged != bytes(state)
        conn.execute("UPDATE snapshots SET state = ? WHERE thread_id = 't'", (forged,))
    conn.close()

    caught = agentlog("verify", "t", "--db", db)
    assert caught.returncode == 1
    assert "snapshot" in caught.stderr and "differ from the log" in caught.stderr
    assert "\x1b" not in caught.stdout + caught.stderr
    report = json.loads(agentlog("verify", "t", "--db", db, "--json").stdout)
    assert report["snapshots"]["ok"] is False
    assert agentlog("verify", "t", "--no-snapshots", "--db", db).returncode == 0
