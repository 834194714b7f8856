"""`SQLiteEventStore`: the embedded default, on aiosqlite.

One writer connection in WAL mode. Every append is a single hop to the writer thread that
runs BEGIN IMMEDIATE ... INSERTs ... COMMIT there; appends that arrive while a commit is in
flight are group-committed together in the next one, each still all-or-nothing. A second
connection serves reads, so readers never queue behind writers.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, NamedTuple, TypeVar

import aiosqlite

from .codec import GENESIS_HASH, Encoded, Row, chain_rows, decode_state, encode_state
from .errors import (
    ConcurrencyError,
    CorruptDatabaseError,
    NotAnAgentlogDatabaseError,
    SchemaVersionError,
    StoreClosedError,
    StoreUnavailableError,
)
from .kinds import Event
from .record import EventRecord, Snapshot
from .store import BaseEventStore

APPLICATION_ID = 0x41474C47  # "AGLG" in the SQLite header marks an agentlog database.
SCHEMA_VERSION = 1
SQLITE_MAGIC = b"SQLite format 3\x00"
MAX_BATCH = 512

_SCHEMA = f"""
CREATE TABLE events (
    position  INTEGER PRIMARY KEY,
    thread_id TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    run_id    TEXT,
    actor     TEXT,
    at        REAL    NOT NULL,
    kind      TEXT    NOT NULL,
    version   INTEGER NOT NULL,
    payload   BLOB    NOT NULL,
    hash      BLOB    NOT NULL,
    UNIQUE (thread_id, seq)
);
CREATE TABLE threads (
    thread_id  TEXT PRIMARY KEY,
    last_seq   INTEGER NOT NULL,
    last_hash  BLOB    NOT NULL,
    created_at REAL    NOT NULL,
    updated_at REAL    NOT NULL
);
CREATE INDEX events_steps ON events (thread_id, seq) WHERE kind = 'step_advanced';
CREATE TABLE snapshots (
    thread_id  TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    state_type TEXT    NOT NULL,
    at         REAL    NOT NULL,
    state      BLOB    NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
"""

_ROW_COLUMNS = "thread_id, seq, run_id, actor, at, kind, version, payload, hash, position"
_INSERT = (
    "INSERT INTO events (thread_id, seq, run_id, actor, at, kind, version, payload, hash, "
    "position) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_HEAD = (
    "INSERT INTO threads (thread_id, last_seq, last_hash, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (thread_id) DO UPDATE SET "
    "last_seq = excluded.last_seq, last_hash = excluded.last_hash, "
    "updated_at = excluded.updated_at"
)

T = TypeVar("T")


class _Append(NamedTuple):
    thread_id: str
    events: Sequence[Event]
    encoded: Sequence[Encoded]
    expected_seq: int
    run_id: str | None
    actor: str | None
    at: float


def storage_error(path: str, exc: sqlite3.Error) -> Exception:
    """The typed error for a failure SQLite reported: damage, or a passing condition."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or (
        code is None and type(exc) is sqlite3.DatabaseError
    ):
        return CorruptDatabaseError(path, str(exc))
    return StoreUnavailableError(
        f"{path}: SQLite could not complete the operation ({exc}); nothing was written: "
        "retry once the file is free, writable and the disk has space"
    )


def _check_file(path: str) -> None:
    """Refuse, without touching it, a file that is not SQLite at all."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise NotAnAgentlogDatabaseError(path, "it is a directory") from None
    if head and head != SQLITE_MAGIC:
        raise NotAnAgentlogDatabaseError(path, "it is not a SQLite file")


def _identify(conn: sqlite3.Connection, path: str) -> tuple[int, int, list[str]]:
    """The file's application id, schema version and table names."""
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    except sqlite3.DatabaseError as exc:
        raise NotAnAgentlogDatabaseError(path, f"SQLite cannot read it: {exc}") from exc
    return app_id, version, tables


