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

import sqlite3
import sys
import time
import weakref
from collections.abc import Sequence
from typing import Any

from agentlog.events.errors import InvalidArgumentError, StoreError
from agentlog.events.sealing import (
    PERSONAL,
    Erasure,
    Keys,
    KeyStore,
    Sealer,
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


class _Tables:
    """One backend's two tables: rows in, rows out (`wrapped` None once erased)."""

    store: Any

    async def get_keys(self, subjects: set[str]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    async def put_key(self, subject: str, wrapped: bytes, now: float) -> None:
        """Insert unless the subject has a row already."""
        raise NotImplementedError

    async def erase(self, erasure: Erasure) -> None:
        """Null the key, keep the erasure, and drop the snapshots of the subject's threads,
        in one transaction."""
        raise NotImplementedError

    async def get_tag(self, thread_id: str) -> str | None:
        raise NotImplementedError

    async def put_tag(self, thread_id: str, subject: str) -> str:
        """Tag the thread unless tagged; the subject it carries after."""
        raise NotImplementedError

    async def tagged(self, subject: str) -> list[str]:
        raise NotImplementedError

    async def vacuum(self) -> None:
        return None

    async def get_floor(self, thread_id: str) -> tuple[int, bytes] | None:
        return None

    async def prune(self, thread_id: str, through_seq: int, last_hash: bytes) -> int:
        """In one transaction: remember the floor, delete the thread's records up to it and
        every snapshot but the one at it; how many records went."""
        raise StoreError(
            f"{type(self.store).__name__} cannot prune: retention needs a SQLite or PostgreSQL "
            "store (a memory store is gone with its process anyway)"
        )


class DatabaseKeyStore:
    """Subject keys in the store's own database, wrapped under the master key."""

    def __init__(self, tables: _Tables, master: bytes | None = None) -> None:
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

    def __init__(self, tables: _Tables, keys: KeyStore | None = None) -> None:
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

    async def tag(self, thread_id: str, subject: str) -> None:
        self._tags.pop(thread_id, None)
        held = await self.subject(thread_id)
        if held is None:
            held = await self.tables.put_tag(thread_id, subject)
            self._tags[thread_id] = held
        if held != subject:
            raise ThreadTaggedError(
                f"thread {thread_id!r} holds the data of subject {held!r}; a thread has one "
                f"subject, so it cannot take {subject!r}: use a new thread for that subject"
            )

    async def sealer(self, thread_id: str) -> Sealer | None:
        """What seals the thread's personal fields, or None for an untagged thread."""
        subject = await self.subject(thread_id)
        if subject is None:
            return None
        key = self._cache.get(subject)
        if not isinstance(key, bytes):
            key = self._cache[subject] = await self.keys.create(subject)
        sealer = self._sealers.get(subject)
        if sealer is None or sealer.key != key:
            sealer = self._sealers[subject] = Sealer(subject, key)
        return sealer

    async def keys_for(self, rows: Sequence[Any]) -> Keys | None:
        """The keys (or erasures) of the subjects whose sealed payloads are among `rows`."""
        subjects = {
            subject_of(row.thread_id, row.seq, row.payload)
            for row in rows
            if is_sealed(row.payload)
        }
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
    """The store's keyring (made on first use)."""
    ring = _RINGS.get(store)
    if ring is None:
        ring = _RINGS[store] = Keyring(_tables_of(store))
    return ring


def use_key_store(store: Any, keys: KeyStore) -> None:
    """Keep the store's subject keys in `keys` (a KMS) instead of its own database; thread
    tags and erasures' snapshot clean-up stay in the database."""
    _RINGS[store] = Keyring(_tables_of(store), keys)


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
    await _tables_of(store).vacuum()


def _tables_of(store: Any) -> _Tables:
    from agentlog.events.stores.memory import MemoryEventStore
    from agentlog.events.stores.sqlite import SQLiteEventStore

    if isinstance(store, SQLiteEventStore):
        return _SQLite(store)
    if isinstance(store, MemoryEventStore):
        return _Memory(store)
    postgres = sys.modules.get("agentlog.events.stores.postgres")
    if postgres is not None and isinstance(store, postgres.PostgresEventStore):
        return _Postgres(store)
    raise StoreError(
        f"{type(store).__name__} keeps no subject keys: use a SQLite, PostgreSQL or memory store"
    )


# ---- memory ------------------------------------------------------------------------------------


class _Memory(_Tables):
    def __init__(self, store: Any) -> None:
        self.store = store
        self.keys: dict[str, tuple[Any, ...]] = {}
        self.tags: dict[str, str] = {}

    async def get_keys(self, subjects: set[str]) -> list[tuple[Any, ...]]:
        return [self.keys[s] for s in sorted(subjects) if s in self.keys]

    async def put_key(self, subject: str, wrapped: bytes, now: float) -> None:
        self.keys.setdefault(subject, (subject, wrapped, None, None, None))

    async def erase(self, erasure: Erasure) -> None:
        e = erasure
        self.keys[e.subject] = (e.subject, None, e.at, e.by, e.reason)
        for thread_id in await self.tagged(e.subject):
            self.store._snapshots.pop(thread_id, None)

    async def get_tag(self, thread_id: str) -> str | None:
        return self.tags.get(thread_id)

    async def put_tag(self, thread_id: str, subject: str) -> str:
        return self.tags.setdefault(thread_id, subject)

    async def tagged(self, subject: str) -> list[str]:
        return sorted(t for t, s in self.tags.items() if s == subject)


# ---- SQLite: tables of the file, written on the writer's thread ---------------------------------

_SQLITE_TABLES = (
    "CREATE TABLE IF NOT EXISTS pruned_floors (thread_id TEXT PRIMARY KEY, "
    "through_seq INTEGER NOT NULL, last_hash BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS subject_keys (subject TEXT PRIMARY KEY, wrapped BLOB, "
    "created_at REAL NOT NULL, erased_at REAL, erased_by TEXT, reason TEXT)",
    "CREATE TABLE IF NOT EXISTS subject_threads (thread_id TEXT PRIMARY KEY, "
    "subject TEXT NOT NULL)",
)
_KEY_COLUMNS = "subject, wrapped, erased_at, erased_by, reason"


def _in_transaction(conn: sqlite3.Connection, statements: list[tuple[str, tuple[Any, ...]]]) -> Any:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table in _SQLITE_TABLES:
            conn.execute(table)
        last = None
        for sql, args in statements:
            last = conn.execute(sql, args).fetchall()
        conn.execute("COMMIT")
        return last
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _select(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    try:
        return [tuple(row) for row in conn.execute(sql, args).fetchall()]
    except sqlite3.OperationalError as exc:  # a file written before subjects existed
        if "no such table" in str(exc):
            return []
        raise


def _vacuum(conn: sqlite3.Connection) -> None:
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


class _SQLite(_Tables):
    def __init__(self, store: Any) -> None:
        self.store = store

    async def vacuum(self) -> None:
        self.store._check_open()
        await self.store._write(_vacuum)

    async def _read(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        self.store._check_open()
        rows: list[tuple[Any, ...]] = await self.store._read(_select, sql, args)
        return rows

    async def _write(self, *statements: tuple[str, tuple[Any, ...]]) -> Any:
        self.store._check_open()
        return await self.store._write(_in_transaction, list(statements))

    async def get_keys(self, subjects: set[str]) -> list[tuple[Any, ...]]:
        marks = ", ".join("?" * len(subjects))
        return await self._read(
            f"SELECT {_KEY_COLUMNS} FROM subject_keys WHERE subject IN ({marks})", *subjects
        )

    async def put_key(self, subject: str, wrapped: bytes, now: float) -> None:
        await self._write((
            "INSERT INTO subject_keys (subject, wrapped, created_at) VALUES (?, ?, ?) "
            "ON CONFLICT (subject) DO NOTHING", (subject, wrapped, now),
        ))  # fmt: skip

    async def erase(self, erasure: Erasure) -> None:
        e = erasure
        await self._write(
            ("INSERT INTO subject_keys (subject, created_at) VALUES (?, ?) "
             "ON CONFLICT (subject) DO NOTHING", (e.subject, e.at)),
            ("UPDATE subject_keys SET wrapped = NULL, erased_at = ?, erased_by = ?, reason = ? "
             "WHERE subject = ? AND erased_at IS NULL", (e.at, e.by, e.reason, e.subject)),
            ("DELETE FROM snapshots WHERE thread_id IN "
             "(SELECT thread_id FROM subject_threads WHERE subject = ?) AND NOT EXISTS "
             "(SELECT 1 FROM pruned_floors f WHERE f.thread_id = snapshots.thread_id "
             "AND f.through_seq = snapshots.seq)", (e.subject,)),
        )  # fmt: skip

    async def get_floor(self, thread_id: str) -> tuple[int, bytes] | None:
        sql = "SELECT through_seq, last_hash FROM pruned_floors WHERE thread_id = ?"
        rows = await self._read(sql, thread_id)
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else None

    async def prune(self, thread_id: str, through_seq: int, last_hash: bytes) -> int:
        rows = await self._write(
            ("INSERT INTO pruned_floors (thread_id, through_seq, last_hash) VALUES (?, ?, ?) "
             "ON CONFLICT (thread_id) DO UPDATE SET through_seq = excluded.through_seq, "
             "last_hash = excluded.last_hash WHERE excluded.through_seq > through_seq",
             (thread_id, through_seq, last_hash)),
            ("DELETE FROM snapshots WHERE thread_id = ? AND seq <> ?", (thread_id, through_seq)),
            ("DELETE FROM events WHERE thread_id = ? AND seq <= ?", (thread_id, through_seq)),
            ("SELECT changes()", ()),
        )  # fmt: skip
        return int(rows[0][0])

    async def get_tag(self, thread_id: str) -> str | None:
        rows = await self._read(
            "SELECT subject FROM subject_threads WHERE thread_id = ?", thread_id
        )
        return str(rows[0][0]) if rows else None

    async def put_tag(self, thread_id: str, subject: str) -> str:
        rows = await self._write(
            ("INSERT INTO subject_threads (thread_id, subject) VALUES (?, ?) "
             "ON CONFLICT (thread_id) DO NOTHING", (thread_id, subject)),
            ("SELECT subject FROM subject_threads WHERE thread_id = ?", (thread_id,)),
        )  # fmt: skip
        return str(rows[0][0])

    async def tagged(self, subject: str) -> list[str]:
        sql = "SELECT thread_id FROM subject_threads WHERE subject = ? ORDER BY thread_id"
        return [str(row[0]) for row in await self._read(sql, subject)]


# ---- PostgreSQL: tables of the schema, made on first use -----------------------------------------


class _Postgres(_Tables):
    def __init__(self, store: Any) -> None:
        self.store = store
        s = f'"{store.schema}"'
        self.keys, self.threads, self.snapshots = (
            f"{s}.subject_keys", f"{s}.subject_threads", f"{s}.snapshots",
        )  # fmt: skip
        self.made = False
        self.floors, self.events = f"{s}.pruned_floors", f"{s}.events"

    async def vacuum(self) -> None:
        self.store._check_writable("vacuum")
        for table in (self.snapshots, self.keys, f'"{self.store.schema}".events'):
            await self.store._query("execute", f"VACUUM FULL {table}")

    async def _query(self, method: str, sql: str, *args: Any) -> Any:
        self.store._check_open()
        if not self.made:
            for statement in (
                f"CREATE TABLE IF NOT EXISTS {self.floors} (thread_id text PRIMARY KEY, "
                "through_seq bigint NOT NULL, last_hash bytea NOT NULL)",
                f"CREATE TABLE IF NOT EXISTS {self.keys} (subject text PRIMARY KEY, wrapped "
                "bytea, created_at double precision NOT NULL, erased_at double precision, "
                "erased_by text, reason text)",
                f"CREATE TABLE IF NOT EXISTS {self.threads} (thread_id text PRIMARY KEY, "
                "subject text NOT NULL)",
            ):
                try:
                    await self.store._query("execute", statement)
                except StoreError:  # two sessions made it at once: the other's stands
                    await self.store._query("execute", statement)
            self.made = True
        return await self.store._query(method, sql, *args)

    async def get_keys(self, subjects: set[str]) -> list[tuple[Any, ...]]:
        rows = await self._query(
            "fetch", f"SELECT {_KEY_COLUMNS} FROM {self.keys} WHERE subject = ANY($1::text[])",
            sorted(subjects),
        )  # fmt: skip
        return [tuple(row) for row in rows]

    async def put_key(self, subject: str, wrapped: bytes, now: float) -> None:
        self.store._check_writable("store a subject key")
        await self._query(
            "execute", f"INSERT INTO {self.keys} (subject, wrapped, created_at) "
            "VALUES ($1, $2, $3) ON CONFLICT (subject) DO NOTHING", subject, wrapped, now,
        )  # fmt: skip

    async def erase(self, erasure: Erasure) -> None:
        """One statement, so one transaction: the key, its erasure, the snapshots."""
        self.store._check_writable("erase a subject")
        e = erasure
        await self._query(
            "execute",
            f"WITH k AS (INSERT INTO {self.keys} AS k (subject, created_at, erased_at, erased_by,"
            " reason) VALUES ($1, $2, $2, $3, $4) ON CONFLICT (subject) DO UPDATE SET wrapped = "
            "NULL, erased_at = excluded.erased_at, erased_by = excluded.erased_by, reason = "
            "excluded.reason WHERE k.erased_at IS NULL RETURNING subject) "
            f"DELETE FROM {self.snapshots} s WHERE thread_id IN "
            f"(SELECT thread_id FROM {self.threads} WHERE subject = $1) AND NOT EXISTS "
            f"(SELECT 1 FROM {self.floors} f WHERE f.thread_id = s.thread_id "
            "AND f.through_seq = s.seq)",
            e.subject, e.at, e.by, e.reason,
        )  # fmt: skip

    async def get_floor(self, thread_id: str) -> tuple[int, bytes] | None:
        sql = f"SELECT through_seq, last_hash FROM {self.floors} WHERE thread_id = $1"
        row = await self._query("fetchrow", sql, thread_id)
        return None if row is None else (int(row[0]), bytes(row[1]))

    async def prune(self, thread_id: str, through_seq: int, last_hash: bytes) -> int:
        """One statement, so one transaction: the floor, the records, the snapshots."""
        self.store._check_writable("prune")
        removed = await self._query(
            "fetchval",
            f"WITH f AS (INSERT INTO {self.floors} AS f (thread_id, through_seq, last_hash) "
            "VALUES ($1, $2, $3) ON CONFLICT (thread_id) DO UPDATE SET through_seq = "
            "excluded.through_seq, last_hash = excluded.last_hash WHERE excluded.through_seq "
            "> f.through_seq RETURNING 1), "
            f"s AS (DELETE FROM {self.snapshots} WHERE thread_id = $1 AND seq <> $2 RETURNING 1), "
            f"e AS (DELETE FROM {self.events} WHERE thread_id = $1 AND seq <= $2 RETURNING 1) "
            "SELECT count(*) FROM e",
            thread_id, through_seq, last_hash,
        )  # fmt: skip
        return int(removed)

    async def get_tag(self, thread_id: str) -> str | None:
        sql = f"SELECT subject FROM {self.threads} WHERE thread_id = $1"
        found = await self._query("fetchval", sql, thread_id)
        return None if found is None else str(found)

    async def put_tag(self, thread_id: str, subject: str) -> str:
        self.store._check_writable("tag a thread")
        await self._query(
            "execute", f"INSERT INTO {self.threads} (thread_id, subject) VALUES ($1, $2) "
            "ON CONFLICT (thread_id) DO NOTHING", thread_id, subject,
        )  # fmt: skip
        return str(await self.get_tag(thread_id))

    async def tagged(self, subject: str) -> list[str]:
        sql = f"SELECT thread_id FROM {self.threads} WHERE subject = $1 ORDER BY thread_id"
        return [str(row[0]) for row in await self._query("fetch", sql, subject)]
