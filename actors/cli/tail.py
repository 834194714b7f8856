"""`agentlog tail`: follow the log live, like `tail -f`, one line per record as it commits.

The records come from `events.follow` on the database opened read-only, so the writers are
other processes: their commits are found by polling (every `POLL_S` seconds). Human lines are
inert (`render.inert`); `--json` lines are exact, and carry the position that `--from`
resumes after. SIGINT and SIGTERM end the command with exit status 0.

The command's options are declared in `actors.cli` and this module is imported when it
runs, so `agentlog --help` loads no more than before (see tests/test_cli_startup.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable

import msgspec
import typer

from events import EventRecord, EventStore, follow, last_position

from . import _run, render

POLL_S = 0.2
"""Seconds between two looks at the database for commits made by other processes."""

SUMMARY_LIMIT = 200
"""Characters of a record's summary shown on its line before it is cut."""

KIND_WIDTH = 18
"""The longest event kind's length: summaries line up after it."""


def record_json(record: EventRecord) -> str:
    """A record as one line of JSON: its envelope (position included) and its event; ASCII
    only, as every `--json` of the CLI, so no stored character reaches a terminal raw."""
    return json.dumps(msgspec.to_builtins(record))


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
    try:
        async for record in records:
            out.write(show(record) + "\n")
            out.flush()
    except BrokenPipeError:  # `agentlog tail | head`: the reader has all it wants
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())  # so that the flush at exit finds nowhere to fail
        os.close(devnull)


def tail(
    db: str,
    kinds: list[str] | None,
    thread: str | None,
    node: str | None,
    start: int | None,
    as_json: bool,
) -> None:
    """`agentlog tail` (its options are declared in `actors.cli`, so `--help` loads no more)."""
    if thread == "":
        raise typer.BadParameter("the thread id is empty", param_hint="--thread")
    if node == "":
        raise typer.BadParameter("the node name is empty", param_hint="--node")
    if as_json:
        show = record_json
    else:
        from projections import summarize

        def show(record: EventRecord) -> str:
            return record_line(record, summarize)

    async def job(store: EventStore) -> None:
        after = await _start(store, start)
        records = follow(
            store, after=after, kinds=kinds, thread_id=thread, node=node, poll_s=POLL_S
        )
        printing = asyncio.create_task(_print_all(records, show))
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
            await records.aclose()
        if not printing.cancelled():
            printing.result()  # a failure of the store, reported as every command reports one

    _run(job, db)
