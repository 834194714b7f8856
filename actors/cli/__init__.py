"""The `agentlog` command line: run the demo, then read, branch and audit a log.

Every command but `demo` and `runtime` opens an existing agentlog database and never creates
one; only `fork`, `erase` and `vacuum` (`agentlog.actors.cli.keep`) write to it, and
`runtime`. `--json` prints JSON on stdout instead of tables. A failure prints one line,
`error: ...`, on stderr and exits 1 (usage errors: 2; `verify` exits 3 when the chains are
intact but an invariant is broken); with `--json` it is `{"error": ..., "exit": N}`. Stored
text is shown inert (see `cli_render.inert`), a view is bounded unless `--full` asks for
everything, and nothing is wrapped or cut when stdout is not a terminal.

`--db` takes a SQLite path or any URL `open_store` reads; `--dsn` is the same option, named
for PostgreSQL (`--dsn postgresql://user@host/db`; `agentlog db upgrade` makes its schema).

Points may count back from the end: step -1 is the thread's last step, seq -1 its last record.

A command imports what it uses when it runs: `agentlog --help` loads neither the state models
(pydantic) nor the graph engine, so it starts fast; `threads` and `show` read each thread
with the library's own fold (one fold answers for every reader), never the engine.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console, RenderableType
from rich.text import Text
from typer._click.exceptions import ClickException

from agentlog.actors.cli import logs, relay, render, replay_command, ui
from agentlog.events import (
    KINDS,
    AgentlogError,
    EventRecord,
    EventStore,
    Forked,
    InterruptRaised,
    StepAdvanced,
    StoreNotFoundError,
    VerifyReport,
    open_store,
)
from agentlog.events.audit import Head, verify_store, verify_tree

if TYPE_CHECKING:
    from agentlog.projections import AgentState, EventRow, StreamChunk
    from agentlog.projections.generic import OpenState
    from agentlog.projections.invariants import ThreadFindings
    from agentlog.projections.timetravel import StateDiff

app = typer.Typer(
    name="agentlog",
    help="agentlog: an agent-graph runtime whose event log tells exactly what happened.",
    no_args_is_help=True,
    add_completion=False,
)
INVARIANT_EXIT = 3
"""`verify`'s exit status when every hash chain is intact but a thread breaks an invariant
(1 is a damaged chain or any other failure, 2 a usage error)."""
UNBOUNDED = 1_000_000
"""The width of output that is not a terminal: nothing is wrapped or cut to fit."""


def _console(*, stderr: bool = False) -> Console:
    """A console that wraps to the terminal, or not at all when the output is not one."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        console = Console(stderr=stderr, highlight=False, width=UNBOUNDED)
    return console


console, errors = _console(), _console(stderr=True)
_json_errors = False
"""Set when the command line holds --json: errors are then printed as JSON objects."""

T = TypeVar("T")

Db = Annotated[
    str,
    typer.Option(
        "--db",
        "--dsn",
        help="The agentlog database: a SQLite file's path, or a URL: sqlite:///relative.db, "
        "sqlite:////absolute.db or postgresql://user@host/db (with ?schema=name to pick a "
        "schema).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for machines.")]
Thread = Annotated[
    str, typer.Argument(metavar="THREAD", help="The thread id (see `agentlog threads`).")
]
StepOpt = Annotated[
    int | None, typer.Option("--step", help="The point right after step N (-1: the last).")
]
SeqOpt = Annotated[
    int | None, typer.Option("--seq", help="The point right after record S (-1: the last).")
]
Full = Annotated[
    bool, typer.Option("--full", help="Show everything: every message, every text whole.")
]
Last = Annotated[
    int, typer.Option("--last", min=1, help="How many of the latest messages to show.")
]


class By(StrEnum):
    step = "step"
    seq = "seq"


class Format(StrEnum):
    jsonl = "jsonl"


class CliError(AgentlogError):
    """A problem a command reports in one line, exiting 1."""


