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
import itertools
import math
import operator
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentlog.events import (
    AgentlogError,
    ChainBrokenError,
    CorruptRecordError,
    EventRecord,
    EventStore,
    Snapshot,
    ThreadNotFoundError,
)
from agentlog.events.codec import encode_state
from agentlog.events.kinds import (
    ContextSummarized,
    Forked,
    MessageAppended,
    MessageReplaced,
    MessagesRemoved,
    MessagesReplaced,
    RunStarted,
    StateUpdated,
)
from agentlog.events.store import (
    MESSAGE_KINDS,
    ContextEntry,
    CorruptSnapshotError,
    decode_context_refs,
    messages_of,
    snapshot_digest,
)
from agentlog.projections.edge import state_data, to_builtins
from agentlog.projections.fold import CONTEXT_FIELDS, Fold, field_plan, gc_paused
from agentlog.projections.generic import library_reducer, open_state_class
from agentlog.projections.messages import Message
from agentlog.projections.names import current_name
from agentlog.projections.reducers import add_messages
from agentlog.projections.state import AgentState
from agentlog.projections.views import PointOutOfRangeError, _shares_context, state_type_name

__all__ = [
    "DEFAULT_SNAPSHOT_EVERY",
    "SnapshotFinding",
    "SnapshotWriter",
    "verify_snapshots",
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
        if record.kind in MESSAGE_KINDS:
            self.hashes[seq] = bytes.fromhex(record.hash)
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
        """Take a snapshot of `state`, the thread's state after record `seq` (chain hash
        `hash`), and store it when the returned awaitable runs.

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
            return self._save(self._snapshot_of(capture, refs))  # followed up to here
        return self._write(capture)

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

    async def _save(self, snapshot: Snapshot) -> Snapshot:
        await self.store.save_snapshot(snapshot)
        return snapshot

    async def _write(self, capture: _Capture) -> Snapshot:
        """Rebuild the references up to the snapshot from the store, store the snapshot, then
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
            snapshot = await self._save(self._snapshot_of(capture, refs))
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


def write_snapshot(
    store: EventStore, thread_id: str, seq: int, state: AgentState, *, hash: str, at: float = 0.0
) -> Awaitable[Snapshot]:
    """`SnapshotWriter(store, thread_id).snapshot(...)`: one snapshot, its references
    followed from the newest referencing snapshot stored at or before `seq`."""
    return SnapshotWriter(store, thread_id).snapshot(seq, state, hash=hash, at=at)


# ---- checking -------------------------------------------------------------------------------

FindingKind = Literal[
    "hash", "content", "digest", "unreadable", "unanchored", "other_class", "unchecked"
]
"""What a snapshot finding says:

* "hash": the snapshot names a chain hash other than its record's (or a seq with no record):
  every reader refuses it;
* "content": its state differs from the state folded from the log at its seq (`path` says
  where it first differs; `message` whether readers believe it, or refuse it for its digest);
* "digest": it agrees with the log, not with the digest it was stored with: every reader
  refuses it;
* "unreadable": it, or the log up to it, cannot be read back;
* "unanchored" (no problem): it names no hash, so no reader ever uses it;
* "other_class" (no problem): it holds another state class than the one checked against;
* "unchecked" (no problem): fields that cannot be checked without the thread's state class.
"""

_PROBLEMS = frozenset({"hash", "content", "digest", "unreadable"})


@dataclass(frozen=True)
class SnapshotFinding:
    """One thing found about one snapshot of a thread; `message` says it in a sentence.

    Values quoted in `message` and `path` come from the log and the snapshot: show them
    inert.
    """

    thread_id: str
    seq: int
    kind: FindingKind
    message: str
    path: str | None = None

    @property
    def problem(self) -> bool:
        """True for a snapshot that is wrong ("hash", "content", "digest", "unreadable")."""
        return self.kind in _PROBLEMS

    def __str__(self) -> str:
        return self.message


@dataclass
class _Fields:
    """What the log says about a thread's custom fields, for checking without its class."""

    declared: dict[str, str | None]
    set_at: dict[str, int]

    def checkable(self, name: str, seq: int) -> bool:
        """Whether the open class reproduces field `name` exactly at `seq`."""
        if name in ("execution_meta", "context_summary"):
            return True
        if name == "context":
            reducer = self.declared.get("context")
            return reducer is None or library_reducer(reducer) is not None
        first = self.set_at.get(name)
        if first is None or first > seq or name not in self.declared:
            return False  # a default of the user's class, or reduced in a way not recorded
        reducer = self.declared[name]
        return reducer is None or library_reducer(reducer) is not None


async def _scan_fields(store: EventStore, thread_id: str, top: int) -> _Fields:
    fields = _Fields({}, {})
    bearing: list[int] = []
    for kind in (RunStarted.KIND, Forked.KIND, StateUpdated.KIND):  # FIELD_KINDS
        bearing += [s for s in await store.seqs_of_kind(thread_id, kind) if s <= top]
    for seq in sorted(bearing):
        async for record in store.read(thread_id, seq, seq):
            event = record.event
            if isinstance(event, RunStarted | Forked):
                for name, reducer in (event.fields or {}).items():
                    fields.declared.setdefault(name, reducer)
            names: Iterable[str] = ()
            if isinstance(event, Forked):
                names = event.state
            elif isinstance(event, StateUpdated):
                names = event.values
            for name in names:
                if name not in AgentState.model_fields and name not in CONTEXT_FIELDS:
                    fields.set_at.setdefault(name, seq)
    return fields


async def verify_snapshots(
    store: EventStore, thread_id: str, state_cls: type[AgentState] | None = None
) -> list[SnapshotFinding]:
    """Replay the thread once and compare each of its snapshots with the state folded from
    the log at the snapshot's seq, and with the digest it was stored with; the findings in
    seq order (none: every snapshot agrees).

    Linear in the thread: the log is read once, and a snapshot's context is compared where
    it differs from the previous snapshot's (a message two snapshots reference alike, held
    alike by the fold, is compared once), so a long thread with many snapshots costs its
    records plus the bytes of its snapshots, not its context once per snapshot.

    Without `state_cls` the thread is folded with the open class its log describes (see
    `agentlog.projections.generic`); fields that class cannot reproduce (reduced by a user's
    function,
    or never set in the log, so holding the user's default) are left out of the comparison
    and named in one "unchecked" finding. Only findings whose `problem` is true mean a
    snapshot is wrong. Raises `ThreadNotFoundError` for a thread with no records.
    """
    last = await store.last_seq(thread_id)
    if last == 0:
        raise ThreadNotFoundError(thread_id)
    seqs = await store.snapshot_seqs(thread_id)
    findings: list[SnapshotFinding] = []
    for seq in seqs:
        if not 1 <= seq <= last:
            findings.append(
                SnapshotFinding(
                    thread_id,
                    seq,
                    "hash",
                    f"the snapshot at seq {seq} names a point the thread does not have "
                    f"(records 1..{last}): no record anchors it",
                )
            )
    todo = [seq for seq in seqs if 1 <= seq <= last]
    if not todo:
        return findings
    fields: _Fields | None = None
    cls: type[AgentState]
    if state_cls is None:
        fields = await _scan_fields(store, thread_id, todo[-1])
        unrecorded = sorted(set(fields.set_at) - set(fields.declared))
        cls = open_state_class(fields.declared, unrecorded)
    else:
        cls = state_cls
    check = _Verifier(store, thread_id, cls, fields)
    pending = iter(todo)
    upcoming = next(pending, None)
    fold = check.fold
    try:
        with gc_paused():
            async for record in store.read(thread_id, 1, todo[-1]):
                fold.apply(record)
                carried = messages_of(record.event)
                if carried is not None:
                    check.carriers[record.seq] = bytes.fromhex(record.hash)
                    check.recent[record.seq] = carried
                while upcoming == record.seq:
                    findings += await check.snapshot()
                    upcoming = next(pending, None)
    except (AgentlogError, ValueError) as exc:
        findings.append(
            SnapshotFinding(
                thread_id,
                fold.seq + 1,
                "unreadable",
                f"the log cannot be folded past seq {fold.seq} to check the snapshots after "
                f"it ({type(exc).__name__}: {exc})",
            )
        )
    findings.sort(key=lambda f: f.seq)
    if check.skipped:
        names = ", ".join(sorted(check.skipped))
        findings.append(
            SnapshotFinding(
                thread_id,
                todo[-1],
                "unchecked",
                f"field(s) {names} were not compared: without the state class their values "
                "cannot be rebuilt from the log (a user's reducer, or the class's default); "
                "check again with the state class to cover them",
            )
        )
    return findings


@dataclass
class _Compared:
    """A referencing snapshot as it was compared: its references, the fold's context then,
    and how many of its first messages were found to be the fold's."""

    seq: int
    refs: list[Any]
    context: list[Message]
    agreed: int


class _Verifier:
    """The state of one `verify_snapshots` pass: the fold of the log, the chain hash of each
    record that carries messages (for the digests), the messages carried by the records
    read since the last snapshot, and what that snapshot was found to hold."""

    def __init__(
        self, store: EventStore, thread_id: str, cls: type[AgentState], fields: _Fields | None
    ) -> None:
        self.store = store
        self.thread_id = thread_id
        self.cls = cls
        self.fields = fields
        self.fold: Fold[Any] = Fold.new(cls)
        self.carriers: dict[int, bytes] = {}
        self.recent: dict[int, list[Any]] = {}
        self.last: _Compared | None = None
        self.skipped: set[str] = set()
        self.by_reference = _shares_context(cls)

    def finding(self, kind: FindingKind, message: str, path: str | None = None) -> SnapshotFinding:
        return SnapshotFinding(self.thread_id, self.fold.seq, kind, message, path)

    async def snapshot(self) -> list[SnapshotFinding]:
        """The findings about the snapshot at `fold.seq`, the fold being the log's state there.

        The snapshot is compared as readers see it: validated into the class (so a row written
        before a model gained a field reads with its default), then as exact builtins.
        """
        last, self.last = self.last, None
        try:
            return await self._snapshot(last)
        finally:
            self.recent.clear()

    async def _snapshot(self, last: _Compared | None) -> list[SnapshotFinding]:
        seq, fold, cls = self.fold.seq, self.fold, self.cls
        try:
            snapshot = await self.store.load_snapshot(
                self.thread_id, seq, resolve=False, check=False
            )
        except (AgentlogError, ValueError) as exc:
            return [self.finding("unreadable", f"the snapshot at seq {seq} cannot be read: {exc}")]
        if snapshot is None or snapshot.seq != seq:
            return []  # removed while being checked
        if not snapshot.hash:
            return [
                self.finding(
                    "unanchored",
                    f"the snapshot at seq {seq} names no chain hash, so no reader uses it",
                )
            ]
        if snapshot.hash != fold.hash:
            return [
                self.finding(
                    "hash",
                    f"the snapshot at seq {seq} names hash {snapshot.hash[:16]}..., but the "
                    f"record at that seq hashes to {fold.hash[:16]}...: every reader refuses it",
                )
            ]
        if self.fields is None and current_name(snapshot.state_type) != state_type_name(cls):
            return [
                self.finding(
                    "other_class",
                    f"the snapshot at seq {seq} holds a {snapshot.state_type!r}, not a "
                    f"{state_type_name(cls)!r}: readers of that class ignore it",
                )
            ]
        by_reference = snapshot.context_refs is not None and self.by_reference
        context_checked = self.fields is None or self.fields.checkable("context", seq)
        if snapshot.context_refs is not None and not by_reference:
            try:  # a context of another shape than a list of messages: compared whole
                snapshot = await self.store.load_snapshot(self.thread_id, seq, check=False)
            except (AgentlogError, ValueError) as exc:
                why = f"the snapshot at seq {seq} cannot be read: {exc}"
                return [self.finding("unreadable", why)]
            if snapshot is None or snapshot.seq != seq:
                return []
        try:
            digest = self.digest_of(snapshot)
            rest = snapshot.state
            if by_reference:
                rest = {k: v for k, v in rest.items() if k != "context"}
            found = state_data(cls.model_validate(rest))
        except CorruptSnapshotError as exc:
            return [self.finding("unreadable", f"the snapshot at seq {seq} cannot be read: {exc}")]
        except ValueError as exc:  # pydantic's ValidationError among them
            return [
                self.finding(
                    "unreadable",
                    f"the snapshot at seq {seq} does not validate as {cls.__name__} "
                    f"({str(exc).splitlines()[0]}): readers fold the log instead",
                )
            ]
        if by_reference:
            expected = state_data(fold.state.model_copy(update={"context": []}))
            expected.pop("context", None)
            found.pop("context", None)
        else:
            expected = state_data(fold.state)
        if self.fields is not None:
            names = set(expected) | set(snapshot.state)
            left_out = {name for name in names if not self.fields.checkable(name, seq)}
            self.skipped |= left_out
            expected = {k: v for k, v in expected.items() if k not in left_out}
            found = {k: v for k, v in found.items() if k not in left_out}
        difference = None
        if by_reference and context_checked:
            try:
                difference = await self.context(snapshot, last)
            except CorruptSnapshotError as exc:
                why = f"the snapshot at seq {seq} cannot be read: {exc}"
                return [self.finding("unreadable", why)]
        elif by_reference:
            self.skipped.add("context")
        if difference is None:
            difference = _difference(expected, found, "")
        stored = snapshot.digest
        if difference is not None:
            path, why = difference
            if not stored:
                belief = "readers do not use it (it was stored before snapshots had digests)"
            elif stored != digest.hex():
                belief = "readers refuse it (its digest is not its content's)"
            else:
                belief = "readers would believe it"
            return [
                self.finding(
                    "content",
                    f"the snapshot at seq {seq} differs from the state folded from the log: "
                    f"{why}; {belief}",
                    path,
                )
            ]
        if stored and stored != digest.hex():
            return [
                self.finding(
                    "digest",
                    f"the snapshot at seq {seq} agrees with the log but not with the digest "
                    "it was stored with: every reader refuses it (CorruptSnapshotError); take "
                    "a new one",
                )
            ]
        return []

    def digest_of(self, snapshot: Snapshot) -> bytes:
        """The digest the snapshot's content should carry (`snapshot_digest`), from the chain
        hashes this pass read."""
        anchor = bytes.fromhex(snapshot.hash)
        refs = snapshot.context_refs
        if refs is None:
            return snapshot_digest(anchor, encode_state(snapshot.state), None, ())
        if set(map(type, refs)) <= {int}:
            targets: Iterable[int] = sorted(set(itertools.accumulate(refs)))
        else:
            entries = decode_context_refs(refs, self.thread_id, snapshot.seq)
            targets = sorted({e[0] for e in entries if isinstance(e, tuple)})
        rest = {k: v for k, v in snapshot.state.items() if k != "context"}
        hashes = list(filter(None, map(self.carriers.get, targets)))
        return snapshot_digest(anchor, encode_state(rest), encode_state({"context": refs}), hashes)

    async def context(self, snapshot: Snapshot, last: _Compared | None) -> tuple[str, str] | None:
        """Where the snapshot's referenced context first differs from the fold's, and how;
        only the positions that changed since `last` are compared one by one."""
        refs = snapshot.context_refs or []
        context = list(self.fold.state.context)
        start = 0
        if last is not None:
            start = min(
                _common_prefix(refs, last.refs, operator.eq),
                _common_prefix(context, last.context, operator.is_),
                last.agreed,
            )
        if set(map(type, refs)) <= {int}:
            seqs = list(itertools.accumulate(refs))
            entries: list[ContextEntry] = [(seq, 0) for seq in seqs[start:]]
        else:
            entries = decode_context_refs(refs, self.thread_id, snapshot.seq)[start:]
        compared = _Compared(snapshot.seq, refs, context, start)
        self.last = compared
        carried = await self.messages({e[0] for e in entries if isinstance(e, tuple)})
        messages: list[Any] = []
        for entry in entries:  # every reference must lead to a message, as for a reader
            if isinstance(entry, dict):
                messages.append(entry)
                continue
            held = carried.get(entry[0])
            if held is None or not 0 <= entry[1] < len(held):
                what = "no record carrying messages" if held is None else "a shorter list"
                raise CorruptSnapshotError(
                    self.thread_id,
                    snapshot.seq,
                    f"it names message {entry[1]} of seq {entry[0]}, {what}",
                )
            messages.append(held[entry[1]])
        if len(refs) != len(context):
            return "context", f"context has {len(refs)} items, the log gives {len(context)}"
        for position, message in enumerate(messages, start):
            try:
                found = to_builtins(Message.model_validate(message))
            except ValueError as exc:
                return f"context[{position}]", (
                    f"context[{position}] is no message ({str(exc).splitlines()[0]})"
                )
            difference = _difference(to_builtins(context[position]), found, f"context[{position}]")
            if difference is not None:
                return difference
            compared.agreed = position + 1
        compared.agreed = len(context)
        return None

    async def messages(self, targets: set[int]) -> dict[int, list[Any]]:
        """The messages carried by the records at `targets`: those read since the last
        snapshot, the others read again (one by one, or as one stretch when many)."""
        found = {seq: self.recent[seq] for seq in targets if seq in self.recent}
        missing = sorted(targets.difference(found))
        if not missing:
            return found
        stretches = [(missing[0], missing[-1])] if len(missing) > 64 else [(s, s) for s in missing]
        wanted = set(missing)
        for low, high in stretches:
            async for record in self.store.read(self.thread_id, low, high):
                carried = messages_of(record.event)
                if record.seq in wanted and carried is not None:
                    found[record.seq] = carried
        return found


def _common_prefix(a: Sequence[Any], b: Sequence[Any], same: Any) -> int:
    """How many first items `a` and `b` share (`same` compares two items), in C-speed
    slices: each probe of the binary search is one comparison of two slices."""
    n = min(len(a), len(b))
    if all(map(same, a[:n], b[:n])):
        return n
    low, high = 0, n  # a[:low] and b[:low] agree; a[:high] and b[:high] do not
    while high - low > 1:
        middle = (low + high) // 2
        if all(map(same, a[low:middle], b[low:middle])):
            low = middle
        else:
            high = middle
    return low


def _difference(expected: Any, found: Any, path: str) -> tuple[str, str] | None:
    """Where two states of builtins first differ, and how; None when they are the same.

    Exact: 1, 1.0 and True differ, -0.0 is not 0.0, NaN equals NaN, dict order is ignored.
    """
    where = path or "the state"
    if type(expected) is not type(found):
        return where, (
            f"{where} is {_shown(found)} ({type(found).__name__}), the log gives "
            f"{_shown(expected)} ({type(expected).__name__})"
        )
    if isinstance(expected, dict):
        for key in expected:
            if key not in found:
                return f"{path}.{key}".lstrip("."), f"{where} lacks {key!r}"
        for key in found:
            if key not in expected:
                return f"{path}.{key}".lstrip("."), f"{where} holds {key!r}, the log does not"
        for key, value in expected.items():
            inner = _difference(value, found[key], f"{path}.{key}".lstrip("."))
            if inner is not None:
                return inner
        return None
    if isinstance(expected, list):
        if len(expected) != len(found):
            return where, f"{where} has {len(found)} items, the log gives {len(expected)}"
        for index, (a, b) in enumerate(zip(expected, found, strict=True)):
            inner = _difference(a, b, f"{path}[{index}]")
            if inner is not None:
                return inner
        return None
    if isinstance(expected, float):
        if math.isnan(expected) and math.isnan(found):
            return None
        if expected == found and math.copysign(1.0, expected) == math.copysign(1.0, found):
            return None
    elif expected == found:
        return None
    return where, f"{where} is {_shown(found)}, the log gives {_shown(expected)}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
