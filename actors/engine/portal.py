"""The blocking methods' private event loop, in a daemon thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncGenerator, Coroutine, Iterator
from typing import Any, ClassVar, TypeVar

from agentlog.actors.engine.errors import BlockingCallError

T = TypeVar("T")

CANCEL_GRACE_S = 10.0
"""How long closing the portal waits for what still runs on its loop to settle."""


class Portal:
    """A private event loop in a daemon thread, serving the blocking methods."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="agentlog-portal", daemon=True
        )
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run `coro` on the portal's loop and wait; Ctrl-C abandons it, recorded as such.

        On Ctrl-C (or any exception in the waiting thread) the task is cancelled with the
        cause as its reason, and the exception goes on once the run has recorded how it
        ended (however long a busy machine takes: a clock here would lose the record); a
        second Ctrl-C skips that wait.
        """
        done = threading.Event()
        tasks: list[asyncio.Task[Any]] = []

        def start() -> None:
            task = self.loop.create_task(coro)
            task.add_done_callback(lambda _: done.set())
            tasks.append(task)

        self.loop.call_soon_threadsafe(start)
        try:
            done.wait()
        except BaseException as exc:
            cause = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else type(exc).__name__
            why = f"{cause} interrupted the blocking call waiting for the run"
            self.loop.call_soon_threadsafe(lambda: tasks[0].cancel(why))
            done.wait()
            raise
        return tasks[0].result()

    def iterate(self, agen: AsyncGenerator[T, None]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self.call(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self.call(agen.aclose())

    def close(self) -> None:
        """Stop the loop and its thread, then close the loop (its selector and wake-up
        sockets are file descriptors: a process making many portals would run out)."""
        if threading.current_thread() is self.thread:
            self.loop.stop()  # closed from its own loop (a finalizer ran there): just stop
            return
        if self.loop.is_running():
            settled = asyncio.run_coroutine_threadsafe(_settle(), self.loop)
            with contextlib.suppress(Exception):
                settled.result(timeout=CANCEL_GRACE_S)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
        if not self.thread.is_alive() and not self.loop.is_closed():
            self.loop.close()


async def _settle() -> None:
    """Cancel what still runs on the portal's loop and finish its async generators."""
    here = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not here]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


class BlockingCalls:
    """The blocking twins of an object's async methods: each runs its coroutine on a private
    portal started on first use, and refuses to run inside an event loop (where it would
    block that loop), naming the a-prefixed forms to await instead."""

    BLOCKING_WHAT: ClassVar[str] = "blocking"
    """What the methods belong to, for the refusal ("graph", "store")."""
    ASYNC_FORMS: ClassVar[str] = ""
    """The a-prefixed forms to await instead, for the refusal."""
    _portal: Portal | None = None

    def _blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            running = False
        else:
            running = True
        if not running:  # called outside the except block: a user's error is not chained to it
            result: T = self._get_portal().call(coro)
            return result
        coro.close()
        raise BlockingCallError(
            f"the blocking {self.BLOCKING_WHAT} methods cannot run inside an event loop: "
            f"await the a-prefixed form ({self.ASYNC_FORMS}) instead"
        )

    def _get_portal(self) -> Portal:
        if self._portal is None:
            self._portal = Portal()
            weakref.finalize(self, self._portal.close)
        return self._portal

    def _iterating(self, parts: AsyncGenerator[T, None]) -> Iterator[T]:
        """Iterate `parts` from blocking code; the iteration keeps this object (and so its
        portal) alive, so `builder.compile().stream(...)` runs to its end."""
        yield from self._get_portal().iterate(parts)

    def _close_portal(self) -> None:
        """Stop the private event loop, if the blocking methods started one."""
        portal, self._portal = self._portal, None
        if portal is not None:
            portal.close()
