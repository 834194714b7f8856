"""`agentlog runtime`, run as a real process on a real SQLite file: it runs the runtime the
app builds (timer runs complete), prints one JSON line per change of its figures, stops
cleanly on SIGTERM or SIGINT (a second signal cancels), leaves a log that verifies and runs
the next runtime resumes, and refuses a bad --app in one line, writing nothing."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.runtime.ledger import Ledger
from agentlog.actors.testing import until_blocking
from agentlog.events import MessageAppended, NotAnAgentlogDatabaseError, SQLiteEventStore
from agentlog.events.follow import last_position

from .helpers import ROOT, agentlog

PATIENCE = 60.0
"""How long a test waits for output that must come before it calls the command hung."""

APP = "tests.workers.runtime_cli_app"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Characters that must never reach a terminal raw."""


class Runtime:
    """A running `agentlog runtime`; its stdout read line by line, never blocking for ever."""

    def __init__(
        self, db: Path, app: str, *args: str, command: str = "runtime", **env: str
    ) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable, "-c", "from agentlog.actors.cli import main; main()",
                command, "--db", str(db), "--app", app, *args,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
        )  # fmt: skip
        self._buffer = b""
        self.seen: list[dict[str, Any]] = []

    def line(self, timeout: float = PATIENCE) -> dict[str, Any]:
        """The next JSON line; fails with its stderr when none comes."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                self.proc.kill()
                _, err = self.proc.communicate()
                raise AssertionError(f"runtime printed {self._buffer!r}: {err.decode()}")
            self._buffer += chunk
        got, self._buffer = self._buffer.split(b"\n", 1)
        data: dict[str, Any] = json.loads(got)
        self.seen.append(data)
        return data

    def until(self, done: Any, timeout: float = PATIENCE) -> dict[str, Any]:
        """Read lines until one satisfies `done`; return it."""
        deadline = time.monotonic() + timeout
        while True:
            data = self.line(max(deadline - time.monotonic(), 0))
            if done(data):
                return data

    def stop(self, how: int = signal.SIGTERM) -> tuple[int, str]:
        """Send `how`; wait for the exit; the exit status and stderr (the rest is read)."""
        self.proc.send_signal(how)
        return self.finish()

    def finish(self) -> tuple[int, str]:
        out, err = self.proc.communicate(timeout=PATIENCE)
        for line in (self._buffer + out).decode().splitlines():
            self.seen.append(json.loads(line))
        self._buffer = b""
        return self.proc.returncode, err.decode()


@contextmanager
def runtime(db: Path, app: str = f"{APP}:build", *args: str, **env: str) -> Iterator[Runtime]:
    running = Runtime(db, app, "--json", *args, **env)
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.communicate()


def ticker(data: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = data["graphs"]["ticker"]
    return counts


def check_lines(lines: list[dict[str, Any]], signal_name: str) -> None:
    """One line per change (never the same figures twice running), a last line once stopped."""
    figures = [{k: v for k, v in line.items() if k != "at"} for line in lines]
    assert all(a != b for a, b in itertools.pairwise(figures))
    assert [line["at"] for line in lines] == sorted(line["at"] for line in lines)
    *before, last = lines
    assert last["state"] == "stopped" and last["final"] is True
    assert last["signal"] == signal_name
    assert all("final" not in line for line in before)
    assert {"running", "stopped"} <= {line["state"] for line in lines}


def verified(db: Path) -> dict[str, Any]:
    done = agentlog("verify", "--db", db, "--json", timeout=PATIENCE)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


async def _log(db: Path) -> tuple[Ledger, dict[str, list[str]]]:
    """The runtime thread folded, and each thread's message texts."""
    ledger, texts = Ledger(), {}
    async with SQLiteEventStore(db, readonly=True) as store:
        async for record in store.read("__runtime__"):
            ledger.apply(record)
        for thread in await store.threads():
            texts[thread] = [
                r.event.message["content"][0]["text"]
                async for r in store.read(thread)
                if isinstance(r.event, MessageAppended) and r.event.message["role"] == "assistant"
            ]
    return ledger, texts


def read_log(db: Path) -> tuple[Ledger, dict[str, list[str]]]:
    return asyncio.run(_log(db))


