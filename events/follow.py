"""A live subscription to the log: `follow(store)` yields every committed record, for ever.

A follower reads the log itself, in chunks, from the last position it yielded; it holds no
queue of its own. A store signals only *that* something was committed (a `CommitSignal`:
"durable up to position N", and a wake-up per event loop), never *what*, so a follower that
lags a million records behind costs what one that lags by one costs, and a writer never
waits for a follower.

Positions are a prefix at every instant: a reader never sees position 11 before 10 is
visible. SQLite has one writer at a time (its write lock, across processes too) and the
store assigns positions from `max(position)` inside that write transaction, so a commit's
positions follow every earlier commit's and become visible in one step; the memory store
numbers and appends a commit's rows in one step, with no await between. That is what lets
a follower remember a single number and never miss a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection
from typing import Protocol, TypeVar

from agentlog.events.codec import Row, decode_row
from agentlog.events.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    StoreClosedError,
    StoreError,
    UnknownEventKindError,
)
from agentlog.events.keystore import open_keys
from agentlog.events.kinds import KINDS
from agentlog.events.record import EventRecord
from agentlog.events.store import MAX_POSITION, EventStore, readable_thread_id

_T = TypeVar("_T")

__all__ = [
    "CommitSignal",
    "UnknownKindFilterError",
    "check_kinds",
    "follow",
    "follow_rows",
    "last_position",
]


class UnknownKindFilterError(UnknownEventKindError, InvalidArgumentError):
    """A follower was asked for a kind of event that does not exist."""

    def __init__(self, kind: object) -> None:
        StoreError.__init__(
            self,
            f"unknown event kind {kind!r} in the filter: pick from {', '.join(sorted(KINDS))}",
        )
        self.kind = kind  # type: ignore[assignment]  # whatever the caller passed, named


class CommitSignal:
    """What one store object has committed ("durable up to position N") and the wake-up of
    the followers waiting in this process, one `asyncio.Event` per event loop.

    `advance` is called from any thread after a commit is durable (the SQLite writer thread
    calls it once per group commit); it takes a lock, compares one int and, only when someone
    waits, hands each waiting loop `event.set` (directly on the calling loop's own thread,
    else with `call_soon_threadsafe`). Commits by another store object or another process
    are not signalled here (a PostgreSQL store signals them through LISTEN/NOTIFY); else
    followers find them by polling.
    """

    __slots__ = ("_closed", "_lock", "_position", "_waiting")

    def __init__(self) -> None:
        self._position = 0
        self._closed = False
        self._lock = threading.Lock()
        self._waiting: dict[asyncio.AbstractEventLoop, asyncio.Event] = {}

    @property
    def position(self) -> int:
        """The highest position committed through this store object (0: none yet)."""
        return self._position

    @property
    def closed(self) -> bool:
        """Whether the store closed: waiters return at once and followers stop."""
        return self._closed

    def waiting_loops(self) -> int:
        """How many event loops have a follower waiting (one entry each, however many)."""
        with self._lock:
            return len(self._waiting)

    def advance(self, position: int) -> None:
        """Every record up to `position` is committed and durable: wake whoever waits."""
        with self._lock:
            if position <= self._position:
                return
            self._position = position
            if not self._waiting:
                return
            waiting, self._waiting = self._waiting, {}
        _wake(waiting)

    def close(self) -> None:
        """The store closed: wake every waiter for good."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, {}
        _wake(waiting)

    async def wait(self, seen: int, timeout: float) -> None:
        """Return once `position` is past `seen`, the store closed, or `timeout` seconds went.

        Race-free when `seen` was read before the caller's last read of the log: a commit
        that read missed either moved `position` already or wakes the event registered here.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._position > seen or self._closed:
                return
            event = self._waiting.get(loop)
            if event is None:
                event = self._waiting[loop] = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()


def _wake(waiting: dict[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
    try:
        here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # the SQLite writer thread runs no loop
        here = None
    for loop, event in waiting.items():
        if loop is here:
            event.set()
        else:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits there
                loop.call_soon_threadsafe(event.set)


def commit_signal(store: EventStore) -> CommitSignal | None:
    """The store's `commit_signal` (SQLite and memory stores have one), or None."""
    signal = getattr(store, "commit_signal", None)
    return signal if isinstance(signal, CommitSignal) else None


