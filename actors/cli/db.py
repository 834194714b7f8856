"""`agentlog db`: create and upgrade a PostgreSQL store's schema, explicitly.

A PostgreSQL store never creates or alters its tables when it opens (a SQLite file, owned by
one application, still sets itself up): the schema changes only when someone runs
`agentlog db upgrade --dsn ...`, which is safe to run again and never downgrades.
`agentlog db status --dsn ...` says which version the database holds, changing nothing, and
exits with `NOT_READY` (3) unless this agentlog can open it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import typer

NOT_READY = 3
"""`agentlog db status`'s exit status when the schema is missing, older or newer than this
agentlog's (0: ready; 1: the database could not be reached; 2: a usage error)."""


def _target(dsn: str, schema: str | None) -> tuple[str, str, float]:
    """The DSN asyncpg takes, the schema and the connect timeout, read the way `open_store`
    reads a URL."""
    from agentlog.events import AgentlogError, open_store
    from agentlog.events.stores.postgres_schema import check_schema_name

    try:
        store: Any = open_store(dsn)  # not opened: nothing is touched
    except AgentlogError as exc:  # a malformed URL or ?schema=: a usage error, no traceback
        raise typer.BadParameter(str(exc), param_hint="--dsn") from None
    if type(store).__name__ != "PostgresEventStore":
        raise typer.BadParameter(
            f"{dsn!r} is not a PostgreSQL URL: `agentlog db` manages a PostgreSQL store's "
            "schema (a SQLite file sets itself up on first write)",
            param_hint="--dsn",
        )
    if schema is None:
        return store.dsn, store.schema, store.connect_timeout
    try:
        return store.dsn, check_schema_name(schema), store.connect_timeout
    except AgentlogError as exc:
        raise typer.BadParameter(str(exc), param_hint="--schema") from None


async def _with_connection(dsn: str, timeout: float, job: Any) -> Any:
    import asyncpg  # type: ignore[import-untyped]

    from agentlog.events import StoreUnavailableError
    from agentlog.events.stores.postgres import connect_failure

    try:
        conn = await asyncpg.connect(dsn, timeout=timeout)
    except (asyncpg.PostgresError, OSError, TimeoutError) as exc:
        raise StoreUnavailableError(
            f"{connect_failure(dsn, exc, timeout)}: check the DSN, that the server runs and "
            "that the database exists"
        ) from None
    try:
        return await job(conn)
    finally:
        await conn.close()


def upgrade(dsn: str, schema: str | None, as_json: bool) -> None:
    """`agentlog db upgrade` (its options are declared in `agentlog.actors.cli`)."""
    from agentlog.actors.cli import _echo_json, _fail
    from agentlog.events import AgentlogError
    from agentlog.events.stores.postgres import shown_dsn
    from agentlog.events.stores.postgres_schema import upgrade_schema

    target, name, timeout = _target(dsn, schema)
    try:
        before, after = asyncio.run(
            _with_connection(target, timeout, lambda c: upgrade_schema(c, name))
        )
    except AgentlogError as exc:
        _fail(str(exc))
    if as_json:
        _echo_json({"schema": name, "before": before, "version": after})
    elif before is None:
        typer.echo(f"created schema {name!r} at version {after} in {shown_dsn(target)}")
    elif before == after:
        typer.echo(f"schema {name!r} is already at version {after}: nothing to do")
    else:
        typer.echo(f"upgraded schema {name!r} from version {before} to {after}")


def status(dsn: str, schema: str | None, as_json: bool) -> None:
    """`agentlog db status` (its options are declared in `agentlog.actors.cli`)."""
    from agentlog.actors.cli import _echo_json, _fail
    from agentlog.events import AgentlogError
    from agentlog.events.stores.postgres_schema import (
        SCHEMA_VERSION,
        schema_version,
        upgrade_command,
    )

    target, name, timeout = _target(dsn, schema)
    try:
        version = asyncio.run(_with_connection(target, timeout, lambda c: schema_version(c, name)))
    except AgentlogError as exc:
        _fail(str(exc))
    ready = version == SCHEMA_VERSION
    if as_json:
        _echo_json({"schema": name, "version": version, "expected": SCHEMA_VERSION,
                    "ready": ready})  # fmt: skip
    elif version is None:
        typer.echo(f"no agentlog schema {name!r}: create it with `{upgrade_command(name)}`")
    elif ready:
        typer.echo(f"schema {name!r} is at version {version}: ready")
    elif version < SCHEMA_VERSION:
        typer.echo(f"schema {name!r} is at version {version} (< {SCHEMA_VERSION}): "
                   f"run `{upgrade_command(name)}`")  # fmt: skip
    else:
        typer.echo(f"schema {name!r} is at version {version}, newer than this agentlog "
                   f"({SCHEMA_VERSION}): upgrade agentlog")  # fmt: skip
    if not ready:  # a deploy script can wait on it: `agentlog db status || ...`
        raise typer.Exit(NOT_READY)
