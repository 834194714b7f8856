"""Connecting to PostgreSQL the way a hurried user gets it wrong: a server that never answers,
a libpq `?connect_timeout=`, a misspelt option, a schema name PostgreSQL would not keep.
Each one is a one-line error naming what to fix, never a traceback or a silent hang."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator

import pytest

pytest.importorskip("asyncpg")

from agentlog.actors.testing import until
from agentlog.events import InvalidArgumentError, StoreUnavailableError
from agentlog.events.stores import postgres
from agentlog.events.stores.postgres import PostgresEventStore, split_connect_timeout

from .helpers import agentlog
from .workers.pg_env import DSN, needs_pg


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word (a firewall, a wrong
    service): a connection attempt can only end by its timeout."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


async def test_a_server_that_never_answers_fails_after_the_timeout_saying_so(
    silent_port: int,
) -> None:
    store = PostgresEventStore(
        f"postgresql://app:pw@127.0.0.1:{silent_port}/log?connect_timeout=0.3"
    )
    assert store.connect_timeout == 0.3 and "connect_timeout" not in store.dsn
    with pytest.raises(StoreUnavailableError) as info:
        await asyncio.wait_for(store.open(), timeout=20)
    message = str(info.value)
    assert "no answer within 0.3 s" in message and "connect_timeout" in message
    assert "pw@" not in message
    await store.close()


def test_the_db_command_names_the_timeout_too(silent_port: int) -> None:
    dsn = f"postgresql://app@127.0.0.1:{silent_port}/log?connect_timeout=0.3"
    result = agentlog("db", "status", "--dsn", dsn, timeout=30)
    assert result.returncode == 1, result.stderr
    assert "no answer within 0.3 s" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("bad", ["0", "-1", "soon"])
def test_a_connect_timeout_that_is_not_positive_seconds_is_refused(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match="connect_timeout"):
        split_connect_timeout(f"postgresql://h/db?connect_timeout={bad}", 10.0)
    with pytest.raises(InvalidArgumentError, match="connect_timeout"):
        PostgresEventStore("postgresql://h/db", connect_timeout=float(bad) if bad != "soon" else 0)


def test_the_other_options_of_a_dsn_are_kept() -> None:
    dsn, seconds = split_connect_timeout(
        "postgresql://h/db?sslmode=disable&connect_timeout=4&application_name=x", 10.0
    )
    assert seconds == 4.0 and dsn == "postgresql://h/db?sslmode=disable&application_name=x"
    assert split_connect_timeout("postgresql://h/db", 7.5) == ("postgresql://h/db", 7.5)


@pytest.mark.parametrize("where", ["?schema=Bad-Name", "?schema=a;drop"])
@pytest.mark.parametrize("command", ["status", "upgrade"])
def test_a_bad_schema_name_in_the_dsn_is_a_usage_error(where: str, command: str) -> None:
    result = agentlog("db", command, "--dsn", f"postgresql://app@127.0.0.1:1/log{where}")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "lower-case identifier" in result.stderr
    assert "--dsn" in result.stderr


def test_a_bad_schema_option_is_a_usage_error() -> None:
    result = agentlog("db", "status", "--dsn", "postgresql://app@127.0.0.1:1/log",
                      "--schema", "Support")  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "--schema" in result.stderr and "'Support'" in result.stderr


@needs_pg
def test_a_misspelt_option_in_the_dsn_is_named_as_such() -> None:
    result = agentlog("db", "status", "--dsn", f"{DSN}?schem=x")
    assert result.returncode == 1, result.stderr
    assert '"schem"' in result.stderr and "?schema=" in result.stderr


@needs_pg
async def test_a_backend_killed_mid_statement_is_named_and_the_next_call_reconnects() -> None:
    import asyncpg

    from .workers.pg_env import fresh_schema

    async with fresh_schema() as schema, PostgresEventStore(DSN, schema=schema) as store:
        slow = asyncio.ensure_future(store._query("fetchval", "SELECT pg_sleep(30)"))
        killer = await asyncpg.connect(DSN)
        try:

            async def kill() -> list[object]:  # once the sleep runs, kill its backend
                return await killer.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = $1 AND query LIKE 'SELECT pg_sleep%'",
                    f"agentlog:{schema}",
                )

            killed = await until(kill, interval=0.02)
        finally:
            await killer.close()
        assert killed
        with pytest.raises(StoreUnavailableError) as info:
            await asyncio.wait_for(slow, timeout=60)
        # asyncpg reports the kill as the server said it ("terminating connection due to
        # administrator command") or, when the loss lands mid-protocol on a busy machine, as
        # its own InternalClientError: either way the error says the connection was lost
        said = str(info.value)
        assert "connection to PostgreSQL was lost" in said, said
        assert "administrator command" in said or "InternalClientError" in said, said
        assert "terminate()" not in str(info.value)
        assert await store.threads() == []  # the next call reconnects


@needs_pg
async def test_a_connection_lost_while_opening_is_a_typed_error_and_a_new_open_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backend killed while the store checks its schema (seen when a test kills backends
    as writers start) fails the open with StoreUnavailableError, not asyncpg's own error."""
    import asyncpg

    from .workers.pg_env import fresh_schema

    real = postgres.check_schema

    async def lost(*args: object) -> None:
        raise asyncpg.exceptions.InternalClientError("cannot switch to state 12")

    async with fresh_schema() as schema:
        monkeypatch.setattr(postgres, "check_schema", lost)
        store = PostgresEventStore(DSN, schema=schema)
        with pytest.raises(StoreUnavailableError, match="lost while checking the schema"):
            await store.open()
        await store.close()
        monkeypatch.setattr(postgres, "check_schema", real)
        async with PostgresEventStore(DSN, schema=schema) as again:
            assert await again.threads() == []


@needs_pg
async def test_db_status_exits_3_until_the_schema_is_ready() -> None:
    from .workers.pg_env import fresh_schema, new_schema_name

    missing = agentlog("db", "status", "--dsn", f"{DSN}?schema={new_schema_name()}", "--json")
    assert missing.returncode == 3, missing.stderr
    assert json.loads(missing.stdout)["ready"] is False
    async with fresh_schema() as schema:
        ready = agentlog("db", "status", "--dsn", f"{DSN}?schema={schema}")
        assert ready.returncode == 0 and ready.stdout.strip().endswith("ready"), ready.stderr
