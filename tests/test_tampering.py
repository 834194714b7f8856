"""Altered bytes, dropped and swapped records: `verify` names the first bad record."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.events import SQLiteEventStore, VerifyReport

from .helpers import edit_db, step_events

STEPS = 4  # 12 records


async def build(db: Path) -> None:
    async with SQLiteEventStore(db) as store:
        seq = 0
        for step in range(1, STEPS + 1):
            records = await store.append("t", step_events(step), expected_seq=seq, actor="agent")
            seq = records[-1].seq
        await store.append("other", step_events(1), expected_seq=0)


async def verify(db: Path, thread: str = "t") -> VerifyReport:
    async with SQLiteEventStore(db) as store:
        return await store.verify(thread)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "log.db"
    asyncio.run(build(path))
    assert asyncio.run(verify(path)).ok
    return path


@given(seq=st.integers(1, STEPS * 3), offset=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_flipping_any_payload_byte_is_reported(
    tmp_path_factory, seq: int, offset: int, bit: int
) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path_factory.mktemp("flip") / "log.db"
    asyncio.run(build(db))
    conn = sqlite3.connect(db)
    (payload,) = conn.execute(
        "SELECT payload FROM events WHERE thread_id='t' AND seq=?", (seq,)
    ).fetchone()
    data = bytearray(payload)
    data[offset % len(data)] ^= 1 << bit
    with conn:
        conn.execute(
            "UPDATE events SET payload=? WHERE thread_id='t' AND seq=?", (bytes(data), seq)
        )
    conn.close()
    report = asyncio.run(verify(db))
    assert not report.ok and report.first_bad_seq == seq, report
    assert asyncio.run(verify(db, "other")).ok


@pytest.mark.parametrize(
    ("column", "value"),
    [("actor", "'mallory'"), ("at", "at + 1"), ("kind", "'node_entered'"), ("run_id", "'r2'"),
     ("version", "version + 1"), ("hash", "zeroblob(32)"), ("position", "position + 1000")],
)  # fmt: skip
def test_altering_any_envelope_column_is_reported(db: Path, column: str, value: str) -> None:
    edit_db(db, f"UPDATE events SET {column} = {value} WHERE thread_id='t' AND seq=5")
    report = asyncio.run(verify(db))
    assert not report.ok and report.first_bad_seq == 5 and "hash" in (report.problem or "")


def test_a_deleted_record_is_reported(db: Path) -> None:
    edit_db(db, "DELETE FROM events WHERE thread_id='t' AND seq=7")
    report = asyncio.run(verify(db))
    assert not report.ok and report.first_bad_seq == 7 and "missing" in (report.problem or "")


def test_swapped_records_are_reported(db: Path) -> None:
    edit_db(db, "UPDATE events SET seq = -seq WHERE thread_id='t' AND seq IN (4, 5)")
    edit_db(db, "UPDATE events SET seq = CASE seq WHEN -4 THEN 5 ELSE 4 END WHERE seq < 0")
    report = asyncio.run(verify(db))
    assert not report.ok and report.first_bad_seq == 4


def test_a_truncated_tail_is_reported_against_the_head(db: Path) -> None:
    edit_db(db, "DELETE FROM events WHERE thread_id='t' AND seq > 9")
    report = asyncio.run(verify(db))
    assert not report.ok and report.first_bad_seq == 10 and "head says 12" in (report.problem or "")


def test_a_rewritten_history_with_a_fresh_chain_is_caught_by_the_head(db: Path) -> None:
    edit_db(db, "UPDATE threads SET last_hash = zeroblob(32) WHERE thread_id='t'")
    report = asyncio.run(verify(db))
    assert not report.ok and "head hash" in (report.problem or "")
