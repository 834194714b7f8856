"""The `EventStore` protocol and the machinery every backend shares.

A backend only stores and fetches rows (`events.codec.Row`); argument checks, encoding,
decoding and hash-chain verification live here, once, so every store behaves alike.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from .codec import (
    GENESIS_HASH,
    Encoded,
    Row,
    chain_hash,
    decode_row,
    encode_payloads,
    record_of,
)
from .errors import (
    InvalidAppendError,
    StoreClosedError,
    ThreadNotFoundError,
    UnknownEventKindError,
)
from .kinds import KINDS, Event
from .record import EventRecord, Snapshot, VerifyReport

READ_CHUNK = 2048
"""Rows fetched per round trip when streaming a thread."""


@runtime_checkable
class EventStore(Protocol):
    """An append-only log of events, chained per thread, ordered globally."""

    async def append(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        run_id: str | None = None,
        actor: str | None = None,
    ) -> list[EventRecord]:
        """Append atomically after `expected_seq`, or raise `ConcurrencyError`."""
        ...

    def read(
        self, thread_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> AsyncIterator[EventRecord]:
        """The thread's records with `from_seq <= seq <= to_seq`, in seq order."""
        ...

    def read_all(self, from_position: int = 0) -> AsyncIterator[EventRecord]:
        """Every record with `position > from_position`, in commit order."""
        ...

    async def last_seq(self, thread_id: str) -> int:
        """The seq of the thread's last record; 0 for a thread with none."""
        ...

    async def threads(self) -> list[str]:
        """Every thread id, in order of creation."""
        ...

    async def seqs_of_kind(self, thread_id: str, kind: str) -> list[int]:
        """The seqs of the thread's records of one kind, in order (an index for time travel)."""
        ...

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store a state valid after `snapshot.seq` (replacing one at the same seq)."""
        ...

    async def load_snapshot(self, thread_id: str, max_seq: int | None = None) -> Snapshot | None:
        """The newest snapshot with `seq <= max_seq`, or None."""
        ...

    async def verify(self, thread_id: str) -> VerifyReport:
        """Recompute the thread's hash chain and report the first bad record."""
        ...

    async def close(self) -> None:
        """Finish pending work and release resources."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


def check_thread_id(thread_id: object) -> str:
    """A thread id is a non-empty string; anything else is a caller's mistake."""
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidAppendError(
            f"thread id must be a non-empty string, got {thread_id!r}: pass "
            "config={'thread_id': '...'} or a store call with a real id"
        )
    _check_text("thread id", thread_id)
    return thread_id


