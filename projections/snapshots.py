"""Snapshots that point into the log, how to write them, and how to check them against it.

The format. Every message of a thread's context is already in the log, in the payload of
the record that brought it (`message_appended`, `message_replaced`, `messages_replaced`,
`context_summarized`, `forked`). A snapshot therefore stores the execution metadata, the
summary and the custom fields as builtins, and the context as references: for each message
the seq of the record carrying it (as the distance from the previous reference, one byte of
MessagePack in the usual case) and its index in that record's list. A message no record
carries as is (one a user's context reducer made) is stored inline. The reader fetches the
records referenced in one indexed range read and decodes their payloads; whole-state rows
written before this format are still read as they are.

Why references rather than deltas: a delta chain makes a reader fetch and apply every delta
since the last full snapshot, and each full snapshot still costs every message's bytes
again. A referencing snapshot is complete on its own (one row plus payloads that a fold of
the thread would read anyway), costs about a byte per message, and is cheap to write: the
`SnapshotWriter` follows the context as commits land and re-encodes only what changed.
Measured by bench/snapshots.py on a 10,000-step tool-calling thread (2-core AMD EPYC, one
run): snapshots cost 40 bytes per step (every 1,000 records) where whole states cost 2,633
(every 5,000).

What bounds a read is the messages themselves: validating the ~7,500 messages of a median
point into `Message` models costs more than reading and decoding them, whatever the snapshot
format. So `state_at` (`agentlog.projections.views`) keeps the messages it validated per store and
thread, and hands them out through a `SharedContext` that copies each on its first read: a
point of a thread whose earlier point was read costs the records after its snapshot, 0.07
of a fold from the start and 0.17-0.23 of a whole-state snapshot in the same run (17 ms on
that machine under load); the first read of a process costs 0.43 of the fold. Checking
the records a snapshot points to (below) adds reading them back on every read (hashed
once while their bytes stay the same): at 2,000 steps (bench/snapshots.py --quick, two
rounds alternated with the code before the check, a 2-core VM at load 8 to 14) such a
read costs 0.35-0.44 of the fold from the start, where it cost 0.12-0.14 unchecked, and
the first read of a process 0.62-0.72, where it cost 0.39-0.43.

Trust. A snapshot names the chain hash of the record it folds up to; `fold_at` refuses one
whose hash differs from the chain's (`ChainBrokenError` naming its seq: either the snapshot
or the log was rewritten, and a reader cannot tell which, so it does not pick one). The
store keeps with each snapshot a content digest (`agentlog.events.store.snapshot_digest`) over that
hash, its bytes and the chain hash of every record its context points to, and recomputes it
on every load, checking each record it points to against its chain hash: a snapshot whose
content was changed while its hash was kept, or a referenced payload changed behind the
store, is refused (`CorruptSnapshotError`, `ChainBrokenError`), and the records after the
snapshot are read chained from its hash. What no reader can tell is a snapshot written
whole through `save_snapshot` with content of its own (the store's write path is trusted,
as for appends): `verify_snapshots` compares every snapshot with the log's fold.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

from agentlog.events import (
    ChainBrokenError,
    CorruptRecordError,
    EventRecord,
    EventStore,
    Snapshot,
)
from agentlog.events.kinds import (
    ContextSummarized,
    Forked,
    MessageAppended,
    MessageReplaced,
    MessagesRemoved,
    MessagesReplaced,
    StateUpdated,
)
from agentlog.events.store import (
    MESSAGE_KINDS,
    decode_context_refs,
)
from agentlog.projections.edge import state_data, to_builtins
from agentlog.projections.fold import CONTEXT_FIELDS, field_plan
from agentlog.projections.messages import Message
from agentlog.projections.reducers import add_messages
from agentlog.projections.state import AgentState
from agentlog.projections.views import PointOutOfRangeError, state_type_name

__all__ = [
    "DEFAULT_SNAPSHOT_EVERY",
    "SnapshotWriter",
    "write_snapshot",
]

DEFAULT_SNAPSHOT_EVERY = 1000
"""Records between snapshots the engine should default to. A referencing snapshot costs about
a byte per message of context and, with the writer fed each commit, a pass over the context
to write; every 1,000 records keeps them to tens of bytes per step and to a few percent of a
1,000-step run's time, while any point of a thread is at most 1,000 records of folding away
(about 2 ms of the reads, whose cost is the messages themselves)."""


# ---- the context as references: a fold of where each message comes from ------------------


def _same(a: object, b: object) -> bool:
    """Equal and of the same type (so that 1, 1.0 and True are three different ids)."""
    return type(a) is type(b) and a == b


_CONTEXT_KINDS = frozenset(
    kind.KIND
    for kind in (
        MessageAppended,
        MessagesReplaced,
        MessageReplaced,
        MessagesRemoved,
        ContextSummarized,
        StateUpdated,
        Forked,
    )
)
"""The kinds whose records may change the context: the only ones `_Refs.apply` reads."""


class _Refs:
    """The context of a thread after record `seq`, as the record each message came from.

    It follows the fold's handlers for the context (`agentlog.projections.fold`) on the ids the
    payloads carry, without building a single message. `entries[i]` is `(seq, index)` of
    the message at position i, or None when no record carries it as is (it must be stored
    inline); `lost` says the context went through a reducer this cannot follow, until a
    record replaces it whole. `dirty` is the first position changed since the last `encode`,
    whose result is kept so that the next one re-encodes only from there.
    """

    __slots__ = ("cache", "dirty", "entries", "hash", "hashes", "ids", "known", "lost", "seq")

    def __init__(self) -> None:
        self.seq = 0
        self.hash = ""
        self.hashes: dict[int, bytes] = {}  # the chain hash of each record carrying messages
        self.entries: list[tuple[int, int] | None] = []
        self.ids: list[Any] = []
        self.known: set[Any] = set()
        self.lost = False
        self.dirty = 0
        self.cache: tuple[list[Any], list[Message], list[int]] | None = None

    @classmethod
    def of_snapshot(cls, snapshot: Snapshot) -> _Refs | None:
        """The references of a resolved referencing snapshot whose digest the store checked,
        or None (a whole one, or one not checked: rebuilt from the log instead)."""
        if snapshot.context_refs is None or not snapshot.hash or not snapshot.digest:
            return None
        entries = decode_context_refs(snapshot.context_refs, snapshot.thread_id, snapshot.seq)
        messages = snapshot.state.get("context")
        if not isinstance(messages, list) or len(messages) != len(entries):
            return None
        refs = cls()
        refs.seq, refs.hash = snapshot.seq, snapshot.hash
        refs.hashes = dict(snapshot.record_hashes or {})
        refs.entries = [e if isinstance(e, tuple) else None for e in entries]
        if not refs._take_ids(messages):
            return None
        return refs

    def _take_ids(self, messages: Sequence[Any]) -> bool:
        ids = [m.get("message_id") if isinstance(m, dict) else m for m in messages]
        try:
            self.known = set(ids)
        except TypeError:  # an id no message could have: the fold would refuse the record
            self.lost = True
            return False
        self.ids = ids
        self.lost = False
        return True

    def _replace(self, seq: int, messages: Sequence[Any]) -> None:
        self.entries = [(seq, i) for i in range(len(messages))]
        self.dirty = 0
        self._take_ids(messages)

    def _append(self, entry: tuple[int, int] | None, message: Any) -> None:
        if not isinstance(message, dict):
            self.lost = True
            return
        message_id = message.get("message_id")
        try:
            present = message_id in self.known
        except TypeError:
            self.lost = True
            return
        if message.get("delta") or present:
            return
        self.entries.append(entry)
        self.ids.append(message_id)
        self.known.add(message_id)

    def apply(self, record: EventRecord, custom_context: bool) -> None:
        """Follow one record, as the fold's handler of its kind changes the context."""
        event, seq = record.event, record.seq
        self.seq, self.hash = seq, record.hash
        kind = record.kind
        if kind in MESSAGE_KINDS:
            self.hashes[seq] = bytes.fromhex(record.hash)
        if kind not in _CONTEXT_KINDS:
            return  # a step, a node entered, a tool call's start: the context stays
        if isinstance(event, MessagesReplaced):
            self._replace(seq, event.messages)
        elif isinstance(event, ContextSummarized):
            if event.messages is not None:
                self._replace(seq, event.messages)
        elif isinstance(event, Forked):
            context = event.state.get("context", [])
            if isinstance(context, list):
                self._replace(seq, context)
            else:
                self.lost = True
        elif self.lost:
            return  # nothing short of a whole replacement makes the context known again
        elif isinstance(event, MessageAppended):
            self._append((seq, 0), event.message)
        elif isinstance(event, MessageReplaced):
            self._replace_one(seq, event.message)
        elif isinstance(event, MessagesRemoved):
            gone = self.known.intersection(event.message_ids)
            if gone:
                keep = [i for i, m in enumerate(self.ids) if m not in gone]
                first = next((n for n, i in enumerate(keep) if n != i), len(keep))
                self.dirty = min(self.dirty, first)
                self.entries = [self.entries[i] for i in keep]
                self.ids = [self.ids[i] for i in keep]
                self.known -= gone
        elif isinstance(event, StateUpdated):
            for name, value in event.values.items():
                if name not in CONTEXT_FIELDS:
                    continue
                if custom_context or not isinstance(value, list):
                    self.lost = True
                    return
                for message in value:  # validated by the fold: kept inline
                    self._append(None, message)

    def _replace_one(self, seq: int, message: Any) -> None:
        message_id = message.get("message_id") if isinstance(message, dict) else None
        for index in range(len(self.ids) - 1, -1, -1):
            if self.ids[index] == message_id:  # as the fold compares
                self.entries[index] = (seq, 0)
                self.dirty = min(self.dirty, index)
                return
        self._append((seq, 0), message)

    def encode(self, context: Sequence[Message]) -> list[Any]:
        """The stored form (`encode_context_refs`) of `context`, the fold's own after `seq`:
        a reference where the record followed carries the very message (the same id at the
        same place), else the message itself.

        The positions before `dirty` holding the very objects they held last time keep their
        encoding, so a context that only grew costs a copy of the old list plus the new tail.
        """
        if self.lost or len(self.ids) != len(context):
            self.cache = None
            return [to_builtins(m) for m in context]
        start, encoded, prevs = 0, [], []
        if self.cache is not None:
            old, objects, old_prevs = self.cache
            start = min(self.dirty, len(objects))
            if all(map(operator.is_, context[:start], objects[:start])):
                encoded, prevs = old[:start], old_prevs[:start]
            else:
                start = 0
        prev = prevs[-1] if prevs else 0
        for k in range(start, len(context)):
            entry, message = self.entries[k], context[k]
            if entry is not None and _same(self.ids[k], message.message_id):
                seq, index = entry
                encoded.append(seq - prev if index == 0 else [seq - prev, index])
                prev = seq
            else:
                encoded.append(to_builtins(message))
            prevs.append(prev)
        self.cache, self.dirty = (encoded, list(context), prevs), len(context)
        return list(encoded)


