"""The conformance suite against SQLite, plus what only a file can show."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.testing import until, wait_all_tasks_blocked
from agentlog.events import EventStore, NodeEntered, SQLiteEventStore
from agentlog.events.claims import Holder
from agentlog.events.kinds import Event
from agentlog.events.stores import sqlite
from agentlog.events.testing import StoreConformance, rewritten_row

from .helpers import step_events


class TestSQLiteStore(StoreConformance):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[EventStore]:
        async with SQLiteEventStore(tmp_path / "log.db") as store:
            yield store

    async def forge_holder(self, store: EventStore, thread_id: str, holder: Holder) -> None:
        assert isinstance(store, SQLiteEventStore)
        await store.open()
        conn = sqlite3.connect(store.path, timeout=10)
        with conn:
            conn.execute(
                "INSERT OR REPLACE INTO claims (thread_id, token, host, pid, started, "
                "heartbeat_at, lease, purpose) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    thread_id, holder.token, holder.host, holder.pid, holder.started,
                    holder.heartbeat_at, holder.lease, holder.purpose,
                ),
            )  # fmt: skip
        conn.close()

    async def alter_record(
        self, store: EventStore, thread_id: str, seq: int, event: Event, rehash: bool = False
    ) -> None:
        assert isinstance(store, SQLiteEventStore)
        row = await rewritten_row(store, thread_id, seq, event, rehash)
        conn = sqlite3.connect(store.path, timeout=10)
        with conn:
            conn.execute(
                "UPDATE events SET payload = ?, hash = ? WHERE thread_id = ? AND seq = ?",
                (row.payload, row.hash, thread_id, seq),
            )
        conn.close()


async def test_records_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    async with SQLiteEventStore(path) as store:
        written = await store.append("t", step_events(1), expected_seq=0, run_id="r")
    async with SQLiteEventStore(path) as store:
        assert [r async for r in store.read("t")] == written
        assert await store.last_seq("t") == 3
        assert (await store.verify("t")).ok


async def test_store_opens_lazily_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "lazy.db"
    store = SQLiteEventStore(path)
    assert not path.exists()
    await store.append("t", [NodeEntered(node="n")], expected_seq=0)
    assert path.exists()
    await store.close()
    await store.close()  # closing twice is harmless


async def test_group_commit_puts_concurrent_appends_in_few_transactions(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "g.db") as store:
        await store.open()
        writer = store._writer
        assert writer is not None
        statements: list[str] = []
        await writer.call(lambda conn: conn.set_trace_callback(statements.append))
        await asyncio.gather(
            *(store.append(f"t{i}", step_events(1), expected_seq=0) for i in range(50))
        )
        commits = sum(1 for s in statements if s.strip().upper() == "COMMIT")
        assert 1 <= commits < 10, commits
        for i in range(50):
            assert [r.seq async for r in store.read(f"t{i}")] == [1, 2, 3]


async def test_an_integer_clock_still_verifies(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "c.db", clock=lambda: 1_700_000_000) as store:
        await store.append("t", step_events(1), expected_seq=0)
        assert (await store.verify("t")).ok


async def test_an_append_cancelled_while_queued_is_not_written(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "q.db") as store:
        first = asyncio.ensure_future(store.append("a", step_events(1), expected_seq=0))
        await asyncio.sleep(0)  # the first batch is on the writer thread
        queued = asyncio.ensure_future(store.append("b", step_events(1), expected_seq=0))
        await asyncio.sleep(0)
        queued.cancel()
        await first
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert await store.last_seq("b") == 0


async def test_close_during_the_first_open_leaves_nothing_running(tmp_path: Path) -> None:
    from agentlog.events import StoreClosedError

    store = SQLiteEventStore(tmp_path / "o.db")
    append = asyncio.ensure_future(store.append("t", step_events(1), expected_seq=0))
    await asyncio.sleep(0)
    await store.close()
    with pytest.raises(StoreClosedError):
        await append
    assert store._writer is None and store._reader is None


@pytest.mark.parametrize("reading", [-0.0, float("nan"), float("inf")])
async def test_odd_clock_readings_never_store_an_unverifiable_record(
    tmp_path: Path, reading: float
) -> None:
    from agentlog.events import InvalidAppendError

    async with SQLiteEventStore(tmp_path / "clock.db", clock=lambda: reading) as store:
        if reading == 0.0:
            await store.append("t", step_events(1), expected_seq=0)
            assert (await store.verify("t")).ok
        else:
            with pytest.raises(InvalidAppendError, match="clock"):
                await store.append("t", step_events(1), expected_seq=0)
            assert await store.last_seq("t") == 0


def test_one_store_serves_two_event_loops_at_once(tmp_path: Path) -> None:
    """Two apps on one store, each driven by its blocking API (a private loop each), from two
    threads: every append is answered on its own loop, none waits for ever."""
    import threading

    from agentlog.actors import END, StateGraph
    from agentlog.projections import AgentState, Message

    def reply(state: AgentState) -> list[Message]:
        return [Message.text_message("ok", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("reply", reply)
    graph.set_entry_point("reply")
    graph.add_edge("reply", END)
    store = SQLiteEventStore(tmp_path / "log.db")
    apps = [graph.compile(checkpointer=store), graph.compile(checkpointer=store)]
    done: list[str] = []

    def drive(k: int) -> None:
        for i in range(15):
            out = apps[k].invoke("hi", {"thread_id": f"t{k}-{i}"})
            done.append(out["status"])

    workers = [threading.Thread(target=drive, args=(k,), daemon=True) for k in (0, 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not any(w.is_alive() for w in workers), "an append was never answered"
    assert done.count("completed") == 30
    for app in apps:
        app.close()


async def _threads_committing(store: SQLiteEventStore) -> list[int]:
    """A list that gains the id of the thread running each COMMIT on the writer connection."""
    await store.open()
    writer = store._writer
    assert writer is not None
    committed_on: list[int] = []

    def trace(statement: str) -> None:
        if statement.strip().upper() == "COMMIT":
            committed_on.append(threading.get_ident())

    await writer.call(lambda conn: conn.set_trace_callback(trace))
    return committed_on


async def test_an_idle_writer_lets_the_loop_commit_itself(tmp_path: Path) -> None:
    """A lone append commits on the caller's thread: no hop to the writer thread and back."""
    async with SQLiteEventStore(tmp_path / "inline.db") as store:
        committed_on = await _threads_committing(store)
        writer = store._writer
        assert writer is not None
        for seq in range(0, 9, 3):
            # idle: the writer thread may still hold the connection for a moment after the
            # job above reported (an append then takes the thread, which is only slower)
            await until(lambda: not writer._in_use.locked())
            await store.append("t", step_events(1), expected_seq=seq)
        assert committed_on == [threading.get_ident()] * 3
        assert (await store.verify("t")).ok


