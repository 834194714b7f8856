"""The runtime's writer: its records go to its own thread of the log, batched, in order."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence

import msgspec

from agentlog.actors.engine.commit import commit
from agentlog.actors.runtime.ledger import SNAPSHOT_TYPE, Ledger
from agentlog.events import Claim, EventRecord, EventStore, Snapshot
from agentlog.events.errors import StoreError
from agentlog.events.kinds import Event

Then = Callable[[list[EventRecord] | None], None]
"""What follows a record's commit: told its records, or None when the append failed."""
_Request = tuple[list[Event], list[str], asyncio.Future[list[EventRecord]], Then | None]

_log = logging.getLogger(__name__)

LATENCY_WINDOW = 4096
"""Commit latencies kept for the statistics (the most recent ones)."""
CATCH_UP_PAGE = 1000
"""Records of the runtime thread read and folded at a time."""
SNAPSHOT_EVERY = 10_000
"""Records of the runtime thread between two snapshots of the ledger."""


class RuntimeJournal:
    """Appends the runtime's records; those asked for together commit together.

    Every record is folded into the ledger as it commits, so the ledger is always what the
    log says. Holding the runtime thread's claim, it is that thread's only writer.
    """

    def __init__(self, store: EventStore, thread_id: str, ledger: Ledger) -> None:
        self.store = store
        self.thread_id = thread_id
        self.ledger = ledger
        self.claim: Claim | None = None
        self.latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.appended = 0
        self._pending: list[_Request] = []
        self._flushing: asyncio.Task[None] | None = None
        self.writer = "runtime"
        """Who the records are by when no one else is named: a worker records its own id."""
        self.on_applied: Callable[[list[EventRecord]], None] | None = None
        """Told of the records other writers (other workers) wrote, once folded in."""
        self._loaded = False
        self._snapshot_seq = 0
        """The seq of the ledger's last snapshot, saved or loaded here."""

    async def record(
        self,
        events: Sequence[Event],
        by: str | Sequence[str | None] | None = None,
        then: Then | None = None,
    ) -> list[EventRecord]:
        """Append `events` (written by `by`, else `writer`; a list names each event's
        writer) and return their records.

        `then` is called with the records once they are folded into the ledger (or with None
        when the append failed), before any caller is woken and even when this caller was
        cancelled meanwhile: what must follow a commit follows it.
        """
        future: asyncio.Future[list[EventRecord]] = asyncio.get_running_loop().create_future()
        if by is None or isinstance(by, str):
            actors = [by or self.writer] * len(events)
        else:
            actors = [who or self.writer for who in by]
            if len(actors) != len(events):
                raise ValueError(f"{len(events)} events, but {len(actors)} writers named")
        self._pending.append((list(events), actors, future, then))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush())
        # a caller cancelled meanwhile cancels only its own future: the batch commits anyway
        return await future

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            events = [e for events, _, _, _ in batch for e in events]
            actors: list[str | None] = [a for _, by, _, _ in batch for a in by]
            try:
                records = await self._append(events, actors)
            except Exception as exc:
                for _, _, future, then in batch:
                    _call(then, None)
                    if not future.done():
                        future.set_exception(exc)
                continue
            start = 0
            for chunk, _, future, then in batch:
                mine = records[start : start + len(chunk)]
                _call(then, mine)
                if not future.done():
                    future.set_result(mine)
                start += len(chunk)

    async def _append(self, events: list[Event], actors: list[str | None]) -> list[EventRecord]:
        """One batch, through the commit path: a race lost to another writer of the runtime
        thread (an older runtime) folds its records in and appends after them."""
        return await commit(
            _LedgerWrite(self, events, actors),
            thread_id=self.thread_id,
            what="the runtime's record",
        )

    async def catch_up(self) -> None:
        """Fold in the runtime thread's records the ledger has not seen, a page at a time
        (a restart over a long history never holds it all at once); a fresh ledger starts
        from the thread's last snapshot of it."""
        head = await self.store.last_seq(self.thread_id)
        if self.ledger.seq == 0 and head > 0 and not self._loaded:
            self._loaded = True
            await self._load_snapshot()
        while self.ledger.seq < head:
            start = self.ledger.seq + 1
            page = self.store.read(self.thread_id, start, start + CATCH_UP_PAGE - 1)
            records = [r async for r in page]
            records = [r for r in records if r.seq > self.ledger.seq]  # a concurrent catch-up
            if not records:
                if self.ledger.seq < start:
                    return  # nothing there (the head moved back: never in a sound log)
                continue  # a concurrent catch-up folded this page: on to the next
            self.ledger.apply_all(records)
            if self.on_applied is not None:
                self.on_applied(records)
            await self._snapshot_if_due(records[-1])

    async def _load_snapshot(self) -> None:
        """Start the ledger from its newest snapshot whose hash is the chain's at its seq
        (none, another shape, or one that does not match: the fold starts at seq 1)."""
        try:
            snapshot = await self.store.load_snapshot(self.thread_id)
            if snapshot is None or snapshot.state_type != SNAPSHOT_TYPE:
                return
            at = [r async for r in self.store.read(self.thread_id, snapshot.seq, snapshot.seq)]
            if not at or at[0].hash != snapshot.hash:
                return
            loaded = Ledger.from_snapshot(snapshot.state, self.ledger.keep, self.ledger.ttl_s)
        except (StoreError, KeyError, TypeError, ValueError, msgspec.ValidationError) as exc:
            _log.warning("the runtime's snapshot of %r is unusable (%s): folding it from the "
                         "start", self.thread_id, exc)  # fmt: skip
            return
        self.ledger.restore(loaded)
        self._snapshot_seq = loaded.seq

    async def _snapshot_if_due(self, last: EventRecord) -> None:
        """Save the ledger every `SNAPSHOT_EVERY` records (a failure is only logged: the
        next one is tried later, and a restart folds more meanwhile)."""
        if last.seq != self.ledger.seq or last.seq - self._snapshot_seq < SNAPSHOT_EVERY:
            return
        self._snapshot_seq = last.seq
        snapshot = Snapshot(
            thread_id=self.thread_id, seq=last.seq, state=self.ledger.to_snapshot(),
            state_type=SNAPSHOT_TYPE, at=last.at, hash=last.hash,
        )  # fmt: skip
        try:
            await self.store.save_snapshot(snapshot)
        except StoreError as exc:
            _log.warning("could not save the runtime's snapshot of %r: %s", self.thread_id, exc)

    async def drain(self) -> None:
        """Wait until every record asked for has been written."""
        while self._flushing is not None and not self._flushing.done():
            await asyncio.shield(self._flushing)


