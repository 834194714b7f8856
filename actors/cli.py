"""The `agentlog` command line."""

from __future__ import annotations

import asyncio
import json
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from events import AgentlogError

from .demo import run_demo, summarize

app = typer.Typer(
    name="agentlog",
    help="agentlog: an agent-graph runtime whose event log tells exactly what happened.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
errors = Console(stderr=True)


def _version() -> str:
    try:
        return version("agentlog")
    except PackageNotFoundError:
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"agentlog {_version()}")
        raise typer.Exit()


@app.callback()
def main_callback(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """agentlog: an agent-graph runtime whose event log tells exactly what happened."""


@app.command()
def demo(
    db: Annotated[str, typer.Option(help="The SQLite database to append to.")] = "agentlog.db",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for machines.")] = False,
) -> None:
    """Append a support conversation to the log, read it back and replay it."""
    try:
        timeline, state = asyncio.run(run_demo(db))
    except AgentlogError as exc:
        errors.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "thread_id": timeline[0].thread_id,
                    "events": [
                        {"seq": r.seq, "kind": r.kind, "actor": r.actor, "hash": r.hash}
                        for r in timeline
                    ],
                    "state": state.model_dump(mode="json"),
                }
            )
        )
        return
    table = Table(title=f"thread {timeline[0].thread_id} in {db}")
    for column in ("seq", "kind", "actor", "summary", "hash"):
        table.add_column(column)
    for r in timeline:
        table.add_row(str(r.seq), r.kind, r.actor or "", summarize(r), r.hash[:12])
    console.print(table)
    meta = state.execution_meta
    console.print(
        f"replayed state: status=[bold]{meta.status.value}[/bold] step={meta.step} "
        f"node={meta.current_node} messages={len(state.context)}"
    )
    for message in state.context:
        console.print(
            f"  [cyan]{message.role:>9}[/cyan]  {message.text() or message.content[0].type}"
        )
    console.print("hash chain verified: [green]ok[/green]")


def main() -> None:
    """Console-script entry point."""
    app()
