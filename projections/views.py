"""Reading state out of a store: the state at a point, and snapshots that make it cheap.

Every read that builds state checks what it reads: a snapshot is used only when the store
recomputed its digest from what it read (`EventStore.load_snapshot`: its bytes, and each
record its context points to checked against that record's chain hash), and the records
after it are read chained from its hash.

`state_at` keeps, per process, the messages it has read out of referencing snapshots, as
the log stores them (`_MessageCache`), per store object and thread, keyed by the record
carrying each and that record's chain hash: a point whose snapshot references messages read
before costs reading and hashing their records, not decoding them again, and a cached
message is used only while its record still hashes as it did (it never outlives a change of
the bytes it came from). The cached messages are only cached once the snapshot's hash was
found to be the chain's, and are never handed out: a state gets them through a
`SharedContext`, which validates each one, into a message of the state's own, the first
time it is read; so a first read of a past state validates none of its messages.
"""

from __future__ import annotations

import itertools
import logging
import threading
import weakref
from collections import OrderedDict
from functools import cache
from typing import Any, TypeVar, get_args, get_origin

import msgspec
from pydantic import ValidationError

from agentlog.events.errors import InvalidArgumentError, ThreadNotFoundError
from agentlog.events.record import EventRecord, Snapshot
from agentlog.events.store import EventStore
from agentlog.projections.edge import state_data, to_builtins
from agentlog.projections.errors import ProjectionError
from agentlog.projections.fold import Fold, gc_paused
from agentlog.projections.messages import Message
from agentlog.projections.names import current_name
from agentlog.projections.shared import SharedContext as SharedContext
from agentlog.projections.state import AgentState

S = TypeVar("S", bound=AgentState)

_log = logging.getLogger("agentlog.snapshots")


class PointOutOfRangeError(ProjectionError, IndexError):
    """A seq or step beyond what the thread has recorded."""


def state_type_name(state_cls: type[AgentState]) -> str:
    """The name a snapshot records for its state class."""
    return f"{state_cls.__module__}.{state_cls.__qualname__}"


async def fold_at(
    store: EventStore,
    thread_id: str,
    seq: int | None = None,
    state_cls: type[S] = AgentState,  # type: ignore[assignment]
    *,
    use_snapshots: bool = True,
) -> Fold[S]:
    """A fold positioned after record `seq` (the last one when None).

    It starts from the newest snapshot at or before `seq` and reads only the records after it.
    A snapshot whose hash is not the chain's at its seq raises `ChainBrokenError` naming that
    seq (`use_snapshots=False` reads the log alone); a damaged one, or one whose content is
    not its digest's, `CorruptSnapshotError`; a record it points to whose bytes are not its
    hash's, `ChainBrokenError` naming the record. One the class cannot validate, or stored
    without a digest, is passed over for the log.
    """
    target = await _target(store, thread_id, seq)
    with gc_paused():
        return await _fold_from_snapshot(store, thread_id, target, state_cls, use_snapshots)


async def _target(store: EventStore, thread_id: str, seq: int | None) -> int:
    """The seq to fold up to: `seq`, or the thread's last when None, checked against it."""
    if seq is not None and seq < 0:
        raise PointOutOfRangeError(f"seq must be >= 0, got {seq}")
    last = await store.last_seq(thread_id)
    if last == 0:
        raise ThreadNotFoundError(thread_id)
    if seq is not None and seq > last:
        raise PointOutOfRangeError(
            f"thread {thread_id!r} has {last} records; seq {seq} does not exist yet"
        )
    return last if seq is None else seq


