"""Durable cursors: a named position in the log, kept in the store itself.

A process that reads the log and acts outside it (a relay to a message broker, a follower
that exports spans) remembers how far it got as a *cursor*: a name and the position of the
last record it finished with. `save_cursor` writes it in the same database as the log (the
SQLite file, the PostgreSQL schema, the memory store's process), so the position survives
the process and moves with the log when the log is copied; `load_cursor` reads it back (0
for a name never saved, which `follow(store, after=0)` reads from the start).

    position = await load_cursor(store, "to-redis")
    async for record in follow(store, after=position):
        ...  # act on the record, wait until the outside world confirmed it
        await save_cursor(store, "to-redis", record.position)

A cursor only moves forward: saving a position below the stored one raises
`CursorMovedBackError` and changes nothing, so two processes that share a name by mistake
cannot rewind each other (one of them learns of it). Saving the stored position again is
allowed and changes nothing but `updated_at`. A position past the end of the log is refused
with `InvalidArgumentError`: nothing can have been done with a record not yet written.

Cursor names are short and plain (letters, digits and `._:-`, at most 128), since they are
shown by `agentlog relay status` and in errors. The table is `cursors(name, position,
updated_at)`: the SQLite store creates it when it opens a file (older files gain it), and
PostgreSQL's comes with schema version 2 (`agentlog db upgrade`).
"""

from __future__ import annotations

import re
import sqlite3
import sys
import time
import weakref
from dataclasses import dataclass
from typing import Any

from agentlog.events.errors import InvalidArgumentError, StoreError
from agentlog.events.store import EventStore
from agentlog.events.stores.memory import MemoryEventStore
from agentlog.events.stores.sqlite import SQLiteEventStore

__all__ = [
    "Cursor",
    "CursorMovedBackError",
    "CursorsUnsupportedError",
    "check_cursor_name",
    "list_cursors",
    "load_cursor",
    "save_cursor",
]

_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")


@dataclass(frozen=True)
class Cursor:
    """A saved cursor: its name, the position it holds and when it was last saved (epoch s)."""

    name: str
    position: int
    updated_at: float


class CursorMovedBackError(StoreError, ValueError):
    """A cursor was asked to move below the position it holds; nothing was written."""

    def __init__(self, name: str, stored: int, asked: int) -> None:
        super().__init__(
            f"cursor {name!r} holds position {stored}; saving {asked} would move it back, so "
            "nothing was written: another process may be using the same cursor name (give "
            "each reader its own), or load_cursor() again and go on from there"
        )
        self.name, self.stored, self.asked = name, stored, asked


class CursorsUnsupportedError(StoreError, TypeError):
    """The store keeps no cursors (a store class of one's own): use a SQLite, PostgreSQL or
    memory store."""


