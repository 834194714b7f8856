"""`agentlog verify` while another process appends: no false alarm, and a real tamper is still
caught (the chain is checked up to the head read first; rows beyond it count as damage only
when no append put them there)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from agentlog.events import SQLiteEventStore
from tests.helpers import agentlog, edit_db, spawn_worker, wait_ready


def test_verify_in_a_loop_while_a_writer_appends_never_cries_wolf(tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    writer = spawn_worker("appender", db, "t", "3000")
    try:
        wait_ready(writer)
        verdicts = []
        deadline = time.monotonic() + 60
        while writer.poll() is None and time.monotonic() < deadline and len(verdicts) < 12:
            done = agentlog("verify", "t", "--db", db, "--json")
            if "no thread" in done.stderr or "not found" in done.stderr:
                continue  # the writer has not made its first commit yet
            verdicts.append((done.returncode, done.stdout[-300:], done.stderr[-300:]))
        assert verdicts, "verify never ran while the writer was appending"
        assert all(code == 0 for code, _, _ in verdicts), verdicts
    finally:
        writer.kill()
        writer.wait()

    async def seqs() -> int:
        async with SQLiteEventStore(db) as store:
            return await store.last_seq("t")

    last = asyncio.run(seqs())
    assert agentlog("verify", "t", "--db", db).returncode == 0
    edit_db(db, "UPDATE events SET actor = 'intruder' WHERE thread_id = 't' AND seq = ?", last // 2)
    tampered = agentlog("verify", "t", "--db", db, "--json")
    assert tampered.returncode == 1
    report = json.loads(tampered.stdout)
    assert report["ok"] is False


def test_rows_slipped_in_beyond_the_head_are_damage(tmp_path: Path) -> None:
    db = tmp_path / "beyond.db"

    async def write() -> None:
        from tests.helpers import step_events

        async with SQLiteEventStore(db) as store:
            await store.append("t", step_events(1), expected_seq=0)

    asyncio.run(write())
    edit_db(
        db,
        "INSERT INTO events (thread_id, seq, run_id, actor, at, kind, version, payload, hash, "
        "position) SELECT thread_id, seq + 10, run_id, actor, at, kind, version, payload, hash, "
        "position + 10 FROM events WHERE thread_id = 't' AND seq = 1",
    )
    done = agentlog("verify", "t", "--db", db)
    assert done.returncode == 1
    assert "beyond the thread's head" in done.stdout + done.stderr
