"""Answering a model call from the log: the message an earlier call with the same request
produced, found by the request hash its `model_called` recorded."""

from __future__ import annotations

from agentlog.events import EventStore, MessageAppended, ModelCalled, last_position
from agentlog.events.errors import ThreadNotFoundError
from agentlog.events.record import EventRecord
from agentlog.projections import Message

__all__ = ["LoggedAnswers"]

INDEX_FROM = 64
"""Records per thread, on average, from which the first lookup reads the `model_called`
records thread by thread rather than the whole log: that costs two queries per thread,
about as much as decoding 35 records (measured on SQLite)."""

ANSWER_WITHIN = 8
"""How many records after a completed `model_called` its message is looked for: the node's
step commits the message right after its attempts' facts."""


class LoggedAnswers:
    """An index of a store's completed model calls by request hash.

    `ModelNode(..., replay_from=LoggedAnswers(store))` answers a request seen before with
    the message it produced then, without calling the provider: a replay of a recorded
    session, or a test run against a recorded log.

    The first lookup builds the index. On a log of long threads (more than `INDEX_FROM`
    records each, on average) it reads the `model_called` records alone: per thread, the
    store's list of their seqs (two queries), then each completed call and the few records
    after it, where its message is; the rest of the log is not read. On a log of many short
    threads those queries would cost more than the records, so it reads the whole log once.
    Every later lookup reads only what the store committed since the one before.
    """

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.position: int | None = None
        """The log position read up to; None before the first lookup."""
        self.answers: dict[str, Message] = {}
        self._first: dict[str, int] = {}
        """The log position of each answer's message: the earliest call wins."""
        self._waiting: dict[tuple[str, str | int], str] = {}

    async def find(self, request_hash: str) -> Message | None:
        """The message the first completed call with `request_hash` produced, or None."""
        if self.position is None:
            position = await last_position(self.store)
            threads = await self.store.threads()
            self.position = position if position > INDEX_FROM * len(threads) else 0
            if self.position:
                await self._index(threads)
        async for record in self.store.read_all(self.position):
            self.position = record.position
            self._take(record)
        return self.answers.get(request_hash)

    async def _index(self, threads: list[str]) -> None:
        """Every completed call up to `position`, read through the `model_called` seqs."""
        for thread in threads:
            try:
                seqs = await self.store.seqs_of_kind(thread, ModelCalled.KIND)
            except ThreadNotFoundError:  # removed since the list was read
                continue
            for seq in seqs:
                async for record in self.store.read(thread, seq, seq + ANSWER_WITHIN):
                    if self.position is not None and record.position > self.position:
                        break  # read again, in order, by the incremental pass
                    self._take(record)
                    if isinstance(record.event, MessageAppended):
                        break

    def _take(self, record: EventRecord) -> None:
        """Index one record: a completed call waits for its message, a message settles it."""
        event = record.event
        if isinstance(event, ModelCalled):
            if event.status == "completed" and event.message_id is not None:
                self._waiting[(record.thread_id, event.message_id)] = event.request_hash
        elif isinstance(event, MessageAppended):
            mid = event.message.get("message_id")
            if not isinstance(mid, str | int):
                return
            digest = self._waiting.pop((record.thread_id, mid), None)
            if digest is not None and record.position < self._first.get(
                digest, record.position + 1
            ):
                self._first[digest] = record.position
                self.answers[digest] = Message.model_validate(event.message)
