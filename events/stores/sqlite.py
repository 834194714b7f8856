"""`SQLiteEventStore`: the embedded default.

One writer connection in WAL mode, on a daemon thread of its own. Every append is a single
hop to that thread, which runs BEGIN IMMEDIATE ... INSERTs ... COMMIT there; appends that
arrive while a commit is in flight are group-committed together in the next one, each still
all-or-nothing. A second connection serves reads, so readers never queue behind writers.
Positions are numbered from `max(position)` inside the write transaction, and SQLite lets one
writer in at a time (across processes too), so readers always see a prefix of the positions;
after each group commit `commit_signal` wakes this store's followers (`agentlog.events.follow`).
Claims (one owner per thread) live in the file's own `claims` table, never in a lock on the
database file, which would break SQLite's own locking.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, TypeVar
from urllib.parse import quote

from agentlog.events.claims import (
    DEFAULT_LEASE,
    Claim,
    Heartbeat,
    Holder,
    fence,
    hold,
    let_go,
    new_claim,
)
from agentlog.events.codec import GENESIS_HASH, Row, chain_rows
from agentlog.events.errors import (
    ConcurrencyError,
    CorruptDatabaseError,
    CorruptRecordError,
    NotAnAgentlogDatabaseError,
    ReadOnlyStoreError,
    SchemaVersionError,
    StoreClosedError,
    StoreUnavailableError,
)
from agentlog.events.follow import CommitSignal
from agentlog.events.keystore import keyring
from agentlog.events.record import EventRecord
from agentlog.events.store import (
    MAX_POSITION,
    MESSAGE_KINDS,
    AppendRequest,
    BaseEventStore,
    Linked,
    StoredSnapshot,
)
from agentlog.events.stores.sqlite_claims import (
    HOLDER_COLUMNS,
    drop_claim,
    fetch_holder,
    relabel_claim,
    renew_claims,
    take_claim,
)
from agentlog.events.stores.sqlite_thread import ConnectionThread

APPLICATION_ID = 0x41474C47  # "AGLG" in the SQLite header marks an agentlog database.
SCHEMA_VERSION = 1
SQLITE_MAGIC = b"SQLite format 3\x00"
MAX_BATCH = 512
CHECKPOINT_ROWS = 2000
"""Rows committed between two checkpoints of the WAL (SQLite's own default is ~1000 pages)."""
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
"""Primary codes: compare `_primary(exc)`, since Python reports SQLite's extended codes
(SQLITE_BUSY_RECOVERY while another connection recovers the WAL is 261, not 5)."""


def _primary(exc: sqlite3.Error) -> int | None:
    """SQLite's primary result code of `exc` (its extended code's low byte)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


_CLAIMS = """
CREATE TABLE IF NOT EXISTS claims (
    thread_id    TEXT PRIMARY KEY,
    token        TEXT    NOT NULL,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    started      TEXT    NOT NULL,
    heartbeat_at REAL    NOT NULL,
    lease        REAL    NOT NULL,
    purpose      TEXT    NOT NULL
)
"""
_CURSORS = """CREATE TABLE IF NOT EXISTS cursors (
    name TEXT PRIMARY KEY, position INTEGER NOT NULL, updated_at REAL NOT NULL)"""

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
    hash       BLOB,
    anchor     BLOB,
    refs       BLOB,
    PRIMARY KEY (thread_id, seq)
);
{_CLAIMS};
{_CURSORS};
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
"""
_REQUIRED_TABLES = frozenset({"events", "threads", "snapshots"})

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


def storage_error(path: str, exc: sqlite3.Error) -> Exception:
    """The typed error for a failure SQLite reported: damage, or a passing condition."""
    code = _primary(exc)
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or (
        code is None and type(exc) is sqlite3.DatabaseError
    ):
        return CorruptDatabaseError(path, str(exc))
    if code == sqlite3.SQLITE_READONLY or "readonly" in str(exc):
        return ReadOnlyStoreError(
            f"{path}: the database or its directory is read-only ({exc}); nothing was written: "
            "open it with SQLiteEventStore(path, readonly=True) to read it"
        )
    return StoreUnavailableError(
        f"{path}: SQLite could not complete the operation ({exc}); nothing was written: "
        "retry once the file is free, writable and the disk has space"
    )


def _check_file(path: str) -> bool:
    """Refuse, without touching it, anything that is not a SQLite file; True when it exists.

    A FIFO or a device would block or stream for ever on open, so only regular files pass.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise NotAnAgentlogDatabaseError(path, f"it cannot be examined ({exc})") from None
    if stat.S_ISDIR(mode):
        raise NotAnAgentlogDatabaseError(path, "it is a directory")
    if not stat.S_ISREG(mode):
        raise NotAnAgentlogDatabaseError(
            path, "it is not a regular file (a pipe, socket or device)"
        )
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise NotAnAgentlogDatabaseError(path, f"it cannot be read ({exc})") from None
    if head and head != SQLITE_MAGIC:
        raise NotAnAgentlogDatabaseError(path, "it is not a SQLite file")
    return True


def _identify(conn: sqlite3.Connection, path: str) -> tuple[int, int, list[str]]:
    """The file's application id, schema version and table names."""
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    except sqlite3.DatabaseError as exc:
        if _primary(exc) == sqlite3.SQLITE_CANTOPEN:
            raise
        raise NotAnAgentlogDatabaseError(path, f"SQLite cannot read it: {exc}") from exc
    return app_id, version, tables


def _check_identity(path: str, app_id: int, version: int, tables: list[str]) -> None:
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
    missing = _REQUIRED_TABLES - set(tables)
    if app_id == APPLICATION_ID and missing:
        raise CorruptDatabaseError(
            path, f"it bears agentlog's mark but lacks the tables {', '.join(sorted(missing))}"
        )


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
                app_id, version, tables = APPLICATION_ID, SCHEMA_VERSION, list(_REQUIRED_TABLES)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    _check_identity(path, app_id, version, tables)
    _switch_to_wal(conn)
    for table in (_CLAIMS, _CURSORS):  # files written before claims or cursors gain them
        conn.execute(table)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(snapshots)")}
    if "hash" not in columns:  # nor did snapshots name the hash they fold up to
        conn.execute("ALTER TABLE snapshots ADD COLUMN hash BLOB")
    for column in ("anchor", "refs"):  # nor point into the log for their context
        if column not in columns:
            conn.execute(f"ALTER TABLE snapshots ADD COLUMN {column} BLOB")


def _switch_to_wal(conn: sqlite3.Connection) -> None:
    """Put the file in WAL mode. While another process reads a new file still in rollback
    mode (two processes creating it at once), SQLite refuses the switch at once, without
    waiting on its busy handler: try again for as long as the busy timeout allows."""
    deadline = time.monotonic() + conn.execute("PRAGMA busy_timeout").fetchone()[0] / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if _primary(exc) not in _BUSY_CODES or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def _prepare_readonly(conn: sqlite3.Connection, path: str) -> None:
    """Check the file is an agentlog database, writing nothing."""
    app_id, version, tables = _identify(conn, path)
    if app_id == 0 and not tables:
        raise NotAnAgentlogDatabaseError(path, "it is empty: there is nothing to read")
    _check_identity(path, app_id, version, tables)


def _connect(
    target: str, uri: bool, busy_ms: int, synchronous: str | None
) -> Callable[[], sqlite3.Connection]:
    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(
            target, isolation_level=None, check_same_thread=False, uri=uri, timeout=busy_ms / 1000
        )
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        if synchronous is not None:  # the writer: the store checkpoints (`_checkpoint_after`)
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        return conn

    return connect


def _last_close(path: str) -> None:
    """Open and close the database once: as its last connection, SQLite removes the empty
    -wal and the -shm a read-only reader had to create (when others have it open, nothing)."""
    with contextlib.suppress(sqlite3.Error):
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=rw", uri=True)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # joins the WAL
        finally:
            conn.close()


def _remove_sidecars(path: str) -> None:
    """Remove the -wal and -shm a refused open of `path` created (none were there before):
    as the last connection, SQLite removes them itself; what it leaves of a file it cannot
    read is removed here, a -wal only when it holds nothing."""
    _last_close(path)
    wal, shm = f"{path}-wal", f"{path}-shm"
    with contextlib.suppress(OSError):
        if os.path.exists(wal) and os.path.getsize(wal) == 0:
            os.unlink(wal)
        if not os.path.exists(wal) and os.path.exists(shm):
            os.unlink(shm)


def _writable(path: str) -> bool:
    """Whether `path` may be written: its mode allows it (even for root) and the OS agrees."""
    try:
        return bool(os.stat(path).st_mode & 0o222) and os.access(path, os.W_OK)
    except OSError:
        return False


def _readonly_uri(path: str) -> str:
    """How to read `path` without creating or changing any file.

    A file nobody can write to (an archive, a read-only mount) is opened immutable, which
    needs no -shm or lock files; its WAL must then be empty, or the copy would read stale.
    A live database is opened read-only with SQLite's ordinary locking.
    """
    absolute = quote(os.path.abspath(path))
    directory = os.path.dirname(os.path.abspath(path)) or "."
    writable = _writable(path) and _writable(directory)
    if writable:
        return f"file:{absolute}?mode=ro"
    wal = f"{path}-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        raise ReadOnlyStoreError(
            f"{path}: its write-ahead log {wal} holds commits that cannot be read without "
            "writing, and the file or its directory is read-only: checkpoint the database "
            "before archiving it (sqlite3 FILE 'PRAGMA wal_checkpoint(TRUNCATE)'), or read a "
            "writable copy"
        )
    return f"file:{absolute}?mode=ro&immutable=1"


