"""What the live streams send: where a client resumes (a position it was sent, checked), a
thread's records read by the thread's index, and a run's records: its own and no other run's,
from its dispatch to its end, then the `trigger_finished` that ends it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from agentlog.events import EventRecord
from agentlog.events.codec import decode_row
from agentlog.events.errors import InvalidArgumentError, StoreClosedError
from agentlog.events.follow import commit_signal, follow
from agentlog.events.store import MAX_POSITION

if TYPE_CHECKING:
    from agentlog.actors.runtime import AgentRuntime
    from agentlog.actors.runtime.ledger import Ledger, TriggerState

POLL_S = 0.2
"""How often a run's stream looks again when no commit through this store wakes it."""


class BadResumePoint(InvalidArgumentError):
    """A `Last-Event-ID` or `after` that is no position this server sends (HTTP 400)."""


def resume_point(after: str | None, last_event_id: str | None) -> int:
    """The position a stream continues after: `Last-Event-ID` (what an EventSource sends on
    reconnecting), else `?after=`, else 0 (from the start). Anything but ASCII digits of a
    position the log can hold raises `BadResumePoint`, before the stream opens."""
    for name, value in (("Last-Event-ID", last_event_id), ("after", after)):
        if value is None:
            continue
        text = value.strip()
        if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_POSITION))):
            raise BadResumePoint(
                f"{name} is a position this server sent (an integer 0 to {MAX_POSITION}), "
                f"got {value[:40]!r}"
            )
        position = int(text)
        if position > MAX_POSITION:
            raise BadResumePoint(f"{name} is at most {MAX_POSITION}, got {position}")
        return position
    return 0


async def run_records(
    runtime: AgentRuntime, trigger: TriggerState, after: int, poll_s: float = POLL_S
) -> AsyncIterator[EventRecord]:
    """The records of one run with `position > after`: its thread's records from its first
    dispatch up to its end (an earlier run's records on the thread are not in it, even when
    it was queued behind that run), then its last `trigger_finished`.

    Reads the thread by its index from the run's first seq, so its cost does not grow with
    the rest of the log."""
    store = runtime.store
    signal = commit_signal(store)
    thread_id = trigger.accepted.thread_id

    async def wake(seen: int) -> None:
        if signal is None:
            await asyncio.sleep(poll_s)
            return
        await signal.wait(seen, poll_s)
        if signal.closed:
            raise StoreClosedError("the store was closed while a run's stream followed it")

    def now() -> TriggerState:  # as the ledger has it now
        return runtime.ledger.triggers.get(trigger.id, trigger)

    while now().first_seq is None and not now().done:  # queued: nothing of it yet
        await wake(signal.position if signal is not None else 0)
    seq = (now().first_seq or 0) + 1
    while True:
        seen = signal.position if signal is not None else 0
        trigger = now()
        done = trigger.done  # read first: what it ended after is committed when it is read
        finished = trigger.finished_position if done else None
        if trigger.first_seq is not None:
            last = trigger.end_seq if done else None
            async with contextlib.aclosing(store.read_rows(thread_id, seq, last)) as rows:  # type: ignore[type-var]
                async for row in rows:
                    if finished is not None and row.position > finished:
                        break  # written after its end: not its own
                    seq = row.seq + 1
                    if row.position > after:
                        yield decode_row(row)
        if done:
            if finished is not None and finished > after:
                ledger_thread = runtime.config.runtime_thread
                ends = follow(store, after=finished - 1, thread_id=ledger_thread)
                async with contextlib.aclosing(ends):
                    record = await anext(ends)  # by the index: the ledger's record there
                if record.position == finished:
                    yield record
            return
        await wake(seen)


def run_at(ledger: Ledger, thread_id: str, seq: int) -> str | None:
    """The run (trigger id) a thread's record at `seq` belongs to: the last one dispatched
    before it, unless that one had ended before it; None for a record of no run (the thread's
    creation, a fork, an edit between runs)."""
    for trigger_id in reversed(ledger.by_thread.get(thread_id, ())):
        trigger = ledger.triggers.get(trigger_id)
        if trigger is None or trigger.first_seq is None or trigger.first_seq >= seq:
            continue
        ended = trigger.done and trigger.end_seq is not None and seq > trigger.end_seq
        return None if ended else trigger.id
    return None
