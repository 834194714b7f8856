"""The PostgreSQL store's private loop thread winds down cleanly: work handed in as it stops
is refused or cancelled with a typed error, never left unstarted (a "coroutine was never
awaited" warning) or pending for ever (a caller waiting out its timeout)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import sys
import threading
import warnings

import pytest

from agentlog.actors.testing import until, until_blocking
from agentlog.events import StoreClosedError
from agentlog.events.stores.postgres_loop import LoopThread


async def _forever() -> None:
    await asyncio.Event().wait()


async def _answer() -> int:
    return 42


def test_work_handed_in_after_the_stop_is_refused_and_closed_unstarted() -> None:
    thread = LoopThread("test-loop")
    assert thread.submit(_answer()).result(10) == 42
    thread.stop()
    assert not thread.running
    coro = _answer()
    with pytest.raises(StoreClosedError, match="open a new store"):
        thread.submit(coro)
    assert coro.cr_frame is None  # closed: nothing will warn that it was never awaited
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del coro
        gc.collect()


def test_work_running_when_the_loop_stops_is_cancelled_not_left_pending() -> None:
    thread = LoopThread("test-loop")
    running = thread.submit(_forever())
    queued = [thread.submit(_forever()) for _ in range(5)]
    thread.stop()
    for future in [running, *queued]:
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(10)  # settled at the stop: no wait for a timeout


async def test_a_caller_on_another_loop_gets_a_typed_error_not_a_cancel() -> None:
    thread = LoopThread("test-loop")
    running = threading.Event()

    async def forever() -> None:
        running.set()
        await asyncio.Event().wait()

    call = asyncio.ensure_future(thread.call(forever()))
    await asyncio.to_thread(running.wait, 60)  # the coroutine is running on the store's loop
    await asyncio.to_thread(thread.stop)
    with pytest.raises(StoreClosedError, match="closed before this call could run"):
        await asyncio.wait_for(call, 10)
    assert not call.cancelled()


def test_stopping_twice_while_it_winds_down_still_finishes_the_work() -> None:
    """Two closes at once: the second stop must not cut short the first one's wind-down
    (a task slow to finish after its cancel is still seen to the end)."""

    torn_down = threading.Event()

    async def slow_to_cancel() -> None:
        try:
            await asyncio.Event().wait()
        finally:  # a connection's teardown on cancel, lasting until the second stop waits
            await until(torn_down.is_set, what="the test to end the teardown")

    thread = LoopThread("test-loop")
    future = thread.submit(slow_to_cancel())
    first = threading.Thread(target=thread.stop)
    first.start()
    until_blocking(lambda: thread._ended)  # the first stop is winding down
    second = threading.Thread(target=thread.stop)
    second.start()
    until_blocking(lambda: _joining(second), what="the second stop to wait for the thread")
    torn_down.set()
    first.join(10)
    second.join(10)
    assert future.cancelled()  # settled: nothing was left pending when the loop closed
    assert thread.loop.is_closed()


def _joining(thread: threading.Thread) -> bool:
    """Whether `thread` is blocked joining another thread (what a second stop does)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == "_wait_for_tstate_lock" or frame.f_code.co_name == "join":
            return True
        frame = frame.f_back
    return False