class SQLiteEventStore(BaseEventStore):
    """A durable event store in one SQLite file (WAL).

    `synchronous="NORMAL"` (the default) survives any crash of the process; "FULL" also
    survives a power loss, at the price of an fsync per commit. `readonly=True` reads a
    database (even an archived copy in a read-only directory) and never creates or changes a
    file; any write raises `ReadOnlyStoreError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        busy_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
        readonly: bool = False,
    ) -> None:
        super().__init__(clock=clock)
        self.path = os.fspath(path)
        self.readonly = readonly
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._writer: ConnectionThread | None = None
        self._checkpointer: ConnectionThread | None = None
        self._reader: ConnectionThread | None = None
        self._open_lock = threading.Lock()  # opened from whichever loop comes first
        self._pending: list[tuple[AppendRequest, asyncio.Future[list[EventRecord]]]] = []
        self._in_flight = False
        self._uncheckpointed = 0
        self._checkpointing = False  # a checkpoint is queued or running on its connection
        self._queue_lock = threading.Lock()  # appends come from any event loop's thread
        self._drained = threading.Event()
        self._drained.set()
        self._closing = False
        self._tidy_on_close = False
        self._heartbeat = Heartbeat(self._renew_blocking)
        self.commit_signal = CommitSignal()
        """Committed up to which position, and the wake-up of followers
        (`agentlog.events.follow`)."""

    # ---- connections ---------------------------------------------------------------------

    async def open(self) -> SQLiteEventStore:
        """Open (creating when new) and check the database; later calls are free."""
        self._check_open()
        if self._reader is not None:
            return self
        await asyncio.to_thread(self._open_once)
        return self

    def _open_once(self) -> None:
        with self._open_lock:
            if self._closing:
                raise StoreClosedError(f"{self.path} was closed while opening")
            if self._reader is None:
                self._open_connections()

    def _open_connections(self) -> None:
        """Open and check both connections (blocking, on a worker thread)."""
        busy_ms = int(self._busy_timeout * 1000)
        exists = _check_file(self.path)
        directory = os.path.dirname(os.path.abspath(self.path))
        if not exists and not os.path.isdir(directory):
            raise StoreUnavailableError(
                f"{self.path}: its directory {directory} does not exist; nothing was created: "
                "create the directory first, or check the path"
            )
        # SQLite's WAL mode creates -wal and -shm beside the file; when none were there, a
        # refused open removes them again, as the last connection's close does (close())
        sidecars = any(os.path.exists(f"{self.path}{suffix}") for suffix in ("-wal", "-shm"))
        if self.readonly:
            if not exists:
                raise NotAnAgentlogDatabaseError(self.path, "there is no such file")
            uri = _readonly_uri(self.path)
            self._tidy_on_close = "immutable" not in uri and not sidecars
            reader = self._thread("reader", _connect(uri, True, busy_ms, None))
            try:
                self._blocking(reader, _prepare_readonly, self.path)
            except BaseException:
                reader.close_blocking()
                if self._tidy_on_close:
                    _remove_sidecars(self.path)
                raise
            self._reader = reader
            return
        if exists and not _writable(self.path) and (refused := self._read_only_place()):
            raise refused  # before SQLite opens it read-only and leaves its -wal and -shm
        try:
            writer = self._thread(
                "writer", _connect(self.path, False, busy_ms, self._synchronous), busy_ms
            )
        except NotAnAgentlogDatabaseError as exc:
            raise self._read_only_place() or exc from None
        opened = [writer]
        try:
            self._blocking(writer, _prepare, self.path)
            reader = self._thread("reader", _connect(self.path, False, busy_ms, None))
            opened.append(reader)
            checkpointer = self._thread("checkpointer", _connect(self.path, False, busy_ms, None))
        except BaseException as exc:
            for conn in opened:
                conn.close_blocking()
            if exists and not sidecars:
                _remove_sidecars(self.path)
            if isinstance(exc, NotAnAgentlogDatabaseError | StoreUnavailableError):
                raise self._read_only_place() or exc from None
            raise
        self._writer, self._reader, self._checkpointer = writer, reader, checkpointer

    def _read_only_place(self) -> ReadOnlyStoreError | None:
        """The error for a database that cannot be written where it lies, if that is why."""
        directory = os.path.dirname(os.path.abspath(self.path)) or "."
        if os.path.exists(self.path) and _writable(self.path) and _writable(directory):
            return None
        return ReadOnlyStoreError(
            f"{self.path} lies in a read-only place (the file or its directory cannot be "
            "written): open it with SQLiteEventStore(path, readonly=True) to read it"
        )

    def _thread(
        self, role: str, connect: Callable[[], sqlite3.Connection], busy_ms: int | None = None
    ) -> ConnectionThread:
        try:
            return ConnectionThread(f"agentlog-sqlite-{role}", connect, busy_ms=busy_ms).start()
        except sqlite3.Error as exc:
            raise NotAnAgentlogDatabaseError(self.path, f"SQLite cannot open it: {exc}") from exc

    def _wait_for_open(self) -> None:
        with self._open_lock:
            pass

    def _blocking(self, conn: ConnectionThread, fn: Callable[..., T], *args: Any) -> T:
        """`_on`, waiting in this (worker) thread."""
        try:
            return conn.call_blocking(fn, *args)
        except sqlite3.Error as exc:
            raise storage_error(self.path, exc) from exc

    async def _on(self, conn: ConnectionThread, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(sqlite3_connection, *args)` on the connection's thread: one hop."""
        try:
            return await conn.call(fn, *args)
        except sqlite3.Error as exc:
            raise storage_error(self.path, exc) from exc

    async def __aenter__(self) -> SQLiteEventStore:
        return await self.open()

    async def close(self) -> None:
        """Commit what is pending, then close both connections.

        A claim still held for sync work that outlived its run is released when that work
        returns, on a connection of its own.
        """
        if self._closed:
            return
        self._closing = True
        self.commit_signal.close()  # followers stop now; reads are refused from here on
        await asyncio.to_thread(self._wait_for_open)  # an open under way finishes first
        await asyncio.to_thread(self._drained.wait)
        self._heartbeat.stop()
        for conn in (self._writer, self._checkpointer, self._reader):
            if conn is not None:
                await conn.close()
        self._writer = self._reader = self._checkpointer = None
        if self._tidy_on_close:
            await asyncio.to_thread(_last_close, self.path)
        await super().close()

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closing:
            raise StoreClosedError(f"{self.path} is closing: open a new store to read it")
        await self.open()
        assert self._reader is not None
        return await self._on(self._reader, fn, *args)

    async def _ready_to_write(self, what: str) -> ConnectionThread:
        """The writer connection, opened; refused for a read-only or closing store."""
        if self.readonly:
            raise ReadOnlyStoreError(
                f"{self.path} was opened read-only: open it without readonly=True to {what}"
            )
        if not self._closing:
            await self.open()
        if self._closing or self._writer is None:
            raise StoreClosedError(f"{self.path} is closing: open a new store to {what}")
        return self._writer

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._on(await self._ready_to_write("write"), fn, *args)

    # ---- writes: pipelined group commit --------------------------------------------------

    async def _commit(self, request: AppendRequest) -> list[EventRecord]:
        if self._writer is None or self._closing:  # else open and writable: no check to await
            await self._ready_to_write("append")
        future: asyncio.Future[list[EventRecord]] = asyncio.get_running_loop().create_future()
        with self._queue_lock:
            self._pending.append((request, future))
            first = len(self._pending) == 1
        if first:
            # At the end of this turn of the loop: the appends other tasks make in the same
            # turn (a burst of writers) then leave together, in one commit.
            asyncio.get_running_loop().call_soon(self._submit_next)
        return await future

    def _submit_next(self) -> None:
        """Hand the pending appends to the writer thread as one batch, unless one is in flight.

        While a batch commits, new appends queue up; they leave as the next batch the moment
        the writer is free, before the finished batch's callers are even woken, so the writer
        thread and the event loop work side by side.
        """
        with self._queue_lock:
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
        requests = [request for request, _ in batch]
        if not self._commit_inline(writer, batch, requests):
            writer.submit(partial(_run_batch, self._batch_done, batch, requests, self.path))

    def _commit_inline(
        self,
        writer: ConnectionThread,
        batch: list[tuple[AppendRequest, asyncio.Future[list[EventRecord]]]],
        requests: list[AppendRequest],
    ) -> bool:
        """Commit `batch` on this event loop's thread when the writer is idle: a small
        commit costs less than the two thread hops of handing it over. Not with
        `synchronous="FULL"` (its fsync stays off the loop), not for callers on other
        loops, and not while another process holds the write lock (no waiting here)."""
        if self._synchronous != "NORMAL":
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # on the writer thread, after a batch: it queues the next
            return False
        if any(future.get_loop() is not loop for _, future in batch):
            return False
        try:
            ran, outcome = writer.try_inline(partial(_inline_batch, requests, self.path))
        except sqlite3.Error:  # setting the busy handler failed: the writer thread reports it
            return False
        if not ran or outcome is _BUSY:
            return False
        self._batch_done(batch, outcome, here=True)  # type: ignore[arg-type]
        return True

    def _batch_done(
        self,
        batch: list[tuple[AppendRequest, asyncio.Future[list[EventRecord]]]],
        outcome: list[Any] | BaseException,
        *,
        here: bool = False,
    ) -> None:
        """On the writer thread: start the next batch, then wake each caller on its own loop
        (one store may serve several event loops, each blocking API having its own).
        `here`: the batch committed on its callers' loop, which settles them directly."""
        with self._queue_lock:
            self._in_flight = False
        if here:
            asyncio.get_running_loop().call_soon(self._submit_next)
        else:
            self._submit_next()
        if isinstance(outcome, BaseException):
            if isinstance(outcome, sqlite3.Error):
                outcome = storage_error(self.path, outcome)
            outcome = [outcome] * len(batch)
        else:  # committed: the last rows written are the batch's highest position
            top = next((rows[-1].position for rows in reversed(outcome) if type(rows) is list), 0)
            if top:
                self.commit_signal.advance(top)
                self._checkpoint_after(sum(len(r) for r in outcome if type(r) is list))
        if here:
            self._settle([(req, fut, res) for (req, fut), res in zip(batch, outcome, strict=True)])
            return
        by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        for (request, future), result in zip(batch, outcome, strict=True):
            by_loop.setdefault(future.get_loop(), []).append((request, future, result))
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(self._settle, settled)

    def _checkpoint_after(self, rows: int) -> None:
        """Count committed rows; past `CHECKPOINT_ROWS`, checkpoint the WAL on a connection
        of its own. The writer's autocheckpoint is off, so no commit (on the event loop or
        the writer thread) does a checkpoint's copying and fsyncs, and a passive checkpoint
        elsewhere lets commits go on while it copies."""
        with self._queue_lock:
            self._uncheckpointed += rows
            if self._uncheckpointed < CHECKPOINT_ROWS or self._checkpointing:
                return  # not due, or the one under way (else the next) takes these rows
            self._uncheckpointed = 0
            self._checkpointing = True
        checkpointer = self._checkpointer
        if checkpointer is not None and not self._closing:
            with contextlib.suppress(RuntimeError):  # closed meanwhile: its close checkpoints
                checkpointer.submit(self._checkpoint_job)
                return
        with self._queue_lock:
            self._checkpointing = False

    def _checkpoint_job(self, conn: sqlite3.Connection) -> None:
        try:
            _checkpoint(conn)
        finally:
            with self._queue_lock:
                self._checkpointing = False

    def _settle(self, settled: list[Any]) -> None:
        """On a caller's loop: hand each append its records or its error."""
        for request, future, result in settled:
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(self._records(result, request.encoded))

    # ---- claims --------------------------------------------------------------------------

    async def claim(
        self,
        thread_id: str,
        *,
        purpose: str = "run",
        lease: float = DEFAULT_LEASE,
        under: Claim | None = None,
    ) -> Claim:
        self._check_open()
        claim = new_claim(self._checked_id(thread_id), lease=lease, purpose=purpose)
        hold(claim)  # before the write: a rival claim queued behind it must see it alive
        try:
            seq, subject = await self._claim_write(take_claim, claim, time.time(), under)
        except BaseException:
            let_go(claim)  # refused, or the caller left mid-claim: whatever was written is dead
            raise
        keyring(self).seen(claim.thread_id, subject)
        claim = dataclasses.replace(claim, last_seq=seq)
        self._heartbeat.add(claim)
        return claim

    async def release(self, claim: Claim) -> None:
        self._heartbeat.discard(claim)
        let_go(claim)
        if self._closed or self._writer is None:
            await asyncio.to_thread(self._drop_on_own_connection, claim)
            return
        await self._claim_write(drop_claim, claim.thread_id, claim.token)

    async def _claim_write(self, fn: Callable[..., T], *args: Any) -> T:
        """A claim's write, here while the writer is idle (as `_commit_inline`: cheaper than
        two thread hops); queued with `synchronous="FULL"`, while the writer is busy, or
        while another process holds the write lock (never waited for here)."""
        writer = await self._ready_to_write("write")
        if self._synchronous == "NORMAL":
            try:
                ran, outcome = writer.try_inline(partial(_unless_busy, fn, args))
            except sqlite3.Error:  # failed whole (rolled back): queued, it is tried again
                ran, outcome = False, _BUSY
            if ran and outcome is not _BUSY:
                return outcome  # type: ignore[return-value]
        return await self._on(writer, fn, *args)

    def release_threadsafe(self, claim: Claim) -> None:
        self._heartbeat.discard(claim)
        let_go(claim)
        writer = self._writer
        if writer is None or self._closing:
            self._drop_on_own_connection(claim)  # the store closed while the work ran on
            return

        def job(conn: sqlite3.Connection) -> None:
            with contextlib.suppress(sqlite3.Error):  # else it stays until seen dead
                drop_claim(conn, claim.thread_id, claim.token)

        writer.submit(job)

    def _drop_on_own_connection(self, claim: Claim) -> None:
        """Release a claim after the store closed (blocking: never on the event loop)."""
        if self.readonly:
            return
        with contextlib.suppress(sqlite3.Error):
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None)
            try:
                drop_claim(conn, claim.thread_id, claim.token)
            finally:
                conn.close()

    async def relabel(self, claim: Claim, purpose: str) -> None:
        await self._write(relabel_claim, claim.thread_id, claim.token, purpose)

    async def holder(self, thread_id: str) -> Holder | None:
        self._check_open()
        return await self._read(fetch_holder, self._checked_id(thread_id))

    def _renew_blocking(self, claims: list[Claim], now: float) -> None:
        writer = self._writer
        if writer is not None and not self._closing:
            writer.call_blocking(renew_claims, [c.token for c in claims], now, timeout=60)

    # ---- reads ---------------------------------------------------------------------------

    async def _fetch(self, thread_id: str, from_seq: int, to_seq: int, limit: int) -> list[Row]:
        return await self._read(_fetch_thread, thread_id, from_seq, to_seq, limit)

    async def _fetch_all(self, from_position: int, limit: int) -> list[Row]:
        return await self._read(_fetch_positions, from_position, limit)

    async def _head(self, thread_id: str) -> tuple[int, bytes] | None:
        return await self._read(_fetch_head, thread_id)

    async def last_position(self) -> int:
        """The position of the newest record; 0 when the store holds none."""
        self._check_open()
        return await self._read(_fetch_last_position)

    def files(self) -> list[str]:
        """The database file and the journal files SQLite keeps beside it."""
        return [self.path, f"{self.path}-wal", f"{self.path}-shm", f"{self.path}-journal"]

    async def threads(self) -> list[str]:
        self._check_open()
        return await self._read(_fetch_threads)

    async def _seqs_of_kind(self, thread_id: str, kind: str) -> list[int]:
        return await self._read(_fetch_seqs_of_kind, thread_id, kind)

    async def _put_snapshot(self, thread_id: str, stored: StoredSnapshot) -> None:
        await self._write(_write_snapshot, (thread_id, *stored))

    async def _get_snapshot(self, thread_id: str, max_seq: int) -> StoredSnapshot | None:
        return await self._read(_fetch_snapshot, thread_id, max_seq)

    async def _snapshot_seqs(self, thread_id: str) -> list[int]:
        return await self._read(_fetch_snapshot_seqs, thread_id)

    async def _fetch_carriers(self, thread_id: str, seqs: Sequence[int]) -> list[Linked]:
        return await self._read(_fetch_carriers, thread_id, list(seqs))