def _check_text(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidAppendError(f"{name} must be a string, got {type(value).__name__}")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidAppendError(f"{name} {value!r} is not valid UTF-8 text: {exc}") from exc


class BaseEventStore(ABC):
    """Shared half of every backend: validation, decoding, verification, lifecycle."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._closed = False

    # ---- what a backend provides -------------------------------------------------------

    @abstractmethod
    async def _commit(
        self,
        thread_id: str,
        events: Sequence[Event],
        encoded: Sequence[Encoded],
        expected_seq: int,
        run_id: str | None,
        actor: str | None,
        at: float,
    ) -> list[EventRecord]:
        """Check `expected_seq`, chain `encoded`, and store the rows in one atomic commit."""

    @abstractmethod
    async def _fetch(self, thread_id: str, from_seq: int, to_seq: int, limit: int) -> list[Row]:
        """Up to `limit` rows of a thread in seq order."""

    @abstractmethod
    async def _fetch_all(self, from_position: int, limit: int) -> list[Row]:
        """Up to `limit` rows with `position > from_position`, in position order."""

    @abstractmethod
    async def _seqs_of_kind(self, thread_id: str, kind: str) -> list[int]:
        """Seqs of the thread's records of `kind` (a known kind), in order."""

    @abstractmethod
    async def _head(self, thread_id: str) -> tuple[int, bytes] | None:
        """The thread's recorded (last_seq, last_hash), or None when it does not exist."""

    # ---- the protocol --------------------------------------------------------------------

    async def append(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        run_id: str | None = None,
        actor: str | None = None,
    ) -> list[EventRecord]:
        """Append `events` after `expected_seq`, all or nothing; return their records."""
        self._check_open()
        check_thread_id(thread_id)
        if not isinstance(expected_seq, int) or expected_seq < 0:
            raise InvalidAppendError(
                f"expected_seq must be an int >= 0 (0 for a new thread), got {expected_seq!r}"
            )
        if not events:
            raise InvalidAppendError(
                f"append to thread {thread_id!r} needs at least one event, got none"
            )
        for name, value in (("run_id", run_id), ("actor", actor)):
            if value is not None:
                _check_text(name, value)
        encoded = encode_payloads(thread_id, events)
        at = float(self._clock()) + 0.0  # + 0.0 turns -0.0 into 0.0, as the database would
        if not math.isfinite(at):
            raise InvalidAppendError(f"the store's clock returned {at!r}, not a finite time")
        return await self._commit(thread_id, events, encoded, expected_seq, run_id, actor, at)

    async def read(
        self, thread_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> AsyncIterator[EventRecord]:
        """Stream a thread's records in seq order; a missing thread raises."""
        self._check_open()
        check_thread_id(thread_id)
        head = await self._head(thread_id)
        if head is None:
            raise ThreadNotFoundError(thread_id)
        last = head[0] if to_seq is None else min(to_seq, head[0])
        seq = max(from_seq, 1)
        while seq <= last:
            chunk = await self._fetch(thread_id, seq, last, READ_CHUNK)
            if not chunk:
                return
            for row in chunk:
                yield decode_row(row)
            seq = chunk[-1].seq + 1

    async def read_all(self, from_position: int = 0) -> AsyncIterator[EventRecord]:
        """Stream every record after `from_position`, in commit order."""
        self._check_open()
        position = max(from_position, 0)
        while True:
            chunk = await self._fetch_all(position, READ_CHUNK)
            if not chunk:
                return
            for row in chunk:
                yield decode_row(row)
            position = chunk[-1].position

    async def seqs_of_kind(self, thread_id: str, kind: str) -> list[int]:
        """The seqs of the thread's records of `kind`, in order; a missing thread raises."""
        self._check_open()
        if kind not in KINDS:
            raise UnknownEventKindError(kind)
        if await self._head(check_thread_id(thread_id)) is None:
            raise ThreadNotFoundError(thread_id)
        return await self._seqs_of_kind(thread_id, kind)

    async def last_seq(self, thread_id: str) -> int:
        """The thread's last seq; 0 when it has none yet."""
        self._check_open()
        head = await self._head(check_thread_id(thread_id))
        return 0 if head is None else head[0]

    async def verify(self, thread_id: str) -> VerifyReport:
        """Recompute the chain from the first record and compare with the thread's head."""
        self._check_open()
        head = await self._head(check_thread_id(thread_id))
        if head is None:
            raise ThreadNotFoundError(thread_id)
        head_seq, head_hash = head
        prev, expected, checked = GENESIS_HASH, 1, 0

        def bad(seq: int, problem: str) -> VerifyReport:
            return VerifyReport(
                thread_id=thread_id,
                ok=False,
                records_checked=checked,
                head_hash=head_hash.hex(),
                first_bad_seq=seq,
                problem=problem,
            )

        while True:
            chunk = await self._fetch(thread_id, expected, 2**62, READ_CHUNK)
            if not chunk:
                break
            for row in chunk:
                if row.seq != expected:
                    return bad(expected, f"record seq {expected} is missing (found {row.seq})")
                envelope = (
                    row.thread_id, row.seq, row.run_id, row.actor,
                    row.at, row.kind, row.version, row.position,
                )  # fmt: skip
                if chain_hash(prev, envelope, row.payload) != row.hash:
                    return bad(row.seq, f"record seq {row.seq} does not match its hash")
                prev, expected, checked = row.hash, expected + 1, checked + 1
        if checked != head_seq:
            return bad(checked + 1, f"thread head says {head_seq} records, found {checked}")
        if prev != head_hash:
            return bad(head_seq, "thread head hash does not match the last record")
        return VerifyReport(
            thread_id=thread_id, ok=True, records_checked=checked, head_hash=head_hash.hex()
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Mark the store closed; backends release their resources too."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{type(self).__name__} is closed: open a new store to use it")

    @staticmethod
    def _records(rows: Sequence[Row], encoded: Sequence[Encoded]) -> list[EventRecord]:
        """Records of rows just written, with the events as readers will decode them."""
        return [record_of(row, enc.event) for row, enc in zip(rows, encoded, strict=True)]