async def test_a_full_sync_store_keeps_its_commits_off_the_loop(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "full.db", synchronous="FULL") as store:
        committed_on = await _threads_committing(store)
        await store.append("t", step_events(1), expected_seq=0)
        assert committed_on and threading.get_ident() not in committed_on


async def test_a_write_lock_held_elsewhere_never_blocks_the_loop(tmp_path: Path) -> None:
    """While another connection holds the write lock, the append waits on the writer thread
    (SQLite's busy timeout) and the event loop keeps running; it commits once the lock goes."""
    import sqlite3

    path = tmp_path / "busy.db"
    async with SQLiteEventStore(path) as store:
        await store.append("t", step_events(1), expected_seq=0)
        committed_on = await _threads_committing(store)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            append = asyncio.ensure_future(store.append("t", step_events(1), expected_seq=3))
            writer = store._writer
            assert writer is not None
            # the loop turns (this wait runs on it) while the append waits for the lock
            await until(writer._in_use.locked, what="the append on the writer thread")
            await wait_all_tasks_blocked()
            assert not append.done()
        finally:
            other.execute("COMMIT")
            other.close()
        records = await asyncio.wait_for(append, 10)
        assert [r.seq for r in records] == [4, 5, 6]
        assert committed_on and threading.get_ident() not in committed_on  # the writer's
        assert (await store.verify("t")).ok


@pytest.mark.parametrize("every", [5, 10**9])
async def test_the_store_checkpoints_its_wal_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    """SQLite's autocheckpoint is off on the writer (it would run inside a commit on the
    loop); the store checkpoints on a connection of its own every `CHECKPOINT_ROWS` rows."""
    monkeypatch.setattr(sqlite, "CHECKPOINT_ROWS", every)
    path = tmp_path / "wal.db"
    async with SQLiteEventStore(path) as store:
        await store.append("t", step_events(1), expected_seq=0)
        size_before = path.stat().st_size
        for seq in range(3, 3 * 400, 3):  # ~1,600 WAL frames: past SQLite's own threshold
            await store.append("t", step_events(1), expected_seq=seq)
        grown = path.stat().st_size > size_before
    assert grown is (every == 5)


