"""Damaged data read by every reader: a committed record whose payload does not fit the state
(a hand-written or hostile log with a valid chain), and a log altered behind the store.

The fold names the thread and seq in a typed error (`UnfoldableRecordError`); the command
line answers one line and exit code 1, the HTTP API a stable code that tells the client not
to retry and the operator to run `agentlog verify`; other threads keep working.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from typer.testing import CliRunner

from agentlog.actors.cli import app as cli
from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import SQLiteEventStore
from agentlog.events.kinds import Event, Forked, MessageAppended, StateUpdated, ThreadCreated
from agentlog.projections import AgentState, Message, UnfoldableRecordError, state_at, take_snapshot
from tests.helpers import line

PATIENCE = 120.0
"""A failure guard only: how long a request may take before the test gives up."""

ESC = "\x1b[31m"

BAD: dict[str, list[Event]] = {
    "forked": [
        Forked(
            source_thread="good",
            source_seq=3,
            state={"context": "not a list", "execution_meta": {"status": 7}},
        )
    ],
    "message": [
        ThreadCreated(by="api", graph_id="g"),
        MessageAppended(message={"role": 5, "x" + ESC: 1}),
    ],
    "values": [ThreadCreated(by="api", graph_id="g"), StateUpdated(values={"context": 3})],
    "created_then_bad": [
        ThreadCreated(by="api", graph_id="g", metadata={"k": ESC}),
        MessageAppended(message={"role": "user", "content": ESC}),
    ],
}
"""Threads whose last record no state can take (the fold raises on it)."""


def reply(state: AgentState) -> list[Message]:
    return [Message.text_message("ok", role="assistant")]


async def write_bad(db: Path) -> None:
    async with SQLiteEventStore(db) as store:
        for thread, events in BAD.items():
            await store.append(thread, events, expected_seq=0)


def runtime_of(store: SQLiteEventStore) -> AgentRuntime:
    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("work", reply)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    return runtime


def client_of(runtime: AgentRuntime) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(runtime))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=PATIENCE)


def test_the_fold_names_the_record_it_cannot_take(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    asyncio.run(write_bad(db))

    async def read_all() -> dict[str, UnfoldableRecordError]:
        found = {}
        async with SQLiteEventStore(db) as store:
            for thread, events in BAD.items():
                with pytest.raises(UnfoldableRecordError) as info:
                    await state_at(store, thread, len(events))
                found[thread] = info.value
        return found

    for thread, error in asyncio.run(read_all()).items():
        assert (error.thread_id, error.seq) == (thread, len(BAD[thread]))
        assert repr(thread) in str(error) and "agentlog verify" in str(error)
        assert ESC not in str(error)


@pytest.mark.parametrize("command", ["show", "history", "threads"])
def test_every_command_answers_a_record_that_does_not_fit_in_one_line(
    tmp_path: Path, command: str
) -> None:
    db = tmp_path / "log.db"
    asyncio.run(write_bad(db))
    for thread, events in BAD.items():
        args = ["threads", "--db", str(db)] if command == "threads" else [command, thread]
        done = CliRunner().invoke(cli, [*args, "--db", str(db)] if command != "threads" else args)
        if command == "threads":  # a listing says which thread it cannot read, and goes on
            assert done.exit_code == 0, done.output
            assert "UnfoldableRecordError" in done.output
            break
        if command == "history" and not isinstance(events[-1], MessageAppended):
            # history lists records without folding them: a fork or an update reads as is
            assert done.exit_code == 0, done.output
            assert "\x1b" not in done.output
            continue
        assert done.exit_code == 1, (thread, done.output, done.exception)
        assert not isinstance(done.exception, Exception) or isinstance(
            done.exception, SystemExit
        ), done.exception
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert f"seq {len(events)} of thread {thread!r}" in lines[0], lines[0]
        assert "\x1b" not in done.output


def test_http_answers_a_record_that_does_not_fit_with_a_stable_code(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    asyncio.run(write_bad(db))

    async def scenario() -> list[tuple[str, int, dict[str, Any]]]:
        answers = []
        async with SQLiteEventStore(db) as store:
            runtime = runtime_of(store)
            async with runtime, client_of(runtime) as client:
                await runtime.trigger("api", "hello", thread_id="good")
                await runtime.wait("good", timeout=PATIENCE)
                for thread in BAD:
                    paths = ("", "/state", "/history")
                    for path in (f"/log/threads/{thread}{p}" for p in paths):
                        got = await client.get(path)
                        answers.append((path, got.status_code, got.json()))
                good = await client.get("/log/threads/good")
                assert good.status_code == 200, good.text
                # a listing goes on, and says which threads it cannot read, and why
                found = await client.post("/log/threads/search", json={"limit": 100})
                assert found.status_code == 200, found.text
                rows = {row["thread_id"]: row for row in found.json()}
                assert "status" in rows["good"]
                for thread in BAD:
                    assert rows[thread]["error"]["code"] == "integrity_error", rows[thread]
        return answers

    for path, status, body in asyncio.run(scenario()):
        assert status == 500, (path, body)
        assert body["error"]["code"] == "integrity_error", (path, body)
        assert "agentlog verify" in body["error"]["message"]
        assert "\x1b" not in body["error"]["message"]


# ---- a log altered behind the store, read over HTTP -----------------------------------------


async def two_runs(db: Path) -> None:
    async with SQLiteEventStore(db) as store:
        runtime = runtime_of(store)
        async with runtime:
            for thread in ("t", "u"):
                await runtime.trigger("api", "hello", thread_id=thread)
                await runtime.wait(thread, timeout=PATIENCE)


def retext(db: Path, thread: str, new: str) -> None:
    """Change the text of the thread's first stored message, keeping valid msgpack."""
    conn = sqlite3.connect(db)
    with conn:
        rows = conn.execute(
            "SELECT seq, payload FROM events WHERE thread_id = ? AND kind = 'message_appended' "
            "ORDER BY seq",
            (thread,),
        ).fetchall()
        seq, payload = rows[0]
        data: dict[str, Any] = msgspec.msgpack.decode(payload)
        data["message"]["content"][0]["text"] = new
        conn.execute(
            "UPDATE events SET payload = ? WHERE thread_id = ? AND seq = ?",
            (msgspec.msgpack.encode(data), thread, seq),
        )
    conn.close()


