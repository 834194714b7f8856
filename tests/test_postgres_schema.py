"""The Postgres store's explicit, versioned schema; `open_store` URLs; the CLI on `--dsn`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentlog.events import (
    NodeEntered,
    ReadOnlyStoreError,
    SchemaUpgradeRequiredError,
    SchemaVersionError,
    StoreUnavailableError,
    open_store,
)
from agentlog.events.testing import step_events

from .helpers import ROOT, agentlog
from .workers.pg_env import DSN, drop_schema, fresh_schema, needs_pg, new_schema_name

pytestmark = needs_pg


async def _connect() -> Any:
    import asyncpg

    return await asyncpg.connect(DSN)


async def _schema_exists(schema: str) -> bool:
    conn = await _connect()
    try:
        return bool(
            await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema)
        )
    finally:
        await conn.close()


async def _set_version(schema: str, version: int) -> None:
    conn = await _connect()
    try:
        await conn.execute(f'UPDATE "{schema}".meta SET version = $1', version)
    finally:
        await conn.close()


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    async with fresh_schema() as name:
        yield name


async def test_a_missing_schema_is_refused_and_nothing_is_created() -> None:
    from agentlog.events.stores.postgres import PostgresEventStore

    name = new_schema_name()
    store = PostgresEventStore(DSN, schema=name)
    with pytest.raises(SchemaUpgradeRequiredError) as info:
        await store.open()
    assert isinstance(info.value, SchemaVersionError)
    assert "agentlog db upgrade --dsn" in str(info.value) and name in str(info.value)
    await store.close()
    with pytest.raises(SchemaUpgradeRequiredError):  # nor on first use of a lazy store
        await PostgresEventStore(DSN, schema=name).append(
            "t", [NodeEntered(node="n")], expected_seq=0
        )
    assert not await _schema_exists(name)


async def test_an_old_schema_is_refused_until_upgraded(schema: str) -> None:
    from agentlog.events.stores.postgres import PostgresEventStore
    from agentlog.events.stores.postgres_schema import SCHEMA_VERSION, upgrade_schema

    await _set_version(schema, SCHEMA_VERSION - 1)
    with pytest.raises(SchemaUpgradeRequiredError, match="older") as info:
        async with PostgresEventStore(DSN, schema=schema):
            pass
    assert "agentlog db upgrade" in str(info.value)
    conn = await _connect()
    try:
        assert await upgrade_schema(conn, schema) == (SCHEMA_VERSION - 1, SCHEMA_VERSION)
        assert await upgrade_schema(conn, schema) == (SCHEMA_VERSION, SCHEMA_VERSION)
    finally:
        await conn.close()
    async with PostgresEventStore(DSN, schema=schema) as store:
        await store.append("t", step_events(1), expected_seq=0)
        assert (await store.verify("t")).ok


async def test_a_newer_schema_is_refused_and_never_downgraded(schema: str) -> None:
    from agentlog.events.stores.postgres import PostgresEventStore
    from agentlog.events.stores.postgres_schema import schema_version, upgrade_schema

    await _set_version(schema, 99)
    with pytest.raises(SchemaVersionError, match="newer") as info:
        await PostgresEventStore(DSN, schema=schema).open()
    assert not isinstance(info.value, SchemaUpgradeRequiredError)
    assert "upgrade agentlog" in str(info.value)
    conn = await _connect()
    try:
        with pytest.raises(SchemaVersionError, match="newer"):
            await upgrade_schema(conn, schema)
        assert await schema_version(conn, schema) == 99
    finally:
        await conn.close()


async def test_concurrent_upgrades_create_the_schema_once() -> None:
    from agentlog.events.stores.postgres_schema import SCHEMA_VERSION, upgrade_schema

    name = new_schema_name()
    conns = [await _connect() for _ in range(3)]
    try:
        results = await asyncio.gather(*(upgrade_schema(c, name) for c in conns))
        assert sorted(results, key=str) == sorted(
            [(None, SCHEMA_VERSION)] + [(SCHEMA_VERSION, SCHEMA_VERSION)] * 2, key=str
        )
    finally:
        for conn in conns:
            await conn.close()
        await drop_schema(name)


def test_importing_events_loads_no_driver_and_creates_nothing() -> None:
    code = (
        "import sys, agentlog.events; from agentlog.events import open_store; "
        f"s = open_store({DSN + '?schema=never_made'!r}); "
        "print(type(s).__name__, s.schema, 'asyncpg' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.split() == ["PostgresEventStore", "never_made", "True"], done.stderr
    assert not asyncio.run(_schema_exists("never_made"))
    code = "import sys, agentlog.events; print('asyncpg' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "False", done.stderr


async def test_open_store_reads_the_schema_and_hides_the_password(schema: str) -> None:
    async with open_store(f"{DSN}?schema={schema}") as store:
        await store.append("t", step_events(1), expected_seq=0)
    async with open_store(f"{DSN}?schema={schema}", readonly=True) as store:
        assert await store.last_seq("t") == 3
        with pytest.raises(ReadOnlyStoreError):
            await store.append("t", step_events(2), expected_seq=3)
        with pytest.raises(ReadOnlyStoreError):
            await store.claim("t")
    with pytest.raises(StoreUnavailableError) as info:
        await open_store("postgresql://agent:s3cret-pw@127.0.0.1:1/log").open()  # type: ignore[attr-defined]
    assert "s3cret" not in str(info.value) and "***" in str(info.value)


async def test_the_cli_upgrades_and_reads_a_postgres_store() -> None:
    name = new_schema_name()
    dsn = f"{DSN}?schema={name}"
    try:
        refused = agentlog("threads", "--dsn", dsn)
        assert refused.returncode == 1 and "agentlog db upgrade --dsn" in refused.stderr
        assert not await _schema_exists(name)
        made = agentlog("db", "upgrade", "--dsn", dsn, "--json")
        assert made.returncode == 0, made.stderr
        from agentlog.events.stores.postgres_schema import SCHEMA_VERSION

        assert json.loads(made.stdout) == {
            "schema": name,
            "before": None,
            "version": SCHEMA_VERSION,
        }
        assert agentlog("db", "status", "--dsn", dsn).stdout.strip().endswith("ready")
        demo = agentlog("demo", "--dsn", dsn, "--json")
        assert demo.returncode == 0, demo.stderr
        thread = json.loads(demo.stdout)["thread_id"]
        listed = agentlog("threads", "--dsn", dsn, "--json")
        [info] = json.loads(listed.stdout)
        assert info["thread_id"] == thread
        verified = agentlog("verify", "--db", dsn, "--json")  # --db takes the URL too
        assert verified.returncode == 0, verified.stderr
        forked = agentlog("fork", thread, "--step", "1", "--to", "branch", "--dsn", dsn)
        assert forked.returncode == 0 and forked.stdout.strip() == "branch", forked.stderr
        exported = agentlog("export", "branch", "--dsn", dsn)
        assert exported.returncode == 0 and exported.stdout.count("\n") >= 1, exported.stderr
        history = agentlog("history", thread, "--dsn", dsn, "--json")
        assert len(json.loads(history.stdout)) == info["records"] > 0
    finally:
        await drop_schema(name)