async def test_appends_go_on_while_a_checkpoint_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint copies on its own connection: appends keep committing while it runs,
    and rows committed meanwhile queue no second checkpoint behind it."""
    monkeypatch.setattr(sqlite, "CHECKPOINT_ROWS", 5)
    store = await SQLiteEventStore(tmp_path / "busy.db").open()
    release = threading.Event()
    checkpointer = store._checkpointer
    assert checkpointer is not None
    checkpointer.submit(lambda conn: release.wait(30))  # the checkpointer is busy from here
    try:
        for seq in range(0, 3 * 20, 3):
            await asyncio.wait_for(store.append("t", step_events(1), expected_seq=seq), 10)
        assert checkpointer._jobs.qsize() == 1  # the one checkpoint due, not one per commit
    finally:
        release.set()
    await store.close()
    async with SQLiteEventStore(tmp_path / "busy.db") as reopened:
        assert (await reopened.verify("t")).ok
        assert await reopened.last_seq("t") == 60


async def test_checkpoints_go_on_after_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each checkpoint, once done, lets the next one be queued: the WAL keeps being copied
    back for as long as the store writes."""
    ran: list[str] = []
    real = sqlite._checkpoint

    def counted(conn: Any) -> None:
        ran.append(threading.current_thread().name)
        real(conn)

    monkeypatch.setattr(sqlite, "CHECKPOINT_ROWS", 5)
    monkeypatch.setattr(sqlite, "_checkpoint", counted)
    async with SQLiteEventStore(tmp_path / "again.db") as store:
        for seq in range(0, 3 * 20, 3):
            await store.append("t", step_events(1), expected_seq=seq)
            await until(lambda: not store._checkpointing)  # the due one runs first
    assert len(ran) >= 9  # one per two appends (6 rows >= 5)
    assert set(ran) == {"agentlog-sqlite-checkpointer"}


def test_extended_sqlite_codes_map_to_the_error_of_their_primary_code() -> None:
    """SQLITE_CORRUPT_INDEX (779) is damage like SQLITE_CORRUPT (11); a busy code with
    extended bits is still busy."""
    import sqlite3

    from agentlog.events import CorruptDatabaseError, StoreUnavailableError
    from agentlog.events.stores.sqlite import _BUSY_CODES, _primary, storage_error

    corrupt = sqlite3.DatabaseError("database disk image is malformed")
    corrupt.sqlite_errorcode = 779  # type: ignore[attr-defined]
    assert isinstance(storage_error("x.db", corrupt), CorruptDatabaseError)
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = 261  # type: ignore[attr-defined]
    assert _primary(locked) in _BUSY_CODES
    assert isinstance(storage_error("x.db", locked), StoreUnavailableError)


async def test_a_failure_before_an_inline_commit_hands_it_to_the_writer_thread(
    tmp_path: Path,
) -> None:
    """If the connection refuses to turn its busy handler off, the commit goes to the
    writer thread as before; it never leaves the append waiting."""
    import sqlite3

    refused: list[str] = []

    class RefusingPragma:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def execute(self, sql: str, *args: Any) -> Any:
            if sql.startswith("PRAGMA busy_timeout"):
                refused.append(sql)
                raise sqlite3.OperationalError("disk I/O error")
            return self.conn.execute(sql, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.conn, name)

    store = await SQLiteEventStore(tmp_path / "refusing.db").open()
    try:
        committed_on = await _threads_committing(store)
        writer = store._writer
        assert writer is not None
        writer._conn = RefusingPragma(writer._conn)  # type: ignore[assignment]
        await until(lambda: not writer._in_use.locked())  # idle: the append tries inline
        records = await store.append("t", step_events(1), expected_seq=0)
        assert [r.seq for r in records] == [1, 2, 3]
        assert refused == ["PRAGMA busy_timeout = 0"]  # the inline attempt was refused
        assert committed_on and threading.get_ident() not in committed_on  # the writer's
        assert (await store.verify("t")).ok
    finally:
        if not store._in_flight:  # one left in flight would hold close() for ever
            await store.close()


def test_three_connections_creating_one_file_at_once_all_open_it(tmp_path: Path) -> None:
    """Stores opened at the same instant on a file that does not exist yet (three workers
    starting together) all open it: the switch to WAL that SQLite refuses without waiting,
    while another connection reads the new file, is tried again. 100 fresh files; the code
    before failed about one opening in sixty here."""
    failures: list[BaseException] = []

    def open_all(path: Path) -> None:
        ready = threading.Barrier(3)

        async def open_once(k: int) -> None:
            store = SQLiteEventStore(path)
            ready.wait()
            async with store:
                await store.append(f"t{k}", [NodeEntered(node="a")], expected_seq=0)

        def run(k: int) -> None:
            try:
                asyncio.run(open_once(k))
            except BaseException as exc:  # collected and reported below
                failures.append(exc)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

    for i in range(100):
        open_all(tmp_path / f"new-{i}.db")
    assert failures == []
