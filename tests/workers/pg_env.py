"""The PostgreSQL test environment: the server from AGENTLOG_PG_DSN, one schema per test.

Tests skip with a clear reason when AGENTLOG_PG_DSN is unset (`.ci/run` sets it to the local
server); each test creates a schema of its own with the real upgrade and drops it after.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from agentlog.events import EventStore, MemoryEventStore, SQLiteEventStore

DSN = os.environ.get("AGENTLOG_PG_DSN", "")
SKIP_REASON = (
    "AGENTLOG_PG_DSN is unset: set it to a PostgreSQL server to run these tests, e.g. "
    "AGENTLOG_PG_DSN=postgresql://postgres@127.0.0.1:5432/test"
)
needs_pg = pytest.mark.skipif(not DSN, reason=SKIP_REASON)


def new_schema_name() -> str:
    """A fresh schema name no other test (or xdist worker) uses."""
    return f"t_{uuid.uuid4().hex[:16]}"


async def create_schema(schema: str) -> None:
    """Create `schema` at the current version, as `agentlog db upgrade` does."""
    import asyncpg

    from agentlog.events.stores.postgres_schema import upgrade_schema

    conn = await asyncpg.connect(DSN)
    try:
        await upgrade_schema(conn, schema)
    finally:
        await conn.close()


async def drop_schema(schema: str) -> None:
    """Drop `schema` and everything in it."""
    import asyncpg

    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@asynccontextmanager
async def fresh_schema() -> AsyncIterator[str]:
    """A new, upgraded schema for the duration of the block, dropped after."""
    schema = new_schema_name()
    await create_schema(schema)
    try:
        yield schema
    finally:
        await drop_schema(schema)


BACKENDS = ["memory", "sqlite", "postgres"]
"""The store backends a test parametrised over all of them runs on."""


@asynccontextmanager
async def backend_store(kind: str, tmp_path: Path) -> AsyncIterator[EventStore]:
    """An open store of backend `kind` (one of `BACKENDS`) on a ticking clock: a file under
    `tmp_path`, or a fresh PostgreSQL schema (the test skips when AGENTLOG_PG_DSN is unset)."""
    from tests.conftest import ticking_clock

    if kind == "memory":
        yield MemoryEventStore(clock=ticking_clock())
    elif kind == "sqlite":
        async with SQLiteEventStore(tmp_path / "log.db", clock=ticking_clock()) as sqlite:
            yield sqlite
    else:
        if not DSN:
            pytest.skip(SKIP_REASON)
        from agentlog.events.stores.postgres import PostgresEventStore

        async with (
            fresh_schema() as schema,
            PostgresEventStore(DSN, schema=schema, clock=ticking_clock()) as pg,
        ):
            yield pg
