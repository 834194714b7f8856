"""Live: a follower of the log that emits each span as the committed record that closes it
arrives, the same spans `agentlog otel export` rebuilds later.

It reads only committed records (`agentlog.events.follow`), so a span never describes work
the log lost. Every `checkpoint_s` seconds it flushes the provider's processors and then
remembers the position it had reached: after a crash it goes on from the last position so
remembered, and the spans it had emitted after it are sent again with the same ids (a
backend shows them once). A thread it meets again after a restart is first folded,
silently, up to where it stood, so a run that began before the crash ends in the span it
began.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from agentlog.actors.otel.emit import Emitter
from agentlog.events.follow import follow as follow_log
from agentlog.events.follow import last_position
from agentlog.events.kinds import RUNTIME_KINDS, STORE_KINDS
from agentlog.events.record import EventRecord
from agentlog.events.store import EventStore
from agentlog.projections.spans import SpanFold

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

_log = logging.getLogger("agentlog.otel")
_SKIPPED = RUNTIME_KINDS | STORE_KINDS


class SpanFollower:
    """The state of a live follower: the position it reached, the threads it folds."""

    def __init__(
        self,
        store: EventStore,
        tracer_provider: TracerProvider,
        *,
        after: int = 0,
        capture_content: bool = False,
    ) -> None:
        self.store = store
        self.emitter = Emitter(tracer_provider)
        self.capture_content = capture_content
        self.started_after = after
        self.position = after
        """The position of the last record folded."""
        self.emitted = 0
        """How many spans it emitted."""
        self.flushed = after
        """The position every span up to which has been flushed to the exporters."""
        self._folds: dict[str, SpanFold] = {}
        self._moved = asyncio.Event()

    async def run(self, poll_s: float = 0.2) -> None:
        """Follow the log for ever (until cancelled or the store closes)."""
        async for record in follow_log(self.store, after=self.position, poll_s=poll_s):
            if record.kind not in _SKIPPED:
                fold = await self._fold(record)
                spans = fold.feed(record)
                if spans:
                    self.emitted += self.emitter.emit(spans)
            self.position = record.position
            self._moved.set()

    async def _fold(self, record: EventRecord) -> SpanFold:
        fold = self._folds.get(record.thread_id)
        if fold is not None:
            return fold
        fold = SpanFold(record.thread_id, capture_content=self.capture_content)
        self._folds[record.thread_id] = fold
        if record.seq == 1 or self.started_after == 0:
            return fold
        # First met since a restart: its earlier records are all at or before the position
        # started from; fold them silently (their spans were emitted before).
        async for earlier in self.store.read(record.thread_id, 1, record.seq - 1):
            fold.feed(earlier)
        return fold

    async def flush(self) -> int:
        """Flush the provider's processors; the position every span up to which is out."""
        position = self.position
        done = await asyncio.to_thread(self.emitter.flush)
        if done:
            self.flushed = position
        else:
            _log.warning("the span exporter did not finish in time; spans are sent again")
        return self.flushed

    async def wait_for(self, position: int) -> None:
        """Return once the follower has folded every record up to `position`."""
        while self.position < position:
            self._moved.clear()
            await self._moved.wait()


@contextlib.asynccontextmanager
async def follow(
    store: EventStore,
    *,
    tracer_provider: TracerProvider,
    after: int = 0,
    capture_content: bool = False,
    poll_s: float = 0.2,
) -> AsyncIterator[SpanFollower]:
    """Emit the spans of every run on `store` through `tracer_provider` while the block
    runs, from the records committed after position `after`; on the way out, what was
    emitted is flushed.

        async with agentlog.otel.follow(store, tracer_provider=provider):
            await graph.ainvoke(...)
    """
    follower = SpanFollower(store, tracer_provider, after=after, capture_content=capture_content)
    task = asyncio.create_task(follower.run(poll_s), name="agentlog.otel.follow")
    try:
        yield follower
        # What the block committed is emitted before the block is left.
        caught_up = asyncio.create_task(follower.wait_for(await last_position(store)))
        await asyncio.wait({task, caught_up}, timeout=60.0, return_when="FIRST_COMPLETED")
        caught_up.cancel()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await follower.flush()