# ---- functions that run on a connection's own thread ---------------------------------------


def _run_batch(
    report: Callable[[Any, list[Any] | BaseException], None],
    batch: Any,
    requests: list[AppendRequest],
    path: str,
    conn: sqlite3.Connection,
) -> None:
    """Write a batch on the writer thread and report the outcome, still on that thread."""
    outcome: list[Any] | BaseException
    try:
        outcome = _write_batch(conn, requests, path)
    except BaseException as exc:
        outcome = exc
    report(batch, outcome)


class _Busy:
    """Another process held the write lock when an inline commit began: queue it instead."""


_BUSY = _Busy()


def _inline_batch(
    requests: list[AppendRequest], path: str, conn: sqlite3.Connection
) -> list[Any] | BaseException | _Busy:
    """`_write_batch` on the caller's thread; `_BUSY` when the write lock is taken."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if _primary(exc) in _BUSY_CODES:
            return _BUSY
        return exc
    try:
        return _write_batch(conn, requests, path, begun=True)
    except BaseException as exc:
        return exc


def _checkpoint(conn: sqlite3.Connection) -> None:
    """Copy the WAL's committed pages into the database, waiting for nobody."""
    with contextlib.suppress(sqlite3.Error):  # a reader holding old pages: next time
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def _write_batch(
    conn: sqlite3.Connection, batch: list[AppendRequest], path: str, *, begun: bool = False
) -> list[Any]:
    """One transaction for the whole batch; a request that fails writes none of its rows.

    Heads and claims are read with one query each and rows written with one `executemany`,
    so a batch costs a handful of statements however many appends it carries. Each request
    is fenced: it must hold the thread's claim, or the thread must have no live owner (an
    outsider may only ask the owner to stop).
    """
    results: list[Any] = []
    if not begun:
        conn.execute("BEGIN IMMEDIATE")
    try:
        position, damaged = _positions(conn)
        thread_ids = {req.thread_id for req in batch}
        heads = _heads(conn, thread_ids)
        holders = _holders(conn, thread_ids)
        now = time.time()
        rows_out: list[Row] = []
        touched: dict[str, float] = {}
        for req in batch:
            holder = holders.get(req.thread_id)
            token = None if req.claim is None else req.claim.token
            refusal = fence(req.thread_id, token, req.only_stop_requests, holder, now)
            if refusal is not None:
                results.append(refusal)
                continue
            actual, prev = heads.get(req.thread_id, (0, GENESIS_HASH))
            n = len(req.encoded)
            if req.thread_id in damaged or actual + n > MAX_POSITION or position + n > MAX_POSITION:
                results.append(_exhausted(path, req.thread_id, actual, position, damaged))
                continue
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
            position += n
            results.append(rows)
        if rows_out:
            conn.executemany(_INSERT, rows_out)
            conn.executemany(_UPSERT_HEAD, [(t, *heads[t], at, at) for t, at in touched.items()])
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return results


