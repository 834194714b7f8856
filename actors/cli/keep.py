"""`agentlog erase`: forget a person's data and keep the proof (see docs/compliance.md).

Registered on the `agentlog` app when `agentlog.actors.cli` loads; the engine is imported
only when a command runs.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.text import Text

from agentlog.actors.cli import AsJson, Db, _echo_json, _print, _run, app, render
from agentlog.events import EventStore

Subject = Annotated[
    str, typer.Argument(metavar="SUBJECT", help="The data subject's id, as tagged on its threads.")
]


@app.command("erase")
def erase_command(
    subject: Subject,
    by: Annotated[str, typer.Option("--by", help="Who erases (recorded).")],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded), e.g. the request.")],
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Erase a data subject: destroy its key, so its personal fields read "erased on DATE by
    WHO" everywhere, and record who, why and when; every chain still verifies. Safe to rerun.
    Run `agentlog vacuum` after it to rewrite the file without the freed pages."""
    from agentlog.actors.engine.erasure import ErasureReport, erase_subject

    async def job(store: EventStore) -> ErasureReport:
        return await erase_subject(store, subject, by=by, reason=reason)

    report = _run(job, db, writes=True)
    erasure = report.erasure
    day = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(erasure.at))
    if as_json:
        _echo_json(
            {"subject": subject, "erased_at": erasure.at, "by": erasure.by,
             "reason": erasure.reason, "threads": report.threads, "recorded": report.recorded}
        )  # fmt: skip
        return
    said = "erased" if report.recorded else "already erased"
    _print(
        Text(
            render.inert(
                f"{said}: subject {subject} on {day} by {erasure.by} ({erasure.reason}); "
                f"{len(report.threads)} thread(s) sealed under its key"
            )
        )
    )


@app.command("vacuum")
def vacuum_command(db: Db = "agentlog.db") -> None:
    """Rewrite the database without the pages erasures and prunes freed (SQLite VACUUM and
    its WAL truncated; PostgreSQL VACUUM FULL), so no byte of what they removed remains."""
    from agentlog.events.keystore import vacuum

    _run(vacuum, db, writes=True)
    typer.echo("vacuumed")