async def last_position(store: EventStore) -> int:
    """The position of the newest committed record (0: an empty log): `follow(store,
    after=await last_position(store))` yields only what is committed from now on.

    One query on the SQLite and memory stores; another store is read to its end.
    """
    own = getattr(store, "last_position", None)
    if callable(own):
        return int(await own())
    position = 0
    async with _closing(store.read_all(0)) as records:
        async for record in records:
            position = record.position
    return position


@contextlib.asynccontextmanager
async def _closing(records: AsyncIterator[_T]) -> AsyncIterator[AsyncIterator[_T]]:
    """`records`, closed on the way out when it can be (a store's generator of chunks)."""
    try:
        yield records
    finally:
        close = getattr(records, "aclose", None)
        if close is not None:
            await close()


Match = Callable[[EventRecord], bool]


def follow(
    store: EventStore,
    *,
    after: int = 0,
    kinds: Collection[str] | None = None,
    thread_id: str | None = None,
    node: str | None = None,
    poll_s: float = 0.2,
) -> AsyncGenerator[EventRecord, None]:
    """Every record with `position > after`, in position (commit) order, for ever.

    Filters, all of which must hold (None: any): `kinds` names event kinds (an unknown one
    raises `UnknownKindFilterError`, an `UnknownEventKindError`); `thread_id` is the record's
    thread; `node` matches a record whose payload's `node` field names it (node_entered,
    interrupt_raised, stopped, tool_call_started, run_failed), and a record naming no node
    whose actor is that node (what a node's own step writes). A step's commit also enters
    the next node, so `node_entered` of "tools" is written by "agent" and matches "tools"
    only. A `next_node` or `entry_node` never matches.

    Arguments are checked at once, here; the records come from the async generator returned
    (close it, or leave the `async for`, to stop: `contextlib.aclosing` closes it at once).
    A record filtered out still moves the follower on, so a consumer that remembers the
    last position it was given and calls `follow(after=that)` again goes on exactly, with
    neither gap nor repeat.

    Waking: a commit through the same store object wakes its followers at once (a
    `CommitSignal`, across event loops and threads); so is a commit anywhere to a PostgreSQL
    store (LISTEN/NOTIFY). A commit by another process or another
    store object on the same SQLite file is found by polling every `poll_s` seconds; the poll is
    the read itself, one primary-key seek past the last position, as cheap as any "has it
    changed" check. A store without a signal is polled the same way.

    Lag: a slow consumer is served from the log in chunks (`READ_CHUNK` rows per query, no
    read transaction held between them), so memory never grows with the lag. Records are
    decoded but their hash chain is not checked (`read` and `verify` do that).

    End: when the store closes, the follower raises `StoreClosedError` (a waiting one at
    once): a log has no end, so the consumer learns it was cut off, and can resume from its
    last position on a store opened anew.
    """
    if type(after) is not int or after < 0:
        raise InvalidArgumentError(
            f"after must be a position, an int >= 0 (0: from the start), got {after!r}"
        )
    if type(poll_s) not in (int, float) or not math.isfinite(poll_s) or poll_s <= 0:
        raise InvalidArgumentError(f"poll_s must be a number of seconds > 0, got {poll_s!r}")
    if thread_id is not None:
        readable_thread_id(thread_id)
    if node is not None and (not isinstance(node, str) or not node):
        raise InvalidArgumentError(f"node must be a node's name, got {node!r}")
    match = _matcher(check_kinds(kinds), thread_id, node)
    if thread_id is not None:
        return _follow_thread(store, thread_id, after, match, float(poll_s))
    return _follow(store, after, match, float(poll_s))


def check_kinds(kinds: Collection[str] | None) -> frozenset[str] | None:
    """The kinds a filter names, checked (`UnknownKindFilterError`); None: every kind."""
    if kinds is None:
        return None
    if isinstance(kinds, str | bytes):
        raise InvalidArgumentError(
            f"kinds must be a collection of kind names, got {kinds!r}: pass [{kinds!r}]"
        )
    wanted = frozenset(kinds)
    if not wanted:
        raise InvalidArgumentError("kinds is empty, so nothing would match: pass None for all")
    for kind in sorted(wanted, key=repr):
        if kind not in KINDS:
            raise UnknownKindFilterError(kind)
    return wanted