def _positions(conn: sqlite3.Connection) -> tuple[int, dict[str, int]]:
    """The highest legal position in use, and the threads holding a row beyond the range
    (damage: such a thread takes no appends; every other thread goes on)."""
    top = conn.execute("SELECT max(position) FROM events").fetchone()[0] or 0
    if top <= MAX_POSITION:
        return int(top), {}
    legal = conn.execute(
        "SELECT max(position) FROM events WHERE position <= ?", (MAX_POSITION,)
    ).fetchone()[0]
    damaged: dict[str, int] = {}
    for thread_id, seq in conn.execute(
        "SELECT thread_id, seq FROM events WHERE position > ? ORDER BY position", (MAX_POSITION,)
    ):
        damaged.setdefault(thread_id, seq)
    return int(legal or 0), damaged


def _exhausted(
    path: str, thread_id: str, seq: int, position: int, damaged: dict[str, int]
) -> Exception:
    if thread_id in damaged:
        bad = damaged[thread_id]
        return CorruptRecordError(
            thread_id, bad, f"its position in {path} is beyond {MAX_POSITION}, the legal range"
        )
    if seq >= MAX_POSITION:
        return CorruptRecordError(
            thread_id, seq, f"its head in {path} claims seq {seq}, beyond any real thread"
        )
    return CorruptDatabaseError(path, f"the global position counter is exhausted at {position}")


