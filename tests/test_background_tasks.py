"""Background tasks (the seed architecture's background task manager): started by a node,
outliving it, tracked, cancellable, their outcome in the log; a task whose outcome committed
never runs again, one in flight when its process was killed runs again on `recover`."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentlog import END, EventStatus, MemoryEventStore, Message, StateGraph, executions
from agentlog.actors import GraphError, NodeError
from agentlog.actors.engine.tasks import (
    BackgroundTaskManager,
    TaskNotRegisteredError,
    tasks_thread,
)
from agentlog.actors.engine.threads import internal_thread
from agentlog.events import SQLiteEventStore
from agentlog.events.errors import InvalidArgumentError
from agentlog.projections import AgentState
from tests.helpers import spawn_worker, wait_ready

CONFIG = {"configurable": {"thread_id": "t"}}


def shop(task: Any, *args: Any) -> StateGraph[AgentState]:
    async def checkout(state: AgentState, task_manager: BackgroundTaskManager) -> list[Message]:
        await task_manager.create_task(task, *args)
        return [Message.text_message("ordered", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("checkout", checkout)
    graph.set_entry_point("checkout")
    graph.add_edge("checkout", END)
    return graph


async def task_log(store: Any) -> list[Any]:
    return executions([r async for r in store.read(tasks_thread("t"))])


async def test_a_task_outlives_its_node_and_run_and_its_outcome_is_logged() -> None:
    release = asyncio.Event()

    async def send_receipt(order: str) -> str:
        await release.wait()
        return f"receipt for {order}"

    store = MemoryEventStore()
    graph = shop(send_receipt, "A-1")
    graph.add_task(send_receipt)
    app = graph.compile(checkpointer=store)
    result = await app.ainvoke("buy", CONFIG)
    assert result["status"] == "completed"
    manager = app.task_manager
    assert manager.get_task_count() == 1  # the run is over, the task goes on
    (running,) = await task_log(store)
    assert (running.name, running.status) == ("send_receipt", EventStatus.PROCESSING)
    release.set()
    await manager.wait_for_all()
    (done,) = await task_log(store)
    assert (done.status, done.response) == (EventStatus.COMPLETED, "receipt for A-1")
    assert await manager.recover("t") == []  # finished: it never runs again
    assert internal_thread(tasks_thread("t"))


async def test_a_cancelled_or_failing_task_is_recorded_and_not_run_again() -> None:
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.Event().wait()

    store = MemoryEventStore()
    graph = shop(slow)
    graph.add_task(slow)
    app = graph.compile(checkpointer=store)
    await app.ainvoke("buy", CONFIG)
    await started.wait()
    (task_id,) = app.task_manager.running
    assert app.task_manager.cancel(task_id) and not app.task_manager.cancel("nothing")
    await app.task_manager.wait_for_all()
    (cancelled,) = await task_log(store)
    assert cancelled.status is EventStatus.ABANDONED and "cancelled" in str(cancelled.error)
    assert await app.task_manager.recover("t") == []

    async def broken() -> None:
        raise RuntimeError("mail server down")

    failing = shop(broken)
    failing.add_task(broken)
    other = failing.compile(checkpointer=MemoryEventStore())
    await other.ainvoke("buy", CONFIG)
    await other.task_manager.wait_for_all()
    (failed,) = await task_log(other.checkpointer)
    assert failed.status is EventStatus.FAILED
    assert failed.error == "RuntimeError: mail server down"


async def test_only_declared_async_tasks_with_storable_arguments_start() -> None:
    async def undeclared() -> None:
        return None

    app = shop(undeclared).compile(checkpointer=MemoryEventStore())
    with pytest.raises(TaskNotRegisteredError, match=r"graph\.add_task\(undeclared\)"):
        await app.ainvoke("buy", CONFIG)
    assert await app.checkpointer.last_seq(tasks_thread("t")) == 0  # nothing was written

    async def declared(value: Any) -> None:
        return None

    unstorable = shop(declared, object())
    unstorable.add_task(declared)
    app = unstorable.compile(checkpointer=MemoryEventStore())
    with pytest.raises(NodeError) as refused:
        await app.ainvoke("buy", CONFIG)
    assert isinstance(refused.value.__cause__, InvalidArgumentError)
    assert "cannot be stored in the log" in str(refused.value)
    assert await app.checkpointer.last_seq(tasks_thread("t")) == 0

    def not_async() -> None:
        return None

    with pytest.raises(GraphError, match="async function"):
        StateGraph().add_task(not_async)
    with pytest.raises(GraphError, match="'task_manager' is injected"):
        StateGraph().register("task_manager", object())


def run_worker(db: Path, effects: Path, mode: str) -> subprocess.Popen[str]:
    proc = spawn_worker("background_task", db, effects, mode)
    wait_ready(proc)
    return proc


def test_a_task_killed_in_flight_runs_again_and_a_finished_one_never(tmp_path: Path) -> None:
    db, effects = tmp_path / "log.db", tmp_path / "effects.txt"
    proc = run_worker(db, effects, "run")
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "task running"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    async def tasks() -> list[Any]:
        store = SQLiteEventStore(db)
        await store.open()
        try:
            return await task_log(store)
        finally:
            await store.close()

    (in_flight,) = asyncio.run(tasks())
    assert in_flight.status is EventStatus.PROCESSING  # what ran when the process died

    for again in (["t:3:0"], []):  # the second recovery finds its outcome: nothing to do
        proc = run_worker(db, effects, "recover")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.split("\n")[:2] == [" ".join(again), "done"]
    assert effects.read_text().split() == ["A-1", "A-1"]  # at least once: twice here
    (done,) = asyncio.run(tasks())
    assert (done.status, done.response) == (EventStatus.COMPLETED, "receipt for A-1")
