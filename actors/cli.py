"""The `agentlog` command line: run the demo, then read, branch and audit a log.

Every command but `demo` opens an existing agentlog database and never creates one; only
`fork` writes to it (it appends the new thread). `--json` prints JSON on stdout instead of
tables. A failure prints one line, `error: ...`, on stderr and exits 1 (usage errors: 2).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO, Annotated, Any, NoReturn, TypeVar, cast

import typer
from rich.console import Console
from rich.markup import escape

from events import KINDS, AgentlogError, EventRecord, SQLiteEventStore, VerifyReport
from events.audit import Head, export_jsonl, verify_store, verify_thread
from events.sqlite import APPLICATION_ID, SQLITE_MAGIC
from projections import (
    AgentState,
    InvalidStateUpdateError,
    StreamChunk,
    diff,
    event_history,
    fork,
    state_at,
    step_seq,
)

from . import cli_render as render
from .demo import run_demo

app = typer.Typer(
    name="agentlog",
    help="agentlog: an agent-graph runtime whose event log tells exactly what happened.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
errors = Console(stderr=True)

T = TypeVar("T")

Db = Annotated[str, typer.Option("--db", help="The agentlog database (a SQLite file).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for machines.")]
Thread = Annotated[
    str, typer.Argument(metavar="THREAD", help="The thread id (see `agentlog threads`).")
]
StepOpt = Annotated[int | None, typer.Option("--step", help="The point right after step N.")]
SeqOpt = Annotated[int | None, typer.Option("--seq", help="The point right after record S.")]


class By(StrEnum):
    step = "step"
    seq = "seq"


class Format(StrEnum):
    jsonl = "jsonl"


class CliError(Exception):
    """A problem a command reports in one line, exiting 1."""


def _fail(message: str) -> NoReturn:
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    errors.print(f"[red]error:[/red] {escape(line)}", soft_wrap=True, highlight=False)
    raise typer.Exit(1)


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data))


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


# ---- opening a store, running a job ---------------------------------------------------------


def _check_database(db: str) -> None:
    """Refuse what is not an existing agentlog database before SQLite opens it.

    SQLite would create a missing file, and the store would set up an empty one: a command
    that only reads must do neither.
    """
    untouched = "it was left untouched"
    if not os.path.exists(db):
        raise CliError(
            f"no database at {db}: nothing was created; pass --db PATH of an existing log"
        )
    if os.path.isdir(db):
        raise CliError(f"{db} is a directory, not an agentlog database; {untouched}")
    try:
        with open(db, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise CliError(f"cannot read {db}: {exc.strerror}") from None
    if not header:
        raise CliError(f"{db} is an empty file, not an agentlog database; {untouched}")
    if not header.startswith(SQLITE_MAGIC) or len(header) < 72:
        raise CliError(f"{db} is not an agentlog database (not a SQLite file); {untouched}")
    if int.from_bytes(header[68:72], "big") != APPLICATION_ID:
        raise CliError(
            f"{db} is not an agentlog database (a SQLite file without agentlog's mark); {untouched}"
        )


@asynccontextmanager
async def _open(db: str) -> AsyncIterator[SQLiteEventStore]:
    _check_database(db)
    async with SQLiteEventStore(db) as store:
        yield store


def _run(
    job: Callable[[SQLiteEventStore], Awaitable[T]], db: str, thread_id: str | None = None
) -> T:
    """Run `job` on the opened store (checking `thread_id` exists); report errors in a line."""

    async def main() -> T:
        async with _open(db) as store:
            if thread_id is not None and (not thread_id or await store.last_seq(thread_id) == 0):
                raise CliError(
                    f"thread {thread_id!r} does not exist in {db}: "
                    f"list the threads with `agentlog threads --db {db}`"
                )
            return await job(store)

    try:
        return asyncio.run(main())
    except InvalidStateUpdateError as exc:
        _fail(
            f"thread {thread_id!r} was written with a custom state class ({exc}); this command "
            "knows only AgentState's fields: read the thread from Python with its state class"
        )
    except (CliError, AgentlogError) as exc:
        _fail(str(exc))


def _one_point(step: int | None, seq: int | None) -> None:
    if step is not None and seq is not None:
        raise typer.BadParameter("name the point with --step or with --seq, not both")


async def _point(store: SQLiteEventStore, thread_id: str, step: int | None, seq: int | None) -> int:
    """The seq a --step or --seq names; the thread's last seq when neither is given."""
    if step is not None:
        return await step_seq(store, thread_id, step)
    return await store.last_seq(thread_id) if seq is None else seq