def _matcher(kinds: frozenset[str] | None, thread_id: str | None, node: str | None) -> Match:
    def match(record: EventRecord) -> bool:
        if kinds is not None and record.kind not in kinds:
            return False
        if thread_id is not None and record.thread_id != thread_id:
            return False
        if node is None:
            return True
        named = _node_of(record)  # a record that names a node is that node's, whoever wrote it
        return named == node if named is not None else record.actor == node

    return match


def _node_of(record: EventRecord) -> object:
    event = record.event
    return getattr(event, "node", None) if "node" in event.__struct_fields__ else None


async def _follow(
    store: EventStore, after: int, match: Match, poll_s: float
) -> AsyncGenerator[EventRecord, None]:
    async with _closing(_tail(store, store.read_all, after, poll_s)) as records:
        async for record in records:
            if match(record):
                yield record


def follow_rows(
    store: EventStore, *, after: int = 0, poll_s: float = 0.2
) -> AsyncGenerator[Row, None]:
    """`follow` without filters, yielding each record's row exactly as stored, undecoded and
    unchecked (what a relay ships on as it is); woken and polled the same way."""
    if type(after) is not int or after < 0:
        raise InvalidArgumentError(
            f"after must be a position, an int >= 0 (0: from the start), got {after!r}"
        )
    read = getattr(store, "read_all_rows", None)
    if not callable(read):
        raise InvalidArgumentError(
            f"{type(store).__name__} cannot hand out its rows (read_all_rows): follow a "
            "SQLite, PostgreSQL or memory store"
        )
    return _tail(store, read, after, float(poll_s))


class _Positioned(Protocol):
    @property
    def position(self) -> int: ...


_P = TypeVar("_P", bound=_Positioned)


async def _tail(
    store: EventStore, read: Callable[[int], AsyncIterator[_P]], after: int, poll_s: float
) -> AsyncGenerator[_P, None]:
    """What `read(position)` yields past `after`, for ever: read to the end, then wait for a
    commit (or `poll_s`) and read again from the last position yielded."""
    signal = commit_signal(store)
    position = after
    while True:
        # Read `seen` before the log: a commit the read misses has moved it, or will wake us.
        seen = signal.position if signal is not None else 0
        async with _closing(read(position)) as records:
            async for record in records:
                position = record.position
                yield record
        if signal is None:
            await asyncio.sleep(poll_s)
            continue
        await signal.wait(seen, poll_s)
        if signal.closed:
            raise StoreClosedError(
                f"the store was closed while following it (last position read: {position}): "
                f"open it again and follow(after={position}) to go on"
            )


async def _first_seq_after(store: EventStore, thread_id: str, after: int) -> int:
    """The seq of the thread's first record with `position > after` (one past its last when
    none), by a binary search on the thread's index: O(log n) one-row reads."""
    low, high = 1, await store.last_seq(thread_id) + 1
    while low < high:
        middle = (low + high) // 2
        async with _closing(store.read_rows(thread_id, middle, middle)) as rows:
            found = [row.position async for row in rows]
        if found and found[0] > after:
            high = middle
        else:  # at or before `after` (or pruned away, which is before too)
            low = middle + 1
    return low


async def _follow_thread(
    store: EventStore, thread_id: str, after: int, match: Match, poll_s: float
) -> AsyncGenerator[EventRecord, None]:
    """`_follow` for one thread, read by its index (thread, seq) from the first record past
    `after`: what it costs depends on the thread, never on the rest of the log. A thread's
    positions grow with its seqs, so its records come in position order too."""
    signal = commit_signal(store)
    seq = await _first_seq_after(store, thread_id, after)
    while True:
        seen = signal.position if signal is not None else 0
        async with _closing(store.read_rows(thread_id, seq)) as rows:
            async for row in rows:
                if row.position > MAX_POSITION:
                    raise CorruptRecordError(
                        row.thread_id, row.seq, f"its position {row.position} is out of range"
                    )
                seq = row.seq + 1
                if row.position <= after:
                    continue
                record = decode_row(row, await open_keys(store, (row,)))
                if match(record):
                    yield record
        if signal is None:
            await asyncio.sleep(poll_s)
            continue
        await signal.wait(seen, poll_s)
        if signal.closed:
            raise StoreClosedError(
                f"the store was closed while following thread {thread_id!r} (next seq: "
                f"{seq}): open it again and follow it anew"
            )
