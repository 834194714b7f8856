"""The stream actor: fans a run's chunks out to its consumers, with backpressure."""

from __future__ import annotations

import asyncio

from agentlog.actors.engine.actor import Actor
from agentlog.projections import StreamChunk

END_OF_STREAM = StreamChunk(data={"end": True})
"""The last item every consumer receives."""


class RunStream(Actor[StreamChunk, None]):
    """Delivers each chunk to every subscriber's bounded queue, in order.

    A slow consumer slows the run down (the queue fills, `tell` waits) instead of letting
    chunks pile up in memory.
    """

    def __init__(self, name: str, *, buffer: int = 64) -> None:
        super().__init__(f"stream:{name}", mailbox_size=buffer)
        self._buffer = buffer
        self._subscribers: list[asyncio.Queue[StreamChunk]] = []

    def subscribe(self) -> asyncio.Queue[StreamChunk]:
        """A new queue that will receive every chunk from now on."""
        queue: asyncio.Queue[StreamChunk] = asyncio.Queue(self._buffer)
        self._subscribers.append(queue)
        return queue

    async def receive(self, message: StreamChunk) -> None:
        for queue in self._subscribers:
            await queue.put(message)