# ---- commands --------------------------------------------------------------------------------


@app.command("threads")
def threads_command(db: Db = "agentlog.db", as_json: AsJson = False) -> None:
    """List the threads with their status, step, records and last activity."""

    async def job(store: SQLiteEventStore) -> list[render.ThreadInfo]:
        ids = await store.threads()
        infos: list[render.ThreadInfo] = []
        with render.progress(errors, "reading threads") as update:
            for thread_id in ids:
                infos.append(await _thread_info(store, thread_id))
                update(len(infos), len(ids))
        return infos

    infos = _run(job, db)
    if as_json:
        _echo_json(render.threads_json(infos))
    else:
        console.print(render.threads_table(infos))


async def _thread_info(store: SQLiteEventStore, thread_id: str) -> render.ThreadInfo:
    records, at = await store.last_seq(thread_id), 0.0
    try:
        async for record in store.read(thread_id, records, records):
            at = record.at
        state: AgentState = await state_at(store, thread_id)
    except InvalidStateUpdateError:
        return render.ThreadInfo(thread_id, records, at, error="custom state")
    except AgentlogError as exc:
        return render.ThreadInfo(thread_id, records, at, error=f"unreadable: {type(exc).__name__}")
    return render.ThreadInfo.of(thread_id, records, at, state)


def _check_kinds(kinds: list[str] | None) -> list[str] | None:
    for kind in kinds or []:
        if kind not in KINDS:
            raise typer.BadParameter(f"unknown kind {kind!r}; kinds: {', '.join(sorted(KINDS))}")
    return kinds


