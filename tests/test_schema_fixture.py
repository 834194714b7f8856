"""Schema evolution: a database written with schema v1 opens, verifies and replays for good.

`fixtures/schema_v1.db` is fixed bytes written by `fixtures/make_v1_fixture.py` (tools, a
node interrupt and its resume, human and node state updates, a fork, snapshots);
`fixtures/schema_v1.json` holds each thread's kinds and the final state the writer replayed.
Every later agentlog must read the file to that same state, upcasting where a kind's version
moved on. Every test works on a copy, so the fixture itself is never touched.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import Command
from agentlog.events import (
    KINDS,
    EventRecord,
    SchemaVersionError,
    SQLiteEventStore,
    register_upcaster,
    unregister_upcaster,
)
from agentlog.events.stores.sqlite import SCHEMA_VERSION, SQLITE_MAGIC
from agentlog.projections import Message, replay, state_at

from .fixtures.make_v1_fixture import DB, EXPECTED, FORK, THREAD, FixtureState, build_graph

EXPECTED_STATE: dict[str, Any] = json.loads(EXPECTED.read_text())["threads"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    """A private copy of the fixture (opening a database may write to it)."""
    before = digest(DB)
    copy = tmp_path / DB.name
    shutil.copyfile(DB, copy)
    yield copy
    assert digest(DB) == before, "a test wrote to the fixture itself"


async def records_of(store: SQLiteEventStore, thread_id: str) -> list[EventRecord]:
    return [r async for r in store.read(thread_id)]


def test_the_fixture_is_one_small_self_contained_file() -> None:
    data = DB.read_bytes()
    assert data.startswith(SQLITE_MAGIC)
    assert len(data) < 100_000
    for suffix in ("-wal", "-shm", "-journal"):
        assert not DB.with_name(DB.name + suffix).exists()
    assert data[18] == data[19] == 1, "the file still says WAL: its log may live elsewhere"
    assert set(EXPECTED_STATE) == {THREAD, FORK}


async def test_the_fixture_opens_verifies_and_replays_to_the_recorded_state(db: Path) -> None:
    async with SQLiteEventStore(db) as store:
        assert await store.threads() == [THREAD, FORK]
        for thread_id, expected in EXPECTED_STATE.items():
            report = await store.verify(thread_id)
            assert report.ok, report
            assert report.records_checked == len(expected["kinds"])
            records = await records_of(store, thread_id)
            assert [r.kind for r in records] == expected["kinds"]
            assert {r.version for r in records} == {1}
            replayed = replay(records, FixtureState)
            assert replayed.model_dump(mode="json") == expected["state"]
            # The snapshots in the file are of the same state class and agree with the log.
            snapshot = await store.load_snapshot(thread_id)
            assert snapshot is not None
            assert snapshot.state_type == f"{FixtureState.__module__}.FixtureState"
            from_snapshot = await state_at(store, thread_id, state_cls=FixtureState)
            assert from_snapshot.model_dump(mode="json") == expected["state"]


async def test_time_travel_reads_the_fixture_as_its_writer_did(db: Path) -> None:
    async with SQLiteEventStore(db) as store:
        app = build_graph().compile(checkpointer=store)
        source, fork = {"thread_id": THREAD}, {"thread_id": FORK}
        history = await app.aget_state_history(source)
        assert [(e.step, e.node, e.status) for e in history] == [
            (1, "agent", "running"),
            (2, "tools", "running"),
            (3, "agent", "running"),
            (4, "approve", "completed"),
        ]
        edits = await app.ahistory(source, kinds=["state_updated"])
        assert [(r.actor, r.summary) for r in edits] == [
            ("user", "user set topic"),
            ("agent", "agent set notes"),
            ("alice", "alice set notes (double-checked)"),
            ("approve", "approve set approved"),
        ]
        # The fork in the file starts from the source's step 2, and says so.
        forked = (await records_of(store, FORK))[0]
        at_two = await app.aget_state(source, at_step=2)
        assert forked.event.source_seq == history[1].last_seq  # type: ignore[union-attr]
        start = await app.aget_state(fork, at_seq=1)
        assert start.context == at_two.context
        assert start.execution_meta.step == 2


async def test_the_fixture_thread_goes_on_under_todays_runtime(db: Path) -> None:
    async with SQLiteEventStore(db) as store:
        before = await records_of(store, THREAD)
        app = build_graph().compile(checkpointer=store)
        config = {"thread_id": THREAD}
        out = await app.ainvoke({"messages": [Message.text_message("and Bergen?")]}, config)
        assert out["messages"][-1].text() == "answer: sunny in Oslo"
        out = await app.ainvoke(Command(resume="no"), config, include_state=True)
        state = out["state"]
        assert state.execution_meta.status.value == "completed"
        assert state.approved is False
        after = await records_of(store, THREAD)
        assert after[: len(before)] == before
        assert (await store.verify(THREAD)).ok
        assert replay(after, FixtureState) == state


def counting(calls: list[dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """An upcaster that changes nothing and remembers each payload it lifted."""

    def upcast(data: dict[str, Any]) -> dict[str, Any]:
        calls.append(data)
        return dict(data)

    return upcast


@pytest.mark.parametrize(
    "kind", ["message_appended", "state_updated", "tool_call_finished", "forked", "resumed"]
)
async def test_an_upcaster_for_a_bumped_version_replays_the_fixture_to_the_same_state(
    db: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    current = KINDS[kind].VERSION  # the fixture's records are at 1: built-ins lift them here
    monkeypatch.setattr(KINDS[kind], "VERSION", current + 1)
    async with SQLiteEventStore(db) as store:
        holder = next(t for t, e in EXPECTED_STATE.items() if kind in e["kinds"])
        with pytest.raises(SchemaVersionError, match="no upcaster"):
            await records_of(store, holder)
        calls: list[dict[str, Any]] = []
        register_upcaster(kind, current, counting(calls))
        try:
            total = 0
            for thread_id, expected in EXPECTED_STATE.items():
                records = await records_of(store, thread_id)
                assert replay(records, FixtureState).model_dump(mode="json") == expected["state"]
                assert (await store.verify(thread_id)).ok
                total += expected["kinds"].count(kind)
            assert total > 0, f"the fixture holds no {kind!r}: the test proves nothing"
            assert len(calls) == total
        finally:
            unregister_upcaster(kind, current)


def test_the_fixture_has_the_schema_this_agentlog_writes() -> None:
    conn = sqlite3.connect(f"file:{DB}?mode=ro", uri=True)
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
    finally:
        conn.close()
    assert version == SCHEMA_VERSION == 1
