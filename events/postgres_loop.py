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

T = TypeVar("T")


class LoopThread:
    """A running event loop on a daemon thread; coroutines are handed to it from anywhere."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def running(self) -> bool:
        """Whether the loop still takes work."""
        return self._thread.is_alive() and not self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop; the future settles with its outcome."""
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
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self) -> None:
        """Stop the loop and wait for its thread (from any thread but the loop's own)."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join()
