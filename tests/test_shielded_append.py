"""An append survives its caller's cancellation without a task of its own: the caller is
cut short at once, the append goes on to its end, and `run.committing` is done only then
(what the run's abandon and cut records wait for before reading the log)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentlog.actors.engine import durability
from agentlog.actors.engine.durability import shielded


class _Run:
    committing: asyncio.Future[Any] | None = None


class _Append:
    """An append that waits on `answer` (the store's future) and notes when it ended."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.answer: asyncio.Future[list[Any]] = loop.create_future()
        self.waiting = asyncio.Event()
        self.ended: list[Any] = []

    async def __call__(self) -> list[Any]:
        self.waiting.set()
        records = await self.answer
        self.ended.append(records)
        return records


async def _started() -> tuple[_Run, _Append, asyncio.Future[Any]]:
    """A caller awaiting a shielded append, which waits on the store's answer."""
    run, append = _Run(), _Append()
    caller = asyncio.ensure_future(shielded(run, append()))  # type: ignore[arg-type]
    await append.waiting.wait()
    return run, append, caller


async def _cancelled(caller: asyncio.Future[Any]) -> None:
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_an_append_not_cancelled_hands_its_records_to_its_caller_in_its_task() -> None:
    run, append, caller = await _started()
    append.answer.set_result(["r1", "r2"])
    assert await caller == ["r1", "r2"]
    assert run.committing is not None and run.committing.done()
    assert not durability._RESTS  # no task was started for it


async def test_a_cancelled_caller_leaves_the_append_going_until_it_ends() -> None:
    run, append, caller = await _started()
    await _cancelled(caller)
    assert not append.answer.cancelled()  # the cancel never reached the store's future
    assert run.committing is not None and not run.committing.done()
    append.answer.set_result(["r1"])
    await run.committing
    assert append.ended == [["r1"]]


async def test_a_cancel_coming_as_the_store_answers_still_lets_the_append_end() -> None:
    run, append, caller = await _started()
    append.answer.set_result(["r1"])  # landed: its caller is not yet woken
    await _cancelled(caller)
    assert run.committing is not None
    await run.committing
    assert append.ended == [["r1"]]


async def test_an_append_failing_after_its_caller_was_cancelled_ends_its_wait_quietly() -> None:
    run, append, caller = await _started()
    await _cancelled(caller)
    append.answer.set_exception(OSError("disk"))
    assert run.committing is not None
    assert await run.committing is None


async def test_an_append_error_reaches_its_caller() -> None:
    run, append, caller = await _started()
    append.answer.set_exception(OSError("disk"))
    with pytest.raises(OSError, match="disk"):
        await caller
    assert run.committing is not None and run.committing.done()


async def test_an_append_waiting_on_a_bare_yield_is_carried_through_it() -> None:
    run = _Run()

    async def append() -> list[str]:
        await asyncio.sleep(0)
        return ["r"]

    records: list[Any] = await shielded(run, append())  # type: ignore[arg-type]
    assert records == ["r"]
