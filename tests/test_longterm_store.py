"""The long-term store's API (LangGraph's `BaseStore` methods) against every event store:
in memory, SQLite and PostgreSQL. Every write is a record of the store's thread, the chain
verifies, and a store reopened on the same log answers as the one that wrote it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import InMemoryStore, InvalidNamespaceError, Item, LogStore, SearchItem
from agentlog.actors.engine.errors import BlockingCallError
from agentlog.actors.engine.threads import STORE_THREAD, internal_thread
from agentlog.events import EventStore, MemoryEventStore, SQLiteEventStore, StoreItemPut
from agentlog.projections.timetravel import summarize

from .workers.pg_env import DSN, fresh_schema, needs_pg

Reopen = Callable[[], Awaitable[LogStore]]


class StoreContract:
    """What every long-term store over an event store does; a backend gives `log` (a fresh
    event store) and `reopen` (a new store over the same database)."""

    @pytest.fixture
    def store(self, log: EventStore) -> LogStore:
        return LogStore(log)

    async def test_put_then_get_gives_the_item_and_a_second_put_keeps_created_at(
        self, store: LogStore
    ) -> None:
        assert await store.aget(("users", "1"), "prefs") is None
        await store.aput(("users", "1"), "prefs", {"theme": "dark"})
        first = await store.aget(("users", "1"), "prefs")
        assert first is not None
        assert (first.namespace, first.key, first.value) == (
            ("users", "1"),
            "prefs",
            {"theme": "dark"},
        )
        assert first.created_at == first.updated_at
        assert first.created_at.tzinfo is UTC
        first.value["theme"] = "changed by the reader"  # a copy: nothing stored changes
        again = await store.aget(("users", "1"), "prefs")
        assert again is not None and again.value == {"theme": "dark"}
        await store.aput(("users", "1"), "prefs", {"theme": "light"})
        second = await store.aget(("users", "1"), "prefs")
        assert second is not None and second.value == {"theme": "light"}
        assert second.created_at == first.created_at and second.updated_at >= first.updated_at
        assert second.dict() == {
            "namespace": ["users", "1"],
            "key": "prefs",
            "value": {"theme": "light"},
            "created_at": second.created_at.isoformat(),
            "updated_at": second.updated_at.isoformat(),
        }

    async def test_delete_removes_the_item_and_a_namespace_left_empty_is_not_listed(
        self, store: LogStore
    ) -> None:
        await store.aput(("a",), "k", {"v": 1})
        await store.aput(("b",), "k", {"v": 2})
        await store.adelete(("a",), "k")
        await store.adelete(("a",), "never-there")
        assert await store.aget(("a",), "k") is None
        assert await store.alist_namespaces() == [("b",)]

    async def test_search_filters_by_prefix_field_values_and_pages(self, store: LogStore) -> None:
        await store.aput(("docs", "x"), "1", {"kind": "note", "n": 1, "text": "red apple"})
        await store.aput(("docs", "y"), "2", {"kind": "todo", "n": 2, "text": "green pear"})
        await store.aput(("docs", "x"), "3", {"kind": "note", "n": 3, "text": "red pear"})
        await store.aput(("other",), "4", {"kind": "note", "n": 4})
        keys = [i.key for i in await store.asearch(("docs",))]
        assert keys == ["1", "3", "2"]  # namespaces, then keys, in the order first put
        assert [i.key for i in await store.asearch(())] == ["1", "3", "2", "4"]
        assert [i.key for i in await store.asearch(("docs", "x"))] == ["1", "3"]
        assert [i.key for i in await store.asearch(("docs",), filter={"kind": "note"})] == [
            "1",
            "3",
        ]
        assert [i.key for i in await store.asearch((), filter={"n": {"$gte": 2, "$lt": 4}})] == [
            "3",
            "2",
        ]
        assert [i.key for i in await store.asearch((), filter={"n": {"$ne": 1}}, limit=2)] == [
            "3",
            "2",
        ]
        assert [i.key for i in await store.asearch((), limit=2, offset=1)] == ["3", "2"]
        assert await store.asearch((), filter={"missing": "x"}) == []
        found = await store.asearch(())
        assert all(isinstance(i, SearchItem) and i.score is None for i in found)

    async def test_a_query_matches_words_in_the_text_best_first(self, store: LogStore) -> None:
        await store.aput(("m",), "a", {"text": "User likes PIZZA", "tag": "food"})
        await store.aput(("m",), "b", {"text": "user lives in Paris"})
        await store.aput(("m",), "c", {"text": "pizza in Paris", "tag": "food"}, index=["tag"])
        await store.aput(("m",), "d", {"text": "pizza in Paris"}, index=False)
        hits = await store.asearch(("m",), query="pizza paris")
        assert [(h.key, h.score) for h in hits] == [("a", 0.5), ("b", 0.5)]
        assert [h.key for h in await store.asearch(("m",), query="food")] == ["a", "c"]
        assert await store.asearch(("m",), query="nowhere") == []

    async def test_list_namespaces_matches_prefix_suffix_wildcards_and_depth(
        self, store: LogStore
    ) -> None:
        for namespace in [("a", "b", "c"), ("a", "x", "c"), ("a", "b"), ("z", "b", "c")]:
            await store.aput(namespace, "k", {})
        assert await store.alist_namespaces() == [
            ("a", "b"),
            ("a", "b", "c"),
            ("a", "x", "c"),
            ("z", "b", "c"),
        ]
        assert await store.alist_namespaces(prefix=("a",)) == [
            ("a", "b"),
            ("a", "b", "c"),
            ("a", "x", "c"),
        ]
        assert await store.alist_namespaces(prefix=("*", "b")) == [
            ("a", "b"),
            ("a", "b", "c"),
            ("z", "b", "c"),
        ]
        assert await store.alist_namespaces(suffix=("c",)) == [
            ("a", "b", "c"),
            ("a", "x", "c"),
            ("z", "b", "c"),
        ]
        assert await store.alist_namespaces(prefix=("a",), suffix=("*", "c")) == [
            ("a", "b", "c"),
            ("a", "x", "c"),
        ]
        assert await store.alist_namespaces(max_depth=1) == [("a",), ("z",)]
        assert await store.alist_namespaces(max_depth=2, limit=2, offset=1) == [
            ("a", "x"),
            ("z", "b"),
        ]

    async def test_every_write_is_a_record_of_the_store_thread_and_the_chain_verifies(
        self, store: LogStore, log: EventStore
    ) -> None:
        await store.aput(("u",), "k", {"v": 1})
        await store.adelete(("u",), "k")
        records = [r async for r in log.read(STORE_THREAD)]
        assert [r.kind for r in records] == ["store_item_put", "store_item_deleted"]
        assert {r.actor for r in records} == {"user"}
        assert isinstance(records[0].event, StoreItemPut) and records[0].event.value == {"v": 1}
        report = await log.verify(STORE_THREAD)
        assert report.ok and report.records_checked == 2
        said = [summarize(r) for r in records]  # what `agentlog history __store__` shows
        assert said == ['put u k {"v": 1}', "deleted u k"]
        assert internal_thread(STORE_THREAD)

    async def test_a_store_reopened_on_the_same_log_gives_the_same_answers(
        self, store: LogStore, reopen: Reopen
    ) -> None:
        await store.aput(("u", "1"), "a", {"x": 1}, ttl=60)
        await store.aput(("u", "2"), "b", {"x": 2, "text": "hello"}, index=["text"])
        await store.aput(("u", "1"), "c", {"x": 3})
        await store.adelete(("u", "1"), "a")
        again = await reopen()
        for reader in (store, again):
            assert await reader.aget(("u", "2"), "b") == await store.aget(("u", "2"), "b")
            assert await reader.asearch(("u",), query="hello") == await store.asearch(
                ("u",), query="hello"
            )
            assert await reader.asearch(()) == await store.asearch(())
            assert await reader.alist_namespaces() == [("u", "1"), ("u", "2")]

    async def test_two_stores_on_one_log_see_each_others_writes(
        self, store: LogStore, reopen: Reopen
    ) -> None:
        other = await reopen()
        await asyncio.gather(
            *(store.aput(("n",), f"a{i}", {"i": i}) for i in range(10)),
            *(other.aput(("n",), f"b{i}", {"i": i}) for i in range(10)),
        )
        for reader in (store, other):
            assert len(await reader.asearch(("n",), limit=100)) == 20
        assert (await other.event_store.verify(STORE_THREAD)).ok

    async def test_bad_arguments_are_refused_before_anything_is_written(
        self, store: LogStore, log: EventStore
    ) -> None:
        bad: list[Callable[[], Awaitable[Any]]] = [
            lambda: store.aput("users", "k", {}),  # type: ignore[arg-type]
            lambda: store.aput((), "k", {}),
            lambda: store.aput(("a.b",), "k", {}),
            lambda: store.aput(("a", ""), "k", {}),
            lambda: store.aput(("a",), "", {}),
            lambda: store.aput(("a",), "k", ["not", "a", "dict"]),  # type: ignore[arg-type]
            lambda: store.aput(("a",), "k", {"x": object()}),
            lambda: store.aput(("a",), "k", {}, index="text"),  # type: ignore[arg-type]
            lambda: store.aput(("a",), "k", {}, ttl=0),
            lambda: store.adelete(("a",), 3),  # type: ignore[arg-type]
            lambda: store.asearch(("a",), filter={"n": {"$near": 1}}),
            lambda: store.asearch(("a",), limit=-1),
            lambda: store.alist_namespaces(max_depth=0),
        ]
        for call in bad:
            with pytest.raises(InvalidNamespaceError):
                await call()
        assert await log.last_seq(STORE_THREAD) == 0

    async def test_the_blocking_methods_serve_worker_threads_and_refuse_the_loop(
        self, store: LogStore
    ) -> None:
        def work() -> Item | None:
            store.put(("t",), "k", {"v": 1})
            assert [i.key for i in store.search(("t",))] == ["k"]
            assert store.list_namespaces() == [("t",)]
            found = store.get(("t",), "k")
            store.delete(("t",), "k")
            return found

        try:
            found = await asyncio.to_thread(work)
            assert found is not None and found.value == {"v": 1}
            assert await store.aget(("t",), "k") is None
            with pytest.raises(BlockingCallError, match="aput"):
                store.put(("t",), "k", {})
        finally:
            await asyncio.to_thread(store.close)


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def log(self) -> EventStore:
        return MemoryEventStore()

    @pytest.fixture
    def reopen(self, log: EventStore) -> Reopen:
        async def again() -> LogStore:
            return LogStore(log)

        return again


class TestSQLiteStore(StoreContract):
    @pytest.fixture
    async def log(self, tmp_path: Path) -> AsyncIterator[EventStore]:
        async with SQLiteEventStore(tmp_path / "log.db") as log:
            yield log

    @pytest.fixture
    async def reopen(self, tmp_path: Path) -> AsyncIterator[Reopen]:
        opened: list[SQLiteEventStore] = []

        async def again() -> LogStore:
            opened.append(SQLiteEventStore(tmp_path / "log.db"))
            return LogStore(opened[-1])

        yield again
        for log in opened:
            await log.close()


@needs_pg
class TestPostgresStore(StoreContract):
    @pytest.fixture
    async def schema(self) -> AsyncIterator[str]:
        async with fresh_schema() as schema:
            yield schema

    @pytest.fixture
    async def log(self, schema: str) -> AsyncIterator[EventStore]:
        from agentlog.events.stores.postgres import PostgresEventStore

        async with PostgresEventStore(DSN, schema=schema) as log:
            yield log

    @pytest.fixture
    async def reopen(self, schema: str) -> AsyncIterator[Reopen]:
        from agentlog.events.stores.postgres import PostgresEventStore

        opened: list[PostgresEventStore] = []

        async def again() -> LogStore:
            opened.append(PostgresEventStore(DSN, schema=schema))
            return LogStore(opened[-1])

        yield again
        for log in opened:
            await log.close()


# ---- what only some stores show ------------------------------------------------------------


async def test_an_item_expires_ttl_minutes_after_its_put_and_its_records_stay() -> None:
    now = [1000.0]
    store = InMemoryStore(clock=lambda: now[0])
    await store.aput(("s",), "k", {"v": 1}, ttl=1)
    await store.aput(("s",), "j", {"v": 2})
    now[0] += 59
    assert await store.aget(("s",), "k") is not None
    now[0] += 1
    assert await store.aget(("s",), "k") is None
    assert [i.key for i in await store.asearch(("s",))] == ["j"]
    await store.adelete(("s",), "j")
    assert await store.alist_namespaces() == []
    await store.aput(("s",), "k", {"v": 3})  # after it expired: a new item
    item = await store.aget(("s",), "k")
    assert item is not None and item.created_at == datetime.fromtimestamp(now[0], tz=UTC)
    assert await store.event_store.last_seq(STORE_THREAD) == 4


def test_in_memory_store_refuses_an_embedding_configuration_and_works_without_a_loop() -> None:
    from agentlog.actors import LongTermStoreError

    with pytest.raises(LongTermStoreError, match="no embeddings"):
        InMemoryStore(index={"dims": 1536, "embed": "openai:text-embedding-3-small"})
    store = InMemoryStore()
    store.put(("users", "1"), "a", {"food": "pizza"})
    assert [i.value for i in store.search(("users",), query="Pizza")] == [{"food": "pizza"}]
    assert repr(store) == "InMemoryStore(MemoryEventStore, thread='__store__')"
    store.close()


async def test_a_store_on_a_thread_of_its_own_keeps_apart_from_the_default_one() -> None:
    log = MemoryEventStore()
    tenant = LogStore(log, thread="__store__/tenant-a")
    await tenant.aput(("u",), "k", {"v": 1})
    assert await LogStore(log).aget(("u",), "k") is None
    assert await LogStore(log, thread="__store__/tenant-a").aget(("u",), "k") is not None
    assert internal_thread("__store__/tenant-a") and not internal_thread("__storefront")


async def test_a_store_record_altered_behind_the_stores_back_is_refused_by_readers(
    tmp_path: Path,
) -> None:
    import msgspec

    from agentlog.events import ChainBrokenError

    from .helpers import edit_db

    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as log:
        await LogStore(log).aput(("u",), "limit", {"amount": 100})
        await LogStore(log).aput(("u",), "other", {"amount": 1})
    forged = StoreItemPut(namespace=["u"], key="limit", value={"amount": 1_000_000})
    payload = msgspec.msgpack.encode(forged)
    edit_db(
        db, "UPDATE events SET payload = ? WHERE thread_id = ? AND seq = 1", payload, STORE_THREAD
    )
    async with SQLiteEventStore(db) as log:
        with pytest.raises(ChainBrokenError):
            await LogStore(log).aget(("u",), "limit")
        assert not (await log.verify(STORE_THREAD)).ok
