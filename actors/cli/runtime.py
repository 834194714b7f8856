"""`agentlog runtime`: run the agent runtime an application builds, until a signal stops it.

`--app module:attribute` names an `AgentRuntime` (built on the store `--db` names), or a
function `build(store) -> AgentRuntime` (def or async def) called with the opened store of
`--db`. Anything else is refused in one line (exit 2) before the database is touched; a
database this command had to create for `build` is removed again when the app is refused.

SIGINT or SIGTERM stops the runtime cleanly (`runtime.stop()`: running steps commit, runs
pause and the next runtime on the file resumes them); a second signal cancels what still runs
(`runtime.stop(cancel=True)`). Meanwhile the figures of `runtime.stats()` are sampled twice a
second: a live table on a terminal, or with `--json` one line per change and a last one once
stopped. Ids in the table come from user code, so they are shown inert.

The command's options are declared in `agentlog.actors.cli` and this module is imported when it
runs, so `agentlog --help` loads no more than before (see tests/test_cli_startup.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from agentlog.actors.cli import CliError, _fail, console, render
from agentlog.events import AgentlogError, EventStore, open_store
from agentlog.events.follow import last_position

if TYPE_CHECKING:
    from rich.live import Live

    from agentlog.actors.runtime import AgentRuntime

REFRESH_S = 0.5
"""Seconds between two looks at the runtime's figures (the table's refresh, the JSON's)."""

COUNTS = ("active", "queued", "completed", "failed", "interrupted", "cancelled")
"""Runs of a graph or entry point by where they stand, as `AgentRuntime.stats()` counts."""


# ---- the application ---------------------------------------------------------------------


def usage(message: str) -> typer.BadParameter:
    """A usage error about --app: one line, exit status 2."""
    return typer.BadParameter(message, param_hint="--app")


@dataclass(frozen=True)
class AppRef:
    """`module:attribute`, read from --app."""

    module: str
    attribute: str

    @classmethod
    def parse(cls, text: str) -> AppRef:
        module, colon, attribute = text.partition(":")
        dotted = [*module.split("."), *attribute.split(".")]
        if not colon or not all(part.isidentifier() for part in dotted):
            raise usage(
                f"{text!r} is not MODULE:ATTRIBUTE: write the dotted module path, a colon and "
                "the name in it, e.g. myapp.agents:build"
            )
        return cls(module, attribute)

    def __str__(self) -> str:
        return f"{self.module}:{self.attribute}"


