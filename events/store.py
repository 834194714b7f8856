"""The `EventStore` protocol and the machinery every backend shares.

A backend only stores and fetches rows (`agentlog.events.codec.Row`); argument checks, encoding,
decoding and hash-chain verification live here, once, so every store behaves alike.
"""

from __future__ import annotations

import hashlib
import math
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, NamedTuple, Protocol, Self, runtime_checkable

from agentlog.events.claims import DEFAULT_LEASE, Claim, Holder
from agentlog.events.codec import (
    GENESIS_HASH,
    Encoded,
    Row,
    chain_hash,
    decode_event,
    decode_row,
    decode_state,
    encode_payloads,
    encode_state,
    record_of,
)
from agentlog.events.errors import (
    ChainBrokenError,
    CorruptRecordError,
    InvalidAppendError,
    StoreClosedError,
    ThreadNotFoundError,
    UnknownEventKindError,
)
from agentlog.events.keystore import keyring, pruned_floor
from agentlog.events.kinds import (
    KINDS,
    MESSAGE_KINDS,
    Event,
    Pruned,
    StopRequested,
)
from agentlog.events.names import brief, check_text, check_thread_id, readable_thread_id
from agentlog.events.record import EventRecord, Snapshot, VerifyReport
from agentlog.events.sealing import (
    SNAPSHOT,
    Keys,
    SubjectErasedError,
    open_sealed,
    subject_of,
)
from agentlog.events.snapshot_reads import (
    Linked,
    check_linked,
    context_messages,
    messages_of,
    sealed_rows,
)
from agentlog.events.snapshot_refs import (
    ContextEntry,
    CorruptSnapshotError,
    decode_context_refs,
    encode_context_refs,
    is_int,
    ref_targets,
)

READ_CHUNK = 2048
"""Rows fetched per round trip when streaming a thread."""

MAX_POSITION = 2**53 - 1
"""The largest seq or position a store hands out (exact in JSON too); beyond is damage."""

