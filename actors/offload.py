"""Sync work (plain `def` nodes and tools) on the engine's own bounded executor.

Python cannot stop a thread, so a run that ends early (stopped, cancelled, abandoned, timed
out) stops waiting for its sync work but must keep its thread owned until that work returns:
`InFlight` tracks what each run has on a worker thread and says when none is left, from
whichever thread finishes last.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

SYNC_WORKERS = min(32, (os.cpu_count() or 1) + 4)
"""Worker threads shared by every graph of the process (never the loop's default executor)."""

_executor: concurrent.futures.ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def executor() -> concurrent.futures.ThreadPoolExecutor:
    """The process's executor for sync nodes and tools, started on first use."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(
                SYNC_WORKERS, thread_name_prefix="agentlog-sync"
            )
        return _executor


class InFlight:
    """The sync calls one run has on worker threads, each with a label naming it."""

    def __init__(self) -> None:
        self._work: dict[concurrent.futures.Future[Any], str] = {}
        self._lock = threading.Lock()
        self._on_idle: list[Callable[[], None]] = []

    async def run(self, label: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn` on a worker thread (with this context's variables) and await it."""
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        future = executor().submit(call)
        with self._lock:
            if not future.done():
                self._work[future] = label
        future.add_done_callback(self._finished)
        return await asyncio.wrap_future(future)

    def running(self) -> list[str]:
        """Labels of the calls still running (or queued) on worker threads."""
        with self._lock:
            return [label for future, label in self._work.items() if not future.done()]

    def when_idle(self, callback: Callable[[], None]) -> None:
        """Call `callback` once nothing is running: now, or from the thread that ends last."""
        with self._lock:
            if self._work:
                self._on_idle.append(callback)
                return
        callback()

    def _finished(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._work.pop(future, None)
            if self._work or not self._on_idle:
                return
            callbacks, self._on_idle = self._on_idle, []
        for callback in callbacks:
            callback()