def test_timer_runs_complete_and_sigterm_stops_it_cleanly(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with runtime(db) as running:
        first = running.line()
        assert first["state"] == "running" and first["signal"] is None
        tick = first["entry_points"]["tick"]
        assert (tick["graph_id"], tick["trigger"]) == ("ticker", "timer")
        assert tick["next_fire"] is not None
        assert first["entry_points"]["chat"]["trigger"] == "api"
        assert first["entry_points"]["chat"]["next_fire"] is None
        busy = running.until(lambda d: ticker(d)["completed"] >= 3)
        code, err = running.stop(signal.SIGTERM)
    assert (code, err) == (0, "")
    check_lines(running.seen, "SIGTERM")
    assert busy["events_appended"] > 0
    assert busy["commit_latency_ms"]["p50"] is not None
    assert busy["commit_latency_ms"]["p99"] >= busy["commit_latency_ms"]["p50"]
    last = running.seen[-1]
    assert ticker(last)["completed"] >= 3 and last["entry_points"]["tick"]["next_fire"] is None
    assert last["graphs"]["support"] == {
        "active": 0, "queued": 0, "completed": 0, "failed": 0, "interrupted": 0, "cancelled": 0
    }  # fmt: skip
    report = verified(db)
    assert report["ok"] and report["invariants"]["ok"]
    ledger, texts = read_log(db)
    done = [t for t in ledger.triggers.values() if t.outcome == "completed"]
    assert len(done) == ticker(last)["completed"]
    for trigger in done:
        assert texts[trigger.accepted.thread_id] == ["worked", "reported"]


def test_sigint_lets_running_steps_commit_and_the_next_runtime_resumes_the_runs(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    with runtime(db, f"{APP}:abuild", RUNTIME_CLI_SLEEP="1.0") as running:
        running.until(lambda d: d["executing"] >= 1)
        code, err = running.stop(signal.SIGINT)
    assert (code, err) == (0, "")
    check_lines(running.seen, "SIGINT")
    assert "stopping" in {line["state"] for line in running.seen}
    verified(db)
    paused, texts = read_log(db)
    cut = [t for t in paused.triggers.values() if not t.done]  # paused or queued: kept
    ran = [texts.get(t.accepted.thread_id, []) for t in cut if t.in_flight]
    assert ["worked"] in ran  # a running step committed, and its run paused after it
    assert all(said in ([], ["worked"]) for said in ran)  # none went further, none failed

    with runtime(db) as again:  # "work" now sleeps the default: configuration, not code
        again.until(lambda d: ticker(d)["queued"] == 0 and ticker(d)["active"] == 0)
        assert again.stop(signal.SIGTERM) == (0, "")  # so no code-change warning either
    verified(db)
    ledger, texts = read_log(db)
    for trigger in cut:
        assert ledger.triggers[trigger.id].outcome == "completed"
        assert texts[trigger.accepted.thread_id] == ["worked", "reported"]  # "work" ran once


def test_a_second_signal_cancels_what_still_runs_and_nothing_is_lost(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with runtime(db, RUNTIME_CLI_SLEEP="600") as running:  # only a cancel ends these in time
        running.until(lambda d: d["executing"] >= 1)
        running.proc.send_signal(signal.SIGTERM)
        running.until(lambda d: d["state"] == "stopping")
        code, err = running.stop(signal.SIGTERM)
    assert (code, err) == (0, "")
    check_lines(running.seen, "SIGTERM")
    assert "cancelling" in {line["state"] for line in running.seen}
    verified(db)
    cut = [t for t in read_log(db)[0].triggers.values() if not t.done]
    assert cut

    with runtime(db) as again:  # "work" now sleeps the default: configuration, not code
        again.until(lambda d: ticker(d)["queued"] == 0 and ticker(d)["active"] == 0)
        assert again.stop(signal.SIGTERM) == (0, "")  # so no code-change warning either
    verified(db)
    ledger, texts = read_log(db)
    for trigger in cut:
        assert ledger.triggers[trigger.id].outcome == "completed"
        assert texts[trigger.accepted.thread_id] == ["worked", "reported"]


def test_a_runtime_built_at_import_on_the_same_database_runs(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with runtime(db, f"{APP}:runtime", RUNTIME_CLI_DB=str(db)) as running:
        running.until(lambda d: ticker(d)["completed"] >= 1)
        assert running.stop() == (0, "")
    check_lines(running.seen, "SIGTERM")
    verified(db)


def test_a_second_runtime_on_the_same_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with runtime(db) as running:
        running.line()
        done = agentlog("runtime", "--db", db, "--app", f"{APP}:build", timeout=PATIENCE)
        assert running.stop() == (0, "")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: ") and "another runtime runs on this store" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def positions(db: Path) -> int:
    """The log's last position, read beside the writer (0 while there is no file, or the
    writer has created it and not yet its schema: a loaded machine widens that instant)."""

    async def read() -> int:
        async with SQLiteEventStore(db, readonly=True) as store:
            return await last_position(store)

    try:
        return asyncio.run(read()) if db.exists() else 0
    except NotAnAgentlogDatabaseError:
        return 0


def test_ids_from_user_code_are_shown_inert(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    running = Runtime(db, f"{APP}:hostile")  # not a terminal: the table once, at the stop
    try:
        until_blocking(  # its start records where the timer listens from
            lambda: positions(db), timeout=PATIENCE, interval=0.05, what="the runtime to start"
        )
        running.proc.send_signal(signal.SIGTERM)
        out, err = running.proc.communicate(timeout=PATIENCE)
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.communicate()
    text = out.decode()
    assert running.proc.returncode == 0, err.decode()
    assert "agentlog runtime on" in text and "stopped (SIGTERM)" in text
    assert not RAW.search(text), text
    assert r"evil\x1b[31m\u202e\nforged" in text
    assert r"entry evil\x1b[31m\u202e\nforged" in text
    assert r"timer evil\x1b[31m\u202e\nforged" in text


BAD_APPS = [
    ("tests.workers.no_such_module:build", "no module named 'tests.workers.no_such_module'"),
    (f"{APP}:no_such_name", "has no attribute 'no_such_name'"),
    (f"{APP}:not_a_runtime", "is a value of type int"),
    ("agentlog.actors.runtime:AgentRuntime", "is the class AgentRuntime"),
    (f"{APP}:two_arguments", "cannot be called with one argument (the store)"),
    (f"{APP}:returns_text", "returned a value of type str, not an AgentRuntime"),
    (f"{APP}:on_another_store", "returned a runtime built on another store"),
    (f"{APP}:runtime", "is a runtime built on the database"),
    ("no colon", "is not MODULE:ATTRIBUTE"),
]


@pytest.mark.parametrize(("app", "says"), BAD_APPS, ids=[a for a, _ in BAD_APPS])
def test_a_bad_app_is_refused_in_one_line_writing_nothing(
    tmp_path: Path, app: str, says: str
) -> None:
    other = tmp_path / "other.db"
    env = {"RUNTIME_CLI_DB": str(other), "RUNTIME_CLI_OTHER": str(other)}
    missing = tmp_path / "new.db"
    done = agentlog("runtime", "--db", missing, "--app", app, timeout=PATIENCE, **env)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: Invalid value for --app: ") and says in line, line
    assert line.endswith("(see `agentlog runtime --help`)")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither --db nor the other

    as_json = agentlog("runtime", "--db", missing, "--app", app, "--json", timeout=PATIENCE, **env)
    assert json.loads(as_json.stderr)["exit"] == 2 and as_json.stdout == ""
    assert says in json.loads(as_json.stderr)["error"]
    assert not missing.exists()


def test_a_bad_app_leaves_an_existing_log_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with runtime(db) as running:
        running.until(lambda d: ticker(d)["completed"] >= 1)
        assert running.stop() == (0, "")
    before = db.read_bytes()
    for app in (f"{APP}:returns_text", f"{APP}:not_a_runtime", f"{APP}:broken"):
        done = agentlog("runtime", "--db", db, "--app", app, timeout=PATIENCE)
        assert done.returncode in (1, 2) and len(done.stderr.splitlines()) == 1
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_an_app_whose_build_raises_fails_with_exit_1(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    done = agentlog("runtime", "--db", db, "--app", f"{APP}:broken", timeout=PATIENCE)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == (
        f"error: {APP}:broken(store) raised RuntimeError: the configuration is missing"
    )
    assert not db.exists()


def test_two_workers_share_a_file_fire_each_slot_once_and_drain_on_sigterm(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    app = f"{APP}:build"
    first = Runtime(db, app, "--json", "--id", "w1", command="worker")
    second = Runtime(db, app, "--json", "--id", "w2", command="worker")
    try:
        for worker in (first, second):
            worker.until(lambda d: d["state"] == "running")
        first.until(lambda d: ticker(d)["completed"] >= 3)
        for worker in (first, second):
            assert worker.stop(signal.SIGTERM) == (0, "")
            check_lines(worker.seen, "SIGTERM")
    finally:
        for worker in (first, second):
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.communicate()
    verified(db)
    ledger, _ = read_log(db)
    ticks = [t for t in ledger.triggers.values() if t.accepted.entry_point == "tick"]
    slots = [t.accepted.slot for t in ticks if t.outcome != "rejected"]
    assert len(slots) == len(set(slots)) >= 3  # each slot fired once across the two
    assert sum(t.outcome == "completed" for t in ticks) >= 3


def test_a_worker_without_an_app_or_with_an_empty_id_is_refused(tmp_path: Path) -> None:
    done = agentlog("worker", "--db", tmp_path / "x.db", "--app", f"{APP}:build", "--id", " ")
    assert done.returncode == 2 and "worker id" in done.stderr
    done = agentlog("worker", "--db", tmp_path / "x.db")
    assert done.returncode == 2 and "--app" in done.stderr
    assert not (tmp_path / "x.db").exists()


def test_a_runtime_object_on_another_store_is_refused_without_echoing_a_password(
    tmp_path: Path,
) -> None:
    dsn = "postgresql://agent:s3cret@127.0.0.1:1/log"
    env = {"RUNTIME_CLI_DB": str(tmp_path / "other.db")}
    done = agentlog("runtime", "--dsn", dsn, "--app", f"{APP}:runtime", timeout=PATIENCE, **env)
    assert done.returncode == 2, done.stderr
    assert "is a runtime built on the database" in done.stderr and "--db/--dsn" in done.stderr
    assert "s3cret" not in done.stderr
