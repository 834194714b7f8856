"""`open_store`: every address form, its errors, read-only and create, and the CLI's --db."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agentlog.events import (
    AgentlogError,
    InvalidArgumentError,
    MemoryEventStore,
    NodeEntered,
    NotAnAgentlogDatabaseError,
    ReadOnlyStoreError,
    SQLiteEventStore,
    StoreNotFoundError,
    StoreUnavailableError,
    StoreURLError,
    open_store,
)

from .helpers import ROOT, agentlog, step_events


def listing(directory: Path) -> dict[str, str]:
    """Every file of the directory with a digest of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


async def make_log(path: Path, threads: tuple[str, ...] = ("t",)) -> None:
    """An agentlog database at `path` holding one step in each thread."""
    async with SQLiteEventStore(path) as store:
        for thread_id in threads:
            await store.append(thread_id, step_events(1), expected_seq=0)


# ---- the forms of an address ------------------------------------------------------------------


@pytest.mark.parametrize("as_path", [False, True])
async def test_a_plain_path_is_a_sqlite_file(tmp_path: Path, as_path: bool) -> None:
    target = tmp_path / "log.db"
    store = open_store(target if as_path else str(target))
    assert isinstance(store, SQLiteEventStore) and store.path == str(target)
    assert not target.exists()  # opened when entered, as SQLiteEventStore is
    async with store:
        await store.append("t", [NodeEntered(node="n")], expected_seq=0)
    async with open_store(str(target)) as again:
        assert await again.threads() == ["t"]


async def test_three_slashes_name_a_file_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    store = open_store("sqlite:///sub/log.db")
    assert isinstance(store, SQLiteEventStore) and store.path == "sub/log.db"
    async with store:
        await store.append("t", [NodeEntered(node="n")], expected_seq=0)
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["log.db"]
    async with open_store(tmp_path / "sub" / "log.db") as same:
        assert await same.last_seq("t") == 1


async def test_four_slashes_name_an_absolute_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    target = tmp_path / "abs.db"
    url = f"sqlite:///{target}"
    assert url.startswith("sqlite:////")
    store = open_store(url)
    assert isinstance(store, SQLiteEventStore) and store.path == str(target)
    async with store:
        await store.append("t", [NodeEntered(node="n")], expected_seq=0)
    assert target.exists() and list(elsewhere.iterdir()) == []


async def test_a_url_path_is_percent_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///odd%20name%3F%23%25.db")
    assert isinstance(store, SQLiteEventStore) and store.path == "odd name?#%.db"
    async with store:
        await store.append("t", [NodeEntered(node="n")], expected_seq=0)
    assert (tmp_path / "odd name?#%.db").exists()


def test_the_scheme_is_read_without_regard_to_case(tmp_path: Path) -> None:
    store = open_store(f"SQLite:///{tmp_path}/x.db")
    assert isinstance(store, SQLiteEventStore) and store.path == f"{tmp_path}/x.db"
    assert isinstance(open_store("MEMORY://"), MemoryEventStore)


@pytest.mark.parametrize(
    "address", ["memory://", "sqlite://", "sqlite://:memory:", "sqlite:///:memory:", ":memory:"]
)
async def test_in_memory_forms_give_a_new_memory_store(
    address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first, second = open_store(address), open_store(address)
    assert isinstance(first, MemoryEventStore) and isinstance(second, MemoryEventStore)
    async with first, second:
        await first.append("t", [NodeEntered(node="n")], expected_seq=0)
        assert await first.threads() == ["t"]
        assert await second.threads() == []  # each is a store of its own
    assert list(tmp_path.iterdir()) == []  # no file called ":memory:" appears


# ---- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://agent:s3cret-pw@db.example:5432/log",
        "postgres://agent:s3cret-pw@db.example/log",
        "postgresql+psycopg://agent:s3cret-pw@db.example/log",
        "PostgreSQL://db.example/log",
    ],
)
def test_postgres_urls_are_served_by_the_postgres_store(url: str) -> None:
    store = open_store(url)  # not opened: nothing is contacted
    assert type(store).__name__ == "PostgresEventStore"
    assert "s3cret" not in store._where  # type: ignore[attr-defined] # never echoed


