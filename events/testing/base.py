"""What the parts of the store contract share: the `store` fixture, the two hooks through
which a backend lets the suite reach behind it, and builders of events."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from agentlog.events.claims import Holder
from agentlog.events.codec import GENESIS_HASH, Row, chain_hash, encode_payloads
from agentlog.events.kinds import Event, MessageAppended, NodeEntered, StepAdvanced
from agentlog.events.store import EventStore

__all__ = [
    "ConformanceBase",
    "eventually",
    "rewritten_row",
    "step_events",
    "text_event",
    "text_message",
]

_ids = itertools.count(1)


def text_message(text: str, role: str = "user", message_id: str | None = None) -> dict[str, Any]:
    """A message as the log stores it (builtins): one text block."""
    return {
        "message_id": message_id or f"msg-{next(_ids)}",
        "role": role,
        "content": [{"type": "text", "text": text}],
    }


def text_event(text: str, message_id: str | None = None) -> MessageAppended:
    """A message_appended event of a user text."""
    return MessageAppended(message=text_message(text, message_id=message_id))


def step_events(step: int, text: str = "hello", role: str = "assistant") -> list[Event]:
    """The events of one ordinary agent step: a node entered, its reply, the step's end."""
    return [
        NodeEntered(node="agent"),
        MessageAppended(message=text_message(f"{text} {step}", role=role)),
        StepAdvanced(step=step, next_node="agent"),
    ]


class ConformanceBase:
    """The fixture and hooks a backend's subclass provides. The suite knows no backend: what
    only a backend can do (write behind its own back) it asks of these hooks."""

    pytestmark = pytest.mark.asyncio

    @pytest.fixture
    async def store(self) -> AsyncIterator[EventStore]:  # pragma: no cover - overridden
        raise NotImplementedError("a StoreConformance subclass provides the `store` fixture")
        yield

    async def forge_holder(self, store: EventStore, thread_id: str, holder: Holder) -> None:
        """Put `holder` in the store as the thread's claim, as another process would have.

        The claim tests need it to stage owners that are dead, remote or usurping; a backend's
        subclass overrides it with a direct write to wherever it keeps claims.
        """
        pytest.fail(
            f"{type(store).__name__} has no way to stage a claim: override "
            "StoreConformance.forge_holder to write `holder` as the thread's claim"
        )

    async def alter_record(
        self, store: EventStore, thread_id: str, seq: int, event: Event, rehash: bool = False
    ) -> None:
        """Replace the payload of the thread's record `seq` with `event`'s behind the store,
        as a hand edit of the database would; with `rehash`, its stored hash is made to match
        the new bytes too (the records after it are left alone).

        The snapshot tests need it; a backend's subclass overrides it with a direct write
        (`rewritten_row` computes the row's new payload and hash).
        """
        pytest.fail(
            f"{type(store).__name__} has no way to alter a record: override "
            "StoreConformance.alter_record to rewrite it behind the store"
        )


async def rewritten_row(
    store: EventStore, thread_id: str, seq: int, event: Event, rehash: bool = False
) -> Row:
    """The thread's row `seq` as `alter_record` must leave it: `event`'s payload, and the
    stored hash kept, or with `rehash` made to match the new bytes. What a backend's
    `alter_record` writes where it keeps rows."""
    [encoded] = encode_payloads(thread_id, [event])
    rows = [r async for r in store.read_rows(thread_id, seq - 1 if seq > 1 else 1, seq)]
    row = rows[-1]
    prev = rows[0].hash if seq > 1 else GENESIS_HASH
    envelope = (
        row.thread_id, row.seq, row.run_id, row.actor,
        row.at, row.kind, row.version, row.position,
    )  # fmt: skip
    digest = chain_hash(prev, envelope, encoded.payload) if rehash else row.hash
    return row._replace(payload=encoded.payload, hash=digest)


async def eventually(
    condition: Callable[[], Awaitable[bool]], *, what: str, timeout: float = 120.0
) -> None:
    """Await `condition()` until it holds, failing the test naming `what` after `timeout`
    seconds (a guard against never, not a guess of how long). The suite's own copy of
    `agentlog.actors.testing.until`: the events layer imports nothing above it."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"still waiting for {what} after {timeout:g}s")
        await asyncio.sleep(0.005)