def _heads(conn: sqlite3.Connection, thread_ids: set[str]) -> dict[str, tuple[int, bytes]]:
    return {
        tid: (seq, digest)
        for tid, seq, digest in _select_in(
            conn, "SELECT thread_id, last_seq, last_hash FROM threads", thread_ids
        )
    }


def _holders(conn: sqlite3.Connection, thread_ids: set[str]) -> dict[str, Holder]:
    sql = f"SELECT thread_id, {HOLDER_COLUMNS} FROM claims"
    return {row[0]: Holder(*row[1:]) for row in _select_in(conn, sql, thread_ids)}


def _select_in(conn: sqlite3.Connection, select: str, thread_ids: set[str]) -> list[Any]:
    ids = list(thread_ids)
    if len(ids) == 1:
        return conn.execute(f"{select} WHERE thread_id = ?", ids).fetchall()
    found: list[Any] = []
    for i in range(0, len(ids), 500):
        part = ids[i : i + 500]
        marks = ",".join("?" * len(part))
        found.extend(conn.execute(f"{select} WHERE thread_id IN ({marks})", part).fetchall())
    return found


def _unless_busy(
    fn: Callable[..., T], args: tuple[Any, ...], conn: sqlite3.Connection
) -> T | _Busy:
    """`fn(conn, *args)`; `_BUSY` when another process holds the write lock."""
    try:
        return fn(conn, *args)
    except sqlite3.OperationalError as exc:
        if _primary(exc) in _BUSY_CODES:
            return _BUSY
        raise


