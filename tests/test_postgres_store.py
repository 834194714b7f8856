"""The conformance suite against PostgreSQL, plus what only a shared server can show."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentlog.events import EventStore
from agentlog.events.claims import Holder
from agentlog.events.kinds import Event
from agentlog.events.testing import StoreConformance, rewritten_row

from .workers.pg_env import DSN, fresh_schema, needs_pg

pytestmark = needs_pg


class TestPostgresStore(StoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[EventStore]:
        from agentlog.events.stores.postgres import PostgresEventStore

        async with fresh_schema() as schema, PostgresEventStore(DSN, schema=schema) as store:
            yield store

    async def forge_holder(self, store: EventStore, thread_id: str, holder: Holder) -> None:
        from agentlog.events.stores.postgres import PostgresEventStore

        assert isinstance(store, PostgresEventStore)
        await store.open()
        await store._query(
            "execute",
            f'INSERT INTO "{store.schema}".claims (thread_id, token, host, pid, started, '
            "heartbeat_at, lease, purpose) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
            "ON CONFLICT (thread_id) DO UPDATE SET token = excluded.token, "
            "host = excluded.host, pid = excluded.pid, started = excluded.started, "
            "heartbeat_at = excluded.heartbeat_at, lease = excluded.lease, "
            "purpose = excluded.purpose",
            thread_id, holder.token, holder.host, holder.pid, holder.started,
            holder.heartbeat_at, holder.lease, holder.purpose,
        )  # fmt: skip

    async def alter_record(
        self, store: EventStore, thread_id: str, seq: int, event: Event, rehash: bool = False
    ) -> None:
        from agentlog.events.stores.postgres import PostgresEventStore

        assert isinstance(store, PostgresEventStore)
        row = await rewritten_row(store, thread_id, seq, event, rehash)
        await store._query(
            "execute",
            f'UPDATE "{store.schema}".events SET payload = $1, hash = $2 '
            "WHERE thread_id = $3 AND seq = $4",
            row.payload, row.hash, thread_id, seq,
        )  # fmt: skip


async def test_many_first_uses_at_once_open_the_store_once() -> None:
    """A fresh store used by many callers at once opens once: one writer, every append lands."""
    import asyncio

    from agentlog.events.stores.postgres import PostgresEventStore

    from .helpers import step_events

    async with fresh_schema() as schema:
        store = PostgresEventStore(DSN, schema=schema)
        try:
            await asyncio.gather(
                *(store.append(f"t{i}", step_events(1), expected_seq=0) for i in range(20))
            )
            assert sorted(await store.threads()) == sorted(f"t{i}" for i in range(20))
        finally:
            await store.close()