def check_cursor_name(name: object) -> str:
    """`name` when it is a valid cursor name, else `InvalidArgumentError` naming the rule."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"a cursor name is 1 to 128 letters, digits or '._:-', got {name!r}: "
            "name it after its reader, like 'to-redis' or 'otel.exporter'"
        )
    return name


async def load_cursor(store: EventStore, name: str) -> int:
    """The position saved under `name`, or 0 when none was ever saved."""
    check_cursor_name(name)
    found = await _backend(store).get(name)
    return 0 if found is None else found.position


async def save_cursor(store: EventStore, name: str, position: int) -> None:
    """Save `position` under `name`, durably, once every record up to it is done with.

    Refused, writing nothing: a position that is not an int >= 0 or lies past the end of the
    log (`InvalidArgumentError`), one below the stored position (`CursorMovedBackError`), a
    store opened read-only (`ReadOnlyStoreError`).
    """
    check_cursor_name(name)
    if type(position) is not int or position < 0:
        raise InvalidArgumentError(f"a cursor position is an int >= 0, got {position!r}")
    await _backend(store).put(name, position, float(getattr(store, "_clock", time.time)()))


async def list_cursors(store: EventStore) -> list[Cursor]:
    """Every cursor saved in `store`, by name."""
    return await _backend(store).all()


def _past_end(name: str, position: int, last: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"cursor {name!r} cannot move to position {position}: the log ends at {last}, so "
        "no reader can have finished with it; nothing was written"
    )


class _Backend:
    async def get(self, name: str) -> Cursor | None:
        raise NotImplementedError

    async def put(self, name: str, position: int, now: float) -> None:
        raise NotImplementedError

    async def all(self) -> list[Cursor]:
        raise NotImplementedError


def _backend(store: EventStore) -> _Backend:
    if isinstance(store, SQLiteEventStore):
        return _SQLite(store)
    if isinstance(store, MemoryEventStore):
        return _Memory(store)
    postgres = sys.modules.get("agentlog.events.stores.postgres")  # loaded if one exists
    if postgres is not None and isinstance(store, postgres.PostgresEventStore):
        return _Postgres(store)
    raise CursorsUnsupportedError(
        f"{type(store).__name__} keeps no cursors: use a SQLite, PostgreSQL or memory store"
    )


# ---- memory: a table per store object, gone with it ---------------------------------------

_MEMORY: weakref.WeakKeyDictionary[MemoryEventStore, dict[str, Cursor]] = (
    weakref.WeakKeyDictionary()
)


class _Memory(_Backend):
    def __init__(self, store: MemoryEventStore) -> None:
        self.store = store
        self.table = _MEMORY.setdefault(store, {})

    async def get(self, name: str) -> Cursor | None:
        return self.table.get(name)

    async def put(self, name: str, position: int, now: float) -> None:
        last = await self.store.last_position()
        if position > last:
            raise _past_end(name, position, last)
        held = self.table.get(name)
        if held is not None and position < held.position:
            raise CursorMovedBackError(name, held.position, position)
        self.table[name] = Cursor(name, position, now)

    async def all(self) -> list[Cursor]:
        return sorted(self.table.values(), key=lambda cursor: cursor.name)


# ---- SQLite: the file's own `cursors` table, written on the writer's thread ---------------


class _SQLite(_Backend):
    def __init__(self, store: SQLiteEventStore) -> None:
        self.store = store

    async def get(self, name: str) -> Cursor | None:
        self.store._check_open()
        rows = await self.store._read(_sqlite_select, name)
        return rows[0] if rows else None

    async def put(self, name: str, position: int, now: float) -> None:
        self.store._check_open()
        await self.store._write(_sqlite_put, name, position, now)

    async def all(self) -> list[Cursor]:
        self.store._check_open()
        return await self.store._read(_sqlite_select, None)


def _sqlite_select(conn: sqlite3.Connection, name: str | None) -> list[Cursor]:
    where, args = ("WHERE name = ?", (name,)) if name is not None else ("ORDER BY name", ())
    try:
        rows = conn.execute(f"SELECT name, position, updated_at FROM cursors {where}", args)
    except sqlite3.OperationalError:  # a read-only file written before cursors existed
        return []
    return [Cursor(str(n), int(p), float(u)) for n, p, u in rows.fetchall()]


def _sqlite_put(conn: sqlite3.Connection, name: str, position: int, now: float) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        last = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
        if position > last:
            raise _past_end(name, position, last)
        held = conn.execute("SELECT position FROM cursors WHERE name = ?", (name,)).fetchone()
        if held is not None and position < held[0]:
            raise CursorMovedBackError(name, held[0], position)
        conn.execute(
            "INSERT INTO cursors (name, position, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET position = excluded.position, "
            "updated_at = excluded.updated_at",
            (name, position, now),
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


# ---- PostgreSQL: the schema's `cursors` table (schema version 2) --------------------------


class _Postgres(_Backend):
    def __init__(self, store: Any) -> None:
        self.store = store
        self.table = f'"{store.schema}".cursors'
        self.counter = f'"{store.schema}".commit_counter'

    async def get(self, name: str) -> Cursor | None:
        self.store._check_open()
        row = await self.store._query(
            "fetchrow", f"SELECT name, position, updated_at FROM {self.table} WHERE name = $1", name
        )
        return None if row is None else Cursor(row[0], int(row[1]), float(row[2]))

    async def put(self, name: str, position: int, now: float) -> None:
        """One statement: moves the cursor only forward, and only within the log; when it
        did not move, a second read says why."""
        self.store._check_open()
        self.store._check_writable("save a cursor")
        moved = await self.store._query(
            "fetchval",
            f"INSERT INTO {self.table} AS c (name, position, updated_at) "
            f"SELECT $1, $2, $3 WHERE $2 <= (SELECT position FROM {self.counter}) "
            "ON CONFLICT (name) DO UPDATE SET position = excluded.position, "
            "updated_at = excluded.updated_at WHERE c.position <= excluded.position "
            "RETURNING position",
            name, position, now,
        )  # fmt: skip
        if moved is not None:
            return
        last = int(await self.store._query("fetchval", f"SELECT position FROM {self.counter}"))
        if position > last:
            raise _past_end(name, position, last)
        held = await self.get(name)
        raise CursorMovedBackError(name, -1 if held is None else held.position, position)

    async def all(self) -> list[Cursor]:
        self.store._check_open()
        rows = await self.store._query(
            "fetch", f"SELECT name, position, updated_at FROM {self.table} ORDER BY name"
        )
        return [Cursor(r[0], int(r[1]), float(r[2])) for r in rows]
