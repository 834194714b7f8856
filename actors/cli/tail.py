"""`agentlog tail`: follow the log live, like `tail -f`, one line per record as it commits.

The records come from `agentlog.events.follow` on the database opened read-only, so the writers are
other processes: their commits are found by polling (every `POLL_S` seconds). Human lines are
inert (`render.inert`); `--json` lines are exact, and carry the position that `--from`
resumes after. SIGINT and SIGTERM end the command with exit status 0.

`--graph G` keeps the records of threads that run graph G (see `GraphFilter`).

The command's options are declared in `agentlog.actors.cli` and this module is imported when it
runs, so `agentlog --help` loads no more than before (see tests/test_cli_startup.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TextIO

import typer

from agentlog.actors.cli import _run, render
from agentlog.actors.engine.threads import RUNTIME_THREAD
from agentlog.events import EventRecord, EventStore, follow, last_position
from agentlog.events.kinds import TriggerAccepted

POLL_S = 0.2
"""Seconds between two looks at the database for commits made by other processes."""

SUMMARY_LIMIT = 200
"""Characters of a record's summary shown on its line before it is cut."""

KIND_WIDTH = 18
"""The longest event kind's length: summaries line up after it."""


class GraphFilter:
    """Which records belong to graph `graph` (`tail --graph`): those of threads that run it,
    and the runtime's records of the triggers that started them.

    A thread's graph is the graph id of the first trigger a runtime accepted for it (its
    `trigger_accepted` record in the runtime thread), else the graph named by the thread's
    first record (run_started's `graph`, the graph's name; a fork: its source's graph), as
    the runtime itself decides (`agentlog.actors.runtime.listeners.graph_of_thread`). The runtime
    thread is read as far as needed, once.
    """

    def __init__(self, store: EventStore, graph: str) -> None:
        from agentlog.actors.runtime.listeners import graph_of_thread

        self._graph_of = graph_of_thread
        self.store = store
        self.graph = graph
        self.known: dict[str, str] = {}
        """Thread -> graph id, from the runtime's trigger_accepted records."""
        self.triggers: dict[str, str] = {}
        """Trigger id -> graph id, for the runtime's later records about each trigger."""
        self.cache: dict[str, str | None] = {}
        self.read_to = 0
        """The runtime thread's last seq read."""

    def _learn(self, record: EventRecord) -> None:
        event = record.event
        if isinstance(event, TriggerAccepted):  # the first trigger's graph, as the ledger
            self.known.setdefault(event.thread_id, event.graph_id)
            self.triggers[event.trigger_id] = event.graph_id
        self.read_to = record.seq

    async def _catch_up(self, to_seq: int | None = None) -> None:
        """Read the runtime thread's records not read yet (up to `to_seq`)."""
        last = await self.store.last_seq(RUNTIME_THREAD) if to_seq is None else to_seq
        if last > self.read_to:
            async for record in self.store.read(RUNTIME_THREAD, self.read_to + 1, last):
                self._learn(record)

    async def keeps(self, record: EventRecord) -> bool:
        """Whether `record` belongs to the graph (a thread first seen is read once)."""
        if record.thread_id == RUNTIME_THREAD:
            await self._catch_up(record.seq - 1)
            if record.seq > self.read_to:
                self._learn(record)
            event = record.event
            graph = getattr(event, "graph_id", None)
            if graph is None:
                graph = self.triggers.get(getattr(event, "trigger_id", None) or "")
            return graph == self.graph
        if record.thread_id not in self.known:
            await self._catch_up()  # a runtime may have started it since
        found = await self._graph_of(self.store, record.thread_id, self.known, self.cache)
        return found == self.graph


async def _of_graph(
    records: AsyncIterator[EventRecord], graph: GraphFilter
) -> AsyncGenerator[EventRecord, None]:
    async for record in records:
        if await graph.keeps(record):
            yield record


def record_json(record: EventRecord) -> str:
    """A record as one line of JSON: its envelope (position included) and its event; ASCII
    only, as every `--json` of the CLI, so no stored character reaches a terminal raw."""
    from agentlog.projections import present

    return json.dumps(present.record(record))


