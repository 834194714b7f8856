"""`agentlog otel`: OpenTelemetry spans of the runs in a log, live beside the runtime or
rebuilt after the fact (`agentlog otel export`), exported over OTLP/HTTP where the standard
`OTEL_EXPORTER_OTLP_*` variables point.

Needs the `otel` extra: `pip install 'agentlog[otel]'`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentlog.actors.cli import AsJson, CliError, Db, _fail, _open, _run
from agentlog.actors.cli.logs import Level, LogJson, LogLevel, setup_logging
from agentlog.events import AgentlogError

if TYPE_CHECKING:
    from agentlog.projections.spans import Span

otel_app = typer.Typer(
    name="otel",
    help="OpenTelemetry spans of the runs, derived from the log: live beside the runtime "
    "(agentlog otel --db FILE), or after the fact (agentlog otel export --thread T).",
    add_completion=False,
)
DEFAULT_CURSOR = "otel"

Content = Annotated[
    bool,
    typer.Option(
        "--capture-content",
        help="Add tool arguments and results and resume values to the spans (they may hold "
        "personal data; off by default).",
    ),
]
Service = Annotated[
    str | None,
    typer.Option(
        "--service-name",
        help="The service.name of the spans (default: OTEL_SERVICE_NAME, else agentlog).",
    ),
]


def _otel() -> Any:
    try:
        import agentlog.actors.otel as otel
    except ImportError:
        _fail("agentlog otel needs the otel extra: pip install 'agentlog[otel]'")
    return otel


def _provider(otel: Any, service_name: str | None) -> Any:
    """The OTLP tracer provider the environment configures; a bad setting fails here, before
    anything is read or sent."""
    try:
        return otel.otlp_provider(service_name)
    except AgentlogError as exc:
        _fail(str(exc))


@otel_app.callback(invoke_without_command=True)
def live(
    ctx: typer.Context,
    db: Db = "agentlog.db",
    cursor: Annotated[
        str,
        typer.Option(
            "--cursor",
            help="The name under which the follower keeps its position in the store: a "
            "restart goes on from it.",
        ),
    ] = DEFAULT_CURSOR,
    checkpoint_s: Annotated[
        float,
        typer.Option(
            "--checkpoint-s",
            min=0.01,
            help="How often the exported position is saved under --cursor (seconds); spans "
            "sent after the last save are sent again after a crash, with the same ids.",
        ),
    ] = 1.0,
    capture_content: Content = False,
    service_name: Service = None,
    log_level: LogLevel = Level.warning,
    log_json: LogJson = False,
) -> None:
    """Follow the log and export each run's spans as their records are committed, until
    SIGINT or SIGTERM; a restart goes on from the position kept under --cursor."""
    if ctx.invoked_subcommand is not None:
        return
    otel = _otel()
    setup_logging(log_level, log_json)
    provider = _provider(otel, service_name)

    # metrics go where the traces go, unless OTEL_METRICS_EXPORTER=none (Jaeger takes none)
    metered = os.environ.get("OTEL_METRICS_EXPORTER", "otlp").strip().lower() != "none"
    meters = otel.otlp_meter_provider(service_name) if metered else None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            async with (
                _open(db, writes=True) as store,
                otel.follow(
                    store,
                    tracer_provider=provider,
                    cursor=cursor,
                    capture_content=capture_content,
                    checkpoint_s=checkpoint_s,
                    meter_provider=meters,
                ) as follower,
            ):
                from agentlog.actors.cli.render import inert
                from agentlog.events.stores.postgres import shown_dsn  # never a password

                where = inert(shown_dsn(str(db)))
                typer.echo(
                    f"following {where} from position {follower.started_after} (cursor {cursor!r})",
                    err=True,
                )
                await stop.wait()
        finally:
            await asyncio.to_thread(provider.shutdown)
            if meters is not None:
                await asyncio.to_thread(meters.shutdown)

    try:
        asyncio.run(main())
    except (CliError, AgentlogError) as exc:
        _fail(str(exc))


@otel_app.command("export")
def export(
    thread: Annotated[str, typer.Option("--thread", help="The thread whose runs to export.")],
    db: Db = "agentlog.db",
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="Read the thread from an export file (`agentlog export`) instead of --db; "
            "its hash chain is checked first.",
        ),
    ] = None,
    stdout: Annotated[
        bool,
        typer.Option("--stdout", help="Print the spans as JSON lines instead of exporting."),
    ] = False,
    capture_content: Content = False,
    service_name: Service = None,
    as_json: AsJson = False,
) -> None:
    """Rebuild the thread's spans from the log and export them over OTLP/HTTP: the same
    spans, ids and all, that a live follower sent when the thread ran."""
    otel = _otel()
    from agentlog.projections.spans import thread_spans

    provider = None if stdout else _provider(otel, service_name)
    if file is not None:
        try:
            with open(file, encoding="utf-8") as lines:
                records = otel.export_records(lines)
        except (OSError, UnicodeDecodeError, AgentlogError) as exc:
            _fail(f"cannot read {file}: {exc}")
        if records[0].thread_id != thread:
            _fail(f"{file} holds thread {records[0].thread_id!r}, not {thread!r}")
        spans: list[Span] = thread_spans(records, capture_content=capture_content)
    else:

        async def read(store: Any) -> list[Span]:
            found: list[Span] = await otel.spans_of_thread(
                store, thread, capture_content=capture_content
            )
            return found

        spans = _run(read, db, thread)
    if provider is None:
        for span in spans:
            typer.echo(json.dumps(span_json(span)))
        return
    try:
        otel.Emitter(provider).emit(spans)
        flushed = provider.force_flush()
    finally:
        provider.shutdown()
    if not flushed:
        _fail("the OTLP exporter did not finish in time: is OTEL_EXPORTER_OTLP_ENDPOINT right?")
    if as_json:
        typer.echo(json.dumps({"thread_id": thread, "spans": len(spans)}))
    else:
        typer.echo(f"exported {len(spans)} spans of {thread!r}")


def span_json(span: Span) -> dict[str, Any]:
    """A span as JSON: ids in hex as OTLP/JSON writes them, times in ns since the epoch."""
    return {
        "name": span.name,
        "trace_id": f"{span.trace_id:032x}",
        "span_id": f"{span.span_id:016x}",
        "parent_span_id": f"{span.parent_id:016x}" if span.parent_id is not None else None,
        "kind": span.kind,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "attributes": span.attributes,
        "events": [
            {"name": e.name, "at_ns": e.at_ns, "attributes": e.attributes} for e in span.events
        ],
        "status": span.status,
        "status_description": span.status_description,
    }
