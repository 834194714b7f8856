"""Watching a running node: its time limit, and a stop request landing in the log."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agentlog.actors.engine.nodes import NodeActor
from agentlog.actors.engine.run import Run, _log
from agentlog.events import (
    EventStore,
    StopRequested,
    StoreClosedError,
)

STOP_POLL_S = 0.25
"""How often a running node's run looks in the log for a stop request (after this long)."""


class Guard:
    """Watches a running node: its time limit, and a stop request landing in the log.

    Either cuts the node short by stopping its actor: an async node is cancelled, a sync
    one abandoned on its worker thread. Nodes quicker than `STOP_POLL_S` cost one timer.
    """

    def __init__(
        self,
        store: EventStore,
        run: Run[Any],
        node: str,
        actor: NodeActor,
        timeout: float | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.store, self.run, self.node, self.actor, self.timeout = store, run, node, actor, timeout
        self.fired: str | None = None
        self.armed = True
        self._stopping: asyncio.Future[None] | None = None
        self._poll: asyncio.Task[None] | None = None
        self._timers = [loop.call_later(STOP_POLL_S, self._start_polling)]
        if timeout is not None:
            self._timers.append(loop.call_later(timeout, self._fire, "timeout"))

    def disarm(self) -> str | None:
        """Stop watching; say what cut the node short, if anything did."""
        self.armed = False
        for timer in self._timers:
            timer.cancel()
        if self._poll is not None and not self._poll.done():
            self._poll.cancel()
        return self.fired

    async def stopped(self) -> None:
        """Wait until the node's actor has stopped (its async work is cancelled)."""
        if self._stopping is not None:
            with contextlib.suppress(BaseException):
                await self._stopping

    def _fire(self, why: str) -> None:
        if self.armed and self.fired is None:
            self.fired = why
            self.run.actors.pop(self.node, None)  # a later step of the node gets a new one
            self._stopping = asyncio.ensure_future(self.actor.stop(drain=False))

    def _start_polling(self) -> None:
        if self.armed:
            self._poll = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        try:
            while self.armed:
                async for record in self.store.read(self.run.thread_id, self.run.durable_seq() + 1):
                    if isinstance(record.event, StopRequested):
                        if not record.event.between_nodes:
                            self._fire("stop")
                        return  # a stop between nodes lands once this node has committed
                await asyncio.sleep(STOP_POLL_S)
        except asyncio.CancelledError:
            raise
        except StoreClosedError:
            return  # the app is shutting down: the run's own commit reports what it must
        except Exception as exc:  # the step's own commit will meet the same trouble
            _log.warning("stop watch on thread %r ended: %s", self.run.thread_id, exc)