@pytest.mark.parametrize(
    "url", ["mysql://u:s3cret@h/db", "file:///tmp/x.db", "https://example.com/log.db"]
)
def test_an_unknown_scheme_names_the_accepted_forms(url: str) -> None:
    with pytest.raises(StoreURLError) as info:
        open_store(url)
    assert isinstance(info.value, InvalidArgumentError) and isinstance(info.value, AgentlogError)
    message = str(info.value)
    assert url.split("://")[0] in message
    for form in ("sqlite:///relative", "sqlite:////absolute", "memory://", "path"):
        assert form in message
    assert "s3cret" not in message


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("sqlite://host/x.db", "names a host"),
        ("sqlite://u:s3cret@host/x.db", "names a host"),
        ("sqlite:///x.db?mode=ro", "options"),
        ("sqlite:///x.db#frag", "options"),
        ("sqlite:///", "names no file"),
        ("sqlite:///dir/", "names no file"),
        ("sqlite:///%FF.db", "not UTF-8"),
        ("sqlite:///a%00b.db", "NUL"),
        ("a\x00b.db", "NUL"),
        ("memory://named", "takes nothing after it"),
        ("", "empty"),
    ],
)
def test_a_malformed_address_is_a_typed_error_and_creates_nothing(
    address: str, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreURLError, match=words) as info:
        open_store(address)
    assert "s3cret" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_an_address_that_is_no_text_is_a_typed_error() -> None:
    with pytest.raises(StoreURLError, match="str or a path, got int"):
        open_store(42)  # type: ignore[arg-type]
    with pytest.raises(StoreURLError, match="got bytes"):
        open_store(b"log.db")  # type: ignore[arg-type]


# ---- read-only and create ----------------------------------------------------------------------


@pytest.mark.parametrize("form", ["path", "url"])
async def test_readonly_reads_and_refuses_every_write(tmp_path: Path, form: str) -> None:
    db = tmp_path / "log.db"
    await make_log(db)
    before = listing(tmp_path)
    store = open_store(db if form == "path" else f"sqlite:///{db}", readonly=True)
    assert isinstance(store, SQLiteEventStore) and store.readonly
    async with store:
        assert await store.threads() == ["t"]
        assert (await store.verify("t")).ok
        with pytest.raises(ReadOnlyStoreError):
            await store.append("t", [NodeEntered(node="n")], expected_seq=3)
        with pytest.raises(ReadOnlyStoreError):
            await store.claim("t")
    assert listing(tmp_path) == before  # not a byte changed, no -wal or -shm left behind


