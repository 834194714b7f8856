"""Durable cursors: a named position kept in the store, moving only forward, on every backend."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.events import (
    CursorMovedBackError,
    CursorsUnsupportedError,
    EventStore,
    InvalidArgumentError,
    MemoryEventStore,
    NodeEntered,
    ReadOnlyStoreError,
    SQLiteEventStore,
    list_cursors,
    load_cursor,
    save_cursor,
)
from agentlog.events.cursors import check_cursor_name

from .workers.pg_env import BACKENDS, DSN, backend_store, fresh_schema, needs_pg


async def _fill(store: EventStore, records: int) -> None:
    for _ in range(records):
        seq = await store.last_seq("t")
        await store.append("t", [NodeEntered(node="n")], expected_seq=seq)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    async with backend_store(request.param, tmp_path) as opened:
        yield opened


async def test_a_new_cursor_is_at_zero_and_moves_forward(store: EventStore) -> None:
    assert await load_cursor(store, "to-redis") == 0
    await _fill(store, 5)
    await save_cursor(store, "to-redis", 3)
    await save_cursor(store, "other", 5)
    assert await load_cursor(store, "to-redis") == 3
    await save_cursor(store, "to-redis", 3)  # the same again: allowed
    await save_cursor(store, "to-redis", 5)
    assert await load_cursor(store, "to-redis") == 5
    listed = await list_cursors(store)
    assert [(c.name, c.position) for c in listed] == [("other", 5), ("to-redis", 5)]
    assert listed[1].updated_at > listed[0].updated_at  # the store's clock ticks per call


async def test_moving_back_is_refused_and_writes_nothing(store: EventStore) -> None:
    await _fill(store, 4)
    await save_cursor(store, "c", 4)
    with pytest.raises(CursorMovedBackError) as info:
        await save_cursor(store, "c", 2)
    assert (info.value.stored, info.value.asked) == (4, 2)
    assert "'c'" in str(info.value) and "own" in str(info.value)
    assert await load_cursor(store, "c") == 4


async def test_a_position_past_the_log_is_refused(store: EventStore) -> None:
    await _fill(store, 2)
    with pytest.raises(InvalidArgumentError, match="the log ends at 2"):
        await save_cursor(store, "c", 3)
    assert await list_cursors(store) == []
    await save_cursor(store, "c", 0)  # "nothing done yet" is always a place to be
    assert await load_cursor(store, "c") == 0


@pytest.mark.parametrize("name", ["", "a b", "x" * 129, "\x1b[2J", "ü", None, 3])
async def test_a_bad_name_is_refused_before_anything_is_read(name: object) -> None:
    store = MemoryEventStore()
    with pytest.raises(InvalidArgumentError, match="cursor name"):
        await load_cursor(store, name)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="cursor name"):
        await save_cursor(store, name, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("position", [-1, 1.0, True, "1", None])
async def test_a_bad_position_is_refused(position: object) -> None:
    store = MemoryEventStore()
    with pytest.raises(InvalidArgumentError, match="int >= 0"):
        await save_cursor(store, "c", position)  # type: ignore[arg-type]


async def test_a_store_of_ones_own_keeps_no_cursors() -> None:
    class Own(MemoryEventStore):
        pass

    class Wrapped:  # not an agentlog store at all
        pass

    assert await load_cursor(Own(), "c") == 0  # a subclass keeps the backend's cursors
    with pytest.raises(CursorsUnsupportedError, match="keeps no cursors"):
        await load_cursor(Wrapped(), "c")  # type: ignore[arg-type]


@given(st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=12))
async def test_the_cursor_is_the_highest_position_saved(moves: list[int]) -> None:
    store = MemoryEventStore()
    await _fill(store, 6)
    highest = 0
    for move in moves:
        if move < highest:
            with pytest.raises(CursorMovedBackError):
                await save_cursor(store, "c", move)
        else:
            await save_cursor(store, "c", move)
            highest = move
        assert await load_cursor(store, "c") == highest


async def test_a_sqlite_cursor_survives_the_process_and_old_files_gain_the_table(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as store:
        await _fill(store, 3)
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE cursors")  # a file written before cursors existed
    conn.close()
    async with SQLiteEventStore(db, readonly=True) as readonly:
        assert await load_cursor(readonly, "c") == 0  # read-only: nothing to create, none kept
        with pytest.raises(ReadOnlyStoreError):
            await save_cursor(readonly, "c", 1)
    script = (
        "import asyncio, sys\n"
        "from agentlog.events import SQLiteEventStore, save_cursor\n"
        "async def main():\n"
        "    async with SQLiteEventStore(sys.argv[1]) as store:\n"
        "        await save_cursor(store, 'c', 2)\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", script, str(db)], check=True, timeout=60)
    async with SQLiteEventStore(db, readonly=True) as readonly:
        assert await load_cursor(readonly, "c") == 2


@needs_pg
async def test_a_postgres_cursor_needs_schema_version_2_and_is_read_only_on_a_replica() -> None:
    import asyncpg  # type: ignore[import-untyped]

    from agentlog.events.stores.postgres import PostgresEventStore
    from agentlog.events.stores.postgres_schema import SCHEMA_VERSION

    assert SCHEMA_VERSION >= 2
    async with fresh_schema() as schema:
        conn = await asyncpg.connect(DSN)
        try:
            assert await conn.fetchval("SELECT to_regclass($1)", f'"{schema}".cursors')
        finally:
            await conn.close()
        async with PostgresEventStore(DSN, schema=schema) as store:
            await _fill(store, 2)
            await save_cursor(store, "c", 2)
        async with PostgresEventStore(DSN, schema=schema, readonly=True) as readonly:
            assert await load_cursor(readonly, "c") == 2
            with pytest.raises(ReadOnlyStoreError):
                await save_cursor(readonly, "c", 2)


def test_names_that_pass() -> None:
    for name in ("to-redis", "otel.exporter", "a:b_c-1", "x" * 128):
        assert check_cursor_name(name) == name