def _write_snapshot(conn: sqlite3.Connection, values: tuple[Any, ...]) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO snapshots "
        "(thread_id, seq, state_type, at, state, hash, anchor, refs) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
    sql = f"SELECT {_ROW_COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?"
    return _to_rows(conn.execute(sql, (from_position, limit)).fetchall())


def _fetch_last_position(conn: sqlite3.Connection) -> int:
    # Rows beyond the legal range are damage, which reading them reports.
    sql = "SELECT max(position) FROM events WHERE position <= ?"
    return int(conn.execute(sql, (MAX_POSITION,)).fetchone()[0] or 0)


def _fetch_head(conn: sqlite3.Connection, thread_id: str) -> tuple[int, bytes] | None:
    sql = "SELECT last_seq, last_hash FROM threads WHERE thread_id = ?"
    row = conn.execute(sql, (thread_id,)).fetchone()
    return None if row is None else (row[0], row[1])


def _fetch_seqs_of_kind(conn: sqlite3.Connection, thread_id: str, kind: str) -> list[int]:
    # `kind` is one of KINDS (checked by the caller), so it can be a literal, which lets
    # SQLite use the partial index of step_advanced records.
    sql = f"SELECT seq FROM events WHERE thread_id = ? AND kind = '{kind}' ORDER BY seq"
    return [r[0] for r in conn.execute(sql, (thread_id,))]


