"""`SQLiteEventStore(path, readonly=True)`: reading a database without changing any file.

Tests run as root here, and root writes through chmod 0o555, so a truly read-only place is
made with a read-only bind mount in a private mount namespace (`unshare -m`), and the
reader runs there as a subprocess (tests/workers/readonly_reader.py). Without root the
directory is simply chmod'ed 0o555. When neither works the tests say why and skip. The
in-process tests force the immutable path by making `os.access` report the file
non-writable (monkeypatched), which exercises the same code on a directory that is in fact
writable, so "no file was created" is checked there too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentlog.events import (
    NodeEntered,
    NotAnAgentlogDatabaseError,
    ReadOnlyStoreError,
    Snapshot,
    SQLiteEventStore,
)

from .helpers import step_events

ROOT = Path(__file__).resolve().parent.parent
AGENTLOG = ROOT / ".venv" / "bin" / "agentlog"
TIMEOUT = 60.0

Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


def listing(directory: Path) -> dict[str, str]:
    """Every file of the directory with a digest of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


async def make_log(path: Path) -> None:
    """A database with two threads, closed cleanly (its WAL checkpointed and removed)."""
    async with SQLiteEventStore(path) as store:
        await store.append("t", step_events(1), expected_seq=0, run_id="r1")
        await store.append("t", step_events(2), expected_seq=3, run_id="r1")
        await store.append("u", step_events(1), expected_seq=0, run_id="r2")


