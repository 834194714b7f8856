"""One sqlite3 connection owned by one daemon thread, fed by a queue of jobs.

Every job is a function of the connection and runs on that thread, in order, in one hop
from the event loop. The thread is a daemon: a program that never closes its store still
exits (SQLite itself makes an unfinished transaction harmless), and a job can be handed in
from any thread, so a worker thread can release a claim after the event loop has gone.

`try_inline` lets the caller's own thread use the connection when the thread is idle, which
saves the two thread hops of a job where they cost more than the work (a small commit);
a lock keeps the connection to one user at a time, and the caller's attempt never waits
on SQLite's busy handler (it is told to go through the queue instead).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

Job = Callable[[sqlite3.Connection], None]


class ConnectionThread:
    """A connection and the daemon thread that alone touches it."""

    def __init__(
        self,
        name: str,
        connect: Callable[[], sqlite3.Connection],
        *,
        busy_ms: int | None = None,
    ) -> None:
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._busy_ms = busy_ms
        self._in_use = threading.Lock()  # held by whoever runs SQL on the connection
        self._impatient = False  # the busy handler is off (set by the last inline user)
        self._connect = connect
        self._conn: sqlite3.Connection | None = None
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._opened = threading.Event()
        self._open_error: BaseException | None = None
        self._closed = False

    def start(self) -> ConnectionThread:
        """Start the thread and open the connection there (blocking, quick)."""
        self._thread.start()
        self._opened.wait()
        if self._open_error is not None:
            raise self._open_error
        return self

    def _work(self) -> None:
        try:
            self._conn = self._connect()
        except BaseException as exc:
            self._open_error = exc
            self._opened.set()
            return
        self._opened.set()
        while True:
            job = self._jobs.get()
            if job is None:
                break
            with self._in_use:
                if self._impatient:  # queued work waits for other processes' locks again
                    with contextlib.suppress(sqlite3.Error):  # else the next job tries again
                        self._conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
                        self._impatient = False
                with contextlib.suppress(BaseException):  # a job reports its own outcome
                    job(self._conn)
        with self._in_use:
            self._conn.close()

    def try_inline(self, fn: Callable[[sqlite3.Connection], T]) -> tuple[bool, T | None]:
        """Run `fn(conn)` in the calling thread if the connection is idle and nothing is
        queued; `(False, None)` otherwise, and the caller queues a job instead.

        While `fn` runs, SQLite's busy handler is off: `fn` must expect `SQLITE_BUSY` where
        another process holds the write lock, and report it so the caller can queue.
        """
        if self._closed or self._busy_ms is None or self._conn is None or not self._jobs.empty():
            return False, None
        if not self._in_use.acquire(blocking=False):
            return False, None
        try:
            if self._closed:  # closed while we took the lock: the thread may have closed it
                return False, None
            if not self._impatient:
                self._conn.execute("PRAGMA busy_timeout = 0")
                self._impatient = True
            return True, fn(self._conn)
        finally:
            self._in_use.release()

    def submit(self, job: Job) -> None:
        """Queue `job`; it reports its outcome itself. Safe from any thread."""
        if self._closed:
            raise RuntimeError("the connection is closed")
        self._jobs.put(job)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(conn, *args)` on the connection's thread and await its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def job(conn: sqlite3.Connection) -> None:
            try:
                result = fn(conn, *args)
            except BaseException as exc:
                _deliver(loop, future, None, exc)
            else:
                _deliver(loop, future, result, None)

        self.submit(job)
        return await future

    def call_blocking(self, fn: Callable[..., T], *args: Any, timeout: float | None = None) -> T:
        """Run `fn(conn, *args)` there and wait in this thread (never on the event loop)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def job(conn: sqlite3.Connection) -> None:
            try:
                future.set_result(fn(conn, *args))
            except BaseException as exc:
                future.set_exception(exc)

        self.submit(job)
        return future.result(timeout)

    def close_blocking(self) -> None:
        """`close`, waiting in this thread (never on an event loop)."""
        if self._closed:
            return
        self._closed = True
        self._jobs.put(None)
        self._thread.join()

    async def close(self) -> None:
        """Finish the queued jobs, close the connection and end the thread."""
        if self._closed:
            return
        done = asyncio.get_running_loop().create_future()
        loop = asyncio.get_running_loop()
        self.submit(lambda conn: _deliver(loop, done, None, None))
        self._closed = True
        self._jobs.put(None)
        await done
        await asyncio.to_thread(self._thread.join)


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
) -> None:
    """Settle `future` on its loop, unless its waiter left or the loop has closed."""

    def settle() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(settle)
