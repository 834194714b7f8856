"""`agentlog relay`: send the log's records to a broker, effectively once; `agentlog relay
status`: where each reader of the log (relays and other followers) stands.

    agentlog relay --db app.db --to redis://127.0.0.1:6379 --name to-redis
    agentlog relay --dsn postgresql://.../app --to nats://127.0.0.1:4222 --name to-nats \\
        --kinds run_completed,run_failed --subject-template 'runs.{kind}'
    agentlog relay status --db app.db

The relay runs until stopped (Ctrl-C or SIGTERM: the batch in flight is left to the next
start, which sends it again under the same ids). `--status-every S` prints its status as a
JSON line every S seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from typing import Annotated, Any

import typer

relay_app = typer.Typer(
    name="relay",
    help="Relay the log's records to Redis Streams, NATS JetStream or RabbitMQ, effectively "
    "once (agentlog relay --db FILE --to URL --name NAME), or show where relays stand "
    "(agentlog relay status).",
)

Db = Annotated[
    str,
    typer.Option(
        "--db",
        "--dsn",
        help="The agentlog database: a SQLite file's path, or a URL (sqlite:///..., "
        "postgresql://user@host/db?schema=name).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for machines.")]


def _listed(values: list[str] | None) -> list[str] | None:
    """Repeated and comma-separated values as one list (None when none was given)."""
    if not values:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


@relay_app.callback(invoke_without_command=True)
def relay_command(
    ctx: typer.Context,
    db: Db = "agentlog.db",
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="The broker: redis://HOST:6379, nats://HOST:4222 (?stream=NAME), "
            "amqp://USER:PASSWORD@HOST:5672/ (?exchange=NAME&queue=NAME).",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="The relay's name: its durable cursor in the store."),
    ] = None,
    kinds: Annotated[
        list[str] | None,
        typer.Option("--kinds", help="Send only these event kinds (comma-separated)."),
    ] = None,
    threads: Annotated[
        list[str] | None,
        typer.Option("--threads", help="Send only these threads: ids or patterns like 'web-*'."),
    ] = None,
    subject_template: Annotated[
        str | None,
        typer.Option(
            "--subject-template",
            help="The Redis stream key, NATS subject or AMQP routing key, with {thread} and "
            "{kind} (default: agentlog for Redis, agentlog.{kind} for the others).",
        ),
    ] = None,
    status_every: Annotated[
        float, typer.Option("--status-every", min=0, help="Print status every S seconds.")
    ] = 0.0,
) -> None:
    """Relay every committed record (or those --kinds and --threads select) to the broker,
    saving the cursor --name in the store once the broker confirmed each batch."""
    if ctx.invoked_subcommand is not None:
        return
    if to is None or name is None:
        raise typer.BadParameter("name the broker with --to URL and the relay with --name NAME")
    options = {
        "name": name, "kinds": _listed(kinds), "threads": _listed(threads),
        "subject_template": subject_template,
    }  # fmt: skip
    _guarded(_run_relay(db, to, options, status_every))


async def _run_relay(db: str, to: str, options: dict[str, Any], every: float) -> None:
    from agentlog.actors.cli import _open
    from agentlog.actors.relay import Relay

    async with _open(db, writes=True) as store:
        relay = Relay(store, to, **options)  # checked before anything is sent
        task = asyncio.ensure_future(relay.run())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=every or None)
                if every and not task.done():
                    typer.echo(json.dumps(vars(await relay.status())), nl=True)
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


@relay_app.command("status")
def status_command(db: Db = "agentlog.db", as_json: AsJson = False) -> None:
    """Each relay's (and follower's) cursor, the log's last position, and the lag."""
    from agentlog.actors.cli import _open
    from agentlog.actors.cli.render import inert
    from agentlog.events import last_position, list_cursors

    async def job() -> tuple[int, list[Any]]:
        async with _open(db) as store:
            return await last_position(store), await list_cursors(store)

    head, cursors = _guarded(job())
    rows = [
        {"name": c.name, "position": c.position, "lag": max(head - c.position, 0),
         "updated_at": c.updated_at}
        for c in cursors
    ]  # fmt: skip
    if as_json:
        typer.echo(json.dumps({"head": head, "cursors": rows}))
        return
    if not rows:
        from agentlog.events.stores.postgres import shown_dsn  # never a password

        where = inert(shown_dsn(str(db)))
        typer.echo(f"no relay or follower has saved a cursor in {where} (head: {head})")
    for row in rows:
        age = max(time.time() - row["updated_at"], 0.0)
        typer.echo(
            f"{inert(row['name'])}: position {row['position']} of {head}, lag {row['lag']}, "
            f"saved {age:.0f}s ago"
        )


def _guarded(work: Any) -> Any:
    """Run `work`; a typed error is one line on stderr and exit status 1."""
    from agentlog.actors.cli import CliError, _fail
    from agentlog.events import AgentlogError

    try:
        return asyncio.run(work)
    except (CliError, AgentlogError) as exc:
        _fail(str(exc))
