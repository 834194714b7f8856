"""The conformance suite against PostgreSQL, plus what only a shared server can show."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentlog.events import EventStore
from agentlog.events.testing import StoreConformance

from .workers.pg_env import DSN, fresh_schema, needs_pg

pytestmark = needs_pg


class TestPostgresStore(StoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[EventStore]:
        from agentlog.events.stores.postgres import PostgresEventStore

        async with fresh_schema() as schema, PostgresEventStore(DSN, schema=schema) as store:
            yield store