async def test_a_writable_store_of_an_existing_file_appends(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    await make_log(db)
    store = open_store(f"sqlite:///{db}", create=False)
    assert isinstance(store, SQLiteEventStore) and not store.readonly
    async with store:
        await store.append("t", [NodeEntered(node="n")], expected_seq=3)
        assert await store.last_seq("t") == 4


@pytest.mark.parametrize(
    "kwargs", [{"create": False}, {"readonly": True}, {"readonly": True, "create": False}]
)
def test_a_missing_database_is_not_created_unless_asked(
    tmp_path: Path, kwargs: dict[str, bool]
) -> None:
    for address in (str(tmp_path / "none.db"), f"sqlite:///{tmp_path}/none.db"):
        with pytest.raises(StoreNotFoundError, match="no database at") as info:
            open_store(address, **kwargs)
        assert isinstance(info.value, LookupError) and "nothing was created" in str(info.value)
    assert list(tmp_path.iterdir()) == []


async def test_by_default_a_missing_database_is_created(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    async with open_store(f"sqlite:///{db}") as store:
        assert await store.threads() == []
    assert db.exists()
    async with open_store(db, readonly=True) as store:  # an agentlog database now
        assert await store.threads() == []


async def test_a_missing_directory_is_reported_on_opening(tmp_path: Path) -> None:
    store = open_store(tmp_path / "no" / "such" / "log.db")
    with pytest.raises(StoreUnavailableError, match="does not exist"):
        async with store:
            pass
    assert list(tmp_path.iterdir()) == []


def test_readonly_cannot_be_asked_to_create(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="create=False"):
        open_store(tmp_path / "x.db", readonly=True, create=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kwargs", [{"create": False}, {"readonly": True}])
def test_an_existing_memory_store_cannot_be_asked_for(kwargs: dict[str, bool]) -> None:
    with pytest.raises(StoreNotFoundError, match="new and empty each time"):
        open_store("memory://", **kwargs)


def _other_program_db(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()


def _unmarked_db(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 1")  # a SQLite file, written, without agentlog's mark
    conn.execute("VACUUM")
    conn.close()


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_bytes(b""), "empty file"),
        (lambda p: p.write_text("meeting notes\n" * 20), "not a SQLite file"),
        (lambda p: p.write_bytes(b"SQLite format 3\x00"), "not a SQLite file"),  # cut short
        (_other_program_db, "without agentlog's mark"),
        (_unmarked_db, "without agentlog's mark"),
        (lambda p: os.mkfifo(p), "not a regular file"),
    ],
)
@pytest.mark.parametrize("readonly", [False, True])
def test_what_is_no_agentlog_database_is_refused_untouched(
    tmp_path: Path, make: object, why: str, readonly: bool
) -> None:
    target = tmp_path / "target.db"
    make(target)  # type: ignore[operator]
    before = listing(tmp_path)
    with pytest.raises(NotAnAgentlogDatabaseError, match=why) as info:
        open_store(f"sqlite:///{target}", readonly=readonly, create=False)
    assert "left untouched" in str(info.value)
    assert listing(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "target.db"
    ]


# ---- the command line -----------------------------------------------------------------------


def _threads(done: object) -> list[str]:
    assert done.returncode == 0, done.stderr  # type: ignore[attr-defined]
    return [t["thread_id"] for t in json.loads(done.stdout)]  # type: ignore[attr-defined]


async def test_the_cli_reads_a_database_named_by_url(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    db = tmp_path / "logs" / "x.db"
    await make_log(db, ("first", "second"))
    before = listing(tmp_path / "logs")
    relative = agentlog("threads", "--db", "sqlite:///logs/x.db", "--json", cwd=tmp_path)
    assert _threads(relative) == ["first", "second"]
    absolute = agentlog("threads", "--db", f"sqlite:///{db}", "--json")
    assert _threads(absolute) == ["first", "second"]
    plain = agentlog("threads", "--db", "logs/x.db", "--json", cwd=tmp_path)
    assert _threads(plain) == ["first", "second"]
    verified = agentlog("verify", "first", "--db", f"sqlite:///{db}", "--json")
    assert verified.returncode == 0, verified.stderr
    assert listing(tmp_path / "logs") == before  # reading is read-only, through a URL too


async def test_the_cli_writes_and_creates_through_a_url(tmp_path: Path) -> None:
    made = agentlog("demo", "--db", "sqlite:///demo.db", "--json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "demo.db").exists()
    [thread] = _threads(agentlog("threads", "--db", "sqlite:///demo.db", "--json", cwd=tmp_path))
    forked = agentlog(
        "fork", thread, "--step", "1", "--to", "branch", "--db", f"sqlite:///{tmp_path}/demo.db"
    )
    assert forked.returncode == 0, forked.stderr
    assert forked.stdout.strip() == "branch"
    async with open_store(tmp_path / "demo.db", readonly=True) as store:
        assert await store.threads() == [thread, "branch"]


@pytest.mark.parametrize(
    ("db", "words"),
    [
        ("sqlite:///missing.db", ("no database at sqlite:///missing.db", "nothing was created")),
        ("memory://", ("no database at memory://", "nothing was created")),
        ("postgresql://agent:s3cret@db.example/log", ("cannot connect to PostgreSQL", "***")),
        ("mysql://db.example/log", ("'mysql'", "sqlite:///relative/path.db")),
        ("sqlite://host/x.db", ("names a host",)),
    ],
)
def test_the_cli_reports_a_bad_url_in_one_line(tmp_path: Path, db: str, words: tuple[str]) -> None:
    done = agentlog("threads", "--db", db, cwd=tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    [line] = done.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in done.stderr
    for word in words:
        assert word in line, line
    assert "s3cret" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_conformance_suite_ships_without_burdening_import_events() -> None:
    """`agentlog.events.testing` is importable from the package, and `import events` loads no
    pytest."""
    probe = (
        "import sys, agentlog.events; "
        "assert 'pytest' not in sys.modules and 'hypothesis' not in sys.modules, 'test deps'; "
        "assert 'agentlog.events.testing' not in sys.modules, 'suite imported'; "
        "from agentlog.events.testing import StoreConformance; "
        "assert 'pytest' in sys.modules; print(StoreConformance.__module__)"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "agentlog.events.testing"
