"""An event loop on a daemon thread of its own, where a PostgreSQL store's connections live.

asyncpg connections belong to the loop that made them. Keeping them on a private loop lets
one store serve any caller's loop (and plain threads: the claims' heartbeat, a worker thread
releasing a claim), as the SQLite store's connection threads do, and a caller blocked in a
slow synchronous tool never stalls the store's commits or heartbeats.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from agentlog.events.errors import StoreClosedError

T = TypeVar("T")


class LoopThread:
    """A running event loop on a daemon thread; coroutines are handed to it from anywhere."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._ended = False  # past this, `submit` refuses: the loop is winding down
        self._stopping = False  # a stop was asked for: later ones only wait for it
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            try:
                self._wind_down()
            finally:
                self.loop.close()

    def _wind_down(self) -> None:
        """Take no more work, then cancel and finish what was handed in before: no coroutine
        is left unstarted or pending when the loop closes (each would be reported)."""
        with self._lock:
            self._ended = True
        self.loop.run_until_complete(asyncio.sleep(0))  # what was scheduled becomes a task
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())

    @property
    def running(self) -> bool:
        """Whether the loop still takes work."""
        return self._thread.is_alive() and not self._ended

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop; the future settles with its outcome (cancelled if
        the loop stops first). `StoreClosedError` once the loop has stopped; `coro` is then
        closed unstarted."""
        with self._lock:
            if self._ended or self.loop.is_closed():
                coro.close()
                raise StoreClosedError(_STOPPED)
            return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and await its outcome from the caller's loop.

        When the caller is itself on this loop, the coroutine is simply awaited.
        """
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self.loop:
            return await coro
        try:
            return await asyncio.wrap_future(self.submit(coro))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._ended and (task is None or not task.cancelling()):
                raise StoreClosedError(_STOPPED) from None  # its loop ended, not our caller
            raise

    def stop(self) -> None:
        """Stop the loop and wait for its thread (from any thread but the loop's own)."""
        with self._lock:
            first, self._stopping = not self._stopping, True
            if first and not self.loop.is_closed():
                # once only: a second loop.stop would cut the wind-down's own run short
                self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()


_STOPPED = "the store was closed before this call could run: open a new store to use it"
