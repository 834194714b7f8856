"""The conformance suite against the in-memory store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentlog.events import EventStore, MemoryEventStore
from agentlog.events.claims import Holder
from agentlog.events.kinds import Event
from agentlog.events.testing import StoreConformance, rewritten_row


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[EventStore]:
        async with MemoryEventStore() as store:
            yield store

    async def forge_holder(self, store: EventStore, thread_id: str, holder: Holder) -> None:
        assert isinstance(store, MemoryEventStore)
        store._claims[thread_id] = holder

    async def alter_record(
        self, store: EventStore, thread_id: str, seq: int, event: Event, rehash: bool = False
    ) -> None:
        assert isinstance(store, MemoryEventStore)
        altered = await rewritten_row(store, thread_id, seq, event, rehash)
        store._threads[thread_id][seq - 1] = altered
        store._all[altered.position - 1] = altered


def test_the_shared_suite_knows_no_backend() -> None:
    """Backend knowledge lives in each backend's own subclass: the shared suite names none."""
    import agentlog.events.testing as suite

    for source in Path(suite.__file__).parent.glob("*.py"):
        text = source.read_text()
        for name in ("stores.", "SQLite", "Memory", "Postgres", "sqlite3", "__module__"):
            assert name not in text, (source.name, name)


class _NoHooks(StoreConformance):
    """A backend that gave the suite no way to reach behind it."""


async def test_a_backend_without_hooks_is_told_which_to_write() -> None:
    from agentlog.events.claims import Holder
    from agentlog.events.kinds import NodeEntered

    async with MemoryEventStore() as store:
        holder = Holder("x", "h", 1, "1", 0.0, 30.0, "p")
        with pytest.raises(pytest.fail.Exception, match=r"override StoreConformance\.forge_holder"):
            await _NoHooks().forge_holder(store, "t", holder)
        with pytest.raises(pytest.fail.Exception, match=r"override StoreConformance\.alter_record"):
            await _NoHooks().alter_record(store, "t", 1, NodeEntered(node="n"))
