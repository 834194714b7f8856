"""Waiting on what happened, not on the wall clock: poll a condition or the log until it holds.

A test that sleeps "long enough" fails on a busy machine and wastes time on an idle one. These
helpers return as soon as the condition holds; their `timeout` is only a failure guard (it
is generous on purpose, so a loaded machine never trips it) and the error names what was
awaited.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agentlog.events.errors import AgentlogError

T = TypeVar("T")

GUARD_S = 120.0
"""The default failure guard: how long to wait before a condition counts as never coming."""

POLL_S = 0.005
"""How often a condition is checked again: the latency of a poll, not a synchronisation."""


class WaitTimeoutError(AgentlogError, AssertionError):
    """A condition a test waited for did not hold within the failure guard."""


async def until(
    predicate: Callable[[], T | Awaitable[T | None] | None],
    *,
    timeout: float = GUARD_S,
    interval: float = POLL_S,
    what: str | None = None,
) -> T:
    """Await `predicate()` (sync or async) until it returns something truthy, and return that.

    Raise `WaitTimeoutError` naming `what` if it has not held after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeoutError(_late(what or _named(predicate), timeout))
        await asyncio.sleep(interval)


def until_blocking(
    predicate: Callable[[], T],
    *,
    timeout: float = GUARD_S,
    interval: float = POLL_S,
    what: str | None = None,
) -> T:
    """`until` for code with no event loop (threads, subprocess tests): block the caller."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeoutError(_late(what or _named(predicate), timeout))
        time.sleep(interval)


async def wait_for_record(
    store: Any,
    thread_id: str,
    kind: str,
    *,
    where: Callable[[Any], bool] | None = None,
    count: int = 1,
    timeout: float = GUARD_S,
) -> Any:
    """Poll `store` until thread `thread_id` holds `count` records of `kind` (those `where`
    accepts, given the record), and return the `count`-th; the log is the truth, so a test
    waits on it rather than guessing how long a commit takes."""

    from agentlog.events.errors import ThreadNotFoundError

    async def found() -> Any:
        try:
            matching = [
                r
                async for r in store.read(thread_id)
                if r.kind == kind and (where is None or where(r))
            ]
        except ThreadNotFoundError:
            return None  # nothing committed on the thread yet
        return matching[count - 1] if len(matching) >= count else None

    return await until(found, timeout=timeout, what=f"{count} {kind!r} record(s) on {thread_id!r}")


async def wait_for_line(path: Any, text: str, *, timeout: float = GUARD_S) -> str:
    """Poll the file at `path` until a line containing `text` appears, and return that line:
    how a test waits for another process to reach a point it announces by writing a line."""
    from pathlib import Path

    file = Path(path)

    def seen() -> str | None:
        try:
            lines = file.read_text().splitlines()
        except FileNotFoundError:
            return None
        return next((line for line in lines if text in line), None)

    found: str = await until(seen, timeout=timeout, what=f"a line with {text!r} in {file}")
    return found


async def until_idle(runtime: Any, *, timeout: float = GUARD_S) -> None:
    """Wait until an `AgentRuntime` has nothing left to do for now: no run executing or
    queued, and its event entry points have answered every record committed so far.

    What a test awaits before asserting that nothing more comes (an event trigger that must
    not fire, a restart that must repeat nothing), instead of sleeping and hoping.
    """
    from agentlog.events.follow import last_position

    listens = any(e.trigger == "event" for e in runtime.entries.values())

    async def idle() -> bool:
        if runtime.dispatcher.executing or runtime.dispatcher.depth():
            return False
        head = await last_position(runtime.store)
        return not listens or runtime.listeners.settled >= head

    settled: bool = await until(idle, timeout=timeout, what="the runtime to be idle")
    assert settled


async def wait_all_tasks_blocked(*, rounds: int = 3, timeout: float = GUARD_S) -> None:
    """Return once every other task on this event loop is blocked: waiting on an event, a
    lock, a future or a timer, with nothing ready to run (`trio.testing`'s helper of the
    same name, for asyncio).

    What a test awaits between starting a task and acting on the point it must have reached
    ("B is now queued behind A's commit"), instead of sleeping long enough for it to get
    there. The loop must have nothing to run for `rounds` turns in a row, so callbacks of
    ready I/O get their turn too. Work on another thread (`asyncio.to_thread`, a store's
    writer thread) is beyond it: a task waiting for a thread counts as blocked, so await the
    thread's result some other way (`until`) when the point lies past one.
    """
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)  # the ready queue: asyncio's own loops have it
    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < rounds:
        await asyncio.sleep(0)
        if ready is None or len(ready) == 0:  # another loop implementation: the turns alone
            quiet += 1
        else:
            quiet = 0
            if time.monotonic() >= deadline:
                raise WaitTimeoutError(_late("every other task to block", timeout))


def _named(predicate: Callable[..., Any]) -> str:
    return getattr(predicate, "__qualname__", None) or repr(predicate)


def _late(what: str, timeout: float) -> str:
    return (
        f"still waiting for {what} after {timeout:g}s: it never happened, or the machine is "
        "slower than the guard allows (pass a larger timeout)"
    )
