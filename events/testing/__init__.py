"""The contract every `EventStore` keeps, as a pytest suite any backend can run.

A new store is proven by inheritance: subclass `StoreConformance` in a test module, give it
an async `store` fixture yielding a fresh, empty store, and the two hooks through which the
suite reaches behind the store: `forge_holder` (write a claim as another process would) and
`alter_record` (rewrite a stored record as a hand edit would; `rewritten_row` computes it)::

    import pytest
    from agentlog.events.testing import StoreConformance, rewritten_row

    class TestMyStore(StoreConformance):
        @pytest.fixture
        async def store(self, tmp_path):
            async with MyEventStore(tmp_path / "log") as store:
                yield store

        async def forge_holder(self, store, thread_id, holder):
            await store.put_claim_row(thread_id, holder)  # however MyEventStore keeps claims

        async def alter_record(self, store, thread_id, seq, event, rehash=False):
            await store.put_row(await rewritten_row(store, thread_id, seq, event, rehash))

The suite is split by concern, and each part can be run on its own: `LogConformance`
(appends, reads, the hash chain, audits), `SnapshotConformance` (needs `alter_record`) and
`ClaimConformance` (needs `forge_holder`). The shared suite knows no backend; the built-in
stores' hooks live in their own test modules.

The suite needs pytest and pytest-asyncio (`pip install agentlog[testing]`), with
`asyncio_mode = "auto"` or the fixture declared with `pytest_asyncio.fixture`; `import
agentlog.events` needs neither, and nothing in the package imports this module.
"""

from __future__ import annotations

from agentlog.events.testing.base import (
    ConformanceBase,
    rewritten_row,
    step_events,
    text_event,
    text_message,
)
from agentlog.events.testing.claims import ClaimConformance
from agentlog.events.testing.log import LogConformance
from agentlog.events.testing.snapshots import SnapshotConformance

__all__ = [
    "ClaimConformance",
    "ConformanceBase",
    "LogConformance",
    "SnapshotConformance",
    "StoreConformance",
    "rewritten_row",
    "step_events",
    "text_event",
    "text_message",
]


class StoreConformance(LogConformance, SnapshotConformance, ClaimConformance):
    """Behaviour shared by all stores: the log, snapshots and claims. Subclasses provide an
    async `store` fixture (a fresh, empty store each test), `forge_holder` and
    `alter_record`."""
