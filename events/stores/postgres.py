"""`PostgresEventStore`: the shared, server-grade store (`pip install 'agentlog[postgres]'`).

Many processes on many hosts append to one log. Each append locks its thread's head row
(`threads`, `SELECT ... FOR UPDATE`), so appends to different threads run side by side and the
loser of a race on one thread gets `ConcurrencyError`. Appends made through one store object
while a commit is in flight leave together in the next transaction (group commit).

Commit order without a table lock: a record's position is taken from a one-row counter
(`commit_counter`) by the last statements of the transaction, and the row lock the UPDATE
takes is held until COMMIT. A writer that wants the next positions waits on that lock, which
PostgreSQL releases only once the holder's commit is visible to everyone, so positions become
visible strictly in order: a reader never sees position 11 before 10. Everything before (the
head locks, the claim checks, the chaining) runs concurrently; only the tail of each commit
is serialised. `ordering="table_lock"` (LOCK TABLE events at the start) is kept only so the
benchmark can measure the difference in the same run.

Followers are woken by LISTEN/NOTIFY: a commit notifies its last position on the schema's
channel; the table stays the source, the notification is only a wake-up (`agentlog.events.follow`).

The schema is never created on open: `agentlog db upgrade --dsn ...` does (see
`agentlog.events.stores.postgres_schema`). Connections live on the store's own event loop thread
(`agentlog.events.stores.postgres_loop`), so one store serves callers on any loop or thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]

from agentlog.events.claims import (
    DEFAULT_LEASE,
    Claim,
    Heartbeat,
    Holder,
    fence,
    hold,
    let_go,
    lost_under,
    new_claim,
)
from agentlog.events.codec import GENESIS_HASH, Row, chain_rows
from agentlog.events.errors import (
    ConcurrencyError,
    CorruptDatabaseError,
    CorruptRecordError,
    InvalidArgumentError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
)
from agentlog.events.follow import CommitSignal
from agentlog.events.record import EventRecord
from agentlog.events.store import (
    MAX_POSITION,
    MESSAGE_KINDS,
    AppendRequest,
    BaseEventStore,
    Linked,
    StoredSnapshot,
)
from agentlog.events.stores.postgres_loop import LoopThread
from agentlog.events.stores.postgres_schema import (
    DEFAULT_SCHEMA,
    SchemaUpgradeRequiredError,
    check_schema,
    check_schema_name,
    upgrade_command,
)

__all__ = [
    "Ordering",
    "PostgresEventStore",
    "connect_failure",
    "shown_dsn",
    "split_connect_timeout",
]

MAX_BATCH = 512
Ordering = Literal["commit_counter", "table_lock"]
T = TypeVar("T")

_ROW_COLUMNS = "thread_id, seq, run_id, actor, at, kind, version, payload, hash, position"
_HOLDER_COLUMNS = "token, host, pid, started, heartbeat_at, lease, purpose"
_DB_NOW = "extract(epoch FROM clock_timestamp())::float8"
"""The database's clock: the one clock every host's heartbeats and takeovers are judged by
(a host whose own clock runs ahead must not see live owners as dead)."""
_PASSWORD = re.compile(r"(//[^/@:]*):[^/@]*@")
_LOST = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,  # a connection left mid-protocol by a loss
    asyncpg.exceptions.OperatorInterventionError,  # the backend was terminated or shut down
    ConnectionError,
    OSError,
    TimeoutError,
)


_TRANSIENT = (
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.SerializationError,
)
"""Failures PostgreSQL resolves by rolling one transaction back: the batch is tried again."""


def shown_dsn(dsn: str) -> str:
    """The DSN as messages show it: without its password."""
    return _PASSWORD.sub(r"\1:***@", dsn, count=1)


def split_connect_timeout(dsn: str, default: float) -> tuple[str, float]:
    """The DSN without libpq's `?connect_timeout=N` and the seconds it names (else
    `default`): asyncpg would send it to the server as a setting, which refuses it."""
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = [value for key, value in query if key == "connect_timeout"]
    if not given:
        return dsn, default
    try:
        seconds = float(given[-1])
    except ValueError:
        seconds = -1.0
    if not seconds > 0:  # libpq reads 0 as "wait for ever": refused, a hang is never wanted
        raise InvalidArgumentError(
            f"{shown_dsn(dsn)}: connect_timeout is a number of seconds > 0, got {given[-1]!r}"
        )
    kept = urlencode([(key, value) for key, value in query if key != "connect_timeout"])
    return urlunsplit(parts._replace(query=kept)), seconds


def connect_failure(dsn: str, exc: BaseException, timeout: float) -> str:
    """Why connecting failed, in words naming what to check (the DSN without its password)."""
    if isinstance(exc, TimeoutError):
        cause = (
            f"no answer within {timeout:g} s: is the host and port a PostgreSQL server's? "
            "(a slow network: raise ?connect_timeout=SECONDS in the DSN)"
        )
    elif "unrecognized configuration parameter" in str(exc):
        cause = (
            f"{exc}: the DSN's ?name=value options are PostgreSQL settings, apart from "
            "?schema= and ?connect_timeout=; check the spelling"
        )
    else:
        cause = f"{type(exc).__name__}: {exc}"
    return f"cannot connect to PostgreSQL at {shown_dsn(dsn)} ({cause})"


class PostgresEventStore(BaseEventStore):
    """An event store in a PostgreSQL schema, shared by any number of processes and hosts.

    `async with PostgresEventStore(dsn) as store:` (or `await store.open()` ... `close()`).
    `schema` names the PostgreSQL schema the log lives in, created beforehand by `agentlog db
    upgrade`. `readonly=True` opens read-only sessions; any write raises `ReadOnlyStoreError`.
    `pool_size` bounds the connections used for reads and claims (one more writes, one more
    listens). `ordering` is for `bench/postgres.py` alone (see the module).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        readonly: bool = False,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        ordering: Ordering = "commit_counter",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(clock=clock)
        if ordering not in ("commit_counter", "table_lock"):
            raise InvalidArgumentError(
                f"ordering must be 'commit_counter' (the store's) or 'table_lock' (kept for "
                f"the benchmark's comparison), not {ordering!r}"
            )
        if (
            isinstance(connect_timeout, bool)
            or not isinstance(connect_timeout, int | float)
            or not connect_timeout > 0
        ):
            raise InvalidArgumentError(
                f"connect_timeout is a number of seconds > 0, got {connect_timeout!r}"
            )
        self.dsn, self.connect_timeout = split_connect_timeout(dsn, connect_timeout)
        """The DSN asyncpg is given, and the seconds a connection attempt may take (the
        argument, or the DSN's `?connect_timeout=`)."""
        self.schema = check_schema_name(schema)
        self.readonly = readonly
        self.ordering = ordering
        self._pool_size = max(1, pool_size)
        self._where = f"{shown_dsn(self.dsn)} (schema {schema!r})"
        self._channel = f"agentlog_{schema}"
        self._settings = {"application_name": f"agentlog:{schema}"[:63]}
        """Every connection names the log it serves (`pg_stat_activity.application_name`)."""
        self._loop: LoopThread | None = None
        self._open_lock = threading.Lock()
        self._opened = False
        self._closing = False
        self._pool: Any = None
        self._writer: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._writer_task: asyncio.Task[None] | None = None
        self._pending: list[tuple[AppendRequest, asyncio.Future[list[Row] | Exception]]] = []
        self._wake: asyncio.Event | None = None
        self._heartbeat = Heartbeat(self._renew_blocking)
        self.commits = 0
        """Transactions this store object committed appends in (group commit: often fewer
        than its appends)."""
        self.commit_signal = CommitSignal()
        """Committed up to which position (here or, by NOTIFY, anywhere), and the wake-up of
        followers (`agentlog.events.follow`)."""
        s = f'"{self.schema}"'
        self._t = {"events": f"{s}.events", "threads": f"{s}.threads", "claims": f"{s}.claims",
                   "snapshots": f"{s}.snapshots", "counter": f"{s}.commit_counter"}  # fmt: skip

    # ---- lifecycle -----------------------------------------------------------------------

    async def open(self) -> PostgresEventStore:
        """Connect and check the schema (created by `agentlog db upgrade`); later calls are free."""
        self._check_open()
        if self._opened:
            return self
        with self._open_lock:
            if self._loop is None:
                self._loop = LoopThread(f"agentlog-postgres-{self.schema}")
        await self._loop.call(self._open_here())
        return self

    async def __aenter__(self) -> PostgresEventStore:
        return await self.open()

    async def _open_here(self) -> None:
        if self._closing:
            raise StoreClosedError(f"{self._where} was closed while opening")
        settings = dict(self._settings)
        if self.readonly:
            settings["default_transaction_read_only"] = "on"
        try:
            pool = await asyncpg.create_pool(
                self.dsn, min_size=1, max_size=self._pool_size, timeout=self.connect_timeout,
                server_settings=settings,
            )  # fmt: skip
        except (asyncpg.PostgresError, *_LOST) as exc:
            raise StoreUnavailableError(
                f"{connect_failure(self.dsn, exc, self.connect_timeout)}; nothing was read or "
                "written: check the DSN, that the server runs and that the database exists"
            ) from None
        try:
            async with pool.acquire() as conn:
                await check_schema(conn, self.schema, shown_dsn(self.dsn))
        except _LOST as exc:
            pool.terminate()
            raise StoreUnavailableError(
                f"{self._where}: the connection was lost while checking the schema "
                f"({type(exc).__name__}: {exc}); nothing was read or written: open the store "
                "again"
            ) from None
        except BaseException:
            await pool.close()
            raise
        if self._opened:  # first uses raced each other here: the first one opened the store
            return await pool.close()  # type: ignore[no-any-return]
        self._pool = pool
        self._wake = asyncio.Event()
        self._writer_task = asyncio.get_running_loop().create_task(self._write_loop())
        self._listener = asyncio.get_running_loop().create_task(self._listen())
        self._opened = True

    async def close(self) -> None:
        """Commit what is pending, stop listening and close every connection."""
        if self._closed:
            return
        self._closing = True
        self.commit_signal.close()
        self._heartbeat.stop()
        loop = self._loop
        if loop is not None and loop.running:
            with contextlib.suppress(Exception):
                await loop.call(self._close_here())
            await asyncio.to_thread(loop.stop)
        await super().close()

    async def _close_here(self) -> None:
        if self._wake is not None:
            self._wake.set()
        if self._writer_task is not None:
            await asyncio.wait([self._writer_task], timeout=60)
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(BaseException):
                await self._listener
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._writer.close(), 5)
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), 5)

    async def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the store's loop (opening the store first when needed)."""
        if self._closing:
            coro.close()
            raise StoreClosedError(f"{self._where} is closing: open a new store to use it")
        if not self._opened:
            try:
                await self.open()
            except BaseException:
                coro.close()
                raise
        assert self._loop is not None
        return await self._loop.call(coro)

    async def _query(self, method: str, sql: str, *args: Any) -> Any:
        """One statement on a pooled connection, its failures made typed errors."""

        async def run() -> Any:
            try:
                async with self._pool.acquire() as conn:
                    try:
                        return await getattr(conn, method)(sql, *args)
                    except _LOST:
                        # the pool replaces it: the next call reconnects (a connection the
                        # pool already took back refuses terminate(): the loss is what counts)
                        with contextlib.suppress(asyncpg.InterfaceError):
                            conn.terminate()
                        raise
            except (asyncpg.PostgresError, *_LOST) as exc:
                raise self._error(exc, "nothing was written") from exc

        return await self._call(run())

    def _error(self, exc: BaseException, outcome: str) -> StoreError:
        """The typed error for a failure asyncpg reported."""
        if isinstance(exc, StoreError):
            return exc
        if isinstance(exc, asyncpg.exceptions.ReadOnlySQLTransactionError):
            return ReadOnlyStoreError(
                f"{self._where} was opened read-only: open it without readonly=True to write"
            )
        if isinstance(
            exc, asyncpg.exceptions.UndefinedTableError | asyncpg.exceptions.InvalidSchemaNameError
        ):
            return SchemaUpgradeRequiredError(
                f"{self._where}: the agentlog schema disappeared while open ({exc}); "
                f"{outcome}: recreate it with `{upgrade_command(self.schema)}`"
            )
        if isinstance(exc, _LOST):
            return StoreUnavailableError(
                f"{self._where}: the connection to PostgreSQL was lost ({type(exc).__name__}: "
                f"{exc}); {outcome}: retry once the server is reachable"
            )
        return StoreUnavailableError(
            f"{self._where}: PostgreSQL refused the operation ({type(exc).__name__}: {exc}); "
            f"{outcome}"
        )

    def _check_writable(self, what: str) -> None:
        if self.readonly:
            raise ReadOnlyStoreError(
                f"{self._where} was opened read-only: open it without readonly=True to {what}"
            )

    # ---- appends: group commit on the store's loop ------------------------------------------

    async def _commit(self, request: AppendRequest) -> list[EventRecord]:
        self._check_writable("append")
        rows = await self._call(self._enqueue(request))
        return self._records(rows, request.encoded)

    async def _enqueue(self, request: AppendRequest) -> list[Row]:
        if self._closing or self._wake is None:
            raise StoreClosedError(f"{self._where} is closing: open a new store to append")
        future: asyncio.Future[list[Row] | Exception] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._wake.set()
        outcome = await asyncio.shield(future)  # a caller that leaves does not undo a commit
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _write_loop(self) -> None:
        """Commit pending appends in batches until the store closes and nothing is left."""
        assert self._wake is not None
        while True:
            if not self._pending:
                if self._closing:
                    return
                await self._wake.wait()
                self._wake.clear()
                continue
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            requests = [request for request, _ in batch]
            outcomes: list[list[Row] | Exception]
            for attempt in range(1, 4):
                try:
                    outcomes = await self._write_batch(requests)
                except _TRANSIENT as exc:  # rolled back whole: nothing written, try again
                    outcomes = [self._error(exc, "nothing was written")] * len(batch)
                    if attempt < 3:
                        continue
                except Exception as exc:
                    outcomes = [exc] * len(batch)
                break
            top = max((o[-1].position for o in outcomes if isinstance(o, list) and o), default=0)
            if top:
                self.commits += 1
                self.commit_signal.advance(top)
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if not future.done():
                    future.set_result(outcome)

    async def _connection(self) -> Any:
        """The writer connection, reconnected when the last one was lost."""
        if self._writer is None or self._writer.is_closed():
            try:
                self._writer = await asyncpg.connect(
                    self.dsn,
                    timeout=self.connect_timeout,
                    server_settings=self._settings,
                )
            except (asyncpg.PostgresError, *_LOST) as exc:
                raise self._error(exc, "nothing was written") from exc
        return self._writer

    async def _write_batch(self, batch: list[AppendRequest]) -> list[list[Row] | Exception]:
        """One transaction for the batch; a request that fails writes none of its rows."""
        conn = await self._connection()
        stage = "nothing was written"
        outcomes: list[list[Row] | Exception] = []
        rows: list[Row] = []
        try:
            tx = conn.transaction()
            await tx.start()
            try:
                outcomes, rows, _top = await self._in_transaction(conn, batch)
            except BaseException:
                with contextlib.suppress(Exception):
                    await tx.rollback()
                raise
            stage = "commit"
            await tx.commit()
            return outcomes
        except _TRANSIENT:
            raise
        except (asyncpg.PostgresError, *_LOST) as exc:
            if isinstance(exc, _LOST) or conn.is_in_transaction():
                conn.terminate()  # in an unknown state: the next batch reconnects
                self._writer = None
            if stage != "commit" or not rows:
                raise self._error(exc, "nothing was written") from exc
            return await self._after_lost_commit(exc, outcomes, rows[-1])

    async def _after_lost_commit(
        self, exc: BaseException, outcomes: list[list[Row] | Exception], last: Row
    ) -> list[list[Row] | Exception]:
        """The connection died during COMMIT: ask the database whether the batch landed."""
        try:
            conn = await self._connection()
            found = await conn.fetchval(
                f"SELECT hash FROM {self._t['events']} WHERE position = $1", last.position
            )
        except Exception:
            raise self._error(
                exc, "the commit may or may not have landed: read the thread's last seq "
                "before appending again",
            ) from exc  # fmt: skip
        if found == last.hash:  # positions are unique and hashes cover them: it committed
            return outcomes
        raise self._error(exc, "nothing was written (the commit did not land)") from exc

    async def _in_transaction(
        self, conn: Any, batch: list[AppendRequest]
    ) -> tuple[list[list[Row] | Exception], list[Row], int]:
        t = self._t
        if self.ordering == "table_lock":
            await conn.execute(f"LOCK TABLE {t['events']} IN EXCLUSIVE MODE")
        ids = sorted({req.thread_id for req in batch})
        heads = await self._lock_heads(conn, ids)
        missing = [tid for tid in ids if tid not in heads]
        if missing:  # new threads: a placeholder head row to lock (removed unless written)
            await conn.execute(
                f"INSERT INTO {t['threads']} (thread_id, last_seq, last_hash, created_at, "
                "updated_at) SELECT tid, 0, $2, 0, 0 FROM unnest($1::text[]) AS tid "
                "ORDER BY tid ON CONFLICT DO NOTHING",
                missing, GENESIS_HASH,
            )  # fmt: skip
            heads.update(await self._lock_heads(conn, missing))
        claimed = await conn.fetch(
            f"SELECT thread_id, {_HOLDER_COLUMNS}, {_DB_NOW} FROM {t['claims']} "
            "WHERE thread_id = ANY($1::text[]) ORDER BY thread_id FOR SHARE",
            ids,
        )
        holders = {r[0]: Holder(*r[1:-1]) for r in claimed}
        now = claimed[0][-1] if claimed else 0.0  # only a holder's liveness reads it
        accepted: list[tuple[int, AppendRequest, int, bytes]] = []
        outcomes: list[list[Row] | Exception] = []
        total = 0
        for req in batch:
            token = None if req.claim is None else req.claim.token
            refusal = fence(req.thread_id, token, req.only_stop_requests,
                            holders.get(req.thread_id), now)  # fmt: skip
            actual, prev = heads.get(req.thread_id, (0, GENESIS_HASH))
            if refusal is None and actual + len(req.encoded) > MAX_POSITION:
                refusal = CorruptRecordError(
                    req.thread_id, actual, f"its head in {self._where} is beyond any real thread"
                )
            if refusal is None and actual != req.expected_seq:
                refusal = ConcurrencyError(req.thread_id, req.expected_seq, actual)
            if refusal is not None:
                outcomes.append(refusal)
                continue
            accepted.append((len(outcomes), req, actual, prev))
            outcomes.append([])
            heads[req.thread_id] = (actual + len(req.encoded), b"")  # the next one's seq
            total += len(req.encoded)
        written = {req.thread_id for _, req, _, _ in accepted}
        unused = [tid for tid in missing if tid not in written]
        if not accepted:
            if unused:
                await conn.execute(
                    f"DELETE FROM {t['threads']} WHERE thread_id = ANY($1::text[]) "
                    "AND last_seq = 0",
                    unused,
                )
            return outcomes, [], 0
        # The tail of the commit: positions from the counter, whose row lock is held to COMMIT.
        top = await conn.fetchval(
            f"UPDATE {t['counter']} SET position = position + $1 RETURNING position", total
        )
        if top is None or top > MAX_POSITION:
            raise CorruptDatabaseError(
                self._where, f"the position counter is {top}, beyond {MAX_POSITION} or missing"
            )
        position = top - total + 1
        rows_out: list[Row] = []
        last_hash: dict[str, bytes] = {}
        for index, req, actual, prev in accepted:
            prev = last_hash.get(req.thread_id, prev)
            rows = chain_rows(req.thread_id, actual + 1, prev, req.encoded, req.run_id,
                              req.actor, req.at, position)  # fmt: skip
            position += len(rows)
            last_hash[req.thread_id] = rows[-1].hash
            outcomes[index] = rows
            rows_out.extend(rows)
        await conn.execute(self._write_sql, *_columns(rows_out), *_heads_of(rows_out),
                           unused, self._channel, str(top))  # fmt: skip
        return outcomes, rows_out, top

    async def _lock_heads(self, conn: Any, ids: list[str]) -> dict[str, tuple[int, bytes]]:
        rows = await conn.fetch(
            f"SELECT thread_id, last_seq, last_hash FROM {self._t['threads']} "
            "WHERE thread_id = ANY($1::text[]) ORDER BY thread_id FOR UPDATE",
            ids,
        )
        return {r[0]: (r[1], r[2]) for r in rows}

    @property
    def _write_sql(self) -> str:
        t = self._t
        return (
            f"WITH ins AS (INSERT INTO {t['events']} ({_ROW_COLUMNS}) SELECT * FROM unnest("
            "$1::text[], $2::bigint[], $3::text[], $4::text[], $5::float8[], $6::text[], "
            "$7::int[], $8::bytea[], $9::bytea[], $10::bigint[])), "
            f"upd AS (UPDATE {t['threads']} AS h SET last_seq = n.seq, last_hash = n.hash, "
            "updated_at = n.at, created_at = CASE WHEN h.last_seq = 0 THEN n.at "
            "ELSE h.created_at END, first_position = COALESCE(h.first_position, n.first) "
            "FROM unnest($11::text[], $12::bigint[], $13::bytea[], $14::float8[], "
            "$15::bigint[]) AS n(thread_id, seq, hash, at, first) "
            "WHERE h.thread_id = n.thread_id), "
            f"del AS (DELETE FROM {t['threads']} WHERE thread_id = ANY($16::text[]) "
            "AND last_seq = 0) SELECT pg_notify($17, $18)"
        )

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
        self._check_writable("claim a thread")
        claim = new_claim(self._checked_id(thread_id), lease=lease, purpose=purpose)
        hold(claim)  # before the write: a rival claim queued behind it must see it alive
        try:
            await self._call(self._take(claim, under))
        except BaseException:
            let_go(claim)
            raise
        self._heartbeat.add(claim)
        return claim

    async def _take(self, claim: Claim, under: Claim | None = None) -> None:
        """Record the claim, taking over a dead holder's; heartbeats and the holder's age
        are the database's time, never this host's."""
        c = self._t["claims"]
        values = (claim.thread_id, claim.token, claim.host, claim.pid, claim.started,
                  claim.lease, claim.purpose)  # fmt: skip
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                if under is not None and not await conn.fetchval(
                    f"SELECT true FROM {c} WHERE thread_id = $1 AND token = $2 FOR SHARE",
                    under.thread_id, under.token,
                ):  # fmt: skip
                    raise lost_under(claim, under)  # held FOR SHARE: not taken over meanwhile
                while True:
                    taken = await conn.fetchval(
                        f"INSERT INTO {c} (thread_id, {_HOLDER_COLUMNS}) VALUES "
                        f"($1, $2, $3, $4, $5, {_DB_NOW}, $6, $7) ON CONFLICT DO NOTHING "
                        "RETURNING token",
                        *values,
                    )
                    if taken is not None:
                        return
                    row = await conn.fetchrow(
                        f"SELECT {_HOLDER_COLUMNS}, {_DB_NOW} FROM {c} WHERE thread_id = $1 "
                        "FOR UPDATE",
                        claim.thread_id,
                    )
                    if row is None:  # released in between: try the insert again
                        continue
                    holder, now = Holder(*row[:-1]), row[-1]
                    if holder.alive(now):
                        raise holder.busy_error(claim.thread_id, now)
                    await conn.execute(
                        f"UPDATE {c} SET token = $2, host = $3, pid = $4, started = $5, "
                        f"heartbeat_at = {_DB_NOW}, lease = $6, purpose = $7 "
                        "WHERE thread_id = $1",
                        *values,
                    )
                    return
        except (asyncpg.PostgresError, *_LOST) as exc:
            raise self._error(exc, "the thread was not claimed") from exc

    async def release(self, claim: Claim) -> None:
        self._heartbeat.discard(claim)
        let_go(claim)
        if self._closing or not self._opened:
            await asyncio.to_thread(self._drop_on_own_connection, claim)
            return
        await self._drop(claim)

    async def _drop(self, claim: Claim) -> None:
        await self._query(
            "execute",
            f"DELETE FROM {self._t['claims']} WHERE thread_id = $1 AND token = $2",
            claim.thread_id, claim.token,
        )  # fmt: skip

    def release_threadsafe(self, claim: Claim) -> None:
        self._heartbeat.discard(claim)
        let_go(claim)
        loop = self._loop
        if loop is not None and loop.running and not self._closing and not self.readonly:
            try:
                loop.submit(self._drop_quietly(claim))
                return
            except StoreClosedError:
                pass  # the store closed just now: drop it on a connection of its own
        if not self.readonly:
            threading.Thread(
                target=self._drop_on_own_connection, args=(claim,), daemon=True
            ).start()

    async def _drop_quietly(self, claim: Claim) -> None:
        with contextlib.suppress(Exception):  # else it stays until seen dead
            await self._drop(claim)

    def _drop_on_own_connection(self, claim: Claim) -> None:
        """Release a claim after the store closed (blocking: never on an event loop)."""

        async def drop() -> None:
            conn = await asyncpg.connect(
                self.dsn, timeout=self.connect_timeout, server_settings=self._settings
            )
            try:
                await conn.execute(
                    f"DELETE FROM {self._t['claims']} WHERE thread_id = $1 AND token = $2",
                    claim.thread_id, claim.token,
                )  # fmt: skip
            finally:
                await conn.close()

        with contextlib.suppress(Exception):
            asyncio.run(drop())

    async def relabel(self, claim: Claim, purpose: str) -> None:
        self._check_writable("relabel a claim")
        await self._query(
            "execute",
            f"UPDATE {self._t['claims']} SET purpose = $3 WHERE thread_id = $1 AND token = $2",
            claim.thread_id, claim.token, purpose,
        )  # fmt: skip

    async def holder(self, thread_id: str) -> Holder | None:
        """The thread's owner, its heartbeat shifted to this host's clock: its age is the
        database's (`alive(time.time())` then judges it as the store itself does)."""
        self._check_open()
        row = await self._query(
            "fetchrow",
            f"SELECT {_HOLDER_COLUMNS}, {_DB_NOW} FROM {self._t['claims']} WHERE thread_id = $1",
            self._checked_id(thread_id),
        )
        if row is None:
            return None
        holder = Holder(*row[:-1])
        return dataclasses.replace(holder, heartbeat_at=holder.heartbeat_at + time.time() - row[-1])

    def _renew_blocking(self, claims: list[Claim], now: float) -> None:
        """Beat the claims at the database's time (`now`, this host's, is not used)."""
        loop = self._loop
        if loop is None or not loop.running or self._closing:
            return
        c = self._t["claims"]
        # Rows locked in thread order, as appends lock them (FOR SHARE): no deadlock between.
        sql = (
            f"UPDATE {c} SET heartbeat_at = {_DB_NOW} WHERE thread_id IN (SELECT thread_id "
            f"FROM {c} WHERE token = ANY($1::text[]) ORDER BY thread_id FOR UPDATE)"
        )
        loop.submit(self._query("execute", sql, [c.token for c in claims])).result(60)

    # ---- LISTEN/NOTIFY: the wake-up of followers -------------------------------------------

    async def _listen(self) -> None:
        """Keep a connection listening on the schema's channel; reconnect when it drops."""
        while not self._closing:
            lost = asyncio.Event()
            conn = None
            try:
                conn = await asyncpg.connect(
                    self.dsn, timeout=self.connect_timeout, server_settings=self._settings
                )
                conn.add_termination_listener(partial(_set, lost))
                await conn.add_listener(self._channel, self._notified)
                top = await conn.fetchval(f"SELECT position FROM {self._t['counter']}")
                self.commit_signal.advance(int(top or 0))  # what committed while deaf
                await lost.wait()
            except asyncio.CancelledError:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), 2)
                raise
            except Exception:  # the server is away: followers poll meanwhile
                pass
            await asyncio.sleep(0.5)

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self.commit_signal.advance(int(payload))

    # ---- reads ---------------------------------------------------------------------------

    async def _fetch(self, thread_id: str, from_seq: int, to_seq: int, limit: int) -> list[Row]:
        rows = await self._query(
            "fetch",
            f"SELECT {_ROW_COLUMNS} FROM {self._t['events']} WHERE thread_id = $1 AND seq "
            "BETWEEN $2 AND $3 ORDER BY seq LIMIT $4",
            thread_id, from_seq, min(to_seq, 2**62), limit,
        )  # fmt: skip
        return [Row(*r) for r in rows]

    async def _fetch_all(self, from_position: int, limit: int) -> list[Row]:
        rows = await self._query(
            "fetch",
            f"SELECT {_ROW_COLUMNS} FROM {self._t['events']} WHERE position > $1 "
            "ORDER BY position LIMIT $2",
            from_position, limit,
        )  # fmt: skip
        return [Row(*r) for r in rows]

    async def _head(self, thread_id: str) -> tuple[int, bytes] | None:
        row = await self._query(
            "fetchrow",
            f"SELECT last_seq, last_hash FROM {self._t['threads']} "
            "WHERE thread_id = $1 AND last_seq > 0",
            thread_id,
        )
        return None if row is None else (row[0], row[1])

    async def last_position(self) -> int:
        """The position of the newest committed record; 0 when the store holds none."""
        self._check_open()
        top = await self._query("fetchval", f"SELECT position FROM {self._t['counter']}")
        return int(top or 0)

    async def threads(self) -> list[str]:
        self._check_open()
        rows = await self._query(
            "fetch",
            f"SELECT thread_id FROM {self._t['threads']} WHERE last_seq > 0 "
            "ORDER BY first_position",
        )
        return [r[0] for r in rows]

    async def _seqs_of_kind(self, thread_id: str, kind: str) -> list[int]:
        rows = await self._query(
            "fetch",
            f"SELECT seq FROM {self._t['events']} WHERE thread_id = $1 AND kind = $2 ORDER BY seq",
            thread_id, kind,
        )  # fmt: skip
        return [r[0] for r in rows]

    async def _fetch_carriers(self, thread_id: str, seqs: Sequence[int]) -> list[Linked]:
        if not seqs:
            return []
        rows = await self._query(
            "fetch",
            "SELECT e.seq, e.run_id, e.actor, e.at, e.kind, e.version, e.position, e.payload, "
            f"e.hash, p.hash FROM {self._t['events']} e LEFT JOIN "
            f"{self._t['events']} p ON p.thread_id = e.thread_id AND p.seq = e.seq - 1 "
            "WHERE e.thread_id = $1 AND e.seq = ANY($2::bigint[]) "
            "AND e.kind = ANY($3::text[]) ORDER BY e.seq",
            thread_id, list(seqs), list(MESSAGE_KINDS),
        )  # fmt: skip
        return [tuple(r) for r in rows]

    # ---- snapshots -----------------------------------------------------------------------

    async def _put_snapshot(self, thread_id: str, stored: StoredSnapshot) -> None:
        self._check_writable("save a snapshot")
        await self._query(
            "execute",
            f"INSERT INTO {self._t['snapshots']} (thread_id, seq, state_type, at, state, hash, "
            "anchor, refs) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (thread_id, seq) "
            "DO UPDATE SET state_type = excluded.state_type, at = excluded.at, "
            "state = excluded.state, hash = excluded.hash, anchor = excluded.anchor, "
            "refs = excluded.refs",
            thread_id, *stored,
        )  # fmt: skip

    async def _get_snapshot(self, thread_id: str, max_seq: int) -> StoredSnapshot | None:
        row = await self._query(
            "fetchrow",
            "SELECT seq, state_type, at, state, hash, anchor, refs FROM "
            f"{self._t['snapshots']} WHERE thread_id = $1 AND seq <= $2 ORDER BY seq DESC LIMIT 1",
            thread_id, max_seq,
        )  # fmt: skip
        return None if row is None else StoredSnapshot(*row)

    async def _snapshot_seqs(self, thread_id: str) -> list[int]:
        rows = await self._query(
            "fetch",
            f"SELECT seq FROM {self._t['snapshots']} WHERE thread_id = $1 ORDER BY seq",
            thread_id,
        )
        return [r[0] for r in rows]


def _set(event: asyncio.Event, _conn: Any) -> None:
    event.set()


def _columns(rows: list[Row]) -> list[list[Any]]:
    """The rows as one array per column, in `_ROW_COLUMNS` order (for unnest)."""
    return [list(column) for column in zip(*rows, strict=True)]


def _heads_of(rows: list[Row]) -> list[list[Any]]:
    """Per thread written: its new head (seq, hash, time) and its first row's position."""
    last: dict[str, Row] = {}
    first: dict[str, int] = {}
    for row in rows:
        last[row.thread_id] = row
        first.setdefault(row.thread_id, row.position)
    ids = list(last)
    return [
        ids,
        [last[t].seq for t in ids],
        [last[t].hash for t in ids],
        [last[t].at for t in ids],
        [first[t] for t in ids],
    ]
