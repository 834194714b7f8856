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
from hypothesis import given, settings
from hypothesis import strategies as st

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


async def test_the_first_call_on_a_thread_starts_its_killed_tasks_again() -> None:
    runs: list[str] = []
    hold = asyncio.Event()

    async def send_receipt(order: str) -> str:
        runs.append(order)
        if len(runs) == 1:
            await hold.wait()  # the first attempt's process "dies" while it waits
        return f"receipt for {order}"

    store = MemoryEventStore()
    graph = shop(send_receipt, "A-1")
    graph.add_task(send_receipt)
    first = graph.compile(checkpointer=store)
    await first.ainvoke("buy", CONFIG)

    async def silent(*args: Any, **kwargs: Any) -> None:
        return None  # a killed process writes nothing more

    first.task_manager._end = silent  # type: ignore[method-assign]
    await first.task_manager.cancel_all()
    second = graph.compile(checkpointer=store)
    await second.ainvoke("buy again", CONFIG)  # starts the killed task, then its own
    await second.task_manager.wait_for_all()
    assert runs == ["A-1", "A-1", "A-1"]
    assert [e.status.value for e in await task_log(store)] == ["completed", "completed"]
    assert await second.task_manager.recover_once("t") == []


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


Op = tuple[str, int]
OPS = st.tuples(
    st.sampled_from(["start", "complete", "fail", "cancel", "crash"]), st.integers(0, 3)
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["start", "complete", "fail", "cancel", "crash"]), st.integers(0, 3)
        ),
        max_size=14,
    )
)
def test_each_task_ends_once_and_runs_again_only_after_a_crash(ops: list[Op]) -> None:
    asyncio.run(_drive(ops))


async def _drive(ops: list[Op]) -> None:
    store = MemoryEventStore()
    gates: dict[str, asyncio.Future[str]] = {}
    ready: dict[str, asyncio.Event] = {}

    async def job(key: str) -> str:
        gates[key] = asyncio.get_running_loop().create_future()
        ready.setdefault(key, asyncio.Event()).set()
        return await gates[key]

    async def begin(state: AgentState, task_manager: BackgroundTaskManager) -> None:
        await task_manager.create_task(job, state.context[-1].text())

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("begin", begin)
    graph.set_entry_point("begin")
    graph.add_edge("begin", END)
    graph.add_task(job)
    app = graph.compile(checkpointer=store)
    model: dict[str, str] = {}  # thread -> running | completed | failed | abandoned
    starts: dict[str, int] = {}
    for op, n in ops:
        thread = f"t{n}"
        if op == "start" and thread not in model:
            ready[thread] = asyncio.Event()
            await app.ainvoke(Message.text_message(thread), {"thread_id": thread})
            await ready[thread].wait()
            model[thread], starts[thread] = "running", 1
        elif op in ("complete", "fail", "cancel") and model.get(thread) == "running":
            manager = app.task_manager
            (task,) = [t for i, t in manager.running.items() if i.startswith(f"{thread}:")]
            if op == "cancel":
                manager.cancel(next(i for i in manager.running if i.startswith(f"{thread}:")))
            elif op == "complete":
                gates[thread].set_result("done")
            else:
                gates[thread].set_exception(RuntimeError("failed"))
            await asyncio.gather(task, return_exceptions=True)
            model[thread] = {"complete": "completed", "fail": "failed"}.get(op, "abandoned")
        elif op == "crash":
            dead = app.task_manager

            async def silent(*args: Any, **kwargs: Any) -> None:
                return None  # a killed process writes nothing more

            dead._end = silent  # type: ignore[method-assign]
            await dead.cancel_all()
            app = graph.compile(checkpointer=store)
            for name in sorted(model):
                again = await app.task_manager.recover(name)
                assert bool(again) == (model[name] == "running")
                if again:
                    ready[name] = asyncio.Event()
                    await ready[name].wait()
                    starts[name] += 1
        for name, status in model.items():
            records = [r async for r in store.read(tasks_thread(name))]
            (execution,) = executions(records)
            expected = "processing" if status == "running" else status
            assert execution.status.value == expected
            kinds = [r.kind for r in records]
            assert kinds.count("tool_call_started") == starts[name]
            assert kinds.count("tool_call_finished") == (status != "running")
            assert status == "running" or kinds[-1] == "tool_call_finished"
    await app.task_manager.cancel_all()
