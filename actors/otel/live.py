"""Live: a follower of the log that emits each span as the committed record that closes it
arrives, the same spans `agentlog otel export` rebuilds later.

It reads only committed records (`agentlog.events.follow`), so a span never describes work
the log lost. With a `cursor` name it keeps its position in the store
(`agentlog.events.cursors`): every `checkpoint_s` seconds it flushes the provider's
processors, then saves the position it had reached, so after a crash it goes on from
there, and the spans it had emitted after that position are sent again with the same ids
(a backend shows them once). A thread it meets again after a restart is first folded,
silently, up to where it stood, so a run that began before the crash ends in the span it
began.

Once it has caught up with the log it waits `batch_s` before reading again, so a busy log
is read in batches of commits rather than once per commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from agentlog.actors.otel.emit import Emitter
from agentlog.actors.otel.metrics import SpanMetrics
from agentlog.events.cursors import check_cursor_name, load_cursor, save_cursor
from agentlog.events.errors import InvalidArgumentError
from agentlog.events.follow import commit_signal, last_position
from agentlog.events.follow import follow as follow_log
from agentlog.events.kinds import RUNTIME_KINDS, STORE_KINDS
from agentlog.events.record import EventRecord
from agentlog.events.store import EventStore
from agentlog.projections.spans import SpanFold

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

_log = logging.getLogger("agentlog.otel")
_SKIPPED = RUNTIME_KINDS | STORE_KINDS
MAX_THREADS = 10_000
"""How many threads' folds a follower keeps; one let go is folded again from the log."""


class SpanFollower:
    """The state of a live follower: the position it reached, the threads it folds."""

    def __init__(
        self,
        store: EventStore,
        tracer_provider: TracerProvider,
        *,
        after: int = 0,
        cursor: str | None = None,
        capture_content: bool = False,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.store = store
        self.metrics = SpanMetrics(meter_provider) if meter_provider is not None else None
        self.emitter = Emitter(tracer_provider)
        self.cursor = cursor
        self.capture_content = capture_content
        self.started_after = after
        """The position it started after (its cursor's, when it has one)."""
        self.position = after
        """The position of the last record folded."""
        self.saved = after
        """The position its cursor holds: every span up to it reached the exporters."""
        self.emitted = 0
        """How many spans it emitted."""
        self._folds: OrderedDict[str, SpanFold] = OrderedDict()
        self._moved = asyncio.Event()

    async def run(self, poll_s: float = 0.2, batch_s: float = 0.05) -> None:
        """Follow the log for ever (until cancelled or the store closes)."""
        signal = commit_signal(self.store)
        async for record in follow_log(self.store, after=self.position, poll_s=poll_s):
            if record.kind not in _SKIPPED:
                fold = await self._fold(record)
                spans = fold.feed(record)
                if spans:
                    self.emitted += self.emitter.emit(spans)
                if self.metrics is not None:
                    self.metrics.record(record, spans)
            self.position = record.position
            self._moved.set()
            if batch_s and signal is not None and record.position >= signal.position:
                await asyncio.sleep(batch_s)  # caught up: let commits gather

    async def _fold(self, record: EventRecord) -> SpanFold:
        """The thread's fold, the most recently used `MAX_THREADS` kept. A thread met anew
        (first since a restart, or its fold let go) is folded silently up to this record:
        its earlier records were read before, and their spans emitted then."""
        fold = self._folds.get(record.thread_id)
        if fold is not None:
            self._folds.move_to_end(record.thread_id)
            return fold
        fold = SpanFold(record.thread_id, capture_content=self.capture_content)
        if record.seq > 1:
            async for earlier in self.store.read(record.thread_id, 1, record.seq - 1):
                fold.feed(earlier)
        self._folds[record.thread_id] = fold
        if len(self._folds) > MAX_THREADS:
            self._folds.popitem(last=False)
        return fold

    async def checkpoint(self) -> int:
        """Flush the provider's processors, then save the position reached under the
        cursor; the position the cursor holds."""
        position = self.position
        if position <= self.saved:
            return self.saved
        if not await asyncio.to_thread(self.emitter.flush):
            _log.warning(
                "the span exporter did not finish in time; the cursor stays at %d",
                self.saved,
                extra={"cursor": self.cursor, "position": position},
            )
            return self.saved
        if self.cursor is not None:
            await save_cursor(self.store, self.cursor, position)
        _log.debug(
            "spans exported up to position %d (%d so far)",
            position,
            self.emitted,
            extra={"cursor": self.cursor, "position": position},
        )
        self.saved = position
        return position

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
    cursor: str | None = None,
    after: int | None = None,
    capture_content: bool = False,
    meter_provider: MeterProvider | None = None,
    checkpoint_s: float = 1.0,
    batch_s: float = 0.05,
    poll_s: float = 0.2,
) -> AsyncIterator[SpanFollower]:
    """Emit the spans of every run on `store` through `tracer_provider` while the block
    runs; on the way out, what the block committed is emitted and flushed.

    It starts after the position its `cursor` holds (a name, kept in the store), else after
    `after` (0: the start of the log); pass one or neither. With a `meter_provider`, the
    runs, steps, tool and model calls are counted too (`agentlog.actors.otel.metrics`).

        async with agentlog.otel.follow(store, tracer_provider=provider, cursor="otel"):
            await graph.ainvoke(...)
    """
    if cursor is not None:
        check_cursor_name(cursor)
        if after is not None:
            raise InvalidArgumentError(
                "pass cursor= (start where it was saved) or after= (start at a position), not both"
            )
        after = await load_cursor(store, cursor)
    follower = SpanFollower(
        store,
        tracer_provider,
        after=after or 0,
        cursor=cursor,
        capture_content=capture_content,
        meter_provider=meter_provider,
    )
    task = asyncio.create_task(follower.run(poll_s, batch_s), name="agentlog.otel.follow")

    async def checkpoints() -> None:
        while True:
            await asyncio.sleep(checkpoint_s)
            await follower.checkpoint()

    saver = asyncio.create_task(checkpoints(), name="agentlog.otel.checkpoints")
    try:
        yield follower
        # What the block committed is emitted before the block is left.
        caught_up = asyncio.create_task(follower.wait_for(await last_position(store)))
        await asyncio.wait({task, caught_up}, timeout=60.0, return_when="FIRST_COMPLETED")
        caught_up.cancel()
    finally:
        saver.cancel()
        task.cancel()
        ended = await asyncio.gather(task, saver, return_exceptions=True)
        failure = next((e for e in ended if isinstance(e, Exception)), None)
        if failure is None:
            await follower.checkpoint()
    if failure is not None:
        raise failure
