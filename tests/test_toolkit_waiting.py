"""The testing toolkit's waiting helpers: they return as soon as the condition holds, and
fail with a message naming what never came."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from agentlog.actors import END, StateGraph
from agentlog.actors.testing import (
    WaitTimeoutError,
    until,
    until_blocking,
    until_idle,
    wait_all_tasks_blocked,
    wait_for_line,
    wait_for_record,
)
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message


async def test_until_returns_the_first_truthy_value_of_a_sync_or_async_predicate() -> None:
    calls: list[int] = []

    def later() -> int:
        calls.append(1)
        return len(calls) if len(calls) >= 3 else 0

    assert await until(later) == 3

    async def ready() -> str:
        return "yes"

    assert await until(ready) == "yes"


async def test_until_names_what_never_came() -> None:
    with pytest.raises(WaitTimeoutError, match="the answer"):
        await until(lambda: None, timeout=0.01, what="the answer")


def test_until_blocking_waits_on_another_thread() -> None:
    done = threading.Event()
    threading.Thread(target=done.set).start()
    assert until_blocking(done.is_set)
    with pytest.raises(AssertionError, match="after"):
        until_blocking(lambda: False, timeout=0.01)


async def test_wait_for_record_waits_for_a_commit_on_a_thread_not_yet_created(
    tmp_path: Path,
) -> None:
    def agent(state: AgentState) -> list[Message]:
        return [Message.text_message("hi", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph(AgentState)
    graph.add_node("agent", agent)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        waiting = asyncio.ensure_future(wait_for_record(store, "t", "run_completed"))
        await wait_all_tasks_blocked()  # the waiter has read: the thread does not exist yet
        assert not waiting.done()
        await graph.compile(store).ainvoke("go", {"thread_id": "t"})
        record = await waiting
        assert record.kind == "run_completed" and record.thread_id == "t"
        with pytest.raises(WaitTimeoutError, match="2 'run_completed'"):
            await wait_for_record(store, "t", "run_completed", count=2, timeout=0.01)


async def test_wait_for_line_sees_a_line_another_writer_appends(tmp_path: Path) -> None:
    path = tmp_path / "progress.log"
    waiting = asyncio.ensure_future(wait_for_line(path, "reached"))
    await wait_all_tasks_blocked()  # the waiter has looked once and found nothing
    path.write_text("starting\nreached the point\n")
    assert await waiting == "reached the point"


async def test_until_idle_returns_once_event_triggers_have_answered_and_run(
    tmp_path: Path,
) -> None:
    from agentlog.actors.runtime import AgentRuntime, EntryPoint
    from tests.helpers import line

    def reply(state: AgentState) -> list[Message]:
        return [Message.text_message("seen", role="assistant")]

    async with SQLiteEventStore(tmp_path / "log.db") as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("chat", line(("reply", reply)).compile(store))
        runtime.add_graph("audit", line(("note", reply)).compile(store))
        runtime.register_entry_point(EntryPoint(id="api", graph_id="chat"))
        runtime.register_entry_point(
            EntryPoint(
                id="after", graph_id="audit", trigger="event", kinds=["run_completed"],
                from_graph="chat",
            )
        )  # fmt: skip
        async with runtime:
            await runtime.trigger_and_wait("api", "hi", timeout=60)
            await until_idle(runtime)  # the audit run the completion started has finished
            assert runtime.stats()["entry_points"]["after"]["completed"] == 1
            assert runtime.stats()["executing"] == runtime.stats()["queued"] == 0


async def test_wait_all_tasks_blocked_returns_once_the_others_wait() -> None:
    gate, reached, steps = asyncio.Event(), asyncio.Event(), []

    async def walker() -> None:
        for k in range(50):  # many turns of the loop before it blocks
            steps.append(k)
            await asyncio.sleep(0)
        reached.set()
        await gate.wait()
        steps.append("released")

    task = asyncio.ensure_future(walker())
    await wait_all_tasks_blocked()
    assert reached.is_set() and len(steps) == 50  # it got as far as it could, and waits
    gate.set()
    await wait_all_tasks_blocked()
    assert steps[-1] == "released" and task.done()


async def test_wait_all_tasks_blocked_counts_a_sleeping_task_as_blocked() -> None:
    sleeper = asyncio.ensure_future(asyncio.sleep(60))
    await asyncio.wait_for(wait_all_tasks_blocked(), timeout=5)
    assert not sleeper.done()
    sleeper.cancel()


async def test_wait_all_tasks_blocked_names_a_loop_that_never_rests() -> None:
    async def spinner() -> None:
        while True:
            await asyncio.sleep(0)

    task = asyncio.ensure_future(spinner())
    with pytest.raises(WaitTimeoutError, match="every other task to block"):
        await wait_all_tasks_blocked(timeout=0.05)
    task.cancel()
