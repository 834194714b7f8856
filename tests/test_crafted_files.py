"""Files crafted to break a reader: out-of-range numbers, a marked but empty database, a
FIFO where a database should be, and a log edited by hand behind the store's back.

Every case must end in a typed error naming what is wrong (thread, seq, file), never in a
hang, a wrong answer or a write to the file.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentlog.events import (
    ChainBrokenError,
    CorruptDatabaseError,
    CorruptRecordError,
    NotAnAgentlogDatabaseError,
    Snapshot,
    SQLiteEventStore,
    StoreError,
)
from agentlog.events.codec import chain_hash
from agentlog.events.store import MAX_POSITION
from agentlog.projections import Message, take_snapshot

from .helpers import step_events, text_event
from .workers.claim_run import build_graph

ROOT = Path(__file__).resolve().parent.parent
AGENTLOG = ROOT / ".venv" / "bin" / "agentlog"
BIG = 2**63 - 1
"""The largest integer SQLite stores: far beyond what a store may hand out (2**53 - 1)."""


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cli(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run the agentlog command line; a hang fails the test instead of the suite."""
    try:
        return subprocess.run(
            [str(AGENTLOG), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"`agentlog {' '.join(args)}` hung for {timeout}s") from None


async def three_threads(db: Path) -> None:
    """Threads t, u (one step each) and v (one message), written through the store."""
    async with SQLiteEventStore(db) as store:
        await store.append("t", step_events(1), expected_seq=0)
        await store.append("u", step_events(1), expected_seq=0)
        await store.append("v", [text_event("a message")], expected_seq=0)


def edit(db: Path, fn: Callable[[sqlite3.Connection], None]) -> None:
    conn = sqlite3.connect(db)
    with conn:
        fn(conn)
    conn.close()


# ---- numbers beyond 2**53 - 1 ---------------------------------------------------------------


async def test_a_head_beyond_the_range_refuses_appends_to_its_thread_only(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    await three_threads(db)
    edit(db, lambda c: c.execute("UPDATE threads SET last_seq = ? WHERE thread_id = 'u'", (BIG,)))
    rows_before = _rows(db, "u")
    async with SQLiteEventStore(db) as store:
        with pytest.raises(CorruptRecordError) as info:
            await store.append("u", step_events(2), expected_seq=BIG)
        assert info.value.thread_id == "u" and str(BIG) in str(info.value)
        assert str(db) in str(info.value)
        with pytest.raises(StoreError, match="'u'"):  # whatever the caller believed
            await store.append("u", step_events(2), expected_seq=3)
        report = await store.verify("u")
        assert not report.ok and report.first_bad_seq == 4 and str(BIG) in (report.problem or "")
        with pytest.raises(ChainBrokenError, match="'u'"):
            [r async for r in store.read("u")]
        # The rest of the file is unharmed: other threads append, in range, in order.
        t = await store.append("t", step_events(2), expected_seq=3)
        w = await store.append("w", step_events(1), expected_seq=0)
        positions = [r.position for r in t + w]
        assert positions == list(range(8, 14))
        assert (await store.verify("t")).ok and (await store.verify("w")).ok
    assert _rows(db, "u") == rows_before


async def test_a_head_beyond_the_range_is_damage_whatever_seq_was_expected(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    await three_threads(db)
    edit(db, lambda c: c.execute("UPDATE threads SET last_seq = ? WHERE thread_id = 'u'", (BIG,)))
    async with SQLiteEventStore(db) as store:
        with pytest.raises(CorruptRecordError, match="'u'"):
            await store.append("u", step_events(2), expected_seq=3)


def _forge_far_row(db: Path) -> None:
    """Record 4 of thread t at position 2**63 - 1, chained correctly, head updated to it."""

    def forge(conn: sqlite3.Connection) -> None:
        prev = conn.execute("SELECT hash FROM events WHERE thread_id = 't' AND seq = 3").fetchone()
        payload = conn.execute(
            "SELECT payload FROM events WHERE thread_id = 'v' AND seq = 1"
        ).fetchone()[0]
        envelope = ("t", 4, "r", "agent", 5.0, "message_appended", 1, BIG)
        digest = chain_hash(prev[0], envelope, payload)
        conn.execute(
            "INSERT INTO events (thread_id, seq, run_id, actor, at, kind, version, position, "
            "payload, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*envelope, payload, digest),
        )
        conn.execute(
            "UPDATE threads SET last_seq = 4, last_hash = ? WHERE thread_id = 't'", (digest,)
        )

    edit(db, forge)


async def test_a_row_far_beyond_the_range_leaves_other_threads_appendable(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    await three_threads(db)
    _forge_far_row(db)
    async with SQLiteEventStore(db) as store:
        records = await store.append("w", step_events(1), expected_seq=0)
        assert [r.position for r in records] == [8, 9, 10]  # the forged number is not a base
        assert all(r.position <= MAX_POSITION for r in records)
        more = await store.append("u", step_events(2), expected_seq=3)
        assert [r.position for r in more] == [11, 12, 13]


async def test_a_row_far_beyond_the_range_is_damage_named_by_thread_and_seq(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    await three_threads(db)
    _forge_far_row(db)
    async with SQLiteEventStore(db) as store:
        report = await store.verify("t")
        assert not report.ok and report.first_bad_seq == 4
        with pytest.raises(CorruptRecordError, match="'t'") as info:
            await store.append("t", step_events(2), expected_seq=4)
        assert info.value.seq == 4  # type: ignore[attr-defined]
        # A subscriber must never be handed a cursor past every later commit.
        try:
            seen = [r.position async for r in store.read_all()]
        except CorruptRecordError as exc:
            assert "'t'" in str(exc)
        else:
            assert max(seen) <= MAX_POSITION


# ---- files that are not (whole) agentlog databases -----------------------------------------


@pytest.mark.parametrize("readonly", [False, True])
async def test_a_marked_file_without_tables_is_damaged(tmp_path: Path, readonly: bool) -> None:
    db = tmp_path / "marked.db"
    edit(db, lambda c: c.execute("PRAGMA application_id = 0x41474C47"))
    before = digest(db)
    store = SQLiteEventStore(db, readonly=readonly)
    with pytest.raises(CorruptDatabaseError, match="damaged") as info:
        await store.threads()
    await store.close()
    assert "events" in str(info.value) and str(db) in str(info.value)
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["marked.db"]


def test_the_cli_calls_a_marked_file_without_tables_damaged(tmp_path: Path) -> None:
    db = tmp_path / "marked.db"
    edit(db, lambda c: c.execute("PRAGMA application_id = 0x41474C47"))
    before = digest(db)
    done = cli("threads", "--db", str(db))
    assert done.returncode == 1 and "damaged" in done.stderr, (done.stdout, done.stderr)
    assert digest(db) == before


def _open_in_thread(path: Path, readonly: bool, timeout: float) -> BaseException | None:
    """Open a store on `path` in a daemon thread; the error it raised, or fail on a hang."""
    outcome: list[BaseException | None] = []

    def work() -> None:
        async def main() -> None:
            store = SQLiteEventStore(path, readonly=readonly)
            try:
                await store.threads()
            finally:
                await store.close()

        try:
            asyncio.run(main())
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        # Unblock an open() waiting for a writer (O_RDWR never blocks on a Linux FIFO).
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        worker.join(timeout)
        os.close(fd)
        raise AssertionError(f"opening {path} blocked for {timeout}s")
    return outcome[0]


@pytest.mark.parametrize("readonly", [False, True])
def test_a_fifo_is_refused_at_once_without_opening_it(tmp_path: Path, readonly: bool) -> None:
    fifo = tmp_path / "log.db"
    os.mkfifo(fifo)
    error = _open_in_thread(fifo, readonly, timeout=10.0)
    assert isinstance(error, NotAnAgentlogDatabaseError), error
    assert "regular file" in str(error) and str(fifo) in str(error)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.db"]


def test_the_cli_refuses_a_fifo_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "log.db"
    os.mkfifo(fifo)
    try:
        done = cli("threads", "--db", str(fifo), timeout=8.0)
    finally:
        with open(os.open(fifo, os.O_RDWR | os.O_NONBLOCK), "rb"):
            pass  # nothing must be left waiting on the pipe
    assert done.returncode == 1 and "regular file" in done.stderr, done.stderr


# ---- a log edited by hand: reads check the chain -------------------------------------------


async def _charged_thread(db: Path, effects: Path) -> None:
    """Thread "t" run to completion by the charge-card graph (a tool call, an answer)."""
    async with SQLiteEventStore(db) as store:
        graph = build_graph(store, str(effects), 0.0)
        await graph.ainvoke(
            {"messages": [Message.text_message("first input", message_id="u-1")]},
            {"thread_id": "t"},
        )


def _retext(db: Path, seq: int, old: str, new: str) -> None:
    """Change one message's text in record `seq` of thread t, keeping valid msgpack."""

    def change(conn: sqlite3.Connection) -> None:
        payload = conn.execute(
            "SELECT payload FROM events WHERE thread_id = 't' AND seq = ?", (seq,)
        ).fetchone()[0]
        data: dict[str, Any] = msgspec.msgpack.decode(payload)
        [block] = data["message"]["content"]
        assert block["text"] == old
        block["text"] = new
        conn.execute(
            "UPDATE events SET payload = ? WHERE thread_id = 't' AND seq = ?",
            (msgspec.msgpack.encode(data), seq),
        )

    edit(db, change)


def _rows(db: Path, thread: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT * FROM events WHERE thread_id = ? ORDER BY seq", (thread,)
        ).fetchall()
    finally:
        conn.close()


async def test_an_edited_message_is_refused_by_every_reader(tmp_path: Path) -> None:
    db, effects = tmp_path / "log.db", tmp_path / "effects"
    await _charged_thread(db, effects)
    _retext(db, 2, "first input", "forged input")
    rows = _rows(db, "t")
    config = {"thread_id": "t"}
    async with SQLiteEventStore(db) as store:
        graph = build_graph(store, str(effects), 0.0)
        with pytest.raises(ChainBrokenError) as info:
            await graph.aget_state(config)
        assert (info.value.thread_id, info.value.seq) == ("t", 2)
        with pytest.raises(ChainBrokenError) as info:
            await graph.ainvoke(None, config)
        assert (info.value.thread_id, info.value.seq) == ("t", 2)
        with pytest.raises(ChainBrokenError, match="seq 2 of thread 't'"):
            await graph.aget_state_history(config)
        assert await store.holder("t") is None  # the refused run gave its claim back
    assert _rows(db, "t") == rows  # nothing was appended on top of the forgery
    assert effects.read_text().count("start") == 1  # nor was anything run again

    shown = cli("show", "t", "--db", str(db))
    assert shown.returncode == 1, shown.stdout
    assert "seq 2" in shown.stderr and "'t'" in shown.stderr
    assert "forged input" not in shown.stdout + shown.stderr
    checked = cli("verify", "t", "--db", str(db))
    assert checked.returncode == 1 and "seq 2" in checked.stderr + checked.stdout


async def test_a_snapshot_is_anchored_by_the_hash_of_its_record(tmp_path: Path) -> None:
    db, effects = tmp_path / "log.db", tmp_path / "effects"
    await _charged_thread(db, effects)
    config = {"thread_id": "t"}
    async with SQLiteEventStore(db) as store:
        graph = build_graph(store, str(effects), 0.0)
        honest = await graph.aget_state(config)
        last = await store.last_seq("t")
        middle = await take_snapshot(store, "t", seq=last - 3)
        assert await graph.aget_state(config) == honest  # snapshot + tail == the full fold

        records = [r async for r in store.read("t")]
        wrong = records[last - 5].hash  # another record's hash
        for seq in (last - 3, last):
            await store.save_snapshot(
                Snapshot(
                    thread_id="t",
                    seq=seq,
                    state=middle.state,
                    state_type=middle.state_type,
                    hash=wrong,
                )
            )
            with pytest.raises(ChainBrokenError) as info:
                await graph.aget_state(config)
            assert (info.value.thread_id, info.value.seq) == ("t", seq)

        # A snapshot whose state was changed but whose hash was kept is NOT detected: the
        # hash anchors the snapshot to the chain, not the snapshot's own bytes. Whoever can
        # write the snapshots table can rewrite history this way; verify() checks records.
        await store.save_snapshot(
            Snapshot(thread_id="t", seq=last, state={}, state_type="", hash="")
        )  # an unanchored snapshot is never used: the honest fold comes back
        assert await graph.aget_state(config) == honest
        await store.save_snapshot(
            Snapshot(
                thread_id="t",
                seq=last,
                state={**honest.model_dump(mode="python"), "context_summary": "rewritten"},
                state_type=middle.state_type,
                hash=records[last - 1].hash,
            )
        )
        believed = await graph.aget_state(config)
        assert believed.context_summary == "rewritten"  # the known limit, stated above
        assert (await store.verify("t")).ok