class _LedgerWrite:
    """The runtime journal's side of a commit: the ledger is its fold."""

    def __init__(self, journal: RuntimeJournal, events: list[Event], actors: list[str | None]):
        self.journal, self.events, self.actors = journal, events, actors
        self.began = 0.0

    async def base(self) -> int:
        return self.journal.ledger.seq

    async def build(self, base: int) -> list[Event]:
        return self.events  # checked by those who asked for them, against the ledger

    async def append(self, events: Sequence[Event], base: int) -> list[EventRecord]:
        journal = self.journal
        self.began = time.perf_counter()
        return await journal.store.append(
            journal.thread_id, events, expected_seq=base, actor=self.actors, claim=journal.claim
        )

    async def landed(self, records: list[EventRecord]) -> None:
        journal = self.journal
        journal.latencies.append(time.perf_counter() - self.began)
        journal.appended += len(records)
        journal.ledger.apply_all(records)
        await journal._snapshot_if_due(records[-1])

    async def lost(self, base: int) -> None:
        await self.journal.catch_up()  # someone else wrote (an older runtime): fold it in

    async def failed(self) -> None:
        return None


def _call(then: Then | None, records: list[EventRecord] | None) -> None:
    if then is None:
        return
    try:
        then(records)
    except Exception:  # the batch's other callers must still be answered
        _log.exception("the runtime failed to act on its own records")