def _error_line(message: str, code: int) -> None:
    """Print an error: one inert line on stderr, or one JSON object with --json."""
    if _json_errors:
        typer.echo(json.dumps({"error": message, "exit": code}), err=True)
        return
    # Our messages quote stored values with repr(), so backslashes are ours: body mode keeps
    # them single, and the newlines and tabs it keeps are our own wrapping.
    line = " ".join(render.inert(message, body=True).split())
    text = Text("error:", style="red")
    text.append(" " + line)
    errors.print(text, soft_wrap=True)


def _fail(message: str) -> NoReturn:
    _error_line(message, 1)
    raise typer.Exit(1)


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

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


@asynccontextmanager
async def _open(db: str, *, writes: bool = False) -> AsyncIterator[EventStore]:
    """The existing store `--db` names (a path or a URL), read-only unless the command writes.

    Nothing is created or set up: a missing file, a directory, a pipe or another program's
    file is refused before it is opened, and reading never changes a file, so an archived
    copy in a read-only place can be read and verified.
    """
    try:
        store = open_store(db, readonly=not writes, create=False)
    except StoreNotFoundError:
        raise CliError(
            f"no database at {db}: nothing was created; pass --db PATH (or a sqlite:/// URL, or "
            "--dsn postgresql://...) of an existing log"
        ) from None
    async with store:
        yield store


def _run(
    job: Callable[[EventStore], Awaitable[T]],
    db: str,
    thread_id: str | None = None,
    *,
    writes: bool = False,
) -> T:
    """Run `job` on the opened store (checking `thread_id` exists); report errors in a line."""

    async def main() -> T:
        async with _open(db, writes=writes) as store:
            if thread_id is not None and (not thread_id or await store.last_seq(thread_id) == 0):
                raise CliError(
                    f"thread {thread_id!r} does not exist in {db}: "
                    f"list the threads with `agentlog threads --db {db}`"
                )
            return await job(store)

    try:
        return asyncio.run(main())
    except (CliError, AgentlogError) as exc:
        _fail(str(exc))


def _one_point(step: int | None, seq: int | None) -> None:
    if step is not None and seq is not None:
        raise typer.BadParameter("name the point with --step or with --seq, not both")


async def _first_step(store: EventStore, thread_id: str) -> int:
    """The step a thread starts from: 0, or its source's step when it is a fork."""
    async for record in store.read(thread_id, 1, 1):
        if isinstance(record.event, Forked):
            meta = record.event.state.get("execution_meta")
            return int(meta.get("step", 0)) if isinstance(meta, dict) else 0
    return 0


async def _from_end(store: EventStore, thread_id: str, point: int, by: str) -> int:
    """`point` itself, or for a negative one the step or seq it counts back to (-1: last)."""
    if point >= 0:
        return point
    if by == "seq":
        first, last = 0, await store.last_seq(thread_id)
    else:
        first = await _first_step(store, thread_id)
        last = first + len(await store.seqs_of_kind(thread_id, StepAdvanced.KIND))
    resolved = last + 1 + point
    if resolved < first:
        raise CliError(
            f"{by} {point} counts back past the start of thread {thread_id!r}, which has "
            f"{by}s {first} to {last} ({by} -1 is the last, {by} {first - last - 1} the first)"
        )
    return resolved


async def _point(store: EventStore, thread_id: str, step: int | None, seq: int | None) -> int:
    """The seq a --step or --seq names; the thread's last seq when neither is given."""
    from agentlog.projections import step_seq

    if step is not None:
        return await step_seq(store, thread_id, await _from_end(store, thread_id, step, "step"))
    if seq is None:
        return await store.last_seq(thread_id)
    return await _from_end(store, thread_id, seq, "seq")


def _bounds(full: bool, last: int) -> render.Bounds:
    return render.Bounds.full() if full else render.Bounds(messages=last)


def _print(renderable: RenderableType) -> None:
    console.print(renderable, soft_wrap=not console.is_terminal)


# ---- commands --------------------------------------------------------------------------------