def _fetch_threads(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT thread_id FROM threads ORDER BY rowid")]


_SNAPSHOT_COLUMNS = (
    "seq, state_type, at, state, hash, anchor, refs",
    "seq, state_type, at, state, hash, NULL, NULL",  # a read-only copy from before references
    "seq, state_type, at, state, NULL, NULL, NULL",  # ... or before snapshots named a hash
)


def _fetch_snapshot(
    conn: sqlite3.Connection, thread_id: str, max_seq: int
) -> StoredSnapshot | None:
    where = "FROM snapshots WHERE thread_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1"
    for columns in _SNAPSHOT_COLUMNS:
        try:
            row = conn.execute(f"SELECT {columns} {where}", (thread_id, max_seq)).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such column" not in str(exc):
                raise
            continue
        return None if row is None else StoredSnapshot._make(row)
    raise sqlite3.OperationalError("the snapshots table lacks the columns of any known version")


def _fetch_snapshot_seqs(conn: sqlite3.Connection, thread_id: str) -> list[int]:
    sql = "SELECT seq FROM snapshots WHERE thread_id = ? ORDER BY seq"
    return [r[0] for r in conn.execute(sql, (thread_id,))]


_MESSAGE_KINDS_SQL = ", ".join(f"'{kind}'" for kind in MESSAGE_KINDS)
_CARRIERS = (  # the record before is most often the row before in the file: a rowid seek
    "SELECT e.seq, e.run_id, e.actor, e.at, e.kind, e.version, e.position, e.payload, e.hash, "
    "coalesce((SELECT p.hash FROM events p WHERE p.position = e.position - 1 "
    "AND p.thread_id = e.thread_id AND p.seq = e.seq - 1), (SELECT p.hash FROM events p "
    "WHERE p.thread_id = e.thread_id AND p.seq = e.seq - 1)) FROM events e "
    f"WHERE e.thread_id = ? AND e.kind IN ({_MESSAGE_KINDS_SQL})"
)


def _fetch_carriers(conn: sqlite3.Connection, thread_id: str, seqs: list[int]) -> list[Linked]:
    """The records at `seqs` (ascending) that carry messages, each with the hash of the one
    before: one range scan when they lie close together (the usual context: every message
    record of a stretch), else by seq."""
    if not seqs:
        return []
    low, high = seqs[0], seqs[-1]
    if high - low < 4 * len(seqs) + 1024:
        raw = conn.execute(
            f"{_CARRIERS} AND e.seq BETWEEN ? AND ? ORDER BY e.seq", (thread_id, low, high)
        ).fetchall()
        if len(raw) != len(seqs):
            wanted = set(seqs)
            raw = [r for r in raw if r[0] in wanted]
        return raw
    rows: list[Linked] = []
    for i in range(0, len(seqs), 500):
        part = seqs[i : i + 500]
        marks = ",".join("?" * len(part))
        sql = f"{_CARRIERS} AND e.seq IN ({marks}) ORDER BY e.seq"
        rows += conn.execute(sql, (thread_id, *part)).fetchall()
    return rows