def _custom_context(state_cls: type[AgentState]) -> bool:
    """Whether the class reduces its context with something other than `add_messages`."""
    reducer = field_plan(state_cls)["context"][1]
    return reducer is not None and reducer is not add_messages


# ---- writing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Capture:
    """What a snapshot needs of a live state, taken before the state moves on."""

    seq: int
    hash: str
    at: float
    state_type: str
    rest: dict[str, Any]
    context: list[Message]
    custom_context: bool


class SnapshotWriter:
    """Writes referencing snapshots of one thread, following its context between them.

    Keep one per thread being run. Fed each commit's records (`observe`), it follows the
    context as they land, so a snapshot costs one pass over the context and reads nothing
    back. Without them, each snapshot reads the records since the previous one (the first
    starts from the newest referencing snapshot in the store, or from the first record).
    """

    def __init__(self, store: EventStore, thread_id: str) -> None:
        self.store = store
        self.thread_id = thread_id
        self._refs: _Refs | None = None  # None while a snapshot rebuilds it from the store
        self._custom: bool | None = None
        self._observed = 0
        self._lock: asyncio.Lock | None = None

    def from_start(self, state_cls: type[AgentState]) -> None:
        """The thread has no record yet: follow it from its first (observed) record, so no
        snapshot of it reads the log back."""
        self._refs, self._custom = _Refs(), _custom_context(state_cls)

    def observe(self, records: Sequence[EventRecord]) -> None:
        """Follow records of the thread just committed, in order (cheap: no message is built).

        Records that do not follow on from the last ones seen (another writer's, a reload)
        make the next snapshot rebuild the references from the store.
        """
        if not records:
            return
        refs, custom = self._refs, self._custom
        if refs is not None and custom is not None and records[0].seq == refs.seq + 1:
            for record in records:
                refs.apply(record, custom)
        else:
            self._refs = None
        self._observed = max(self._observed, records[-1].seq)

    def snapshot(
        self, seq: int, state: AgentState, *, hash: str, at: float = 0.0
    ) -> Awaitable[Snapshot]:
        """`build` the snapshot and store it when the returned awaitable runs (the engine's
        commit path builds and stores them itself; this is for callers outside a run)."""
        return self._save(self.build(seq, state, hash=hash, at=at))

    def build(
        self, seq: int, state: AgentState, *, hash: str, at: float = 0.0
    ) -> Awaitable[Snapshot]:
        """The snapshot of `state`, the thread's state after record `seq` (chain hash
        `hash`), made when the returned awaitable runs (reading the log when the references
        must be rebuilt); storing it is the caller's.

        What the snapshot needs of `state` is taken now, before this returns (its fields as
        builtins, its list of messages), so the caller may fold on at once and await the
        result later, or in a background task. The messages themselves are not copied: the
        fold replaces messages, it never changes one in place.
        """
        if not hash:
            raise PointOutOfRangeError(
                f"a snapshot of thread {self.thread_id!r} needs the chain hash of record {seq}"
            )
        custom = _custom_context(type(state))
        if custom != self._custom:
            self._refs, self._custom = None, custom
        rest = state_data(state.model_copy(update={"context": []}))
        rest.pop("context", None)
        capture = _Capture(
            seq=seq,
            hash=hash,
            at=at,
            state_type=state_type_name(type(state)),
            rest=rest,
            context=list(state.context),
            custom_context=custom,
        )
        refs = self._refs
        if refs is not None and refs.seq == seq and refs.hash == hash:
            return _ready(self._snapshot_of(capture, refs))  # followed up to here
        return self._rebuilt(capture)

    def _snapshot_of(self, capture: _Capture, refs: _Refs) -> Snapshot:
        """The snapshot, with the chain hash of each record it points to as the commits
        (or the checked reads) followed gave it: the store pins those in its digest without
        reading the records back."""
        hashes = refs.hashes
        targets = {entry[0] for entry in refs.entries if entry is not None}
        return Snapshot(
            thread_id=self.thread_id,
            seq=capture.seq,
            state=capture.rest,
            state_type=capture.state_type,
            at=capture.at,
            hash=capture.hash,
            context_refs=refs.encode(capture.context),
            record_hashes={seq: hashes[seq] for seq in targets if seq in hashes},
        )

    async def _save(self, building: Awaitable[Snapshot]) -> Snapshot:
        snapshot = await building
        await self.store.save_snapshot(snapshot)
        return snapshot

    async def _rebuilt(self, capture: _Capture) -> Snapshot:
        """Rebuild the references up to the snapshot from the store, make the snapshot, then
        follow on to the last record observed and keep following from there."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            current, self._refs = self._refs, None  # detached: `observe` leaves it alone
            if current is not None and current.seq > capture.seq:
                current = None
            refs = await self._refs_at(current, capture.seq, capture.custom_context)
            if refs.hash != capture.hash:
                raise ChainBrokenError(
                    self.thread_id, capture.seq, "its hash differs from the state's to snapshot"
                )
            snapshot = self._snapshot_of(capture, refs)
            try:
                while refs.seq < self._observed:  # what committed meanwhile
                    await self._follow(refs, self._observed, capture.custom_context)
            except ChainBrokenError:
                return snapshot  # the next snapshot rebuilds from the store
            if self._refs is None and self._custom == capture.custom_context:
                self._refs = refs
            return snapshot

    async def _refs_at(self, refs: _Refs | None, seq: int, custom_context: bool) -> _Refs:
        """The references after record `seq`: from `refs` (at or before it), else the newest
        stored referencing snapshot, else the first record."""
        if refs is None:
            try:
                stored = await self.store.load_snapshot(self.thread_id, seq)
            except CorruptRecordError:  # a damaged snapshot (verify names it): not a base
                stored = None
            refs = _Refs.of_snapshot(stored) if stored is not None else None
        if refs is not None:
            try:  # followed in place: a record that fails leaves it as of the one before
                return await self._follow(refs, seq, custom_context)
            except ChainBrokenError:
                pass  # it disagrees with the chain: follow the whole log instead
        return await self._follow(_Refs(), seq, custom_context)

    async def _follow(self, refs: _Refs, seq: int, custom_context: bool) -> _Refs:
        if refs.seq >= seq:
            return refs
        anchor = bytes.fromhex(refs.hash) if refs.seq else None
        async for record in self.store.read(self.thread_id, refs.seq + 1, seq, after_hash=anchor):
            refs.apply(record, custom_context)
        return refs


async def _ready(snapshot: Snapshot) -> Snapshot:
    return snapshot


def write_snapshot(
    store: EventStore, thread_id: str, seq: int, state: AgentState, *, hash: str, at: float = 0.0
) -> Awaitable[Snapshot]:
    """`SnapshotWriter(store, thread_id).snapshot(...)`: one snapshot, its references
    followed from the newest referencing snapshot stored at or before `seq`."""
    return SnapshotWriter(store, thread_id).snapshot(seq, state, hash=hash, at=at)