__all__ = [
    "MAX_POSITION",
    "MESSAGE_KINDS",
    "BaseEventStore",
    "Claim",
    "ContextEntry",
    "CorruptSnapshotError",
    "EventStore",
    "Holder",
    "Linked",
    "Payload",
    "StoredSnapshot",
    "brief",
    "check_thread_id",
    "decode_context_refs",
    "encode_context_refs",
    "messages_of",
    "readable_thread_id",
    "snapshot_digest",
]


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
        actor: str | Sequence[str | None] | None = None,
        claim: Claim | None = None,
    ) -> list[EventRecord]:
        """Append atomically after `expected_seq`, or raise `ConcurrencyError`.

        `actor` names who wrote the events: one name, or one per event (a hook's change
        committed with the step it changes). With `claim`, the thread must still be claimed
        by it (else `ClaimLostError`); without, the thread must have no live owner (else
        `ThreadBusyError`), unless every event is a stop request addressed to that owner.
        """
        ...

    def read(
        self,
        thread_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        after_hash: bytes | None = None,
    ) -> AsyncIterator[EventRecord]:
        """The thread's records with `from_seq <= seq <= to_seq`, in seq order, each checked
        against its hash link (`ChainBrokenError` otherwise); `after_hash`, when given, is what
        the caller believes the hash of record `from_seq - 1` to be (a snapshot's)."""
        ...

    def read_all(self, from_position: int = 0) -> AsyncIterator[EventRecord]:
        """Every record with `position > from_position`, in commit order."""
        ...

    def read_rows(
        self, thread_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> AsyncIterator[Row]:
        """The thread's rows exactly as stored, unchecked (what an audit export writes and
        a verifier judges)."""
        ...

    def files(self) -> list[str]:
        """The paths of the files the store keeps (none for a store in memory): what an
        export must never overwrite."""
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
        """Store a state valid after `snapshot.seq` (replacing one at the same seq).

        A referencing snapshot (`context_refs` set) must name the chain hash of record `seq`.
        """
        ...

    async def load_snapshot(
        self,
        thread_id: str,
        max_seq: int | None = None,
        *,
        resolve: bool = True,
        check: bool = True,
        payloads: bool = False,
    ) -> Snapshot | None:
        """The newest snapshot with `seq <= max_seq`, or None.

        A referencing snapshot's context is read from the records it names into
        `state["context"]`, unless `resolve` is False (`payloads`: a plain `message_appended`
        record's message as its payload, for `codec.stored_message`); `CorruptSnapshotError`
        when a reference does not lead to a message. With `check` (the default), the snapshot's
        digest is recomputed from what was read (its bytes, and each referenced record
        checked against its chain hash): `CorruptSnapshotError` when it differs,
        `ChainBrokenError` for a referenced record whose bytes do not match its hash.
        """
        ...

    async def snapshot_seqs(self, thread_id: str) -> list[int]:
        """The seqs the thread has snapshots at, ascending (none for an unknown thread)."""
        ...

    async def verify(self, thread_id: str) -> VerifyReport:
        """Recompute the thread's hash chain and report the first bad record."""
        ...

    async def claim(
        self,
        thread_id: str,
        *,
        purpose: str = "run",
        lease: float = DEFAULT_LEASE,
        under: Claim | None = None,
    ) -> Claim:
        """Own the thread until released; `ThreadBusyError` while a live owner holds it.

        With `under`, only while that claim is still held, checked in the same step
        (`ClaimLostError` else, nothing taken): a worker's run takes its thread under its
        lease, so a worker whose lease was taken over cannot start the run again."""
        ...

    async def release(self, claim: Claim) -> None:
        """Give the thread up (a no-op when the claim was already lost)."""
        ...

    def release_threadsafe(self, claim: Claim) -> None:
        """`release` from any thread, without waiting (a worker that outlived its run)."""
        ...

    async def relabel(self, claim: Claim, purpose: str) -> None:
        """Change what the claim says its owner is doing (shown to whoever is refused)."""
        ...

    async def holder(self, thread_id: str) -> Holder | None:
        """The thread's current claim, live or not, or None."""
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


# ---- snapshots whose context points into the log ------------------------------------------


Payload = tuple[int, str | None, int, bytes]
"""A record's `(seq, kind, version, payload)`, what a snapshot's context is read from; `kind`
is None for `MessageAppended`, the kind of nearly every message (no str made per row)."""

_DIGEST_DOMAIN = b"agentlog snapshot digest 1\0"


def snapshot_digest(
    anchor: bytes, state: bytes, refs: bytes | None, record_hashes: Iterable[bytes]
) -> bytes:
    """The content hash a snapshot is stored with: SHA-256 over the chain hash it folds up to,
    its state bytes, its encoded references (`encode_state({"context": refs})`, None for a
    whole state) and the chain hash of each record those references name that carries
    messages, in seq order (the seqs themselves are in the references).

    It binds the snapshot's content to the records it points into: a reader that recomputes
    it, and checks each referenced record's bytes against its chain hash, believes nothing
    that was changed behind the store after the snapshot was written.
    """
    h = hashlib.sha256(_DIGEST_DOMAIN)
    h.update(anchor)
    h.update(len(state).to_bytes(8, "big"))
    h.update(state)
    if refs is None:
        h.update(b"\xff" * 8)
    else:
        h.update(len(refs).to_bytes(8, "big"))
        h.update(refs)
    h.update(b"".join(record_hashes))
    return h.digest()


def _same_digest(thread_id: str, seq: int, stored: object, found: bytes) -> None:
    if stored != found:
        raise CorruptSnapshotError(
            thread_id,
            seq,
            "its content does not match the digest it was stored with: the row, or a record "
            "it points to, was changed after it was written",
        )


class StoredSnapshot(NamedTuple):
    """A snapshot row as a backend keeps it: a whole state (`hash` set, `refs` None), or the
    state without its context plus the encoded references (`anchor` set, `hash` None).

    A referencing row leaves `hash` empty on purpose: a reader that predates references
    takes the row for one that names no hash, and never uses it. The content digest
    (`snapshot_digest`) sits where a reader that predates it does not look: in the `refs`
    blob of a referencing row (`{"context": ..., "digest": ...}`), in `anchor` of a whole one.
    """

    seq: int
    state_type: str
    at: float
    state: bytes
    hash: bytes | None
    anchor: bytes | None
    refs: bytes | None


def _snapshot_hash(snapshot: Snapshot) -> bytes:
    try:
        digest = bytes.fromhex(snapshot.hash)
    except ValueError:
        digest = b""
    if len(digest) != 32 and (snapshot.context_refs is not None or snapshot.hash):
        raise InvalidAppendError(
            f"snapshot at seq {snapshot.seq} of thread {snapshot.thread_id!r} names hash "
            f"{snapshot.hash!r:.80}, not the 64 hex digits of a record's chain hash: take it "
            "from the record at that seq (EventRecord.hash)"
        )
    return digest


def _names(who: str | tuple[str | None, ...] | None) -> tuple[str | None, ...]:
    return who if isinstance(who, tuple) else (who,)


class AppendRequest(NamedTuple):
    """One append, checked and encoded, as a backend commits it (see `BaseEventStore`).
    A tuple: one is built per append, and a tuple builds faster than a frozen dataclass."""

    thread_id: str
    events: Sequence[Event]
    encoded: Sequence[Encoded]
    expected_seq: int
    run_id: str | None
    actor: str | tuple[str | None, ...] | None
    """Who wrote the events: one name for all, or one per event."""
    at: float
    claim: Claim | None = None

    @property
    def only_stop_requests(self) -> bool:
        """True when every event asks the thread's owner to stop (allowed to outsiders)."""
        return all(e.kind == StopRequested.KIND for e in self.encoded)


class BaseEventStore(ABC):
    """Shared half of every backend: validation, decoding, verification, lifecycle."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._closed = False
        self._seen: dict[tuple[str, int], Linked] = {}
        """Rows referenced by snapshots, as last checked against their chain hash."""

    # ---- what a backend provides -------------------------------------------------------

    @abstractmethod
    async def _commit(self, request: AppendRequest) -> list[EventRecord]:
        """Fence the request's claim (see `agentlog.events.claims.fence`), check its `expected_seq`,
        chain its encoded events, and store the rows in one atomic commit."""

    @abstractmethod
    async def threads(self) -> list[str]:
        """Every thread id, in order of creation."""

    @abstractmethod
    async def claim(
        self,
        thread_id: str,
        *,
        purpose: str = "run",
        lease: float = DEFAULT_LEASE,
        under: Claim | None = None,
    ) -> Claim:
        """Become the thread's one owner (see `EventStore.claim`)."""

    @abstractmethod
    async def release(self, claim: Claim) -> None:
        """Give the thread up (see `EventStore.release`)."""

    @abstractmethod
    def release_threadsafe(self, claim: Claim) -> None:
        """`release` from any thread (see `EventStore.release_threadsafe`)."""

    @abstractmethod
    async def relabel(self, claim: Claim, purpose: str) -> None:
        """Say what the owner is doing now (see `EventStore.relabel`)."""

    @abstractmethod
    async def holder(self, thread_id: str) -> Holder | None:
        """Who owns the thread, if anyone (see `EventStore.holder`)."""

    def files(self) -> list[str]:
        """The files the store keeps; none unless a backend says otherwise."""
        return []

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

    @abstractmethod
    async def _put_snapshot(self, thread_id: str, stored: StoredSnapshot) -> None:
        """Store a snapshot row, replacing the thread's row at the same seq."""

    @abstractmethod
    async def _get_snapshot(self, thread_id: str, max_seq: int) -> StoredSnapshot | None:
        """The thread's snapshot row with the largest seq <= `max_seq`, or None."""

    @abstractmethod
    async def _snapshot_seqs(self, thread_id: str) -> list[int]:
        """The seqs of the thread's snapshot rows, ascending."""

    @abstractmethod
    async def _fetch_carriers(self, thread_id: str, seqs: Sequence[int]) -> list[Linked]:
        """The thread's rows at `seqs` (ascending, distinct) that carry messages (a kind of
        `MESSAGE_KINDS`; others may be left out), in seq order, each with the chain hash of
        the record before it."""

    # ---- the protocol --------------------------------------------------------------------

    async def append(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        run_id: str | None = None,
        actor: str | Sequence[str | None] | None = None,
        claim: Claim | None = None,
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
        who: str | tuple[str | None, ...] | None
        if not isinstance(actor, list | tuple):
            who = actor  # type: ignore[assignment]  # a str or None; anything else refused below
        else:  # one actor per event: who wrote which event of one atomic commit
            who = tuple(actor)
            if len(who) != len(events):
                raise InvalidAppendError(
                    f"append to thread {thread_id!r} names {len(who)} actors for "
                    f"{len(events)} events: give one actor, or one per event"
                )
        if run_id is not None or who is not None:
            for name, value in (("run_id", run_id), *(("actor", a) for a in _names(who))):
                if value is not None:
                    check_text(name, value)
        encoded = encode_payloads(thread_id, events)
        ring = keyring(self)
        encoded = ring.plain(thread_id, encoded) or await ring.seal(thread_id, encoded)
        at = float(self._clock()) + 0.0  # + 0.0 turns -0.0 into 0.0, as the database would
        if not math.isfinite(at):
            raise InvalidAppendError(f"the store's clock returned {at!r}, not a finite time")
        if claim is not None and claim.thread_id != thread_id:
            raise InvalidAppendError(
                f"the claim passed is for thread {claim.thread_id!r}, not {thread_id!r}"
            )
        request = AppendRequest(thread_id, events, encoded, expected_seq, run_id, who, at, claim)
        return await self._commit(request)

    async def read_rows(
        self, thread_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> AsyncIterator[Row]:
        """The thread's rows exactly as stored, unchecked, in seq order."""
        self._check_open()
        last = 2**62 if to_seq is None else to_seq
        seq = from_seq
        while seq <= last:
            rows = await self._fetch(readable_thread_id(thread_id), seq, last, READ_CHUNK)
            if not rows:
                return
            for row in rows:
                yield row
            seq = rows[-1].seq + 1

    async def read(
        self,
        thread_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        after_hash: bytes | None = None,
    ) -> AsyncIterator[EventRecord]:
        """Stream a thread's records in seq order, each checked against its hash link.

        The record before `from_seq` is fetched for its hash (and compared with `after_hash`
        when given); reading through the last record also checks the thread's head. A link
        that does not hold raises `ChainBrokenError` naming thread and seq, so nothing is
        built from a log altered behind the store's back.
        """
        self._check_open()
        readable_thread_id(thread_id)
        head = await self._head(thread_id)
        if head is None:
            raise ThreadNotFoundError(thread_id)
        head_seq, head_hash = head
        last = head_seq if to_seq is None else min(to_seq, head_seq)
        seq = max(from_seq, 1)
        prev, linked = GENESIS_HASH, seq == 1
        if seq > 1 and (seq <= last or after_hash is not None):
            before = await self._fetch(thread_id, seq - 1, seq - 1, 1)
            floor = None if before else await self._floor(thread_id)
            if floor is not None and floor[0] >= seq - 1:  # pruned: read on from its floor
                seq, prev = floor[0] + 1, floor[1]
            elif not before or before[0].seq != seq - 1:
                raise ChainBrokenError(thread_id, seq - 1, "the record is missing")
            else:
                prev = before[0].hash
            linked = True
            if after_hash is not None and prev != after_hash:
                raise ChainBrokenError(
                    thread_id, seq - 1, "its hash differs from the one its snapshot names"
                )
        while seq <= last:
            chunk = await self._fetch(thread_id, seq, last, READ_CHUNK)
            if not chunk:
                raise ChainBrokenError(thread_id, seq, "the record is missing")
            keys = await self._keys(chunk)
            for row in chunk:
                if row.position > MAX_POSITION or row.position < 1:
                    why = f"its position {row.position} is outside the legal range"
                    raise ChainBrokenError(thread_id, row.seq, why)
                floor = await self._floor(thread_id) if row.seq != seq == 1 else None
                if floor is not None and floor[0] + 1 == row.seq:  # pruned: from its floor
                    seq, prev = row.seq, floor[1]
                if row.seq != seq:
                    raise ChainBrokenError(
                        thread_id, seq, f"the record is missing (found {row.seq})"
                    )
                envelope = (
                    row.thread_id, row.seq, row.run_id, row.actor,
                    row.at, row.kind, row.version, row.position,
                )  # fmt: skip
                if chain_hash(prev, envelope, row.payload) != row.hash:
                    raise ChainBrokenError(thread_id, seq, "its bytes do not match its hash")
                prev = row.hash
                seq += 1
                yield decode_row(row, keys)
        if linked and last == head_seq and seq == head_seq + 1 and prev != head_hash:
            raise ChainBrokenError(thread_id, head_seq, "the thread's head names another hash")

    async def read_all(self, from_position: int = 0) -> AsyncIterator[EventRecord]:
        """Stream every record after `from_position`, in commit order."""
        async for chunk in self._chunks_all(from_position):
            keys = await self._keys(chunk)
            for row in chunk:
                yield decode_row(row, keys)

    async def read_all_rows(self, from_position: int = 0) -> AsyncIterator[Row]:
        """`read_all`'s rows as stored, undecoded and still sealed (what a relay ships)."""
        async for chunk in self._chunks_all(from_position):
            for row in chunk:
                yield row

    async def _chunks_all(self, from_position: int) -> AsyncIterator[list[Row]]:
        self._check_open()
        position = max(from_position, 0)
        while chunk := await self._fetch_all(position, READ_CHUNK):
            for row in chunk:
                if row.position > MAX_POSITION:
                    why = f"its position {row.position} is beyond the legal range"
                    raise CorruptRecordError(row.thread_id, row.seq, why)
            yield chunk
            position = chunk[-1].position

    async def seqs_of_kind(self, thread_id: str, kind: str) -> list[int]:
        """The seqs of the thread's records of `kind`, in order; a missing thread raises."""
        self._check_open()
        if kind not in KINDS:
            raise UnknownEventKindError(kind)
        if await self._head(readable_thread_id(thread_id)) is None:
            raise ThreadNotFoundError(thread_id)
        return await self._seqs_of_kind(thread_id, kind)

    async def last_seq(self, thread_id: str) -> int:
        """The thread's last seq; 0 when it has none yet."""
        self._check_open()
        head = await self._head(readable_thread_id(thread_id))
        return 0 if head is None else head[0]

    async def verify(self, thread_id: str) -> VerifyReport:
        """Recompute the chain from the first record and compare with the thread's head."""
        self._check_open()
        head = await self._head(readable_thread_id(thread_id))
        if head is None:
            raise ThreadNotFoundError(thread_id)
        head_seq, head_hash = head
        prev, expected, checked, skipped = GENESIS_HASH, 1, 0, 0
        floor: tuple[int, bytes] | None = None  # (seq, hash) records were pruned through
        linked = False  # whether a pruned record in the chain names that floor

        def bad(seq: int, problem: str) -> VerifyReport:
            return VerifyReport(
                thread_id=thread_id,
                ok=False,
                records_checked=checked,
                head_hash=head_hash.hex(),
                first_bad_seq=seq,
                problem=problem,
            )

        while expected <= head_seq:  # up to the head read first: later appends are not damage
            chunk = await self._fetch(thread_id, expected, head_seq, READ_CHUNK)
            if not chunk:
                break
            for row in chunk:
                if row.seq != expected and expected == 1 and floor is None:  # pruned?
                    floor = await self._floor(thread_id)
                    if floor is not None and floor[0] + 1 == row.seq:
                        expected, prev, skipped = row.seq, floor[1], floor[0]
                if row.seq != expected:
                    return bad(expected, f"record seq {expected} is missing (found {row.seq})")
                if floor is not None and row.kind == Pruned.KIND and not linked:
                    e = decode_event(thread_id, row.seq, row.kind, row.version, row.payload)
                    linked = isinstance(e, Pruned) and (e.through_seq, e.last_hash) == (
                        floor[0], floor[1].hex())  # fmt: skip
                if not 1 <= row.position <= MAX_POSITION:
                    return bad(
                        row.seq,
                        f"record seq {row.seq} has position {row.position}, "
                        "outside the legal range",
                    )
                envelope = (
                    row.thread_id, row.seq, row.run_id, row.actor,
                    row.at, row.kind, row.version, row.position,
                )  # fmt: skip
                if chain_hash(prev, envelope, row.payload) != row.hash:
                    return bad(row.seq, f"record seq {row.seq} does not match its hash")
                prev, expected, checked = row.hash, expected + 1, checked + 1
        if floor is not None and not linked:
            return bad(skipped + 1, f"records 1..{skipped} are gone and no pruned record says so")
        if checked != head_seq - skipped:
            return bad(checked + 1, f"thread head says {head_seq} records, found {checked}")
        beyond = await self._fetch(thread_id, head_seq + 1, 2**62, 1)
        if beyond:  # appended since the head was read, or rows slipped in behind the store
            now = await self._head(thread_id)
            if now is None or now[0] < beyond[0].seq:
                return bad(
                    beyond[0].seq,
                    f"record seq {beyond[0].seq} lies beyond the thread's head ({head_seq})",
                )
        if prev != head_hash:
            return bad(head_seq, "thread head hash does not match the last record")
        return VerifyReport(
            thread_id=thread_id, ok=True, records_checked=checked, head_hash=head_hash.hex(),
            pruned_through=skipped,
        )  # fmt: skip

    # ---- snapshots ---------------------------------------------------------------------

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Encode and store `snapshot`, whole or referencing (see `Snapshot`)."""
        self._check_open()
        readable_thread_id(snapshot.thread_id)
        if not is_int(snapshot.seq) or not 0 <= snapshot.seq <= MAX_POSITION:
            raise InvalidAppendError(
                f"snapshot seq must be an int from 0 to {MAX_POSITION}, got {snapshot.seq!r}"
            )
        anchor = _snapshot_hash(snapshot)
        thread_id = snapshot.thread_id
        content: bytes | None = None
        if snapshot.context_refs is None:
            state = await self._seal_state(thread_id, snapshot.seq, encode_state(snapshot.state))
            if anchor:  # a whole state keeps its digest where a referencing row's anchor is
                content = snapshot_digest(anchor, state, None, ())
            stored = StoredSnapshot(
                snapshot.seq, snapshot.state_type, snapshot.at, state, anchor or None,
                content, None,
            )  # fmt: skip
        else:
            try:
                entries = decode_context_refs(snapshot.context_refs, thread_id, snapshot.seq)
            except CorruptSnapshotError as exc:
                raise InvalidAppendError(f"cannot store a snapshot: {exc}") from None
            rest = encode_state({k: v for k, v in snapshot.state.items() if k != "context"})
            state = await self._seal_state(thread_id, snapshot.seq, rest)
            refs = encode_state({"context": snapshot.context_refs})
            targets = ref_targets(entries)
            given = snapshot.record_hashes or {}
            pinned: list[bytes] = [given[t] for t in targets if t in given]
            if len(pinned) != len(targets):  # not followed by a writer: the store's hashes
                linked = await self._fetch_carriers(thread_id, targets)
                pinned = [item[8] for item in linked]
            content = snapshot_digest(anchor, state, refs, pinned)
            stored = StoredSnapshot(
                snapshot.seq, snapshot.state_type, snapshot.at, state, None, anchor,
                encode_state({"context": snapshot.context_refs, "digest": content}),
            )  # fmt: skip
        if snapshot.digest and (content is None or snapshot.digest != content.hex()):
            raise InvalidAppendError(
                f"the snapshot at seq {snapshot.seq} of thread {thread_id!r} carries digest "
                f"{snapshot.digest[:16]!r}..., which is not its content's: a snapshot loaded "
                "and then changed is not stored; take a new one (take_snapshot), or pass "
                "digest='' to store this content as a snapshot of your own"
            )
        await self._put_snapshot(thread_id, stored)

    async def load_snapshot(
        self,
        thread_id: str,
        max_seq: int | None = None,
        *,
        resolve: bool = True,
        check: bool = True,
        payloads: bool = False,
    ) -> Snapshot | None:
        """The newest snapshot at or before `max_seq`, its context read from the log.

        With `check`, its digest is recomputed from what was read, each referenced record
        checked against its chain hash, and `digest` is set only when they agree (a row
        stored before digests existed comes back with none: readers do not use it). Without,
        `digest` is the one stored, unchecked (what `verify_snapshots` compares itself)."""
        self._check_open()
        readable_thread_id(thread_id)
        row = await self._get_snapshot(thread_id, MAX_POSITION if max_seq is None else max_seq)
        if row is None:
            return None
        seq = row.seq
        state = await self._open_state(thread_id, seq, row.state)
        hashes: dict[int, bytes] | None = None
        if row.refs is None:
            anchor, refs, stored = row.hash, None, row.anchor
            if check and isinstance(anchor, bytes) and stored is not None:
                _same_digest(thread_id, seq, stored, snapshot_digest(anchor, row.state, None, ()))
        else:
            anchor = row.anchor
            blob = decode_state(thread_id, seq, row.refs)
            refs, stored = blob.get("context"), blob.get("digest")
            state.pop("context", None)
            if check or resolve:  # unchecked and unresolved: the caller judges the references
                entries = decode_context_refs(refs, thread_id, seq)
            if (check and stored is not None) or resolve:
                linked = await self._fetch_carriers(thread_id, ref_targets(entries))
                if check:
                    check_linked(thread_id, linked, self._seen)
                if check and stored is not None:
                    hashes = {item[0]: item[8] for item in linked}
                    found = snapshot_digest(
                        anchor or b"", row.state, encode_state({"context": refs}), hashes.values()
                    )
                    _same_digest(thread_id, seq, stored, found)
                if resolve:
                    sealed = sealed_rows(thread_id, linked)
                    keys = await self._keys(sealed) if sealed else None
                    state["context"] = context_messages(
                        thread_id, seq, entries, linked, keys, payloads
                    )
        if stored is not None and not isinstance(stored, bytes):
            raise CorruptSnapshotError(thread_id, seq, "its digest is not bytes")
        return Snapshot(
            thread_id=thread_id,
            seq=seq,
            state=state,
            state_type=row.state_type,
            at=row.at,
            hash=anchor.hex() if isinstance(anchor, bytes) else "",
            context_refs=refs,
            digest=stored.hex() if isinstance(stored, bytes) and anchor else "",
            record_hashes=hashes,
        )

    async def snapshot_seqs(self, thread_id: str) -> list[int]:
        """The seqs of the thread's snapshots, ascending."""
        self._check_open()
        return await self._snapshot_seqs(readable_thread_id(thread_id))

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

    async def _seal_state(self, thread_id: str, seq: int, state: bytes) -> bytes:
        """A snapshot's state bytes, sealed like a record when the thread has a subject (as
        they are once it was erased: a state folded since holds its fields as erased)."""
        try:
            sealer = await keyring(self).sealer(thread_id)
        except SubjectErasedError:
            return state
        return state if sealer is None else sealer.seal(thread_id, seq, SNAPSHOT, 0, state)

    async def _open_state(self, thread_id: str, seq: int, data: bytes) -> dict[str, Any]:
        """The state a snapshot row stores, opened (or erased) when it is sealed."""
        if data[:1] != b"\xc1":
            return decode_state(thread_id, seq, data)
        keys = await keyring(self).keys_of({subject_of(thread_id, seq, data)})
        opened = open_sealed(thread_id, seq, SNAPSHOT, 0, data, keys)
        return decode_state(thread_id, seq, opened) if isinstance(opened, bytes) else opened

    async def _floor(self, thread_id: str) -> tuple[int, bytes] | None:
        """The seq and chain hash records were pruned through, if the thread was pruned."""
        return await pruned_floor(self, thread_id)

    async def _keys(self, rows: Sequence[Row]) -> Keys | None:
        """The keys that open the sealed payloads among `rows` (None when none is sealed)."""
        return await keyring(self).keys_for(rows)

    def _checked_id(self, thread_id: str) -> str:
        return check_thread_id(thread_id)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{type(self).__name__} is closed: open a new store to use it")

    @staticmethod
    def _records(rows: Sequence[Row], encoded: Sequence[Encoded]) -> list[EventRecord]:
        """Records of rows just written, with the events as readers will decode them."""
        return [record_of(row, enc.event) for row, enc in zip(rows, encoded, strict=True)]
