"""Subject keys kept in the store's own database, and the keyring a store reads them through.

Two tables, made on first use in the same database as the log (the SQLite file, the
PostgreSQL schema, the memory store's process):

- `subject_keys(subject, wrapped, created_at, erased_at, erased_by, reason)`: each subject's
  data key wrapped under the master key (`agentlog.events.sealing.load_master_key`); erasing
  sets `wrapped` to NULL and keeps who, when and why in its place.
- `subject_threads(thread_id, subject)`: which threads are tagged with which subject.

`DatabaseKeyStore` is the default `KeyStore`; `use_key_store(store, keys)` puts another (a KMS)
in its place. Every store reads sealed payloads through its `Keyring` (see
`agentlog.events.store.BaseEventStore`): it caches keys and thread tags, and forgets a key the
moment it is destroyed through it.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Sequence
from typing import Any

from agentlog.events.codec import Encoded
from agentlog.events.errors import CorruptRecordError, InvalidArgumentError, StoreError
from agentlog.events.keytables import Tables, tables_of
from agentlog.events.sealing import (
    KEY_BYTES,
    PERSONAL,
    Erasure,
    Keys,
    KeyStore,
    Sealer,
    SealingError,
    SubjectErasedError,
    SubjectKey,
    check_subject,
    is_sealed,
    load_master_key,
    new_key,
    subject_of,
    unwrap_key,
    wrap_key,
)

__all__ = [
    "ERASURE_THREAD",
    "DatabaseKeyStore",
    "Keyring",
    "ThreadTaggedError",
    "keyring",
    "open_keys",
    "rotate_master_key",
    "subject_of_thread",
    "tag_thread",
    "threads_of_subject",
    "use_key_store",
    "vacuum",
]


ERASURE_THREAD = "__erasures__"
"""The thread where erasures are recorded (`erased`): a key a reader cached is dropped once
this thread moves, so an erasure made by another process is seen by every reader."""


class ThreadTaggedError(StoreError, InvalidArgumentError):
    """A thread already tagged with one subject was asked to take another; nothing changed."""

    @classmethod
    def of(cls, thread_id: str, held: str, subject: str) -> ThreadTaggedError:
        return cls(
            f"thread {thread_id!r} holds the data of subject {held!r}; a thread has one "
            f"subject, so it cannot take {subject!r}: use a new thread for that subject"
        )


class DatabaseKeyStore:
    """Subject keys in the store's own database, wrapped under the master key."""

    def __init__(self, tables: Tables, master: bytes | None = None) -> None:
        self._tables = tables
        self._master = master

    def master(self) -> bytes:
        if self._master is None:
            self._master = load_master_key()
        return self._master

    async def create(self, subject: str) -> bytes:
        found = (await self.get({subject})).get(subject)
        if found is None:
            await self._tables.put_key(subject, wrap_key(self.master(), subject, new_key()),
                                       time.time())  # fmt: skip
            found = (await self.get({subject}))[subject]  # the winner's, when two raced
        if isinstance(found, Erasure):
            raise SubjectErasedError(found)
        return found

    async def get(self, subjects: set[str]) -> dict[str, SubjectKey]:
        out: dict[str, SubjectKey] = {}
        for subject, wrapped, erased_at, by, reason in await self._tables.get_keys(subjects):
            if wrapped is None:
                out[subject] = Erasure(subject, float(erased_at), str(by), str(reason))
            else:
                out[subject] = unwrap_key(self.master(), subject, bytes(wrapped))
        return out

    async def destroy(self, erasure: Erasure) -> bool:
        found = await self._tables.get_keys({erasure.subject})
        if found and found[0][1] is None:
            return False
        await self._tables.erase(erasure)
        return True


