"""The tables subject keys, thread tags and prune floors live in, one class per backend.

The memory store keeps them in the process, SQLite in tables of the file made on first use
(on the writer's thread), PostgreSQL in tables of the schema made on first use (a read-only
store made before them reads none); a store class of one's own has none. `agentlog.events.
keystore` reads and writes through `tables_of(store)`.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from agentlog.events.errors import StoreError
from agentlog.events.sealing import Erasure

Rewrap = Callable[[str, bytes], bytes | None]
"""A key's new wrapping from its subject and old wrapping (None: leave it as it is)."""


class Tables:
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

    async def rewrap(self, rewrap: Rewrap) -> int:
        """Replace every live wrapped key by `rewrap(subject, wrapped)`, all or none (one
        transaction; an error from `rewrap` leaves every row as it was); how many changed."""
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


def tables_of(store: Any) -> Tables:
    from agentlog.events.stores.memory import MemoryEventStore
    from agentlog.events.stores.sqlite import SQLiteEventStore

    if isinstance(store, SQLiteEventStore):
        return _SQLite(store)
    if isinstance(store, MemoryEventStore):
        return _Memory(store)
    postgres = sys.modules.get("agentlog.events.stores.postgres")
    if postgres is not None and isinstance(store, postgres.PostgresEventStore):
        return _Postgres(store)
    return _Unsupported(store)


class _Unsupported(Tables):
    """A store class of one's own: no thread is tagged, nothing is pruned; tagging says so."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def get_keys(self, subjects: set[str]) -> list[tuple[Any, ...]]:
        return []

    async def get_tag(self, thread_id: str) -> str | None:
        return None

    async def tagged(self, subject: str) -> list[str]:
        return []

    def _refuse(self) -> StoreError:
        return StoreError(
            f"{type(self.store).__name__} keeps no subject keys: use a SQLite, PostgreSQL or "
            "memory store to tag threads with a data subject"
        )

    async def put_key(self, subject: str, wrapped: bytes, now: float) -> None:
        raise self._refuse()

    async def put_tag(self, thread_id: str, subject: str) -> str:
        raise self._refuse()

    async def erase(self, erasure: Erasure) -> None:
        raise self._refuse()


# ---- memory ------------------------------------------------------------------------------------


class _Memory(Tables):
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

    async def rewrap(self, rewrap: Rewrap) -> int:
        new = {s: rewrap(s, row[1]) for s, row in self.keys.items() if row[1] is not None}
        changed = {s: w for s, w in new.items() if w is not None}  # every one made first
        for subject, wrapped in changed.items():
            self.keys[subject] = (subject, wrapped, *self.keys[subject][2:])
        return len(changed)


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


def _atomically(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], Any]) -> Any:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table in _SQLITE_TABLES:
            conn.execute(table)
        result = body(conn)
        conn.execute("COMMIT")
        return result
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _in_transaction(conn: sqlite3.Connection, statements: list[tuple[str, tuple[Any, ...]]]) -> Any:
    def body(conn: sqlite3.Connection) -> Any:
        last = None
        for sql, args in statements:
            last = conn.execute(sql, args).fetchall()
        return last

    return _atomically(conn, body)


def _rewrap(conn: sqlite3.Connection, rewrap: Rewrap) -> int:
    def body(conn: sqlite3.Connection) -> int:
        rows = conn.execute(
            "SELECT subject, wrapped FROM subject_keys WHERE wrapped IS NOT NULL"
        ).fetchall()
        new = [(rewrap(str(s), bytes(w)), s) for s, w in rows]
        changed = [(w, s) for w, s in new if w is not None]
        conn.executemany("UPDATE subject_keys SET wrapped = ? WHERE subject = ?", changed)
        return len(changed)

    return int(_atomically(conn, body))


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


class _SQLite(Tables):
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

    async def rewrap(self, rewrap: Rewrap) -> int:
        self.store._check_open()
        return int(await self.store._write(_rewrap, rewrap))


# ---- PostgreSQL: tables of the schema, made on first use -----------------------------------------


class _Postgres(Tables):
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
        if self.store.readonly and not self.made:  # made by a writer, or nothing to read
            from agentlog.events.stores.postgres_schema import SchemaUpgradeRequiredError

            try:
                return await self.store._query(method, sql, *args)
            except SchemaUpgradeRequiredError:  # the table is missing: no subject, no prune
                return [] if method == "fetch" else None
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

    async def rewrap(self, rewrap: Rewrap) -> int:
        """One statement, so one transaction; each row changes only if it still holds the
        wrapping read, and a row changed meanwhile fails the whole statement."""
        self.store._check_writable("rotate the master key")
        sql = f"SELECT subject, wrapped FROM {self.keys} WHERE wrapped IS NOT NULL"
        rows = [(str(s), bytes(w)) for s, w in await self._query("fetch", sql)]
        new = [(s, w, rewrap(s, w)) for s, w in rows]
        changed = [(s, old, w) for s, old, w in new if w is not None]
        if not changed:
            return 0
        try:
            count = await self._query(
                "fetchval",
            f"WITH v AS (SELECT * FROM unnest($1::text[], $2::bytea[], $3::bytea[]) AS v(s, o, n)),"
            f" u AS (UPDATE {self.keys} k SET wrapped = v.n FROM v WHERE k.subject = v.s AND "
            "k.wrapped = v.o RETURNING 1), c AS (SELECT count(*) AS n FROM u) "
            "SELECT CASE WHEN n = cardinality($1::text[]) THEN n ELSE n / (n - n) END FROM c",
            [c[0] for c in changed], [c[1] for c in changed], [c[2] for c in changed],
            )  # fmt: skip
        except StoreError as exc:
            if "division by zero" not in str(exc):
                raise
            raise StoreError(
                "a subject key was made or erased while the master key was rotated, so no key "
                "was changed: run the rotation again"
            ) from exc
        return int(count)