async def _fold_from_snapshot(
    store: EventStore,
    thread_id: str,
    target: int,
    state_cls: type[S],
    use_snapshots: bool,
    shared: bool = False,
) -> Fold[S]:
    fold: Fold[S] | None = None
    anchor: bytes | None = None
    cached = _CACHE.get(store, thread_id) if shared and _shares_context(state_cls) else None
    new: dict[_Key, _Entry] | None = None
    if use_snapshots and target > 0:
        snapshot = await store.load_snapshot(
            thread_id, target, resolve=cached is None, payloads=shared
        )
        if (
            snapshot is not None
            and snapshot.hash
            and snapshot.digest  # checked by the store against what it read
            and current_name(snapshot.state_type) == state_type_name(state_cls)
        ):
            try:
                state: S | None = None
                if shared and snapshot.context_refs is not None and _shares_context(state_cls):
                    built = await _shared_state(store, snapshot, state_cls, cached)
                    if built is not None:
                        snapshot, state, new = built
                else:
                    state = state_cls.model_validate(snapshot.state)
            except ValidationError as exc:
                # A snapshot this class cannot hold (the class changed since, or the row was
                # altered): the log is the truth, so fold it instead; verify reports the row.
                _log.warning(
                    "snapshot at seq %d of thread %r does not validate as %s (%s): folding "
                    "the log instead",
                    snapshot.seq,
                    thread_id,
                    state_cls.__name__,
                    exc.errors()[0]["msg"] if exc.errors() else exc,
                )
                new = None
            else:
                if state is not None:
                    fold = Fold(state, seq=snapshot.seq, copy=False)
                    fold.hash, anchor = snapshot.hash, bytes.fromhex(snapshot.hash)
                    fold.snapshot_seq = snapshot.seq
    if fold is None:
        fold = Fold.new(state_cls)
    if fold.seq < target or anchor is not None:
        # Reading from the snapshot on checks every link, starting with the record the
        # snapshot names: a snapshot whose hash is not the chain's at its seq is refused
        # with `ChainBrokenError` naming that seq. Not folded around: either the snapshot
        # or the log was rewritten, and only a check of both (`verify`) can say which.
        chunk: list[EventRecord] = []
        async for record in store.read(thread_id, fold.seq + 1, target, after_hash=anchor):
            chunk.append(record)
            if len(chunk) >= 4096:
                fold.apply_all(chunk)
                chunk.clear()
        fold.apply_all(chunk)
        if new is not None:  # the snapshot's hash is the chain's: its messages are the log's
            _CACHE.add(store, thread_id, new)
    return fold


async def _shared_state(
    store: EventStore, snapshot: Snapshot, state_cls: type[S], cached: _Thread | None
) -> tuple[Snapshot, S, dict[_Key, _Entry]] | None:
    """The state of a referencing snapshot, its referenced messages taken from the cache
    where it holds them and from the snapshot otherwise, as stored (validated when read);
    with the messages taken here, for the cache once the snapshot's hash is checked.

    `snapshot` comes unresolved when `cached` is given; it is loaded again, resolved, when
    the cache cannot serve every message (None: it is gone meanwhile). The snapshot returned
    is the one the state is of.
    """
    held = cached.messages if cached is not None else {}
    while True:
        built = _context_of(snapshot, held)
        if built is not None:
            break
        again = await store.load_snapshot(snapshot.thread_id, snapshot.seq, payloads=True)
        if again is None or again.context_refs is None:
            return None  # removed or rewritten meanwhile: the caller folds the log
        snapshot = again
    messages, new = built
    state = state_cls.model_validate({k: v for k, v in snapshot.state.items() if k != "context"})
    state.context = SharedContext(messages, raw=True)
    return snapshot, state, new