async def http_get(db: Path, *paths: str) -> list[httpx.Response]:
    async with SQLiteEventStore(db) as store:
        runtime = runtime_of(store)
        async with runtime, client_of(runtime) as client:
            return [await client.get(path) for path in paths]


def assert_tampered(answer: httpx.Response, check: str) -> None:
    assert answer.status_code == 500, answer.text
    error = answer.json()["error"]
    assert error["code"] == "integrity_error", error
    assert "'t'" in error["message"] and f"`{check}" in error["message"], error
    assert "retry" in error["message"]


def test_an_edited_record_answers_integrity_error_and_other_threads_work(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    asyncio.run(two_runs(db))
    retext(db, "t", "forged")
    bad, state, good = asyncio.run(
        http_get(db, "/log/threads/t", "/log/threads/t/state", "/log/threads/u")
    )
    assert_tampered(bad, "agentlog verify")
    assert_tampered(state, "agentlog verify")
    assert good.status_code == 200, good.text

    async def search() -> list[dict[str, Any]]:
        async with SQLiteEventStore(db) as store:
            runtime = runtime_of(store)
            async with runtime, client_of(runtime) as client:
                found = await client.post("/log/threads/search", json={"limit": 100})
                assert found.status_code == 200, found.text
                rows: list[dict[str, Any]] = found.json()
                return rows

    rows = {row["thread_id"]: row for row in asyncio.run(search())}
    assert rows["t"]["error"]["code"] == "integrity_error", rows["t"]
    assert rows["u"]["status"] == "completed", rows["u"]


def test_a_damaged_snapshot_answers_integrity_error(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    asyncio.run(two_runs(db))

    async def snapshot() -> None:
        async with SQLiteEventStore(db) as store:
            await take_snapshot(store, "t")

    asyncio.run(snapshot())
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE snapshots SET state = x'00ff' WHERE thread_id = 't'")
    conn.close()
    bad, good = asyncio.run(http_get(db, "/log/threads/t", "/log/threads/u"))
    assert_tampered(bad, "agentlog verify")
    assert good.status_code == 200, good.text


class Scored(AgentState):
    scores: dict[str, int] = {}


def test_a_stored_key_in_the_error_is_quoted_not_raw(tmp_path: Path) -> None:
    """A value its field rejects, under a key holding control characters: the error names
    the key escaped, so printing it cannot drive a terminal."""

    async def scenario() -> UnfoldableRecordError:
        async with SQLiteEventStore(tmp_path / "log.db") as store:
            bad = StateUpdated(values={"scores": {"k" + ESC: "many"}})
            await store.append("x", [ThreadCreated(by="api"), bad], expected_seq=0)
            with pytest.raises(UnfoldableRecordError) as info:
                await state_at(store, "x", 2, Scored)
            return info.value

    error = asyncio.run(scenario())
    assert (error.thread_id, error.seq) == ("x", 2)
    assert "\x1b" not in str(error)