@app.command("threads")
def threads_command(
    db: Db = "agentlog.db",
    as_json: AsJson = False,
    everything: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Also list the internal threads (__runtime__..., __shared__/..., __store__).",
        ),
    ] = False,
) -> None:
    """List the threads with their status, step, records and last activity.

    The status is the one `show` and the HTTP API give: the library's fold of the log.
    """
    from agentlog.actors.engine.threads import internal_threads

    async def job(store: EventStore) -> list[render.ThreadInfo]:
        ids = await store.threads()
        if not everything:
            hidden = await internal_threads(store, ids)
            ids = [t for t in ids if t not in hidden]
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
        _print(render.threads_table(infos))


async def _thread_info(store: EventStore, thread_id: str) -> render.ThreadInfo:
    """The thread's line: where its run stands, as the library's fold reads it (`show` and
    the HTTP API read the same). Custom fields never move a run, so the thread is folded
    into a plain `AgentState`; one whose records that class cannot hold (an update of a
    custom field) is read as `show` reads it, with a class built from the log."""
    from agentlog.projections import InvalidStateUpdateError, state_at
    from agentlog.projections.generic import open_states

    records, at = 0, 0.0
    try:
        records = await store.last_seq(thread_id)
        async for record in store.read(thread_id, records, records):
            at = record.at
        try:
            state: AgentState = await state_at(store, thread_id, records)
        except InvalidStateUpdateError:
            (point,) = await open_states(store, thread_id, [records])
            state = point.state
    except (AgentlogError, ValueError) as exc:
        return render.ThreadInfo(thread_id, records, at, error=f"unreadable: {type(exc).__name__}")
    from agentlog.projections import present

    return render.ThreadInfo(thread_id, records, at, **present.run_position(state.execution_meta))


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
    slowest: Annotated[
        int | None,
        typer.Option(
            "--slowest",
            min=0,
            metavar="N",
            help="Only the N slowest node steps and tool calls, slowest first.",
        ),
    ] = None,
    tokens: Annotated[
        bool,
        typer.Option(
            "--tokens", help="Only the model calls' tokens and latency, per step and per run."
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """The thread's timeline: one row per event (seq, time, kind, actor, node, duration,
    summary), then its model calls' tokens and latency per step and per run; with
    --slowest N, where its time went; with --tokens, the tokens alone."""
    from agentlog.projections import event_history
    from agentlog.projections.timetravel import slowest as slowest_of

    async def job(store: EventStore) -> tuple[list[EventRow], render.UsageReport]:
        rows = await event_history(store, thread, kind or None)
        return rows, render.usage_report([r async for r in store.read(thread)])

    if tokens and (slowest is not None or kind):
        raise typer.BadParameter(
            "--tokens shows the model calls alone: drop --slowest/--kind, or run them separately",
            param_hint="--tokens",
        )
    rows, usage = _run(job, db, thread)
    if tokens:
        if as_json:
            _echo_json(render.usage_json(usage))
        else:
            _print(render.usage_view(usage))
        return
    if slowest is not None:
        ranked = slowest_of(rows, slowest)
        if as_json:
            _echo_json(render.slowest_json(ranked))
        else:
            _print(render.slowest_table(thread, ranked))
        return
    if as_json:
        _echo_json(render.history_json(rows, usage))
        return
    if len(rows) > render.TABLE_ROWS:
        for lines in render.history_lines(thread, rows, usage=usage):
            typer.echo(lines)
    else:
        _print(render.history_table(thread, rows, usage))
    if usage.calls:
        _print(render.usage_view(usage))


@app.command("tail")
def tail_command(
    db: Db = "agentlog.db",
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind", help="Only records of this kind (repeat for more).", callback=_check_kinds
        ),
    ] = None,
    thread: Annotated[
        str | None, typer.Option("--thread", help="Only records of this thread.")
    ] = None,
    node: Annotated[
        str | None,
        typer.Option(
            "--node",
            help="Only records whose event names this node (node_entered, interrupt_raised, "
            "stopped, tool_call_started, run_failed), and records naming no node that it "
            "wrote.",
        ),
    ] = None,
    graph: Annotated[
        str | None,
        typer.Option(
            "--graph",
            help="Only records of threads that run this graph: the graph id an agent runtime "
            "started the thread with, else the graph name its first run recorded; and the "
            "runtime's records of those runs' triggers.",
        ),
    ] = None,
    start: Annotated[
        int | None,
        typer.Option(
            "--from",
            metavar="POSITION",
            help="Print the records after this position (0: the whole log; -N: the last N "
            "records of the log first). Default: only what is committed from now on.",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Follow the log live, like `tail -f`: one line per record as any process commits it.

    A line shows the record's position, time (UTC), thread, seq, kind, actor and summary.

    With --json, one JSON object per line, whose "position" --from resumes after.

    Ctrl-C or SIGTERM ends it (exit status 0).
    """
    from agentlog.actors.cli.tail import tail

    tail(db, kind or None, thread, node, start, as_json, graph)


@app.command("runtime")
def runtime_command(
    app_ref: Annotated[
        str,
        typer.Option(
            "--app",
            metavar="MODULE:ATTRIBUTE",
            help="What builds the runtime: an AgentRuntime, or a function build(store) -> "
            "AgentRuntime (def or async def) called with the opened store of --db. MODULE is "
            "imported from the working directory, as `python -m` would.",
        ),
    ],
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Run the agent runtime your code builds (timers and event triggers fire) until SIGINT
    or SIGTERM; the database is created when missing.

    A signal stops it: running steps commit, runs pause, the next runtime here resumes them.
    A second signal cancels what still runs (those runs resume next time too). Exit status 0.
    On a terminal: a live table of runs by graph and entry point, queues, timers, latency.
    With --json: one JSON object per line each time those figures change; the last: "stopped".
    """
    from agentlog.actors.cli.runtime import run_runtime

    run_runtime(db, app_ref, as_json)


@app.command("worker")
def worker_command(
    app_ref: Annotated[
        str,
        typer.Option(
            "--app",
            metavar="MODULE:ATTRIBUTE",
            help="What builds the runtime, as for `agentlog runtime`: an AgentRuntime, or a "
            "function build(store) -> AgentRuntime called with the opened store of --db.",
        ),
    ],
    db: Db = "agentlog.db",
    worker_id: Annotated[
        str | None,
        typer.Option("--id", help="This worker's name among the workers (default host-pid)."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Run the runtime your code builds as one of many workers sharing the store (SQLite on
    one host, PostgreSQL on many): each triggered run is leased by one worker, and a dead
    worker's runs are taken over once its lease expires.

    SIGTERM or SIGINT drains it: running steps commit, its runs are left to the other
    workers. A second signal cancels what still runs here (those runs resume elsewhere too).
    """
    from agentlog.actors.cli.runtime import default_worker_id, run_runtime

    run_runtime(db, app_ref, as_json, worker_id or default_worker_id())


@app.command("serve")
def serve_command(
    app_ref: Annotated[
        str | None,
        typer.Option(
            "--app",
            metavar="MODULE:ATTRIBUTE",
            help="What builds the runtime, as for `agentlog runtime`: an AgentRuntime, or a "
            "function build(store) -> AgentRuntime called with the opened store of --db.",
        ),
    ] = None,
    db: Db = "agentlog.db",
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port (0: any free one).")] = 8123,
    tokens: Annotated[
        str | None,
        typer.Option(
            metavar="FILE",
            help="The token file (JSON: name, sha256, graphs, rights per token); default: the "
            "file the AGENTLOG_TOKENS_FILE environment variable names. Without tokens only a "
            "loopback address is served (AGENTLOG_RUN_WEBHOOK_SECRET signs runs' webhooks).",
        ),
    ] = None,
    max_body: Annotated[int, typer.Option(help="Largest request body, in bytes.")] = 1_048_576,
    hash_token: Annotated[
        bool,
        typer.Option("--hash-token", help="Print the sha256 of a token read from stdin; exit."),
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            metavar="NAME",
            help="A Host name the server answers for, besides loopback names and the --host "
            "address (repeat it; '*': any). Others get 400, so a rebinding domain reads nothing.",
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-origin",
            metavar="ORIGIN",
            help="A web origin (https://host[:port]) whose pages may change things here, "
            "besides the server's own (repeat it). Other origins' requests get 403.",
        ),
    ] = None,
    header_timeout: Annotated[
        float,
        typer.Option(help="Seconds a request's headers may take to arrive; then it is closed."),
    ] = 10.0,
    body_timeout: Annotated[
        float,
        typer.Option(help="Seconds a request's body may take to arrive; then 408 and closed."),
    ] = 30.0,
    client_connections: Annotated[
        int, typer.Option(help="Connections one client address may hold open; more are closed.")
    ] = 100,
    log_level: logs.LogLevel = logs.Level.warning,
    log_json: logs.LogJson = False,
) -> None:
    """Serve the runtime your code builds over HTTP: threads, state, history, runs, live
    streams (Server-Sent Events), webhooks; OpenAPI at /docs and /openapi.json.

    Every request acts as its bearer token's name, which the log records as the actor.
    SIGINT or SIGTERM drains it: requests under way finish, running steps commit, runs pause.
    """
    from agentlog.actors.cli.serve import run_serve

    run_serve(
        db, app_ref, host, port, tokens, max_body, hash_token,
        allowed_hosts=allowed_host or [], allowed_origins=allowed_origin or [],
        header_timeout=header_timeout, body_timeout=body_timeout,
        max_per_client=client_connections, log_level=log_level.value, log_json=log_json,
    )  # fmt: skip


@app.command("show")
def show_command(
    thread: Thread,
    step: StepOpt = None,
    seq: SeqOpt = None,
    db: Db = "agentlog.db",
    full: Full = False,
    last: Last = render.LAST_MESSAGES,
    as_json: AsJson = False,
) -> None:
    """The thread's state at a point (the latest by default): status, messages, fields.

    With --step, also what the step recorded: one summarised row per record.

    Shows the last messages and records and cuts long texts unless --full; --json is complete.
    """
    from agentlog.projections import event_history
    from agentlog.projections.generic import open_states
    from agentlog.projections.timetravel import step_span

    _one_point(step, seq)

    async def job(
        store: EventStore,
    ) -> tuple[OpenState, int | None, list[EventRow], render.UsageReport]:
        if step is None:
            (point,) = await open_states(store, thread, [await _point(store, thread, None, seq)])
            number, rows = None, []
        else:
            number = await _from_end(store, thread, step, "step")
            first, end = await step_span(store, thread, number)
            (point,) = await open_states(store, thread, [end])
            rows = await event_history(store, thread, first=first, last=end) if first <= end else []
        usage = render.usage_report([r async for r in store.read(thread, 1, point.seq)])
        return point, number, rows, usage

    point, number, rows, usage = _run(job, db, thread)
    if as_json:
        data = render.state_json(thread, point.seq, point.state, point, usage)
        if number is not None:
            data["step_records"] = render.history_json(rows, usage)
        _echo_json(data)
        return
    bounds = _bounds(full, last)
    _print(render.state_view(thread, point.seq, point.state, bounds, point, usage))
    if number is not None:
        _print(render.step_records_view(number, rows, bounds, usage))


@app.command("diff", context_settings={"ignore_unknown_options": True})
def diff_command(
    thread: Thread,
    a: Annotated[int, typer.Argument(metavar="A", help="The earlier point (-1: the last).")],
    b: Annotated[int, typer.Argument(metavar="B", help="The later point (-1: the last).")],
    by: Annotated[By, typer.Option("--by", help="Points are steps or seqs.")] = By.step,
    db: Db = "agentlog.db",
    full: Full = False,
    last: Last = render.LAST_MESSAGES,
    as_json: AsJson = False,
) -> None:
    """What changed between two points of a thread: messages, fields, status, interrupt.

    Shows the last changed messages and cuts long texts unless --full; --json is complete.
    """
    from agentlog.projections import step_seq
    from agentlog.projections.generic import open_states
    from agentlog.projections.timetravel import compare_states

    async def job(store: EventStore) -> tuple[StateDiff, tuple[OpenState, OpenState]]:
        seqs = []
        for p in (a, b):
            point = await _from_end(store, thread, p, by.value)
            seqs.append(await step_seq(store, thread, point) if by == By.step else point)
        before, after = await open_states(store, thread, seqs)
        return compare_states(seqs[0], seqs[1], before.state, after.state), (before, after)

    change, points = _run(job, db, thread)
    if as_json:
        _echo_json(render.diff_json(thread, a, b, by.value, change, points))
    else:
        _print(render.diff_view(thread, a, b, by.value, change, _bounds(full, last), points))


@app.command("fork")
def fork_command(
    thread: Thread,
    step: StepOpt = None,
    seq: SeqOpt = None,
    to: Annotated[
        str | None, typer.Option("--to", help="The new thread's id (default: generated).")
    ] = None,
    actor: Annotated[
        str | None,
        typer.Option(
            "--actor",
            help="Who forks: the actor the fork's record names (default: your login name).",
        ),
    ] = None,
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Branch a thread at a step (or seq) into a new thread; print the new thread's id."""
    from agentlog.actors.engine.commit import fork_thread
    from agentlog.projections.generic import open_states

    if step is None and seq is None:
        raise typer.BadParameter("name the fork point with --step N or --seq S")
    _one_point(step, seq)
    if to == "":
        raise typer.BadParameter("the new thread id is empty", param_hint="--to")
    who = _login() if actor is None else actor
    if not who.strip() or not who.isprintable():
        raise typer.BadParameter(
            f"the actor is who forks, in printable text (a name such as 'alice'), got {who!r}",
            param_hint="--actor",
        )

    async def job(store: EventStore) -> tuple[int, str]:
        point = await _point(store, thread, step, seq)
        if to is not None and await store.last_seq(to):
            raise CliError(f"thread {to!r} already exists in {db}: pick a new id with --to")
        (at,) = await open_states(store, thread, [point])
        if at.notes:
            name, note = next(iter(at.notes.items()))
            raise CliError(
                f"cannot fork thread {thread!r} at seq {point} from the log alone: field "
                f"{name!r} is {note.split(':')[0]}; fork it from Python with its state class "
                "(CompiledGraph.afork), or at a point where a snapshot holds its value"
            )
        state_cls = type(at.state)
        return point, await fork_thread(
            store, thread, at_seq=point, new_thread_id=to, state_cls=state_cls, actor=who
        )

    point, new_id = _run(job, db, thread, writes=True)
    if as_json:
        _echo_json(
            {"thread_id": new_id, "source_thread": thread, "source_seq": point, "step": step}
        )
    else:
        typer.echo(new_id)


def _login() -> str:
    """The name of whoever runs the command, for the records it writes ("user" if unknown)."""
    import getpass

    try:
        return getpass.getuser() or "user"
    except (KeyError, OSError):
        return "user"


@app.command("verify")
def verify_command(
    thread: Annotated[
        str | None,
        typer.Argument(help="The thread (and its subgraph runs) to check (default: all)."),
    ] = None,
    head: Annotated[
        str | None,
        typer.Option(
            "--head",
            help="A head saved earlier, THREAD@SEQ:HASH: the log must still hold that record.",
        ),
    ] = None,
    snapshots: Annotated[
        bool | None,
        typer.Option(
            "--snapshots/--no-snapshots",
            help="Replay each intact thread and compare every stored snapshot with the log "
            "(default: on for one thread, off for all).",
        ),
    ] = None,
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Recompute the hash chains (of one thread, or all), then check the tool-call invariants.

    With --snapshots, every snapshot is compared with the state the log folds to at its
    seq: a snapshot that differs was forged or damaged, and counts as damage (exit 1).

    A completed run must leave no tool call without its result; a result answers one call.

    A thread whose chain is damaged is not replayed: only its damage is reported.

    Exit status 0: every chain is intact and no invariant is broken.

    Exit status 1: a chain or a snapshot is damaged (whatever the invariants), or the check
    could not run.

    Exit status 2: a usage error.

    Exit status 3: every chain is intact but a thread breaks an invariant (see its lines).
    """
    from agentlog.projections.invariants import thread_findings
    from agentlog.projections.snapshot_checks import SnapshotFinding, verify_snapshots

    compare = snapshots if snapshots is not None else thread is not None
    found: list[SnapshotFinding] = []
    stored: list[int] = []

    saved: Head | None = None
    if head is not None:
        try:
            saved = Head.parse(head)
        except ValueError as exc:
            _fail(f"--head: {exc}")
        if thread is not None and saved.thread_id != thread:
            _fail(f"--head is a head of thread {saved.thread_id!r}, not of {thread!r}")
        thread = saved.thread_id

    async def job(store: EventStore) -> tuple[list[VerifyReport], list[ThreadFindings]]:
        if thread is not None:
            reports = await verify_tree(store, thread, head=saved)
        else:
            with render.progress(errors, "verifying threads") as update:
                reports = await verify_store(store, progress=update)
        intact = [r.thread_id for r in reports if r.ok]
        checked: list[ThreadFindings] = []
        with render.progress(errors, "checking invariants") as update:
            for thread_id in intact:
                checked.append(await thread_findings(store, thread_id))
                update(len(checked), len(intact))
        if compare:
            with render.progress(errors, "comparing snapshots with the log") as update:
                for done, thread_id in enumerate(intact, 1):
                    found.extend(await verify_snapshots(store, thread_id))
                    stored.append(len(await store.snapshot_seqs(thread_id)))
                    update(done, len(intact))
        return reports, checked

    reports, checked = _run(job, db, thread)
    bad_snapshots = [f for f in found if f.problem]
    if as_json:
        data = render.verify_json(reports, checked)
        if compare:
            data["snapshots"] = {
                "ok": not bad_snapshots,
                "checked": sum(stored),
                "findings": [
                    {"thread_id": f.thread_id, "seq": f.seq, "kind": f.kind,
                     "message": f.message, "path": f.path}
                    for f in found
                ],
            }  # fmt: skip
        _echo_json(data)
    else:
        _print(render.verify_table(reports))
        _print(render.invariants_view(reports, checked))
        if compare:
            _print(render.snapshot_lines(found, sum(stored)))
    failed = [r for r in reports if not r.ok]
    if failed:
        first = failed[0]
        _fail(
            f"{len(failed)} of {len(reports)} threads failed verification; thread "
            f"{first.thread_id!r}, seq {first.first_bad_seq}: {first.problem}"
        )
    if bad_snapshots:
        wrong = bad_snapshots[0]
        _fail(
            f"{len(bad_snapshots)} snapshot(s) differ from the log; thread "
            f"{wrong.thread_id!r}, snapshot at seq {wrong.seq}: {wrong.message}"
        )
    broken = [c for c in checked if not c.ok]
    if broken:
        count = sum(len(c.findings) for c in broken)
        _error_line(
            f"{count} invariant finding(s) in {len(broken)} of {len(reports)} threads (hash "
            f"chains intact); thread {broken[0].thread_id!r}: {broken[0].findings[0]}",
            INVARIANT_EXIT,
        )
        raise typer.Exit(INVARIANT_EXIT)


@app.command()
def demo(
    db: Annotated[
        str,
        typer.Option(
            "--db",
            "--dsn",
            help="The database to write: a SQLite file's path, a sqlite:/// URL, or a "
            "postgresql:// URL (its schema made by `agentlog db upgrade`).",
        ),
    ] = "agentlog.db",
    as_json: AsJson = False,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            metavar="PROVIDER:MODEL",
            help="A real model to play the agent: openai:MODEL or anthropic:MODEL (base URL "
            "and key from OPENAI_* / ANTHROPIC_*); the scripted one when omitted.",
        ),
    ] = None,
) -> None:
    """Run the support agent: a lookup, a refund a human approves, an answer (a scripted
    model, or a real one with --model)."""
    from agentlog.actors.examples.support import run_demo

    def show(chunk: StreamChunk) -> None:
        if as_json:
            return
        if chunk.message is not None:
            message = chunk.message
            line = Text("  ")
            line.append(f"{render.inert(message.role):>9}", style="cyan")
            line.append("  ")
            line.append_text(render.message_line(message))
            _print(line)
        elif chunk.data and chunk.data.get("kind") == InterruptRaised.KIND:
            line = Text("  ")
            line.append("paused", style="yellow")
            line.append(f" before {render.inert(repr(chunk.data['node']))}: awaiting approval")
            _print(line)

    def approve(state: AgentState) -> bool:
        if not as_json:
            line = Text("  ")
            line.append("approved", style="green")
            line.append(" by supervisor; resuming the same thread")
            _print(line)
        return True

    async def main() -> tuple[list[EventRecord], AgentState, VerifyReport]:
        async with open_store(db) as store:
            return await run_demo(store, show, approve, model=model)

    try:
        timeline, state, report = asyncio.run(main())
    except AgentlogError as exc:
        _fail(str(exc))
    if as_json:
        _echo_json(render.demo_json(timeline, state, report))
    else:
        _print(render.demo_view(db, timeline, state, report))


db_app = typer.Typer(
    name="db",
    help="Create or upgrade the schema of a PostgreSQL store (agentlog db upgrade --dsn ...).",
    no_args_is_help=True,
)
app.add_typer(db_app, name="db")
app.add_typer(relay.relay_app, name="relay")
replay_command.register(app)
ui.register(app)
from agentlog.actors.cli.otel import otel_app  # noqa: E402 - it imports the names above

app.add_typer(otel_app)
Dsn = Annotated[
    str,
    typer.Option(
        "--dsn",
        help="The PostgreSQL server and database: postgresql://user@host:5432/database "
        "(?schema=name picks the schema).",
    ),
]
SchemaOpt = Annotated[
    str | None,
    typer.Option("--schema", help="The PostgreSQL schema of the log (default: agentlog)."),
]


@db_app.command("upgrade")
def db_upgrade_command(dsn: Dsn, schema: SchemaOpt = None, as_json: AsJson = False) -> None:
    """Create the agentlog schema, or bring it to this agentlog's version (safe to rerun;
    never downgrades). A PostgreSQL store is never created or altered when it opens."""
    from agentlog.actors.cli.db import upgrade

    upgrade(dsn, schema, as_json)


@db_app.command("status")
def db_status_command(dsn: Dsn, schema: SchemaOpt = None, as_json: AsJson = False) -> None:
    """Say which schema version the database holds and whether this agentlog can open it.

    Exit status 0 when it is ready, 3 when it is missing, older or newer (run `agentlog db
    upgrade`, or upgrade agentlog), so a deploy script can test it."""
    from agentlog.actors.cli.db import status

    status(dsn, schema, as_json)


from agentlog.actors.cli import keep as _keep  # noqa: E402, F401  (its commands join `app`)


def _usage_line(exc: ClickException) -> str:
    """A usage error in one line, naming the command's --help."""
    message = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "agentlog"
    return f"{message} (see `{path} --help`)"


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: usage errors and failures print one line, never a panel."""
    global _json_errors
    args = sys.argv[1:] if argv is None else list(argv)
    _json_errors = "--json" in args[: args.index("--")] if "--" in args else "--json" in args
    command = typer.main.get_command(app)
    try:
        code = command.main(args=args, prog_name="agentlog", standalone_mode=False)
    except ClickException as exc:
        _error_line(_usage_line(exc), exc.exit_code)
        code = exc.exit_code
    except (KeyboardInterrupt, typer.Abort):
        _error_line("interrupted", 130)
        code = 130
    sys.exit(code if isinstance(code, int) else 0)
