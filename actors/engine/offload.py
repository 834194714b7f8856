"""Sync work (plain `def` nodes and tools) on the engine's own bounded executor.

Python cannot stop a thread, so a run that ends early (stopped, cancelled, abandoned, timed
out) stops waiting for its sync work but must keep its thread owned until that work returns:
`InFlight` tracks what each run has on a worker thread and says when none is left, from
whichever thread finishes last.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import os
import sys
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


def _no_stop_iteration(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call `fn`; a `StopIteration` it lets out (an exhausted iterator) becomes the
    `RuntimeError` Python makes of it in a generator: raised into an asyncio future it
    would be refused there, and the awaiting run would wait forever."""
    try:
        return fn(*args, **kwargs)
    except StopIteration as exc:
        raise RuntimeError(f"{getattr(fn, '__name__', fn)!s} raised StopIteration") from exc


_left: dict[InFlight, str] = {}
"""Work runs left running when they ended, with the thread each keeps claimed until then."""
_left_lock = threading.Lock()
_exit_hook = False


class InFlight:
    """The sync calls one run has on worker threads, each with a label naming it."""

    def __init__(self) -> None:
        self._work: dict[concurrent.futures.Future[Any], str] = {}
        self._lock = threading.Lock()
        self._on_idle: list[Callable[[], None]] = []
        self._done = threading.Event()
        """Set once nothing runs and every `when_idle` callback has been called."""
        self._done.set()
        self._waiters: list[Callable[[], None]] = []

    async def run(self, label: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn` on a worker thread (with this context's variables) and await it."""
        call = functools.partial(
            contextvars.copy_context().run, _no_stop_iteration, fn, *args, **kwargs
        )
        future = executor().submit(call)
        with self._lock:
            if not future.done():
                self._work[future] = label
                self._done.clear()
        future.add_done_callback(self._finished)
        return await asyncio.wrap_future(future)

    def leave(self, thread_id: str, release: Callable[[], None]) -> None:
        """The run is over with this work still running: call `release` (giving its thread
        up) once the work returns. Until then the work is listed in `left_running`, and a
        program exiting meanwhile says on stderr that it waits for it."""
        global _exit_hook
        with _left_lock:
            _left[self] = thread_id
            if not _exit_hook:
                # Called before the executor's own hook joins the worker threads (they run
                # in reverse order of registration): an exiting program says what it waits
                # for. CPython's documented-internal hook; without it, nothing is said.
                with contextlib.suppress(AttributeError, RuntimeError):
                    threading._register_atexit(_say_what_exit_waits_for)  # type: ignore[attr-defined]
                    _exit_hook = True

        def released() -> None:
            try:
                release()
            finally:
                with _left_lock:
                    _left.pop(self, None)

        self.when_idle(released)

    def wait_done(self, timeout: float | None = None) -> bool:
        """Block until nothing runs and the `when_idle` callbacks have been called (the
        thread released); False when `timeout` seconds passed first."""
        return self._done.wait(timeout)

    async def done(self) -> None:
        """Await what `wait_done` waits for, without blocking the event loop."""
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not finished.done():
                finished.set_result(None)

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(settle)

        with self._lock:
            if self._done.is_set():
                return
            self._waiters.append(wake)
        await finished

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
            if self._work:
                return
            callbacks, self._on_idle = self._on_idle, []
        try:
            for callback in callbacks:
                callback()
        finally:
            self._settle()

    def _settle(self) -> None:
        """Nothing runs and the idle callbacks were called: wake whoever awaits that."""
        with self._lock:
            if self._work:
                return  # new work began meanwhile: its end settles
            self._done.set()
            waiters, self._waiters = self._waiters, []
        for wake in waiters:
            wake()


def left_running() -> list[str]:
    """What runs that have ended left running on worker threads, and the thread each one
    keeps claimed until it returns ("tool call 'charge' (call-1) on thread 't1'")."""
    with _left_lock:
        left = list(_left.items())
    return [f"{label} on thread {thread!r}" for work, thread in left for label in work.running()]


def _say_what_exit_waits_for() -> None:
    left = left_running()
    if left:
        print(
            f"agentlog: waiting for {'; '.join(left)} to return before exiting: Python cannot "
            "stop a thread, so work a run left behind (recorded as abandoned, its result "
            "discarded) finishes first and then frees its thread",
            file=sys.stderr,
            flush=True,
        )
