"""The PostgreSQL store's schema: its versioned DDL, the upgrade, and the check on open.

Nothing here runs on import, and opening a store never creates or alters a table: the schema
is created and upgraded only by `upgrade_schema` (what `agentlog db upgrade --dsn ...` runs),
so a deployment decides when its database changes. A store refuses a schema that is missing,
older or newer than this agentlog's, with an error naming what to do.

Every object lives in one PostgreSQL schema (default "agentlog"), so several logs can share a
database, and a test can drop its own in one statement.
"""

from __future__ import annotations

import re
from typing import Any

from agentlog.events.errors import InvalidArgumentError, SchemaVersionError

__all__ = [
    "DEFAULT_SCHEMA",
    "SCHEMA_VERSION",
    "SchemaUpgradeRequiredError",
    "check_schema",
    "check_schema_name",
    "schema_version",
    "upgrade_schema",
]

DEFAULT_SCHEMA = "agentlog"
SCHEMA_VERSION = 2
"""The schema version this agentlog reads and writes."""

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class SchemaUpgradeRequiredError(SchemaVersionError):
    """The database holds no agentlog schema yet, or an older one: run the upgrade command."""


def check_schema_name(schema: object) -> str:
    """A schema name is a plain lower-case SQL identifier (it is spliced into statements)."""
    if not isinstance(schema, str) or not _NAME.fullmatch(schema):
        raise InvalidArgumentError(
            f"schema must be a lower-case identifier (letters, digits, '_', at most 63, not "
            f"starting with a digit), got {schema!r}: name it like 'agentlog' or 'support_v2'"
        )
    return schema


def upgrade_command(schema: str) -> str:
    """The command line that creates or upgrades `schema`, as error messages name it."""
    tail = "" if schema == DEFAULT_SCHEMA else f" --schema {schema}"
    return f"agentlog db upgrade --dsn DSN{tail}"


def _steps(s: str) -> list[str]:
    """The DDL of each version, in order: step i brings the schema from version i to i + 1.

    A step is idempotent (IF NOT EXISTS), so re-running a half-applied one is harmless.
    """
    return [
        f"""
        CREATE TABLE IF NOT EXISTS "{s}".meta (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            version   integer NOT NULL
        );
        CREATE TABLE IF NOT EXISTS "{s}".commit_counter (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            position  bigint  NOT NULL
        );
        INSERT INTO "{s}".commit_counter (position) VALUES (0) ON CONFLICT DO NOTHING;
        CREATE TABLE IF NOT EXISTS "{s}".events (
            position  bigint  PRIMARY KEY,
            thread_id text    NOT NULL,
            seq       bigint  NOT NULL,
            run_id    text,
            actor     text,
            at        double precision NOT NULL,
            kind      text    NOT NULL,
            version   integer NOT NULL,
            payload   bytea   NOT NULL,
            hash      bytea   NOT NULL,
            UNIQUE (thread_id, seq)
        );
        CREATE INDEX IF NOT EXISTS events_steps ON "{s}".events (thread_id, seq)
            WHERE kind = 'step_advanced';
        CREATE TABLE IF NOT EXISTS "{s}".threads (
            thread_id      text   PRIMARY KEY,
            last_seq       bigint NOT NULL,
            last_hash      bytea  NOT NULL,
            first_position bigint,
            created_at     double precision NOT NULL,
            updated_at     double precision NOT NULL
        );
        CREATE INDEX IF NOT EXISTS threads_created ON "{s}".threads (first_position)
            WHERE last_seq > 0;
        CREATE TABLE IF NOT EXISTS "{s}".snapshots (
            thread_id  text   NOT NULL,
            seq        bigint NOT NULL,
            state_type text   NOT NULL,
            at         double precision NOT NULL,
            state      bytea  NOT NULL,
            hash       bytea,
            anchor     bytea,
            refs       bytea,
            PRIMARY KEY (thread_id, seq)
        );
        CREATE TABLE IF NOT EXISTS "{s}".claims (
            thread_id    text PRIMARY KEY,
            token        text NOT NULL,
            host         text NOT NULL,
            pid          integer NOT NULL,
            started      text NOT NULL,
            heartbeat_at double precision NOT NULL,
            lease        double precision NOT NULL,
            purpose      text NOT NULL
        );
        """,
        f"""
        CREATE TABLE IF NOT EXISTS "{s}".cursors (
            name       text   PRIMARY KEY,
            position   bigint NOT NULL,
            updated_at double precision NOT NULL
        );
        """,
    ]


assert len(_steps(DEFAULT_SCHEMA)) == SCHEMA_VERSION


async def schema_version(conn: Any, schema: str) -> int | None:
    """The version recorded in `schema`, or None when it holds no agentlog schema."""
    found = await conn.fetchval("SELECT to_regclass($1)", f'"{schema}".meta')
    if found is None:
        return None
    version = await conn.fetchval(f'SELECT version FROM "{schema}".meta')
    return 0 if version is None else int(version)


async def check_schema(conn: Any, schema: str, where: str) -> None:
    """Refuse a schema this agentlog cannot use as it is; touches nothing."""
    version = await schema_version(conn, schema)
    if version is None:
        raise SchemaUpgradeRequiredError(
            f"{where} holds no agentlog schema {schema!r}; nothing was created: create it "
            f"with `{upgrade_command(schema)}`"
        )
    if version < SCHEMA_VERSION:
        raise SchemaUpgradeRequiredError(
            f"{where} holds agentlog schema {schema!r} at version {version}, older than this "
            f"agentlog's {SCHEMA_VERSION}; it was left untouched: upgrade it with "
            f"`{upgrade_command(schema)}`"
        )
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where} holds agentlog schema {schema!r} at version {version}, newer than this "
            f"agentlog knows ({SCHEMA_VERSION}); it was left untouched: upgrade agentlog "
            "(pip install -U 'agentlog[postgres]'); `agentlog db upgrade` never downgrades"
        )


async def upgrade_schema(conn: Any, schema: str = DEFAULT_SCHEMA) -> tuple[int | None, int]:
    """Create `schema` or bring it to `SCHEMA_VERSION`; return (version before, after).

    One transaction under an advisory lock on the schema's name, so two upgrades at once
    apply each step once. A newer schema raises `SchemaVersionError` and is left untouched.
    """
    check_schema_name(schema)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"agentlog:{schema}")
        before = await schema_version(conn, schema)
        start = before or 0
        if start > SCHEMA_VERSION:
            await check_schema(conn, schema, "the database")
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        for step in _steps(schema)[start:]:
            await conn.execute(step)
        if start < SCHEMA_VERSION:
            await conn.execute(
                f'INSERT INTO "{schema}".meta (version) VALUES ($1) '
                "ON CONFLICT (singleton) DO UPDATE SET version = excluded.version",
                SCHEMA_VERSION,
            )
    return before, SCHEMA_VERSION
