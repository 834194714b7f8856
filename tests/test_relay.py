"""The relay's parts against the local brokers: refusals before anything is sent, templates,
selections, the consumer's chain check, outages, bounded read-ahead, and the command line."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.actors.relay import (
    BrokerRefusedError,
    ChainCheck,
    ChainError,
    Relay,
    RelayConfigError,
    redis_records,
)
from agentlog.actors.relay.message import PrevHashes, Template, message
from agentlog.events import (
    EventStore,
    MemoryEventStore,
    NodeEntered,
    SQLiteEventStore,
    load_cursor,
)
from agentlog.events import verify_export as verifier

from .conftest import examples
from .helpers import ROOT, agentlog, text_event
from .relay_kills import Proxy
from .workers.pg_env import DSN, fresh_schema, needs_pg

REDIS = "redis://127.0.0.1:6379/0"
T = TypeVar("T")


async def _fill(store: Any, threads: dict[str, int]) -> None:
    for thread, count in threads.items():
        seq = await store.last_seq(thread)
        events = [text_event(f"{thread} {i}") if i % 2 else NodeEntered(node=f"n{i}")
                  for i in range(count)]  # fmt: skip
        await store.append(thread, events, expected_seq=seq)


@pytest.fixture
async def key() -> AsyncIterator[str]:
    """A Redis stream key of this test's own, deleted after."""
    import redis.asyncio

    name = f"t-relay-{uuid.uuid4().hex[:12]}"
    yield name
    async with redis.asyncio.Redis.from_url(REDIS) as conn:
        await conn.delete(name)


async def _take(key: str, count: int, check: ChainCheck) -> list[dict[str, object]]:
    taken: list[dict[str, object]] = []
    async with asyncio.timeout(60):  # a failure guard: the records are there or coming
        async for record in redis_records(REDIS, keys=(key,), check=check):
            taken.append(record)
            if len(taken) == count:
                return taken
    raise AssertionError("unreachable")


# ---- refused before anything is read or sent ---------------------------------------------


@pytest.mark.parametrize(
    ("to", "options", "says"),
    [
        ("kafka://127.0.0.1", {}, "names no broker"),
        (REDIS, {"name": "a b"}, "cursor name"),
        (REDIS, {"kinds": ["nope"]}, "unknown event kind 'nope'"),
        (REDIS, {"kinds": "node_entered"}, "collection of kind names"),
        (REDIS, {"threads": []}, "non-empty list"),
        (REDIS, {"subject_template": "x.{thread_id}"}, "may use only"),
        (REDIS, {"subject_template": "x.{kind!r}"}, "may use only"),
        (REDIS, {"subject_template": "x.{"}, "malformed"),
        ("nats://127.0.0.1:4222", {"subject_template": "x.*.{kind}"}, "wildcard"),
        ("nats://127.0.0.1:4222?stream=a.b", {}, "stream name"),
        (REDIS, {"batch": 0}, "batch is an int"),
    ],
)
def test_a_relay_that_cannot_work_is_refused_at_once(
    to: str, options: dict[str, object], says: str
) -> None:
    store = MemoryEventStore()
    with pytest.raises(RelayConfigError, match=says):
        Relay(store, to, **{"name": "r", **options})  # type: ignore[arg-type]


def test_a_nats_subject_holds_any_thread_id_as_one_token() -> None:
    template = Template("agentlog.{thread}.{kind}", broker="nats")
    subject = template.render("web.user 7/ü*>", "node_entered")
    assert subject == "agentlog.web%2Euser%207%2F%C3%BC%2A%3E.node_entered"
    assert template.wildcard() == "agentlog.*.*"
    assert Template("{kind}", broker="redis").render("a b", "k") == "k"


# ---- what the consumer checks ---------------------------------------------------------------