def _context_of(
    snapshot: Snapshot, held: dict[_Key, _Entry]
) -> tuple[list[Any], dict[_Key, _Entry]] | None:
    """The snapshot's context, each message pointing into the log as stored (a dict, or the
    payload of its record, never changed: the cache and every state read from it share it)
    and each inline one validated;
    with the ones taken here by key with their record's hash. None when a message is not in
    `held` and the snapshot is unresolved.

    The references were checked by the store as it loaded the snapshot, and each record they
    point to against its chain hash (`snapshot.record_hashes`): a message of `held` is taken
    only when its record still has the hash it was read under.
    """
    refs = snapshot.context_refs or []
    resolved = snapshot.state.get("context")
    hashes = snapshot.record_hashes or {}
    keys: list[_Key | None]
    found: list[Any]
    new: dict[_Key, _Entry]
    if set(map(type, refs)) <= {int}:  # the usual context: first messages of records
        seqs: list[int] = list(itertools.accumulate(refs))
        if held:
            found = [
                entry[1] if entry is not None and entry[0] == digest else None
                for entry, digest in zip(map(held.get, seqs), map(hashes.get, seqs), strict=True)
            ]
        else:
            found = [None] * len(seqs)
        if None not in found:
            return found, {}
        if isinstance(resolved, list) and found.count(None) == len(found):  # a first read
            new = {s: (hashes.get(s, b""), m) for s, m in zip(seqs, resolved, strict=True)}
            return resolved, new
        keys = list(seqs)
    else:
        keys = _keys(refs)
        found = [None if key is None else _held(held, hashes, key) for key in keys]
    missing = [i for i, message in enumerate(found) if message is None]
    if resolved is None and any(keys[i] is not None for i in missing):
        return None
    source = refs if resolved is None else resolved  # inline messages are in both
    new = {}
    for i in missing:
        key = keys[i]
        if key is None:  # kept in the snapshot alone: checked now, as a whole state would be
            found[i] = Message.model_validate(source[i])
        else:
            found[i] = source[i]
            new[key] = (hashes.get(_seq_of(key), b""), source[i])
    return found, new


def _seq_of(key: _Key) -> int:
    return key if isinstance(key, int) else key[0]


def _held(
    held: dict[_Key, _Entry], hashes: dict[int, bytes], key: _Key
) -> dict[str, Any] | bytes | None:
    """The cached message at `key`, if its record still has the hash it was read under."""
    entry = held.get(key)
    if entry is None or entry[0] != hashes.get(_seq_of(key)):
        return None
    return entry[1]


def _keys(refs: list[Any]) -> list[_Key | None]:
    """Where each reference points (`_Key`), None for a message stored inline."""
    keys: list[_Key | None] = []
    prev = 0
    for item in refs:
        if type(item) is dict:
            keys.append(None)
        elif type(item) is int:
            prev += item
            keys.append(prev)
        else:
            prev += item[0]
            keys.append((prev, item[1]) if item[1] else prev)
    return keys


async def state_at(
    store: EventStore,
    thread_id: str,
    seq: int | None = None,
    state_cls: type[S] = AgentState,  # type: ignore[assignment]
    *,
    use_snapshots: bool = True,
) -> S:
    """The thread's state after record `seq` (after its last record when None).

    Its context may be a `SharedContext`: its messages, as the log stores them, are read
    from the log once in this process, and each is validated the first time it is read
    from the state.
    """
    target = await _target(store, thread_id, seq)
    with gc_paused():
        fold = await _fold_from_snapshot(
            store, thread_id, target, state_cls, use_snapshots, shared=True
        )
    return fold.state


def snapshot_of(
    thread_id: str, seq: int, state: AgentState, at: float = 0.0, *, hash: str = ""
) -> Snapshot:
    """A whole-state snapshot of `state` after record `seq`, whose chain hash is `hash`.

    Its data is `state_data(state)`: exact builtins, so the snapshot folds back to `state`.
    A snapshot without the hash is never used by a reader (nothing would anchor it). It
    costs every message's bytes again: `agentlog.projections.snapshots.SnapshotWriter` writes the
    form that references the log instead.
    """
    data = state_data(state)
    return Snapshot(
        thread_id=thread_id,
        seq=seq,
        state=data,
        state_type=state_type_name(type(state)),
        at=at,
        hash=hash,
    )


async def take_snapshot(
    store: EventStore,
    thread_id: str,
    seq: int | None = None,
    state_cls: type[AgentState] = AgentState,
) -> Snapshot:
    """Fold the thread up to `seq` (the end by default) and store a snapshot of it there.

    The snapshot stored references its messages in the log (`agentlog.projections.snapshots`); the
    one returned holds the whole state, as `load_snapshot` gives it back.
    """
    from agentlog.projections.snapshots import write_snapshot  # snapshots builds on this module

    if seq == 0:
        raise PointOutOfRangeError(
            f"seq 0 of thread {thread_id!r} lies before its first record: there is no state "
            "to take a snapshot of"
        )
    fold = await fold_at(store, thread_id, seq, state_cls)
    if not fold.hash:
        async for record in store.read(thread_id, fold.seq, fold.seq):
            fold.hash = record.hash
    stored = await write_snapshot(store, thread_id, fold.seq, fold.state, hash=fold.hash)
    context = [to_builtins(m) for m in fold.state.context]
    return msgspec.structs.replace(stored, state={**stored.state, "context": context})


