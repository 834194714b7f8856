"""Watching a running node: its time limit, and a stop request landing in the log."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from agentlog.actors.engine.run import Run, _log
from agentlog.events import (
    AgentlogError,
    EventStore,
    StopRequested,
    StoreClosedError,
)

T = TypeVar("T")

STOP_POLL_S = 0.25
"""How often a running node's run looks in the log for a stop request (after this long)."""


class CutShortError(AgentlogError):
    """The guard cut the node's call short: `why` is "timeout" or "stop"."""

    def __init__(self, node: str, why: str) -> None:
        super().__init__(f"node {node!r} was cut short ({why})")
        self.node, self.why = node, why


class NodeCancelledError(AgentlogError):
    """The node's call raised `CancelledError` though nobody cancelled its run: a failure."""


class Guard:
    """Watches a node called in the current task: its time limit, and a stop request
    landing in the log.

    Either cuts the call short by cancelling the task awaiting it (`call`): an async node
    is cancelled, a sync one abandoned on its worker thread. The task's cancel count tells
    that cut from a cancel of the task by anyone else, which goes on as a cancel. Nodes
    quicker than `STOP_POLL_S` cost one timer.
    """

    def __init__(self, store: EventStore, run: Run[Any], node: str, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None, "a node is called in a task"
        self.store, self.run, self.node, self.timeout = store, run, node, timeout
        self.task, self.cancelling = task, task.cancelling()
        self.fired: str | None = None
        self.armed = True
        self._cancelled = False
        self._poll: asyncio.Task[None] | None = None
        self._timers = [loop.call_later(STOP_POLL_S, self._start_polling)]
        if timeout is not None:
            self._timers.append(loop.call_later(timeout, self._fire, "timeout"))

    async def call(self, call: Awaitable[T]) -> T:
        """Await the node's `call`, disarmed however it ends; `CutShortError` when this
        guard cut it short (and nobody else cancelled the task meanwhile)."""
        try:
            return await call
        except asyncio.CancelledError:
            fired = self.disarm()
            if self.task.cancelling() > self.cancelling:
                raise  # cancelled from outside (too): the run's own cancel goes on
            if fired is not None:
                raise CutShortError(self.node, fired) from None
            raise NodeCancelledError(f"node {self.node!r} was cancelled") from None
        finally:
            self.disarm()

    def disarm(self) -> str | None:
        """Stop watching; say what cut the node short, if anything did."""
        if self.armed:
            self.armed = False
            for timer in self._timers:
                timer.cancel()
            if self._poll is not None and not self._poll.done():
                self._poll.cancel()
            if self._cancelled:
                self.task.uncancel()  # the cancel was this guard's: the task's count drops it
        return self.fired

    def _fire(self, why: str) -> None:
        if self.armed and self.fired is None:
            self.fired = why
            if self.task.cancelling() == self.cancelling:  # else a cancel already ends it
                self._cancelled = self.task.cancel()

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
