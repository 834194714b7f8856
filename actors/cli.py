"""The `agentlog` command line."""

from __future__ import annotations

import asyncio
import json
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from events import AgentlogError, EventRecord, SQLiteEventStore, VerifyReport
from projections import AgentState, StreamChunk, summarize

from .demo import run_demo

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
    db: Annotated[str, typer.Option(help="The SQLite database to write.")] = "agentlog.db",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for machines.")] = False,
) -> None:
    """Run the scripted support agent: a lookup, a refund a human approves, an answer."""

    def show(chunk: StreamChunk) -> None:
        if as_json:
            return
        if chunk.message is not None:
            message = chunk.message
            calls = ", ".join(f"{c.name}({c.args})" for c in message.tool_calls())
            text = message.text() or ""
            console.print(
                f"  [cyan]{message.role:>9}[/cyan]  {text}" + (f" -> {calls}" if calls else "")
            )
        elif chunk.data and chunk.data.get("kind") == "interrupt_raised":
            console.print(
                f"  [yellow]paused[/yellow] before {chunk.data['node']!r}: awaiting approval"
            )

    def approve(state: AgentState) -> bool:
        if not as_json:
            console.print("  [green]approved[/green] by supervisor; resuming the same thread")
        return True

    async def main() -> tuple[list[EventRecord], AgentState, VerifyReport]:
        async with SQLiteEventStore(db) as store:
            return await run_demo(store, show, approve)

    try:
        timeline, state, report = asyncio.run(main())
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
                    "verified": report.ok,
                }
            )
        )
        return
    table = Table(title=f"thread {timeline[0].thread_id}: the log, read back from {db}")
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
    verdict = "[green]ok[/green]" if report.ok else f"[red]{report.problem}[/red]"
    console.print(f"hash chain of {report.records_checked} records verified: {verdict}")


def main() -> None:
    """Console-script entry point."""
    app()