async def test_every_message_is_an_export_line_the_stdlib_verifier_passes(
    key: str, tmp_path: Path
) -> None:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        await _fill(store, {"a": 6, "b ü/7.x": 4})
        async with Relay(store, REDIS, name="r", subject_template=key) as relay:
            await relay.wait_for(10)
    check = ChainCheck()
    records = await _take(key, 10, check)
    assert [r["position"] for r in records] == list(range(1, 11))
    lines = [json.dumps(r) for r in records if r["thread_id"] == "a"]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    assert verifier.main([str(tmp_path / "a.jsonl")]) == 0
    # a second copy is dropped; a gap, a change or garbage is refused
    first_b = next(r for r in records if r["thread_id"] != "a")
    assert check.check(json.dumps(records[0])) is None and check.copies == 1
    fresh = ChainCheck()
    with pytest.raises(ChainError, match="seq 2 where 1 was expected"):
        fresh.check(json.dumps(records[1]))
    altered = dict(first_b, payload_b64="AA==")
    with pytest.raises(ChainError, match="does not match"):
        ChainCheck().check(json.dumps(altered))
    with pytest.raises(ChainError, match="no agentlog record"):
        ChainCheck().check(b"\xff not json")


async def test_a_filtered_relay_sends_what_it_selects_and_its_cursor_still_reaches_the_head(
    key: str, tmp_path: Path
) -> None:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        await _fill(store, {"web-1": 6, "cron-1": 6, "web-2": 6})
        relay = Relay(store, REDIS, name="web-nodes", kinds=["node_entered"],
                      threads=["web-*"], subject_template=key)  # fmt: skip
        async with relay:
            await relay.wait_for(18)
        assert await load_cursor(store, "web-nodes") == 18
    check = ChainCheck(complete=False)  # each record checked against the hash it carries
    records = await _take(key, 6, check)
    assert {(r["thread_id"], r["kind"]) for r in records} == {
        ("web-1", "node_entered"),
        ("web-2", "node_entered"),
    }
    assert [r["seq"] for r in records if r["thread_id"] == "web-1"] == [1, 3, 5]


# ---- outages, refusals, memory ----------------------------------------------------------


class _Retries(logging.Handler):
    """Sets an event each time the relay logs a retry: tests wait on what happened."""

    def __init__(self) -> None:
        super().__init__()
        self.count, self.seen = 0, asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.count += 1
            self.seen.set()

    async def at_least(self, n: int) -> None:
        while self.count < n:
            self.seen.clear()
            await self.seen.wait()


async def test_a_broker_that_is_away_is_waited_for_with_bounded_read_ahead(
    key: str, tmp_path: Path
) -> None:
    retries = _Retries()
    logging.getLogger("agentlog.relay").addHandler(retries)
    proxy = Proxy(6379)
    port = await proxy.start()
    proxy.server.close()  # nothing listens there now: every connect is refused
    await proxy.server.wait_closed()
    try:
        async with SQLiteEventStore(tmp_path / "log.db") as store:
            await _fill(store, {f"t{i}": 100 for i in range(20)})
            relay = Relay(store, f"redis://127.0.0.1:{port}/0", name="r", subject_template=key,
                          batch=50, buffer=100, backoff=0.01, max_backoff=0.05)  # fmt: skip
            async with relay:
                async with asyncio.timeout(60):
                    await retries.at_least(4)
                status = await relay.status()
                assert status.cursor == 0 and status.lag == 2000 and not status.connected
                assert status.last_error and "Connection" in status.last_error
                assert relay.read_to <= 100 + 2 * 50, "it read far ahead of the broker"
                back = await asyncio.start_server(proxy._link, "127.0.0.1", port)
                try:
                    async with asyncio.timeout(60):
                        await relay.wait_for(2000)
                finally:
                    back.close()
                    proxy.cut()
        assert len(await _take(key, 2000, ChainCheck())) == 2000
    finally:
        logging.getLogger("agentlog.relay").removeHandler(retries)


async def test_a_stream_with_entries_the_relay_did_not_write_stops_it(
    key: str, tmp_path: Path
) -> None:
    import redis.asyncio

    async with redis.asyncio.Redis.from_url(REDIS) as conn:
        await conn.xadd(key, {"id": "someone else"}, id="5-0")
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        await _fill(store, {"a": 8})
        relay = Relay(store, REDIS, name="r", subject_template=key)
        with pytest.raises(BrokerRefusedError, match="did not write"):
            async with asyncio.timeout(60):
                await relay.run()
        assert await load_cursor(store, "r") == 0  # nothing confirmed, nothing moved
        await relay.start()  # in the background, a waiter learns of it too
        with pytest.raises(BrokerRefusedError, match="did not write"):
            async with asyncio.timeout(60):
                await relay.wait_for(8)
        with pytest.raises(BrokerRefusedError):
            await relay.stop()


