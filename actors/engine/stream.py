"""The stream actor: fans a run's chunks out to its consumers, with backpressure."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING

from agentlog.actors.engine.actor import Actor, ActorError
from agentlog.projections import StreamChunk

if TYPE_CHECKING:
    from agentlog.actors.engine.modes import ModeProjection, Part

END_OF_STREAM = StreamChunk(data={"end": True})
"""The last item every consumer receives."""


class RunStream(Actor["StreamChunk | Part", None]):
    """Delivers each chunk to every subscriber's bounded queue, in order.

    A slow consumer slows the run down (the queue fills, `tell` waits) instead of letting
    chunks pile up in memory. With a `projection` (a consumer asked for stream modes), what
    the run tells it is projected into the modes' parts (`agentlog.actors.engine.modes`):
    agentlog's own chunks give way to them, a model's token deltas become `messages` parts.
    """

    def __init__(
        self, name: str, *, buffer: int = 64, projection: ModeProjection | None = None
    ) -> None:
        super().__init__(f"stream:{name}", mailbox_size=buffer)
        self._buffer = buffer
        self._subscribers: list[asyncio.Queue[StreamChunk | Part]] = []
        self.projection = projection
        self._order = asyncio.Lock()
        self._written: list[Part] = []
        """Parts a node's code wrote from the event loop's thread (it cannot wait there):
        delivered before anything told after them, and soon in any case."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._flushing: set[asyncio.Task[None]] = set()

    def start(self) -> RunStream:
        self._loop, self._thread = asyncio.get_running_loop(), threading.get_ident()
        super().start()
        return self

    def subscribe(self) -> asyncio.Queue[StreamChunk | Part]:
        """A new queue that will receive every chunk from now on."""
        queue: asyncio.Queue[StreamChunk | Part] = asyncio.Queue(self._buffer)
        self._subscribers.append(queue)
        return queue

    async def tell(self, message: StreamChunk | Part) -> None:
        """Deliver `message` after what was written before it (as parts, with a projection)."""
        async with self._order:
            for part in self._take_written():
                await super().tell(part)
            if self.projection is None or message is END_OF_STREAM:
                await super().tell(message)
                return
            if isinstance(message, StreamChunk):
                for part in self.projection.delta(message):
                    await super().tell(part)
                return
            await super().tell(message)

    def write(self, part: Part) -> None:
        """Deliver `part` from code that cannot await (a node's stream writer): from a worker
        thread, wait until it is delivered; on the event loop, queue it before whatever is
        told next, and have it delivered soon."""
        loop = self._loop
        if loop is None or not self.running:
            return
        if threading.get_ident() != self._thread:
            with contextlib.suppress(ActorError, RuntimeError):  # the consumer went away
                asyncio.run_coroutine_threadsafe(self.tell(part), loop).result()
            return
        self._written.append(part)
        if len(self._written) == 1:
            task = loop.create_task(self.tell_written())
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)

    async def tell_written(self) -> None:
        """Deliver the parts written from the event loop's thread, if no tell did already."""
        async with self._order:
            with contextlib.suppress(ActorError):  # the run's stream ended meanwhile
                for part in self._take_written():
                    await super().tell(part)

    def _take_written(self) -> list[Part]:
        written, self._written = self._written, []
        return written

    async def receive(self, message: StreamChunk | Part) -> None:
        for queue in self._subscribers:
            await queue.put(message)
