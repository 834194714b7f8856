"""Answering a model call from the log: the message an earlier call with the same request
produced, found by the request hash its `model_called` recorded."""

from __future__ import annotations

from events import EventStore, MessageAppended, ModelCalled
from projections import Message

__all__ = ["LoggedAnswers"]


class LoggedAnswers:
    """An index of a store's completed model calls by request hash, read incrementally.

    `ModelNode(..., replay_from=LoggedAnswers(store))` answers a request seen before with
    the message it produced then, without calling the provider: a replay of a recorded
    session, or a test run against a recorded log. Each lookup first reads what the store
    committed since the last one.
    """

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.position = 0
        self.answers: dict[str, Message] = {}
        self._waiting: dict[tuple[str, str | int], str] = {}

    async def find(self, request_hash: str) -> Message | None:
        """The message the first completed call with `request_hash` produced, or None."""
        async for record in self.store.read_all(self.position):
            self.position = record.position
            event = record.event
            if isinstance(event, ModelCalled):
                if event.status == "completed" and event.message_id is not None:
                    self._waiting[(record.thread_id, event.message_id)] = event.request_hash
            elif isinstance(event, MessageAppended):
                mid = event.message.get("message_id")
                if not isinstance(mid, str | int):
                    continue
                digest = self._waiting.pop((record.thread_id, mid), None)
                if digest is not None:
                    self.answers.setdefault(digest, Message.model_validate(event.message))
        return self.answers.get(request_hash)
