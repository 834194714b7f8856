"""`LoggedAnswers`: the first lookup reads the `model_called` records and their messages,
not the whole log; later lookups read what was committed since; the earliest call wins."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentlog.actors.models import LoggedAnswers
from agentlog.events import MemoryEventStore, ModelCalled
from agentlog.events.record import EventRecord
from agentlog.projections import Message, message_appended
from tests.helpers import text_event


class CountingStore:
    """A store that counts the records it hands out (through `read` and `read_all`)."""

    def __init__(self, store: MemoryEventStore) -> None:
        self.store = store
        self.handed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def read(self, *args: Any, **kwargs: Any) -> AsyncIterator[EventRecord]:
        async for record in self.store.read(*args, **kwargs):
            self.handed += 1
            yield record

    async def read_all(self, *args: Any, **kwargs: Any) -> AsyncIterator[EventRecord]:
        async for record in self.store.read_all(*args, **kwargs):
            self.handed += 1
            yield record


def called(digest: str, message_id: str | None, status: str = "completed") -> ModelCalled:
    return ModelCalled(
        node="agent",
        provider="openai",
        model="m",
        request_hash=digest,
        attempt=1,
        status=status,
        message_id=message_id,
    )


async def answer(store: MemoryEventStore, thread: str, digest: str, text: str) -> None:
    """Commit a failed attempt, a completed one and its message, as a model node's step does."""
    reply = Message.text_message(text, role="assistant")
    seq = await store.last_seq(thread)
    events = [
        called(digest, None, "failed"),
        called(digest, reply.message_id),
        message_appended(reply),
    ]
    await store.append(thread, events, expected_seq=seq)


async def chatter(store: MemoryEventStore, thread: str, count: int) -> None:
    seq = await store.last_seq(thread)
    events = [text_event(f"line {i}") for i in range(count)]
    await store.append(thread, events, expected_seq=seq)


async def test_the_first_lookup_reads_the_calls_not_the_whole_log() -> None:
    store = MemoryEventStore()
    for t in range(10):
        await chatter(store, f"t{t}", 100)
    await answer(store, "t3", "h1", "first")
    await chatter(store, "t3", 50)
    await answer(store, "t7", "h2", "second")
    counting = CountingStore(store)
    answers = LoggedAnswers(counting)  # type: ignore[arg-type]
    found = await answers.find("h1")
    assert found is not None and found.text() == "first"
    assert (await answers.find("h2") or Message()).text() == "second"
    assert await answers.find("unknown") is None
    assert counting.handed <= 12  # of 1,056 records: each call and the records after it


async def test_a_log_of_short_threads_is_read_once_in_full() -> None:
    """Two queries per thread would cost more than its records: the log is read instead."""
    store = MemoryEventStore()
    for t in range(30):
        await chatter(store, f"t{t}", 2)
    await answer(store, "t9", "h", "found")
    counting = CountingStore(store)
    answers = LoggedAnswers(counting)  # type: ignore[arg-type]
    assert (await answers.find("h") or Message()).text() == "found"
    assert counting.handed == await store.last_position() == 63


@pytest.mark.parametrize("filler", [3, 300])  # the whole log read, or the calls alone
async def test_later_lookups_read_what_was_committed_since_and_the_earliest_call_wins(
    filler: int,
) -> None:
    store = MemoryEventStore()
    await chatter(store, "a", filler)  # the thread listed first ...
    await answer(store, "b", "h", "the earlier call")
    await answer(store, "a", "h", "the later call")  # ... holds the later call
    answers = LoggedAnswers(store)
    assert (await answers.find("h") or Message()).text() == "the earlier call"
    assert await answers.find("new") is None
    await answer(store, "c", "new", "committed after the first lookup")
    assert (await answers.find("new") or Message()).text() == "committed after the first lookup"
    assert answers.position == await store.last_position()