# ---- the command line -----------------------------------------------------------------------


async def test_the_command_relays_until_terminated_and_status_shows_the_lag(
    key: str, tmp_path: Path
) -> None:
    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as store:
        await _fill(store, {"a": 5, "b": 5})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from agentlog.actors.cli import main; main()",
        "relay", "--db", str(db), "--to", REDIS, "--name", "cli", "--subject-template", key,
        "--status-every", "0.05", cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert len(await _take(key, 10, ChainCheck())) == 10
        assert proc.stdout is not None
        async with asyncio.timeout(60):  # its status lines, until the cursor is saved
            while json.loads(await proc.stdout.readline())["cursor"] < 10:
                pass
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    shown = agentlog("relay", "status", "--db", db, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["cursors"][0] | {"updated_at": 0} == {
        "name": "cli", "position": 10, "lag": 0, "updated_at": 0,
    }  # fmt: skip
    async with SQLiteEventStore(db) as store:
        await _fill(store, {"a": 3})
    assert "cli: position 10 of 13, lag 3" in agentlog("relay", "status", "--db", db).stdout
    refused = agentlog("relay", "--db", db, "--to", "ftp://x", "--name", "cli")
    assert refused.returncode == 1 and "names no broker" in refused.stderr


# ---- PostgreSQL, and the consumer's check under any redelivery --------------------------------


@needs_pg
async def test_a_relay_follows_a_postgres_store_woken_by_its_commits(key: str) -> None:
    from agentlog.events.stores.postgres import PostgresEventStore

    async with fresh_schema() as schema, PostgresEventStore(DSN, schema=schema) as store:
        await _fill(store, {"a": 4})
        async with Relay(store, REDIS, name="pg", subject_template=key, poll_s=0.05) as relay:
            await relay.wait_for(4)
            await _fill(store, {"b": 3})  # committed while it waits: NOTIFY wakes it
            await relay.wait_for(7)
            await _terminate(schema)  # the server drops every connection of the store
            await _fill(_Retrying(store), {"c": 2})  # the first call after may see the loss
            await relay.wait_for(9)  # the relay reads on, through a new connection
        assert await load_cursor(store, "pg") == 9
    taken = [r["thread_id"] for r in await _take(key, 9, ChainCheck())]
    assert taken == ["a"] * 4 + ["b"] * 3 + ["c"] * 2


async def _terminate(schema: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            f"agentlog:{schema}",
        )
    finally:
        await conn.close()


class _Retrying:
    """The store, its calls tried again once after a lost connection (as a caller would)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    async def last_seq(self, thread: str) -> int:
        return await self._again(lambda: self.store.last_seq(thread))

    async def append(self, *args: object, **kwargs: object) -> object:
        return await self._again(lambda: self.store.append(*args, **kwargs))  # type: ignore[arg-type]

    async def _again(self, call: Callable[[], Awaitable[T]]) -> T:
        from agentlog.events import StoreUnavailableError

        try:
            return await call()
        except StoreUnavailableError:
            return await call()


async def _lines(threads: dict[str, int]) -> list[bytes]:
    store = MemoryEventStore()
    await _fill(store, threads)
    template, prevs = Template("k", broker="redis"), PrevHashes(store)
    bodies = []
    async for row in store.read_all_rows(0):
        bodies.append(message(row, await prevs.before(row), template).body)
        prevs.saw(row)
    return bodies


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=30), max_size=8))
def test_any_redelivery_after_crashes_is_taken_once_in_order(rewinds: list[int]) -> None:
    """A relay that crashes resends from its cursor, some way back: the consumer keeps
    every record exactly once, in order, whatever the crashes were."""
    bodies = asyncio.run(_lines({"a": 12, "b": 9, "c": 10}))
    delivered, sent = [], 0
    for rewind in rewinds:  # send on to a crash point, then back to a cursor behind it
        crash = min(sent + 1 + rewind, len(bodies))
        delivered += bodies[sent:crash]
        sent = max(crash - rewind, 0)
        delivered += bodies[sent:crash]  # the copies of what was past the cursor
        sent = crash
    delivered += bodies[sent:]
    check = ChainCheck()
    taken = [record for body in delivered if (record := check.check(body)) is not None]
    assert [r["position"] for r in taken] == list(range(1, len(bodies) + 1))
    assert check.copies == len(delivered) - len(bodies)