def load(ref: AppRef) -> object:
    """Import the module (from the working directory first) and return the named object."""
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(ref.module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (ref.module + ".").startswith(exc.name + "."):
            raise usage(
                f"no module named {exc.name!r} (looked in {here!r} and on the Python path): "
                "check the name, or run from the directory that holds it"
            ) from None
        raise CliError(f"importing {ref.module!r} failed: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        raise CliError(f"importing {ref.module!r} raised {type(exc).__name__}: {exc}") from exc
    found: object = module
    for name in ref.attribute.split("."):
        try:
            found = getattr(found, name)
        except AttributeError:
            raise usage(
                f"module {ref.module!r} has no attribute {ref.attribute!r}: name an "
                "AgentRuntime or a function build(store) -> AgentRuntime defined in it"
            ) from None
    return found


def _what(value: object) -> str:
    if isinstance(value, type):
        return f"the class {value.__name__}"
    return f"a value of type {type(value).__name__}"


WANTED = "name an AgentRuntime, or a function build(store) -> AgentRuntime (def or async def)"


def check_target(target: object, ref: AppRef) -> bool:
    """True for an `AgentRuntime`, False for a function taking the store; else refused."""
    from agentlog.actors.runtime import AgentRuntime

    if isinstance(target, AgentRuntime):
        return True
    if isinstance(target, type) or not callable(target):
        raise usage(f"{str(ref)!r} is {_what(target)}: {WANTED}")
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):  # no signature to read: calling it will tell
        return False
    try:
        signature.bind(object())
    except TypeError:
        raise usage(
            f"{str(ref)!r} is a function with the parameters {signature}, which cannot be "
            f"called with one argument (the store): {WANTED}"
        ) from None
    return False


def _address(store: object) -> tuple[str | None, ...]:
    """What names a store's database: a file's real path, or a server's DSN and schema."""
    path = getattr(store, "path", None)
    if path is not None:
        return (os.path.realpath(path),)
    dsn = getattr(store, "dsn", None)
    return (dsn, getattr(store, "schema", None)) if dsn is not None else (None,)


def same_store(runtime: AgentRuntime, db: str, ref: AppRef) -> None:
    """Refuse a runtime built on another store than the one --db names."""
    theirs = _address(runtime.store)
    ours = _address(open_store(db))  # the store is not opened: nothing touched
    if theirs[0] is None or theirs != ours:
        named = theirs[0]
        if named is not None and len(theirs) > 1:
            from agentlog.events.stores.postgres import shown_dsn  # never print a password

            named = f"{shown_dsn(named)} (schema {theirs[1]!r})"
        where = f"the database {named!r}" if named is not None else "a store with no file"
        given = db
        if db.lower().startswith("postgres"):
            from agentlog.events.stores.postgres import shown_dsn

            given = shown_dsn(db)
        raise usage(
            f"{str(ref)!r} is a runtime built on {where}, not on --db/--dsn {given!r}: run it "
            "with --db/--dsn naming that database, or build it on the store --db/--dsn names "
            "(a function build(store) gets it)"
        )


async def built(build: Callable[[EventStore], Any], store: EventStore, ref: AppRef) -> Any:
    """What `build(store)` returns (awaited when it is a coroutine); its failure in a line."""
    try:
        made = build(store)
        if inspect.isawaitable(made):
            made = await made
    except Exception as exc:
        raise CliError(f"{ref}(store) raised {type(exc).__name__}: {exc}") from exc
    return made


def check_built(made: object, store: EventStore, ref: AppRef) -> AgentRuntime:
    from agentlog.actors.runtime import AgentRuntime

    if not isinstance(made, AgentRuntime):
        raise usage(f"{ref}(store) returned {_what(made)}, not an AgentRuntime: {WANTED}")
    if made.store is not store:
        raise usage(
            f"{ref}(store) returned a runtime built on another store: build it on the store "
            "it is given (AgentRuntime(store)), so that it runs on --db"
        )
    return made


# ---- the figures ---------------------------------------------------------------------------


def figures(runtime: AgentRuntime, state: str, signal_name: str | None) -> dict[str, Any]:
    """What the table shows and each JSON line says: `runtime.stats()` and the timers."""
    stats = runtime.stats()
    depths: dict[str, int] = stats["queue_depth"]
    entries: dict[str, dict[str, Any]] = {}
    for entry_id, counts in stats["entry_points"].items():
        entry = runtime.entries.get(entry_id)
        next_fire = None
        if entry is not None and entry.trigger == "timer" and state == "running":
            next_fire = runtime.next_fire(entry_id)
        entries[entry_id] = {
            "graph_id": entry.graph_id if entry is not None else None,
            "trigger": entry.trigger if entry is not None else None,
            **counts,
            "queue_depth": depths.get(entry_id, 0),
            "next_fire": next_fire,
        }
    return {
        "state": state,
        "signal": signal_name,
        "graphs": stats["graphs"],
        "entry_points": entries,
        "executing": stats["executing"],
        "queued": stats["queued"],
        "events_appended": stats["events_appended"],
        "commit_latency_ms": stats["commit_latency_ms"],
    }


def _latency(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.1f} ms"


def _next(at: float | None, now: float) -> Text:
    if at is None:
        return Text("")
    return Text(f"{render.iso(at)} (in {max(at - now, 0.0):.1f}s)")


def status_view(db: str, data: dict[str, Any], now: float) -> RenderableType:
    """The live table: a line of totals, then one row per graph and per entry point."""
    from rich.table import Table

    head = Text("agentlog runtime on ", style="bold")
    head.append(render.inert(db))
    head.append(": ")
    head.append(data["state"], style="green" if data["state"] == "running" else "yellow")
    if data["signal"]:
        head.append(f" ({data['signal']})")
    latency = data["commit_latency_ms"]
    totals = Text(
        f"executing {data['executing']}, queued {data['queued']}; "
        f"{data['events_appended']:,} events appended; commit latency "
        f"p50 {_latency(latency['p50'])}, p99 {_latency(latency['p99'])}"
    )
    table = Table(title_justify="left")
    table.add_column("graph / entry point", overflow="fold")
    table.add_column("trigger")
    for column in (*COUNTS, "queue"):
        table.add_column(column, justify="right")
    table.add_column("next fire")
    entries: dict[str, dict[str, Any]] = data["entry_points"]
    shown: set[str] = set()
    for graph_id, counts in data["graphs"].items():
        table.add_row(
            render.cell(graph_id, style="bold"),
            Text("graph"),
            *(Text(str(counts[c])) for c in COUNTS),
            Text(""),
            Text(""),
        )
        for entry_id, entry in entries.items():
            if entry["graph_id"] == graph_id:
                shown.add(entry_id)
                table.add_row(*_entry_row(entry_id, entry, now))
    for entry_id, entry in entries.items():
        if entry_id not in shown:
            table.add_row(*_entry_row(entry_id, entry, now))
    hint = Text(
        "Ctrl-C or SIGTERM stops it: running steps commit and runs pause (the next runtime "
        "resumes them); a second signal cancels what still runs.",
        style="dim",
    )
    return Group(head, totals, table, hint)


def _entry_row(entry_id: str, entry: dict[str, Any], now: float) -> list[Text]:
    name = Text("  ")
    name.append(render.inert(entry_id))
    return [
        name,
        render.cell(entry["trigger"] or "?"),
        *(Text(str(entry[c])) for c in COUNTS),
        Text(str(entry["queue_depth"])),
        _next(entry["next_fire"], now),
    ]


@dataclass
class Monitor:
    """Samples the figures: a JSON line when they changed, or the live table's next frame."""

    runtime: AgentRuntime
    db: str
    live: Live | None
    last: dict[str, Any] | None = None
    signal_name: str | None = None
    reader_left: bool = False
    state: str = "running"

    def sample(self, state: str | None = None, *, final: bool = False) -> None:
        self.state = state or self.state
        data = figures(self.runtime, self.state, self.signal_name)
        now = time.time()
        if self.live is not None:
            self.live.update(status_view(self.db, data, now), refresh=True)
            return
        if data == self.last and not final:
            return
        self.last = data
        line = {"at": round(now, 3), **data}
        if final:
            line["final"] = True
        self._write(json.dumps(line))

    def _write(self, line: str) -> None:
        if self.reader_left:
            return
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except BrokenPipeError:  # `agentlog runtime --json | head`: the runtime goes on
            self.reader_left = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


# ---- running ---------------------------------------------------------------------------------


@dataclass
class Signals:
    """SIGINT and SIGTERM: the first asks for a stop, the second for a cancel."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    first: str | None = None

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, self._got, number)

    def remove(self) -> None:
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(number)

    def _got(self, number: signal.Signals) -> None:
        if not self.stop.is_set():
            self.first = number.name
            self.stop.set()
        else:
            self.cancel.set()


async def _wait(event: asyncio.Event, timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)


async def serve(runtime: AgentRuntime, monitor: Monitor, signals: Signals) -> None:
    """Start the runtime, show its figures until a signal, then stop it (cancel on a second)."""
    await runtime.start()
    try:
        while not signals.stop.is_set():
            monitor.sample("running")
            await _wait(signals.stop, REFRESH_S)
    finally:
        monitor.signal_name = signals.first
        stops = [asyncio.ensure_future(runtime.stop())]
        second = asyncio.ensure_future(signals.cancel.wait())
        try:
            while not all(stop.done() for stop in stops):
                if second.done() and len(stops) == 1:
                    stops.append(asyncio.ensure_future(runtime.stop(cancel=True)))
                monitor.sample("cancelling" if len(stops) > 1 else "stopping")
                waiting = [f for f in (*stops, second) if not f.done()]
                await asyncio.wait(waiting, timeout=REFRESH_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            second.cancel()
        for stop in stops:
            await stop
    monitor.sample("stopped", final=True)


async def _still_empty(store: EventStore, created: str | None) -> bool:
    """Whether this command created the database and nothing was written to it yet."""
    return created is not None and await last_position(store) == 0


def _remove(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)


def as_worker(runtime: AgentRuntime, worker_id: str | None) -> None:
    """Make the runtime one of many workers on its store (`agentlog worker`)."""
    if worker_id is None:
        return
    from dataclasses import replace

    runtime.config = replace(runtime.config, worker_id=worker_id)


def default_worker_id() -> str:
    """This process's name among the workers: its host and pid."""
    import socket

    return f"{socket.gethostname()}-{os.getpid()}"


async def main(
    db: str, ref: AppRef, target: object, as_json: bool, worker_id: str | None = None
) -> None:
    """Open the store, get the runtime, serve it until a signal; then close everything."""
    from rich.live import Live

    from agentlog.actors.runtime import AgentRuntime

    runtime: AgentRuntime | None = None
    if isinstance(target, AgentRuntime):
        runtime = target
        same_store(runtime, db, ref)
        store: EventStore = runtime.store
    else:
        store = open_store(db)
    path = getattr(store, "path", None)
    created = path if path is not None and not os.path.exists(path) else None
    remove = False
    try:
        async with store:
            try:
                if runtime is None:
                    assert callable(target)  # check_target said so
                    runtime = check_built(await built(target, store, ref), store, ref)
            except BaseException:
                remove = await _still_empty(store, created)
                raise
            as_worker(runtime, worker_id)
            signals = Signals()
            signals.install()
            try:
                if as_json:
                    await serve(runtime, Monitor(runtime, db, None), signals)
                else:
                    live = Live(console=console, auto_refresh=False, transient=False)
                    with live:
                        await serve(runtime, Monitor(runtime, db, live), signals)
            finally:
                signals.remove()
    finally:
        if remove and created is not None:
            _remove(created)


def run_runtime(db: str, app_ref: str, as_json: bool, worker_id: str | None = None) -> None:
    """`agentlog runtime`, and `agentlog worker` with a worker id (their options are
    declared in `agentlog.actors.cli`)."""
    ref = AppRef.parse(app_ref)
    if worker_id is not None and not worker_id.strip():
        raise typer.BadParameter("a worker id is a non-empty name", param_hint="--id")
    try:
        target = load(ref)
        check_target(target, ref)
        asyncio.run(main(db, ref, target, as_json, worker_id))
    except (CliError, AgentlogError) as exc:
        _fail(str(exc))
