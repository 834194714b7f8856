"""A node is called in its run's own task: a time limit cuts the call itself, told apart from
a cancel of the run by its caller and from a `CancelledError` the node raises on its own."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentlog.actors import NodeError, NodeTimeoutError
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, ExecutionStatus, Message
from tests.helpers import line


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore(tmp_path / "call.db") as opened:
        yield opened


async def kinds(store: SQLiteEventStore, thread: str) -> list[str]:
    return [r.kind async for r in store.read(thread)]


async def test_a_node_raising_cancelled_error_of_its_own_fails_its_step(
    store: SQLiteEventStore,
) -> None:
    async def gives_up(state: AgentState) -> list[Message]:
        raise asyncio.CancelledError  # nobody cancelled the run: a failure of the node

    app = line(("gives_up", gives_up)).compile(store)
    with pytest.raises(NodeError, match="gives_up"):
        await app.ainvoke("go", {"thread_id": "t"})
    assert (await app.aget_state({"thread_id": "t"})).execution_meta.status == (
        ExecutionStatus.ERROR
    )
    assert "run_failed" in await kinds(store, "t")


async def test_a_caller_cancelling_while_the_time_limit_cuts_the_node_is_a_cancel(
    store: SQLiteEventStore,
) -> None:
    async def slow(state: AgentState) -> list[Message]:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:  # the time limit's cut: the caller cancels meanwhile
            task = asyncio.current_task()
            assert task is not None
            task.cancel("the caller went away")
            raise
        return []

    app = line(("slow", slow)).compile(store, node_timeout=0.05)
    with pytest.raises(asyncio.CancelledError):
        await app.ainvoke("go", {"thread_id": "t"})
    recorded = await kinds(store, "t")
    assert "stopped" in recorded and "run_failed" not in recorded  # abandoned, not timed out


async def test_a_node_that_outlives_its_cut_leaves_the_run_uncancelled(
    store: SQLiteEventStore,
) -> None:
    seen: list[int] = []

    async def stubborn(state: AgentState) -> list[Message]:
        with contextlib.suppress(asyncio.CancelledError):  # swallowed: it returns its output
            await asyncio.Event().wait()
        return [Message.text_message("done anyway", role="assistant")]

    async def after(state: AgentState) -> list[Message]:
        task = asyncio.current_task()
        assert task is not None
        seen.append(task.cancelling())
        await asyncio.sleep(0)
        return []

    app = line(("stubborn", stubborn), ("after", after)).compile(
        store, node_timeouts={"stubborn": 0.05}
    )
    out = await app.ainvoke("go", {"thread_id": "t"})
    assert out["status"] == "completed"
    assert seen == [0]  # the cut's cancel was taken back: nothing pending on the run's task


async def test_a_sync_node_past_its_time_limit_fails_the_step(store: SQLiteEventStore) -> None:
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    let_go = threading.Event()

    def blocking(state: AgentState) -> list[Message]:
        let_go.wait(10)
        loop.call_soon_threadsafe(release.set)
        return []

    app = line(("blocking", blocking)).compile(store, node_timeout=0.05)
    with pytest.raises(NodeTimeoutError):
        await app.ainvoke("go", {"thread_id": "t"})
    let_go.set()
    await asyncio.wait_for(release.wait(), 10)
