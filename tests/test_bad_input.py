"""Bad input, on real bytes in real files: a typed error naming the problem, nothing written."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentlog.events import (
    ChainBrokenError,
    CorruptDatabaseError,
    CorruptRecordError,
    MessageAppended,
    NotAnAgentlogDatabaseError,
    SchemaVersionError,
    SQLiteEventStore,
    UnknownEventKindError,
    register_upcaster,
    unregister_upcaster,
)
from agentlog.projections import state_at

from .helpers import edit_db, rechain, step_events, text_event


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def read_all(db: Path, thread: str = "t") -> list[Any]:
    async with SQLiteEventStore(db) as store:
        return [r async for r in store.read(thread)]


async def build(db: Path) -> None:
    async with SQLiteEventStore(db) as store:
        await store.append("t", step_events(1), expected_seq=0)


def test_a_text_file_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("dear diary\n" * 100)
    before = digest(path)
    with pytest.raises(NotAnAgentlogDatabaseError, match="not a SQLite file"):
        asyncio.run(read_all(path))
    assert digest(path) == before and not Path(f"{path}-wal").exists()


def test_a_directory_is_not_a_database(tmp_path: Path) -> None:
    with pytest.raises(NotAnAgentlogDatabaseError, match="directory"):
        asyncio.run(read_all(tmp_path))


def test_a_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    asyncio.run(build(db))
    edit_db(db, "PRAGMA user_version = 99")
    before = digest(db)
    with pytest.raises(SchemaVersionError, match="schema version 99"):
        asyncio.run(read_all(db))
    assert digest(db) == before


def test_a_damaged_file_is_a_typed_error(tmp_path: Path) -> None:
    db = tmp_path / "damaged.db"
    asyncio.run(build(db))
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(db.read_bytes())
    for i in range(100, len(data)):
        data[i] = 0xA5
    db.write_bytes(bytes(data))
    with pytest.raises((CorruptDatabaseError, NotAnAgentlogDatabaseError)):
        asyncio.run(read_all(db))


@pytest.mark.parametrize(
    ("edit", "chained", "error", "match"),
    [
        ("SET payload = x'c1c1c1' WHERE seq = 2", False, ChainBrokenError, "seq 2 of thread 't'"),
        ("SET payload = x'c1c1c1' WHERE seq = 2", True, CorruptRecordError, "seq 2 of thread"),
        ("SET kind = 'node_entered' WHERE seq = 2", True, CorruptRecordError, "seq 2"),
        ("SET kind = 'alien_landed' WHERE seq = 1", False, ChainBrokenError, "seq 1"),
        (
            "SET kind = 'alien_landed' WHERE seq = 1",
            True,
            UnknownEventKindError,
            "'alien_landed' at seq 1",
        ),
        ("SET version = 7 WHERE seq = 2", True, SchemaVersionError, "version 7"),
    ],
    ids=[
        "tampered-payload",
        "corrupt-payload",
        "payload-of-another-kind",
        "tampered-kind",
        "unknown-kind",
        "newer-version",
    ],
)
def test_a_bad_row_is_a_typed_error_naming_the_record(
    tmp_path: Path, edit: str, chained: bool, error: type[Exception], match: str
) -> None:
    """An edit behind the store's back breaks the chain; a well-chained row that still cannot
    be read (a newer or foreign writer, or damage hashed in) names its own problem."""
    db = tmp_path / "bad.db"
    asyncio.run(build(db))
    edit_db(db, f"UPDATE events {edit}")
    if chained:
        rechain(db)
    with pytest.raises(error, match=match):
        asyncio.run(read_all(db))


def test_an_older_event_version_is_upcast_on_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "old.db"

    async def write_v1() -> None:
        async with SQLiteEventStore(db) as store:
            await store.append("t", [text_event("hello", "m1")], expected_seq=0)

    asyncio.run(write_v1())
    monkeypatch.setattr(MessageAppended, "VERSION", 2)

    with pytest.raises(SchemaVersionError, match="no upcaster"):
        asyncio.run(read_all(db))

    def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
        message = dict(data["message"])
        message["metadata"] = {**message.get("metadata", {}), "upcast": True}
        return {**data, "message": message}

    register_upcaster("message_appended", 1, v1_to_v2)
    try:

        async def load() -> Any:
            async with SQLiteEventStore(db) as store:
                return await state_at(store, "t")

        state = asyncio.run(load())
        assert state.context[0].metadata == {"upcast": True}
        assert state.context[0].text() == "hello"
    finally:
        unregister_upcaster("message_appended", 1)


def test_register_upcaster_refuses_unknown_kinds() -> None:
    with pytest.raises(UnknownEventKindError):
        register_upcaster("nope", 1, lambda d: d)


def test_record_decoding_never_returns_a_half_event(tmp_path: Path) -> None:
    db = tmp_path / "half.db"
    asyncio.run(build(db))
    conn = sqlite3.connect(db)
    (payload,) = conn.execute("SELECT payload FROM events WHERE seq = 2").fetchone()
    conn.close()
    edit_db(db, "UPDATE events SET payload = ? WHERE seq = 2", payload[: len(payload) // 2])
    with pytest.raises(CorruptRecordError):
        asyncio.run(read_all(db))
    assert msgspec.msgpack.decode(payload)["kind"] == "message_appended"