@app.command("history")
def history_command(
    thread: Thread,
    db: Db = "agentlog.db",
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind", help="Only events of this kind (repeat for more).", callback=_check_kinds
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """The thread's timeline: one row per event (seq, time, kind, actor, node, summary)."""
    rows = _run(lambda store: event_history(store, thread, kind or None), db, thread)
    if as_json:
        _echo_json(render.history_json(rows))
    elif len(rows) > render.TABLE_ROWS:
        for lines in render.history_lines(thread, rows):
            typer.echo(lines)
    else:
        console.print(render.history_table(thread, rows))


@app.command("show")
def show_command(
    thread: Thread,
    step: StepOpt = None,
    seq: SeqOpt = None,
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """The thread's state at a point (the latest by default): status, messages, fields."""
    _one_point(step, seq)

    async def job(store: SQLiteEventStore) -> tuple[int, AgentState]:
        point = await _point(store, thread, step, seq)
        return point, await state_at(store, thread, point)

    point, state = _run(job, db, thread)
    if as_json:
        _echo_json(render.state_json(thread, point, state))
    else:
        console.print(render.state_view(thread, point, state))


@app.command("diff")
def diff_command(
    thread: Thread,
    a: Annotated[int, typer.Argument(metavar="A", help="The earlier point.")],
    b: Annotated[int, typer.Argument(metavar="B", help="The later point.")],
    by: Annotated[By, typer.Option("--by", help="Points are steps or seqs.")] = By.step,
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """What changed between two points of a thread: messages, fields, status, interrupt."""
    change = _run(lambda store: diff(store, thread, a, b, by=by.value), db, thread)
    if as_json:
        _echo_json(render.diff_json(thread, a, b, by.value, change))
    else:
        console.print(render.diff_view(thread, a, b, by.value, change))


@app.command("fork")
def fork_command(
    thread: Thread,
    step: StepOpt = None,
    seq: SeqOpt = None,
    to: Annotated[
        str | None, typer.Option("--to", help="The new thread's id (default: generated).")
    ] = None,
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Branch a thread at a step (or seq) into a new thread; print the new thread's id."""
    if step is None and seq is None:
        raise typer.BadParameter("name the fork point with --step N or --seq S")
    _one_point(step, seq)
    if to == "":
        raise typer.BadParameter("the new thread id is empty", param_hint="--to")

    async def job(store: SQLiteEventStore) -> tuple[int, str]:
        point = await _point(store, thread, step, seq)
        if to is not None and await store.last_seq(to):
            raise CliError(f"thread {to!r} already exists in {db}: pick a new id with --to")
        return point, await fork(store, thread, at_seq=point, new_thread_id=to)

    point, new_id = _run(job, db, thread)
    if as_json:
        _echo_json(
            {"thread_id": new_id, "source_thread": thread, "source_seq": point, "step": step}
        )
    else:
        typer.echo(new_id)


@app.command("verify")
def verify_command(
    thread: Annotated[
        str | None,
        typer.Argument(help="The thread to check (default: every thread)."),
    ] = None,
    head: Annotated[
        str | None,
        typer.Option(
            "--head",
            help="A head saved earlier, THREAD@SEQ:HASH: the log must still hold that record.",
        ),
    ] = None,
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Recompute the hash chains (of one thread, or all); exit 1 if any is broken."""
    saved: Head | None = None
    if head is not None:
        try:
            saved = Head.parse(head)
        except ValueError as exc:
            _fail(f"--head: {exc}")
        if thread is not None and saved.thread_id != thread:
            _fail(f"--head is a head of thread {saved.thread_id!r}, not of {thread!r}")
        thread = saved.thread_id

    async def job(store: SQLiteEventStore) -> list[VerifyReport]:
        if thread is not None:
            return [await verify_thread(store, thread, head=saved)]
        with render.progress(errors, "verifying threads") as update:
            return await verify_store(store, progress=update)

    reports = _run(job, db, thread)
    if as_json:
        _echo_json(render.verify_json(reports))
    else:
        console.print(render.verify_table(reports))
    failed = [r for r in reports if not r.ok]
    if failed:
        first = failed[0]
        _fail(
            f"{len(failed)} of {len(reports)} threads failed verification; thread "
            f"{first.thread_id!r}, seq {first.first_bad_seq}: {first.problem}"
        )


async def _export(store: SQLiteEventStore, thread: str, out: Path | None) -> Head:
    total = await store.last_seq(thread)
    with render.progress(errors, f"exporting {thread}") as update:
        if out is None:
            writer = render.CountingWriter(sys.stdout, total, update)
            return await export_jsonl(store, thread, cast(IO[str], writer))
        tmp = out.with_name(out.name + ".tmp")  # replaced only once the export is whole
        try:
            with open(tmp, "w", encoding="utf-8", newline="\n") as f:
                exported = await export_jsonl(
                    store, thread, cast(IO[str], render.CountingWriter(f, total, update))
                )
            os.replace(tmp, out)
        except OSError as exc:
            raise CliError(f"cannot write {out}: {exc.strerror}") from None
        finally:
            tmp.unlink(missing_ok=True)
        return exported


@app.command("export")
def export_command(
    thread: Thread,
    fmt: Annotated[Format, typer.Option("--format", help="The export format.")] = Format.jsonl,
    out: Annotated[
        Path | None, typer.Option("--out", help="The file to write (default: stdout).")
    ] = None,
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Write the thread's records for an audit (check with events/verify_export.py).

    The head (THREAD@SEQ:HASH) is printed on stdout with --out, else on stderr.
    """
    if out is not None and out.exists() and os.path.exists(db) and out.samefile(db):
        _fail(f"--out {out} is the database itself; pick another file")
    exported = _run(lambda store: _export(store, thread, out), db, thread)
    if as_json:
        report = {"thread_id": thread, "format": fmt.value, "records": exported.seq}
        report |= {"head": str(exported), "hash": exported.hash, "out": out and str(out)}
        typer.echo(json.dumps(report), err=out is None)
    elif out is None:
        typer.echo(f"head: {exported}", err=True)
    else:
        console.print(f"exported {exported.seq} records of {escape(thread)} to {escape(str(out))}")
        typer.echo(f"head: {exported}")


@app.command()
def demo(
    db: Annotated[str, typer.Option(help="The SQLite database to write.")] = "agentlog.db",
    as_json: AsJson = False,
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
        _fail(str(exc))
    if as_json:
        _echo_json(render.demo_json(timeline, state, report))
    else:
        console.print(render.demo_view(db, timeline, state, report))


def main() -> None:
    """Console-script entry point."""
    app()
