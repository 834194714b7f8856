"""`agentlog replay-test`: replay recorded threads under today's code (see
`agentlog.actors.replay`). Exit status 0 when every thread replays the same, 1 when one
diverges (or the source cannot be read), 2 on a usage error. The replay machinery loads only
when the command runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

DIVERGED = 1
"""The exit status when a thread diverged."""


def register(app: typer.Typer) -> None:
    """Add the command to the `agentlog` command line."""
    app.command("replay-test")(replay_test_command)


def replay_test_command(
    app_ref: Annotated[
        str,
        typer.Option(
            "--app",
            metavar="MODULE:ATTRIBUTE",
            help="The graph to test: a StateGraph, a compiled graph, or a function returning "
            "one (given a fresh store when it takes an argument); MODULE is imported from "
            "the working directory.",
        ),
    ],
    db: Annotated[
        str | None,
        typer.Option("--db", "--dsn", help="The recorded log: a SQLite path or a URL."),
    ] = None,
    export: Annotated[
        list[Path] | None,
        typer.Option("--export", help="A JSONL export (agentlog export), or a folder of them."),
    ] = None,
    threads: Annotated[
        list[str] | None, typer.Option("--threads", help="Replay this thread (repeatable).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only threads active since then (ISO time or epoch)."),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="At most N threads.")] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option("--ignore", help="A payload field allowed to differ (repeatable)."),
    ] = None,
    may_differ: Annotated[
        list[str] | None,
        typer.Option("--may-differ", help="A node whose outputs may differ (repeatable)."),
    ] = None,
    from_step: Annotated[
        int | None,
        typer.Option("--from-step", min=0, help="Start each thread from the log after step N."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for machines.")] = False,
) -> None:
    """Run today's graph code against recorded threads, every tool and model call answered
    from the log (no tool runs), and name each thread's first divergence: run, step, node,
    both sides, a diff and the cause. Exit status 1 when any thread diverges."""
    from agentlog.actors.cli.render import inert
    from agentlog.actors.replay import Allowed, replay_test_sync
    from agentlog.events.errors import AgentlogError

    if (db is None) == (not export):
        raise typer.BadParameter("give the recorded threads with --db/--dsn or with --export")
    allowed = Allowed.of(ignore or (), may_differ or ())
    try:
        report = replay_test_sync(
            app_ref,
            db=db,
            exports=list(export or ()),
            threads=list(threads or ()),
            since=since,
            limit=limit,
            allowed=allowed,
            from_step=from_step,
        )
    except AgentlogError as exc:
        if as_json:
            typer.echo(json.dumps({"error": str(exc), "exit": 1}), err=True)
        else:
            typer.echo("error: " + " ".join(inert(str(exc), body=True).split()), err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(report.as_json(), default=repr))
    else:
        typer.echo(report.render())  # stored text in it is inert
    if not report.ok:
        raise typer.Exit(DIVERGED)