class Keyring:
    """A store's view of subject keys: the key store, with keys and thread tags cached."""

    def __init__(self, tables: Tables, keys: KeyStore | None = None) -> None:
        self.tables = tables
        self._erasures = -1
        self.keys: KeyStore = keys if keys is not None else DatabaseKeyStore(tables)
        self._tags: dict[str, str | None] = {}
        self._cache: dict[str, SubjectKey] = {}
        self._sealers: dict[str, Sealer] = {}

    async def subject(self, thread_id: str) -> str | None:
        """The subject the thread is tagged with, or None."""
        if thread_id not in self._tags:
            self._tags[thread_id] = await self.tables.get_tag(thread_id)
        return self._tags[thread_id]

    def seen(self, thread_id: str, subject: str | None) -> None:
        """Note the thread's tag as a claim on it just read it: its records read it no more."""
        self._tags[thread_id] = subject

    async def tag(self, thread_id: str, subject: str) -> None:
        self._tags.pop(thread_id, None)
        held = await self.subject(thread_id)
        if held is None:
            held = await self.tables.put_tag(thread_id, subject)
            self._tags[thread_id] = held
        if held != subject:
            raise ThreadTaggedError.of(thread_id, held, subject)

    async def sealer(self, thread_id: str) -> Sealer | None:
        """What seals the thread's personal fields, or None for an untagged thread."""
        subject = await self.subject(thread_id)
        return None if subject is None else await self.sealer_of(subject)

    async def sealer_of(self, subject: str) -> Sealer:
        """What seals a record of `subject`'s data (its key made on first use)."""
        key = self._cache.get(subject)
        if not isinstance(key, bytes):
            key = self._cache[subject] = await self.keys.create(subject)
        sealer = self._sealers.get(subject)
        if sealer is None or sealer.key != key:
            sealer = self._sealers[subject] = Sealer(subject, key)
        return sealer

    def plain(self, thread_id: str, encoded: list[Encoded]) -> list[Encoded] | None:
        """`encoded` when none of it needs sealing, known without a query: no personal
        kind, or a thread known untagged whose records name no subject of their own;
        None when `seal` must decide."""
        if all(e.kind not in PERSONAL for e in encoded):  # a prune's record needs no key
            return encoded
        if self._tags.get(thread_id, "") is not None:
            return None
        if any(getattr(e.event, "subject", None) is not None for e in encoded):
            return None
        return encoded

    async def seal(self, thread_id: str, encoded: list[Encoded]) -> list[Encoded]:
        """`encoded`, each record of a personal kind given what seals it: its thread's
        subject, or the subject the record names itself (a runtime's trigger, on the
        runtime's own thread, which has none)."""
        if self.plain(thread_id, encoded) is not None:
            return encoded
        sealer = await self.sealer(thread_id)
        out = []
        for e in encoded:
            own = getattr(e.event, "subject", None) if e.kind in PERSONAL else None
            seal = sealer if own is None else await self.sealer_of(own)
            out.append(e._replace(sealer=seal) if e.kind in PERSONAL and seal else e)
        return out

    async def keys_for(self, rows: Sequence[Any]) -> Keys | None:
        """The keys (or erasures) of the subjects whose sealed payloads are among `rows`."""
        subjects: set[str] = set()
        for row in rows:
            if is_sealed(row.payload):
                with contextlib.suppress(CorruptRecordError):  # the read names it, in order
                    subjects.add(subject_of(row.thread_id, row.seq, row.payload))
        return await self.keys_of(subjects) if subjects else None

    async def keys_of(self, subjects: set[str]) -> Keys:
        """The keys (or erasures) of `subjects`, cached until the next erasure."""
        erasures = await self.tables.store.last_seq(ERASURE_THREAD)
        if erasures != self._erasures:  # an erasure since: drop every key cached before it
            self._cache.clear()
            self._erasures = erasures
        missing = subjects - self._cache.keys()
        if missing:
            self._cache.update(await self.keys.get(missing))
        return self._cache

    async def destroy(self, erasure: Erasure) -> Erasure:
        """Destroy the subject's key (and its threads' snapshots); the erasure in force."""
        self._cache.pop(erasure.subject, None)
        self._sealers.pop(erasure.subject, None)
        await self.keys.destroy(erasure)
        if isinstance(self.keys, DatabaseKeyStore):
            stored = (await self.keys.get({erasure.subject})).get(erasure.subject)
        else:
            await self.tables.erase(erasure)  # the snapshots still go
            stored = None
        self._cache.pop(erasure.subject, None)
        return stored if isinstance(stored, Erasure) else erasure

    def forget(self) -> None:
        """Drop every cached key and tag (another process may have erased or tagged)."""
        self._cache.clear()
        self._tags.clear()


def personal(kind: str) -> bool:
    """Whether records of `kind` carry personal fields to seal."""
    return kind in PERSONAL


_RINGS: weakref.WeakKeyDictionary[Any, Keyring] = weakref.WeakKeyDictionary()


def keyring(store: Any) -> Keyring:
    """The store's keyring (made on first use); a store wrapping another (`inner`, as the
    testing toolkit's `FaultyStore` does) shares the inner one's."""
    try:  # a key is its own unwrapped store: found without unwrapping
        ring = _RINGS.get(store)
    except TypeError:  # a wrapper that takes no weak reference
        ring = None
    if ring is not None:
        return ring
    store = _unwrapped(store)
    ring = _RINGS.get(store)
    if ring is None:
        ring = _RINGS[store] = Keyring(tables_of(store))
    return ring