def _prepare(conn: sqlite3.Connection, path: str) -> None:
    """Check the file is ours (or empty) before anything writes to it; then set it up.

    An empty file gets the schema under the write lock, so two processes creating the same
    database at once agree on who did it.
    """
    conn.execute("BEGIN")  # one consistent read of the header and the tables
    try:
        app_id, version, tables = _identify(conn, path)
    finally:
        conn.execute("COMMIT")
    if app_id == 0 and not tables:
        conn.execute("BEGIN IMMEDIATE")
        try:
            app_id, version, tables = _identify(conn, path)
            if app_id == 0 and not tables:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
        shown = ", ".join(sorted(tables)[:5]) or "none"
        raise NotAnAgentlogDatabaseError(
            path, f"a SQLite database of another program: tables {shown}"
        )
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} has schema version {version}, newer than this agentlog knows "
            f"({SCHEMA_VERSION}); it was left untouched: upgrade agentlog to open it"
        )
    conn.execute("PRAGMA journal_mode=WAL")


class SQLiteEventStore(BaseEventStore):
    """A durable event store in one SQLite file (WAL).

    `synchronous="NORMAL"` (the default) survives any crash of the process; "FULL" also
    survives a power loss, at the price of an fsync per commit.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        busy_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock=clock)
        self.path = os.fspath(path)
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._open_lock = asyncio.Lock()
        self._pending: list[tuple[_Append, asyncio.Future[list[EventRecord]]]] = []
        self._in_flight = False
        self._drained = asyncio.Event()
        self._drained.set()
        self._closing = False

    # ---- connections ---------------------------------------------------------------------

    async def open(self) -> SQLiteEventStore:
        """Open (creating when new) and check the database; later calls are free."""
        self._check_open()
        if self._reader is not None:
            return self
        async with self._open_lock:
            if self._closing:
                raise StoreClosedError(f"{self.path} was closed while opening")
            if self._reader is None:
                _check_file(self.path)
                writer = await self._connect()
                try:
                    await self._on(writer, _prepare, self.path)
                    reader = await self._connect()
                except BaseException:
                    await writer.close()
                    raise
                self._writer, self._reader = writer, reader
        return self

    async def _connect(self) -> aiosqlite.Connection:
        try:
            conn = await aiosqlite.connect(
                self.path, isolation_level=None, timeout=self._busy_timeout
            )
        except sqlite3.Error as exc:
            raise NotAnAgentlogDatabaseError(self.path, f"SQLite cannot open it: {exc}") from exc
        try:
            await self._on(conn, _configure, int(self._busy_timeout * 1000), self._synchronous)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _on(self, conn: aiosqlite.Connection, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(sqlite3_connection, *args)` on the connection's thread: one hop."""
        try:
            return await conn._execute(fn, conn._conn, *args)  # type: ignore[no-any-return,no-untyped-call]
        except sqlite3.Error as exc:
            raise storage_error(self.path, exc) from exc

    async def __aenter__(self) -> SQLiteEventStore:
        return await self.open()

    async def close(self) -> None:
        """Commit what is pending, then close both connections."""
        if self._closed:
            return
        self._closing = True
        async with self._open_lock:  # an open under way finishes first, then sees _closing
            await self._drained.wait()
        for conn in (self._writer, self._reader):
            if conn is not None:
                await conn.close()
        self._writer = self._reader = None
        await super().close()

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        await self.open()
        assert self._reader is not None
        return await self._on(self._reader, fn, *args)

    # ---- writes: pipelined group commit --------------------------------------------------

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
        if self._closing:
            raise StoreClosedError(f"{self.path} is closing: open a new store to append")
        await self.open()
        if self._closing:
            raise StoreClosedError(f"{self.path} is closing: open a new store to append")
        future: asyncio.Future[list[EventRecord]] = asyncio.get_running_loop().create_future()
        request = _Append(thread_id, events, encoded, expected_seq, run_id, actor, at)
        self._pending.append((request, future))
        self._submit_next()
        return await future

    def _submit_next(self) -> None:
        """Hand the pending appends to the writer thread as one batch, unless one is in flight.

        While a batch commits, new appends queue up; they leave as the next batch the moment
        the writer is free, before the finished batch's callers are even woken, so the writer
        thread and the event loop work side by side.
        """
        if self._in_flight:
            return
        self._pending = [(req, fut) for req, fut in self._pending if not fut.done()]
        if not self._pending:
            self._drained.set()
            return
        writer = self._writer
        assert writer is not None
        batch = self._pending[:MAX_BATCH]
        del self._pending[:MAX_BATCH]
        self._in_flight = True
        self._drained.clear()
        job = partial(
            _run_batch,
            asyncio.get_running_loop(),
            self._batch_done,
            batch,
            writer._conn,
            [request for request, _ in batch],
        )
        # aiosqlite's worker thread takes (future, function) pairs; with no future, the job
        # reports back itself, which wakes the callers one loop iteration sooner.
        writer._tx.put_nowait((None, job))

    def _batch_done(
        self,
        batch: list[tuple[_Append, asyncio.Future[list[EventRecord]]]],
        outcome: list[Any] | BaseException,
    ) -> None:
        self._in_flight = False
        self._submit_next()
        if not self._in_flight:
            self._drained.set()
        if isinstance(outcome, BaseException):
            if isinstance(outcome, sqlite3.Error):
                outcome = storage_error(self.path, outcome)
            outcome = [outcome] * len(batch)
        for (request, future), result in zip(batch, outcome, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(self._records(result, request.encoded))

    # ---- reads ---------------------------------------------------------------------------

    async def _fetch(self, thread_id: str, from_seq: int, to_seq: int, limit: int) -> list[Row]:
        return await self._read(_fetch_thread, thread_id, from_seq, to_seq, limit)

    async def _fetch_all(self, from_position: int, limit: int) -> list[Row]:
        return await self._read(_fetch_positions, from_position, limit)

    async def _head(self, thread_id: str) -> tuple[int, bytes] | None:
        return await self._read(_fetch_head, thread_id)

    async def threads(self) -> list[str]:
        self._check_open()
        return await self._read(_fetch_threads)

    async def _seqs_of_kind(self, thread_id: str, kind: str) -> list[int]:
        return await self._read(_fetch_seqs_of_kind, thread_id, kind)

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        self._check_open()
        await self.open()
        assert self._writer is not None
        data = encode_state(snapshot.state)
        values = (snapshot.thread_id, snapshot.seq, snapshot.state_type, snapshot.at, data)
        await self._on(self._writer, _write_snapshot, values)

    async def load_snapshot(self, thread_id: str, max_seq: int | None = None) -> Snapshot | None:
        self._check_open()
        row = await self._read(_fetch_snapshot, thread_id, 2**62 if max_seq is None else max_seq)
        if row is None:
            return None
        seq, state_type, at, data = row
        return Snapshot(
            thread_id=thread_id,
            seq=seq,
            state=decode_state(thread_id, seq, data),
            state_type=state_type,
            at=at,
        )


# ---- functions that run on a connection's own thread ---------------------------------------


def _run_batch(
    loop: asyncio.AbstractEventLoop,
    report: Callable[[Any, list[Any] | BaseException], None],
    batch: Any,
    conn: sqlite3.Connection,
    requests: list[_Append],
) -> None:
    """Write a batch on the writer thread and report the outcome to the event loop."""
    outcome: list[Any] | BaseException
    try:
        outcome = _write_batch(conn, requests)
    except BaseException as exc:
        outcome = exc
    loop.call_soon_threadsafe(report, batch, outcome)


def _write_batch(conn: sqlite3.Connection, batch: list[_Append]) -> list[Any]:
    """One transaction for the whole batch; a request that fails writes none of its rows.

    Heads are read with one query and rows written with one `executemany`, so a batch
    costs a handful of statements however many appends it carries.
    """
    results: list[Any] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        position = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
        heads = _heads(conn, {req.thread_id for req in batch})
        rows_out: list[Row] = []
        touched: dict[str, float] = {}
        for req in batch:
            actual, prev = heads.get(req.thread_id, (0, GENESIS_HASH))
            if actual != req.expected_seq:
                results.append(ConcurrencyError(req.thread_id, req.expected_seq, actual))
                continue
            rows = chain_rows(
                req.thread_id, actual + 1, prev, req.encoded, req.run_id, req.actor, req.at,
                position + 1,
            )  # fmt: skip
            rows_out.extend(rows)
            heads[req.thread_id] = (rows[-1].seq, rows[-1].hash)
            touched[req.thread_id] = req.at
            position += len(rows)
            results.append(rows)
        if rows_out:
            conn.executemany(_INSERT, rows_out)
            conn.executemany(
                _UPSERT_HEAD, [(tid, *heads[tid], at, at) for tid, at in touched.items()]
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return results


def _heads(conn: sqlite3.Connection, thread_ids: set[str]) -> dict[str, tuple[int, bytes]]:
    ids = list(thread_ids)
    heads: dict[str, tuple[int, bytes]] = {}
    if len(ids) == 1:
        row = conn.execute(
            "SELECT last_seq, last_hash FROM threads WHERE thread_id = ?", ids
        ).fetchone()
        return heads if row is None else {ids[0]: (row[0], row[1])}
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        marks = ",".join("?" * len(part))
        for tid, seq, digest in conn.execute(
            f"SELECT thread_id, last_seq, last_hash FROM threads WHERE thread_id IN ({marks})",
            part,
        ):
            heads[tid] = (seq, digest)
    return heads


def _configure(conn: sqlite3.Connection, busy_ms: int, synchronous: str) -> None:
    conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
    conn.execute(f"PRAGMA synchronous = {synchronous}")


def _write_snapshot(conn: sqlite3.Connection, values: tuple[Any, ...]) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO snapshots (thread_id, seq, state_type, at, state) "
        "VALUES (?, ?, ?, ?, ?)",
        values,
    )


def _to_rows(raw: list[tuple[Any, ...]]) -> list[Row]:
    return [Row._make(r) for r in raw]


def _fetch_thread(
    conn: sqlite3.Connection, thread_id: str, from_seq: int, to_seq: int, limit: int
) -> list[Row]:
    raw = conn.execute(
        f"SELECT {_ROW_COLUMNS} FROM events WHERE thread_id = ? AND seq BETWEEN ? AND ? "
        "ORDER BY seq LIMIT ?",
        (thread_id, from_seq, to_seq, limit),
    ).fetchall()
    return _to_rows(raw)


def _fetch_positions(conn: sqlite3.Connection, from_position: int, limit: int) -> list[Row]:
    raw = conn.execute(
        f"SELECT {_ROW_COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?",
        (from_position, limit),
    ).fetchall()
    return _to_rows(raw)


def _fetch_head(conn: sqlite3.Connection, thread_id: str) -> tuple[int, bytes] | None:
    row = conn.execute(
        "SELECT last_seq, last_hash FROM threads WHERE thread_id = ?", (thread_id,)
    ).fetchone()
    return None if row is None else (row[0], row[1])


def _fetch_seqs_of_kind(conn: sqlite3.Connection, thread_id: str, kind: str) -> list[int]:
    # `kind` is one of KINDS (checked by the caller), so it can be a literal, which lets
    # SQLite use the partial index of step_advanced records.
    sql = f"SELECT seq FROM events WHERE thread_id = ? AND kind = '{kind}' ORDER BY seq"
    return [r[0] for r in conn.execute(sql, (thread_id,))]


def _fetch_threads(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT thread_id FROM threads ORDER BY rowid")]


def _fetch_snapshot(
    conn: sqlite3.Connection, thread_id: str, max_seq: int
) -> tuple[int, str, float, bytes] | None:
    row = conn.execute(
        "SELECT seq, state_type, at, state FROM snapshots WHERE thread_id = ? AND seq <= ? "
        "ORDER BY seq DESC LIMIT 1",
        (thread_id, max_seq),
    ).fetchone()
    return None if row is None else (row[0], row[1], row[2], row[3])