MESSAGE_CACHE_LIMIT = 20_000
"""Messages `state_at` keeps per process by default, least recently read threads
dropped first: every message of a 10,000-step tool-calling thread (15,001), each kept as
its record's payload (about 400 bytes there, 8 MB in all, plus what the store keeps of the
records it checked). `set_message_cache_limit` changes it."""


_Key = int | tuple[int, int]
"""Where a message is in the log: the seq of the record carrying it when it is the record's
first (nearly always), else (seq, index)."""

_Entry = tuple[bytes, dict[str, Any] | bytes]
"""A cached message as the log stores it, with the chain hash of the record it was read
from."""


class _Thread:
    """One thread's cached messages, by where each is in the log (`_Key`), with the hash of
    the record each came from, as read from one store object."""

    __slots__ = ("messages", "store")

    def __init__(self, store: EventStore) -> None:
        self.messages: dict[_Key, _Entry] = {}
        self.store = weakref.ref(store)


class _MessageCache:
    """Messages of referencing snapshots as stored, per store and thread, up to `limit`."""

    def __init__(self, limit: int = MESSAGE_CACHE_LIMIT) -> None:
        self.limit = limit
        self._threads: OrderedDict[tuple[int, str], _Thread] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, store: EventStore, thread_id: str) -> _Thread | None:
        """The thread's messages read from this very store object, if any are kept."""
        with self._lock:
            key = (id(store), thread_id)
            cached = self._threads.get(key)
            if cached is None:
                return None
            if cached.store() is not store:  # another store, since gone, had this id
                self._size -= len(self._threads.pop(key).messages)
                return None
            self._threads.move_to_end(key)
            return cached

    def clear(self) -> None:
        with self._lock:
            self._threads.clear()
            self._size = 0

    def add(self, store: EventStore, thread_id: str, new: dict[_Key, _Entry]) -> None:
        """Keep `new`, messages of the thread read from `store`, dropping the threads read
        least recently to stay within the limit."""
        if not new or len(new) > self.limit:
            return
        with self._lock:
            key = (id(store), thread_id)
            cached = self._threads.get(key)
            if cached is None or cached.store() is not store:
                if cached is not None:
                    self._size -= len(cached.messages)
                cached = self._threads[key] = _Thread(store)
            self._threads.move_to_end(key)
            while self._size + len(new) > self.limit and next(iter(self._threads)) != key:
                _, oldest = self._threads.popitem(last=False)
                self._size -= len(oldest.messages)
            if self._size + len(new) > self.limit:
                return
            before = len(cached.messages)
            cached.messages.update(new)
            self._size += len(cached.messages) - before


_CACHE = _MessageCache()


def clear_message_cache() -> None:
    """Forget every message `state_at` keeps in this process."""
    _CACHE.clear()


def set_message_cache_limit(limit: int) -> None:
    """Keep at most `limit` messages for `state_at` in this process (0: none, so every read
    decodes its messages again); what is kept now is forgotten."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidArgumentError(
            f"the message cache limit must be an int >= 0 (a count of messages), got {limit!r}"
        )
    _CACHE.clear()
    _CACHE.limit = limit


@cache
def _shares_context(state_cls: type[AgentState]) -> bool:
    """Whether a state of this class may be built with its context set after validation:
    a plain `list[Message]` field that no validator of the class looks at."""
    info = state_cls.model_fields.get("context")
    if info is None or get_origin(info.annotation) is not list:
        return False
    if get_args(info.annotation) != (Message,) or state_cls.model_config.get("validate_assignment"):
        return False
    decorators = state_cls.__pydantic_decorators__
    if decorators.model_validators:
        return False
    return not any(
        ("context" in d.info.fields or "*" in d.info.fields) and name != OWN_VALIDATOR
        for name, d in decorators.field_validators.items()
    )


OWN_VALIDATOR = "_own_shared_messages"
"""`AgentState`'s own context validator, which copies what a `SharedContext` still shares."""