def use_key_store(store: Any, keys: KeyStore) -> None:
    """Keep the store's subject keys in `keys` (a KMS) instead of its own database; thread
    tags and erasures' snapshot clean-up stay in the database."""
    store = _unwrapped(store)
    _RINGS[store] = Keyring(tables_of(store), keys)


def _unwrapped(store: Any) -> Any:
    from agentlog.events.store import BaseEventStore

    while not isinstance(store, BaseEventStore) and getattr(store, "inner", None) is not None:
        store = store.inner
    return store


async def pruned_floor(store: Any, thread_id: str) -> tuple[int, bytes] | None:
    """The seq and chain hash of the last record pruned from `thread_id`, or None."""
    try:
        tables = keyring(store).tables
    except StoreError:  # a store class of one's own: it never prunes
        return None
    return await tables.get_floor(thread_id)


async def prune_rows(store: Any, thread_id: str, through_seq: int, last_hash: bytes) -> int:
    """Delete the thread's records up to `through_seq` (whose chain hash is `last_hash`) and
    its snapshots but the one at that seq, in one transaction; how many records went."""
    return await keyring(store).tables.prune(thread_id, through_seq, last_hash)


async def open_keys(store: Any, rows: Sequence[Any]) -> Keys | None:
    """The keys that open the sealed payloads among `rows` read from `store` (None when none
    is sealed): what a reader of raw rows hands `decode_row`, as `read` does itself."""
    return await keyring(store).keys_for(rows)


async def tag_thread(store: Any, thread_id: str, subject: str) -> None:
    """Tag `thread_id` with `subject`: from now on its personal fields are sealed under the
    subject's key. A thread takes one subject (`ThreadTaggedError` for another); an erased
    subject takes nothing more (`SubjectErasedError`); both refused before anything is written."""
    check_subject(subject)
    ring = keyring(store)
    found = (await ring.keys.get({subject})).get(subject)
    if isinstance(found, Erasure):
        raise SubjectErasedError(found)
    await ring.tag(thread_id, subject)


async def subject_of_thread(store: Any, thread_id: str) -> str | None:
    """The subject `thread_id` is tagged with, or None."""
    return await keyring(store).subject(thread_id)


async def threads_of_subject(store: Any, subject: str) -> list[str]:
    """The threads tagged with `subject`."""
    return await keyring(store).tables.tagged(check_subject(subject))


async def vacuum(store: Any) -> None:
    """Rewrite the database without the pages erasures and prunes freed, so no byte of what
    they removed is left in it: SQLite's VACUUM, then its WAL checkpointed and truncated to
    nothing; PostgreSQL's VACUUM FULL of the tables they remove from. Nothing for memory."""
    await tables_of(store).vacuum()


async def rotate_master_key(
    store: Any, new_master: bytes, *, old_master: bytes | None = None
) -> int:
    """Re-wrap every subject key of the store under `new_master`, in one transaction: the
    database afterwards opens with the old master key or, once it committed, with the new one
    only, never half of each. `old_master` defaults to the configured one (`load_master_key`).
    A key already under `new_master` is left as it is, so rerunning a rotation whose outcome
    is unknown is safe. Stop the writers first and restart them with the new key: a process
    still holding the old one would wrap a new subject's key under it. How many keys changed."""
    if not isinstance(new_master, bytes) or len(new_master) != KEY_BYTES:
        raise InvalidArgumentError(
            "a new master key is 32 random bytes: make one with "
            "base64.urlsafe_b64encode(os.urandom(32)) and pass the decoded bytes"
        )
    ring = keyring(store)
    if not isinstance(ring.keys, DatabaseKeyStore):
        raise StoreError(
            f"the subject keys of this store live in {type(ring.keys).__name__}, not in its "
            "database: rotate the key wrapping them there"
        )
    old = ring.keys.master() if old_master is None else old_master
    if old == new_master:
        raise InvalidArgumentError("the new master key is the one in use: make a new one")

    def rewrap(subject: str, wrapped: bytes) -> bytes | None:
        try:
            key = unwrap_key(old, subject, wrapped)
        except SealingError:
            unwrap_key(new_master, subject, wrapped)  # neither opens it: the old key is wrong
            return None  # rotated already
        return wrap_key(new_master, subject, key)

    changed = await ring.tables.rewrap(rewrap)
    ring.keys._master = new_master
    return changed