def record_line(record: EventRecord, summarize: Callable[[EventRecord], str]) -> str:
    """A record as one inert line: position, time, thread, seq, kind, actor and a summary."""
    try:
        said = summarize(record)
    except ValueError as exc:  # a payload the models refuse: say so, keep following
        said = f"(no summary: {type(exc).__name__})"
    shown, cut = render.clip(said, SUMMARY_LIMIT)
    summary = render.inert(shown) + (f" … [{cut:,} more characters]" if cut else "")
    return (
        f"{record.position:>6}  {render.iso(record.at)}  {render.inert(record.thread_id)}  "
        f"{record.seq:>4}  {render.inert(record.kind):<{KIND_WIDTH}}  "
        f"{render.inert(record.actor or '-')}  {summary}"
    ).rstrip()


async def _start(store: EventStore, start: int | None) -> int:
    """The position to follow after: `--from` itself, the end of the log when absent, or
    for -N the position N records before the end."""
    if start is not None and start >= 0:
        return start
    end = await last_position(store)
    return end if start is None else max(end + start, 0)


async def _print_all(
    records: AsyncIterator[EventRecord], show: Callable[[EventRecord], str]
) -> None:
    """Write each record's line as it comes, flushed, until cancelled or the reader leaves."""
    out = sys.stdout
    out.flush()
    pipe = _Pipe.of(out)
    try:
        async for record in records:
            line = show(record) + "\n"
            if pipe is None:
                out.write(line)
                out.flush()
            else:
                await pipe.write(line.encode(out.encoding or "utf-8", out.errors or "strict"))
    except BrokenPipeError:  # `agentlog tail | head`: the reader has all it wants
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())  # so that the flush at exit finds nowhere to fail
        os.close(devnull)
    finally:
        if pipe is not None:
            pipe.close()


class _Pipe:
    """Standard output when it is a pipe, written without blocking the event loop: a reader
    that stops reading (a paused pager) leaves the lines waiting, and a signal still ends
    the command at once (a blocking write would hold the loop, and the signal, forever)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)

    @classmethod
    def of(cls, out: TextIO) -> _Pipe | None:
        try:
            fd = out.fileno()
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                return None  # a file never blocks; a terminal's mode is the shell's too
            return cls(fd)
        except (OSError, ValueError):
            return None

    async def write(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                room: asyncio.Future[None] = loop.create_future()
                loop.add_writer(self.fd, room.set_result, None)
                try:
                    await room
                finally:
                    loop.remove_writer(self.fd)

    def close(self) -> None:
        """Give the pipe back as it was (it is shared with whoever else writes to it)."""
        with contextlib.suppress(OSError):
            os.set_blocking(self.fd, self.was_blocking)


def tail(
    db: str,
    kinds: list[str] | None,
    thread: str | None,
    node: str | None,
    start: int | None,
    as_json: bool,
    graph: str | None = None,
) -> None:
    """`agentlog tail` (its options are declared in `agentlog.actors.cli`, so `--help` loads no
    more)."""
    if thread == "":
        raise typer.BadParameter("the thread id is empty", param_hint="--thread")
    if node == "":
        raise typer.BadParameter("the node name is empty", param_hint="--node")
    if graph == "":
        raise typer.BadParameter("the graph id is empty", param_hint="--graph")
    if as_json:
        show = record_json
    else:
        from agentlog.projections import summarize

        def show(record: EventRecord) -> str:
            return record_line(record, summarize)

    async def job(store: EventStore) -> None:
        after = await _start(store, start)
        records = follow(
            store, after=after, kinds=kinds, thread_id=thread, node=node, poll_s=POLL_S
        )
        shown = records if graph is None else _of_graph(records, GraphFilter(store, graph))
        printing = asyncio.create_task(_print_all(shown, show))
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, printing.cancel)
        try:
            await asyncio.wait([printing])
        finally:
            for number in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(number)
            if not printing.done():  # this command itself was cancelled
                printing.cancel()
                await asyncio.wait([printing])
            if shown is not records:
                await shown.aclose()
            await records.aclose()
        if not printing.cancelled():
            printing.result()  # a failure of the store, reported as every command reports one

    _run(job, db)
