"""The conformance suite against the in-memory store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentlog.events import EventStore, MemoryEventStore
from agentlog.events.testing import StoreConformance


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[EventStore]:
        async with MemoryEventStore() as store:
            yield store