def _probe_unshare(directory: Path) -> str | None:
    """None when a read-only bind mount can be made here; else why not."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare or mount is not installed"
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && ! touch "$1/probe"'
    try:
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", script, "sh", str(directory)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if done.returncode != 0 or (directory / "probe").exists():
        return f"a read-only bind mount is not possible here: {done.stderr.strip()}"
    return None


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[tuple[Path, Runner]]:
    """A directory, and a way to run a command that sees it read-only (really, even as root).

    The directory is writable to the test itself, so it can be filled first.
    """
    directory = tmp_path / "archive"
    directory.mkdir()
    if os.geteuid() == 0:
        why = _probe_unshare(directory)
        if why is not None:
            pytest.skip(f"running as root, which writes through chmod, and {why}")

        def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
            script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
            return subprocess.run(
                ["unshare", "-m", "sh", "-c", script, "sh", str(directory), *argv],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )

        yield directory, run
        return

    def run_chmod(argv: list[str]) -> subprocess.CompletedProcess[str]:
        os.chmod(directory, 0o555)
        for f in directory.iterdir():
            os.chmod(f, 0o444)
        try:
            return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
        finally:
            os.chmod(directory, 0o755)

    yield directory, run_chmod


def reader(db: Path) -> list[str]:
    return [sys.executable, "-m", "tests.workers.readonly_reader", str(db)]


# ---- a database where nothing can be written -----------------------------------------------


async def test_an_archive_in_a_read_only_directory_reads_and_refuses_writes(
    read_only: tuple[Path, Runner],
) -> None:
    directory, run = read_only
    db = directory / "log.db"
    await make_log(db)
    before = listing(directory)
    assert list(before) == ["log.db"]

    done = run(reader(db))
    assert done.returncode == 0, (done.stdout, done.stderr)
    report = json.loads(done.stdout)
    assert report["threads"] == ["t", "u"]
    assert report["read"] == {"t": [1, 2, 3, 4, 5, 6], "u": [1, 2, 3]}
    assert report["verify"] == {"t": True, "u": True}
    assert report["holder"] == {"t": False, "u": False}
    assert report["writes"] == {
        "append": "ReadOnlyStoreError",
        "claim": "ReadOnlyStoreError",
        "save_snapshot": "ReadOnlyStoreError",
    }
    assert listing(directory) == before  # no -wal, no -shm, the file's bytes unchanged


async def test_an_archive_with_a_pending_wal_is_refused_until_checkpointed(
    read_only: tuple[Path, Runner], tmp_path: Path
) -> None:
    """A -wal with commits cannot be read without writing: the error says to checkpoint."""
    directory, run = read_only
    live = tmp_path / "live.db"
    async with SQLiteEventStore(live) as store:
        await store.append("t", step_events(1), expected_seq=0)
        await store.append("t", step_events(2), expected_seq=3)
        assert os.path.getsize(f"{live}-wal") > 0
        shutil.copy(live, directory / "log.db")  # archived without a checkpoint
        shutil.copy(f"{live}-wal", directory / "log.db-wal")
    before = listing(directory)

    done = run(reader(directory / "log.db"))
    assert done.returncode == 2, (done.stdout, done.stderr)
    error = json.loads(done.stdout)
    assert error["error"] == "ReadOnlyStoreError"
    assert "checkpoint" in error["message"] and "log.db-wal" in error["message"]
    assert listing(directory) == before

    conn = sqlite3.connect(directory / "log.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()  # the last connection: SQLite removes the emptied -wal
    wal = directory / "log.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    before = listing(directory)
    done = run(reader(directory / "log.db"))
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["read"] == {"t": [1, 2, 3, 4, 5, 6]}
    assert listing(directory) == before


@pytest.mark.parametrize(
    "command",
    [["threads"], ["threads", "--json"], ["history", "t"], ["show", "t"], ["verify"]],
    ids=lambda c: "-".join(c),
)
async def test_cli_read_commands_work_on_a_read_only_archive(
    read_only: tuple[Path, Runner], command: list[str]
) -> None:
    directory, run = read_only
    db = directory / "log.db"
    await make_log(db)
    before = listing(directory)
    done = run([str(AGENTLOG), *command, "--db", str(db)])
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "t" in done.stdout
    assert listing(directory) == before


async def test_a_writable_open_of_a_read_only_archive_says_to_open_it_read_only(
    read_only: tuple[Path, Runner],
) -> None:
    directory, run = read_only
    db = directory / "log.db"
    await make_log(db)
    before = listing(directory)
    program = (
        "import asyncio, sys\n"
        "from agentlog.events import SQLiteEventStore\n"
        "async def main():\n"
        "    store = SQLiteEventStore(sys.argv[1])\n"
        "    try:\n"
        "        await store.threads()\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__, exc)\n"
        "    await store.close()\n"
        "asyncio.run(main())\n"
    )
    done = run([sys.executable, "-c", program, str(db)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ReadOnlyStoreError "), done.stdout
    assert "readonly=True" in done.stdout
    assert listing(directory) == before


# ---- the immutable path in-process (os.access monkeypatched) -------------------------------


@pytest.fixture
def unwritable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `os.access` say no file or directory is writable (root would always get yes)."""
    real = os.access

    def access(path: object, mode: int, *args: object, **kwargs: object) -> bool:
        if mode & os.W_OK:
            return False
        return real(path, mode, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", access)


@pytest.mark.usefixtures("unwritable")
async def test_immutable_open_reads_everything_and_creates_no_file(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    await make_log(db)
    before = listing(tmp_path)
    async with SQLiteEventStore(db, readonly=True) as store:
        assert await store.threads() == ["t", "u"]
        assert [r.seq async for r in store.read("t")] == [1, 2, 3, 4, 5, 6]
        assert [(r.thread_id, r.seq) async for r in store.read_all(7)] == [("u", 2), ("u", 3)]
        assert (await store.verify("u")).ok
        assert await store.load_snapshot("t") is None
        assert listing(tmp_path) == before  # not even while open
    assert listing(tmp_path) == before


async def test_a_file_without_write_permission_is_read_immutable(tmp_path: Path) -> None:
    """Mode 0o444 marks an archive even for root, who could write through it: no -shm,
    no -wal, no change, and still every record."""
    db = tmp_path / "log.db"
    await make_log(db)
    os.chmod(db, 0o444)
    before = listing(tmp_path)
    async with SQLiteEventStore(db, readonly=True) as store:
        assert [r.seq async for r in store.read("t")] == [1, 2, 3, 4, 5, 6]
        assert (await store.verify("t")).ok
        assert listing(tmp_path) == before
        with pytest.raises(ReadOnlyStoreError):
            await store.append("t", [NodeEntered(node="x")], expected_seq=6)
    assert listing(tmp_path) == before


@pytest.mark.usefixtures("unwritable")
async def test_immutable_open_refuses_a_wal_with_commits(tmp_path: Path) -> None:
    live, copy = tmp_path / "live.db", tmp_path / "copy"
    copy.mkdir()
    async with SQLiteEventStore(live) as store:
        await store.append("t", step_events(1), expected_seq=0)
        shutil.copy(live, copy / "log.db")
        shutil.copy(f"{live}-wal", copy / "log.db-wal")
    before = listing(copy)
    reading = SQLiteEventStore(copy / "log.db", readonly=True)
    with pytest.raises(ReadOnlyStoreError, match="checkpoint"):
        await reading.threads()
    await reading.close()
    assert listing(copy) == before


@pytest.mark.parametrize("write", ["append", "claim", "save_snapshot", "relabel", "release"])
async def test_every_write_on_a_read_only_store_is_refused(tmp_path: Path, write: str) -> None:
    """Writes raise ReadOnlyStoreError; `release` of a claim the store never held (it cannot
    hold any) may instead do nothing, as it does for a claim already lost."""
    db = tmp_path / "log.db"
    await make_log(db)
    async with SQLiteEventStore(db) as writer:
        claim = await writer.claim("u")  # a claim to name in relabel and release
        async with SQLiteEventStore(db, readonly=True) as store:
            attempts = {
                "append": lambda: store.append("t", [NodeEntered(node="x")], expected_seq=6),
                "claim": lambda: store.claim("t"),
                "save_snapshot": lambda: store.save_snapshot(
                    Snapshot(thread_id="t", seq=3, state={"x": 1})
                ),
                "relabel": lambda: store.relabel(claim, "hijacked"),
                "release": lambda: store.release(claim),
            }
            if write == "release":
                with contextlib.suppress(ReadOnlyStoreError):
                    await attempts[write]()
            else:
                with pytest.raises(ReadOnlyStoreError, match="read-only"):
                    await attempts[write]()
            assert await store.last_seq("t") == 6
            assert await store.load_snapshot("t") is None
            holder = await store.holder("u")
            assert holder is not None and holder.token == claim.token
            assert holder.purpose == "run"
        assert await writer.last_seq("t") == 6
        await writer.release(claim)


# ---- a live database, read while its writer works ------------------------------------------


async def test_a_read_only_store_sees_a_live_writers_commits(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as writer:
        await writer.append("t", step_events(1), expected_seq=0)
        async with SQLiteEventStore(db, readonly=True) as store:
            assert await store.last_seq("t") == 3
            await writer.append("t", step_events(2), expected_seq=3)
            assert await store.last_seq("t") == 6  # not a frozen (immutable) view
            assert (await store.verify("t")).ok


async def test_a_read_only_open_of_a_closed_database_creates_no_file(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    await make_log(db)
    before = listing(tmp_path)
    async with SQLiteEventStore(db, readonly=True) as store:
        assert await store.threads() == ["t", "u"]
    assert listing(tmp_path) == before


async def test_read_only_on_a_missing_or_empty_path_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    store = SQLiteEventStore(missing, readonly=True)
    with pytest.raises(NotAnAgentlogDatabaseError, match="no such file"):
        await store.threads()
    await store.close()
    assert not missing.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    store = SQLiteEventStore(empty, readonly=True)
    with pytest.raises(NotAnAgentlogDatabaseError, match="empty"):
        await store.threads()
    await store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]
    assert empty.read_bytes() == b""
