"""Runs that end early: every way a caller can leave, and a stop request.

The harm this guards against is a tool call run twice (a card charged twice). Whatever way
the caller leaves (`task.cancel()`, a timeout around `ainvoke`, a consumer leaving
`astream`, Ctrl-C on the blocking `invoke`), the log must say so and name what was still
running; a sync tool still running keeps the thread owned; once it returns, resuming
finishes the run without starting the call again, and the transcript has exactly one result
per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import (
    END,
    CompiledGraph,
    GraphError,
    StateGraph,
    ThreadBusyError,
    ThreadStillBusyError,
    ToolNode,
)
from agentlog.actors.testing import until, wait_all_tasks_blocked
from agentlog.events import (
    EventRecord,
    EventStore,
    MemoryEventStore,
    SQLiteEventStore,
    Stopped,
    ThreadNotFoundError,
    ToolCallFinished,
)
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    Message,
    StopRequestStatus,
    ToolResultBlock,
)
from tests.workers.charge_graph import CALL_ID, ask_message, charge_graph, check_transcript

CFG = {"thread_id": "t1"}
WAIT = 60.0
"""Seconds a test waits for something that should happen at once: only a guard against a
hang, never the synchronisation (a loaded two-core machine can take seconds)."""

ROOT = Path(__file__).resolve().parent.parent


def pay() -> dict[str, Any]:
    """The user's first message."""
    return {"messages": [Message.text_message("pay", message_id="u-1")]}


async def records(store: EventStore, thread_id: str = "t1") -> list[EventRecord]:
    """The thread's whole log."""
    return [r async for r in store.read(thread_id)]


def kinds(log: list[EventRecord]) -> list[str]:
    return [r.kind for r in log]


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until `check()` is true, or fail naming `what` after WAIT seconds."""
    await until(check, timeout=WAIT, what=what)


async def until_free(store: EventStore, thread_id: str = "t1") -> None:
    """Wait until nobody owns the thread (a run's claim outlives it while sync work runs)."""

    async def free() -> bool:
        return await store.holder(thread_id) is None

    await eventually(free, f"thread {thread_id!r} is released")


async def nobody_holds(store: EventStore, thread_id: str = "t1") -> bool:
    """Whether no live owner holds the thread (a claim given up from a worker thread may
    stay in the store a moment longer, dead)."""
    holder = await store.holder(thread_id)
    return holder is None or not holder.alive(time.time())


async def until_stopped(store: EventStore, thread_id: str = "t1") -> None:
    async def stopped() -> bool:
        return "stopped" in kinds(await records(store, thread_id))

    await eventually(stopped, "the log records the run as stopped")


def results_per_call(messages: list[Message]) -> dict[str, list[ToolResultBlock]]:
    """Every tool call of the transcript, with the results answering it (a validator)."""
    found: dict[str, list[ToolResultBlock]] = {}
    for message in messages:
        for call in message.tool_calls():
            assert call.id not in found, f"call id {call.id!r} is asked twice"
            found[call.id] = []
    for message in messages:
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                assert block.call_id in found, f"result for unknown call {block.call_id!r}"
                found[block.call_id].append(block)
    return found


class SyncCharge:
    """A sync `charge` tool that records each start and finish, and returns when released."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def tool(self) -> Callable[..., str]:
        def charge(amount: int) -> str:
            """Charge the customer's card.

            Args:
                amount: how much, in cents.
            """
            self.events.append(f"start {amount}")
            self.started.set()
            self.release.wait(WAIT * 2)
            self.events.append(f"finish {amount}")
            return f"charged {amount}"

        return charge

    @property
    def starts(self) -> int:
        return sum(1 for e in self.events if e.startswith("start"))

    async def wait_started(self) -> None:
        assert await asyncio.to_thread(self.started.wait, WAIT), "the tool never started"


class AsyncCharge:
    """An async `charge` tool that records its start and its `finally`, and never returns."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.started = asyncio.Event()

    def tool(self) -> Callable[..., Any]:
        async def charge(amount: int) -> str:
            """Charge the customer's card.

            Args:
                amount: how much, in cents.
            """
            self.events.append(f"start {amount}")
            self.started.set()
            try:
                await asyncio.Event().wait()  # never ends: only a cancel gets past
                self.events.append(f"finish {amount}")
                return f"charged {amount}"
            finally:
                self.events.append("finally")

        return charge

    @property
    def starts(self) -> int:
        return sum(1 for e in self.events if e.startswith("start"))

    async def wait_started(self) -> None:
        await asyncio.wait_for(self.started.wait(), WAIT)


# --- the ways a caller leaves ------------------------------------------------------------

Leave = Callable[[CompiledGraph[AgentState], Callable[[], Awaitable[None]]], Awaitable[str]]
"""Start a run of `pay()` on CFG, leave it once the tool started; return the expected cause."""


async def leave_by_task_cancel(
    app: CompiledGraph[AgentState], started: Callable[[], Awaitable[None]]
) -> str:
    task = asyncio.create_task(app.ainvoke(pay(), CFG))
    await started()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return "task.cancel()"


async def leave_by_timeout(
    app: CompiledGraph[AgentState], started: Callable[[], Awaitable[None]]
) -> str:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as deadline:
            # the deadline falls once the tool has started, however long that takes
            due = asyncio.ensure_future(started())
            due.add_done_callback(lambda _: deadline.reschedule(-1.0))
            await app.ainvoke(pay(), CFG)
    assert due.done() and due.exception() is None
    return "a timeout around ainvoke"


async def leave_astream(
    app: CompiledGraph[AgentState], started: Callable[[], Awaitable[None]]
) -> str:
    seen = 0
    async for _chunk in app.astream(pay(), CFG):
        seen += 1
        await started()
        break  # the consumer goes away; nothing closes the generator explicitly
    assert seen == 1
    await until_stopped(app.store)  # the generator is finalized by the loop, soon after
    return "astream consumer stopped reading"


LEAVES = {
    "task.cancel": leave_by_task_cancel,
    "wait_for": leave_by_timeout,
    "astream-break": leave_astream,
}


def stopped_event(log: list[EventRecord]) -> Stopped:
    (event,) = [r.event for r in log if isinstance(r.event, Stopped)]
    assert isinstance(event, Stopped)
    return event


def finished_calls(log: list[EventRecord]) -> list[ToolCallFinished]:
    return [r.event for r in log if isinstance(r.event, ToolCallFinished)]


@pytest.mark.parametrize("how", list(LEAVES))
async def test_a_sync_tool_left_running_is_never_run_twice(how: str, store: EventStore) -> None:
    charge = SyncCharge()
    app = charge_graph(store, [charge.tool()])
    try:
        cause = await LEAVES[how](app, charge.wait_started)
        log = await records(store)
        assert kinds(log)[-3:] == ["tool_call_finished", "stop_requested", "stopped"]
        stopped = stopped_event(log)
        assert stopped.reason is not None and cause in stopped.reason
        assert stopped.reason.startswith("abandoned")
        assert stopped.in_flight == [f"tool call 'charge' ({CALL_ID})"]
        (finished,) = finished_calls(log)
        assert (finished.call_id, finished.status) == (CALL_ID, "abandoned")
        state = await app.aget_state(CFG)
        assert state.execution_meta.stop_current_execution == StopRequestStatus.STOPPED

        # While the tool still runs, the thread stays owned by it, and says by what.
        before = len(log)
        with pytest.raises(ThreadBusyError, match=r"tool call 'charge'"):
            await app.ainvoke(None, CFG)
        assert len(await records(store)) == before
        assert charge.events == ["start 10"]
    finally:
        charge.release.set()

    await until_free(store)
    assert charge.events == ["start 10", "finish 10"]
    result = await app.ainvoke(None, CFG, "partial")
    assert result["status"] == ExecutionStatus.COMPLETED.value
    assert charge.starts == 1, "the abandoned call was started again"
    messages: list[Message] = result["context"]
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    check_transcript(messages)
    (tool_result,) = results_per_call(messages)[CALL_ID]
    assert tool_result.is_error and tool_result.status == "abandoned"
    log = await records(store)
    assert kinds(log).count("tool_call_started") == 1
    assert [f.status for f in finished_calls(log)] == ["abandoned"]


@pytest.mark.parametrize("how", list(LEAVES))
async def test_an_async_tool_is_cancelled_for_real(how: str, store: EventStore) -> None:
    charge = AsyncCharge()
    app = charge_graph(store, [charge.tool()])
    cause = await LEAVES[how](app, charge.wait_started)
    assert charge.events == ["start 10", "finally"]
    stopped = stopped_event(await records(store))
    assert stopped.reason is not None and cause in stopped.reason
    assert stopped.in_flight == []
    await until_free(store)  # nothing on a worker thread: released at once

    result = await app.ainvoke(None, CFG, "partial")
    assert result["status"] == ExecutionStatus.COMPLETED.value
    assert charge.starts == 1
    check_transcript(result["context"])
    (tool_result,) = results_per_call(result["context"])[CALL_ID]
    assert tool_result.status == "abandoned" and tool_result.is_error


async def test_a_sync_node_left_running_holds_the_thread_then_runs_again(
    store: EventStore,
) -> None:
    """Nodes are re-runnable: only tool calls are protected from a second run."""
    started, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def slow(state: AgentState) -> list[Message]:
        runs.append("slow")
        started.set()
        release.wait(WAIT * 2)
        return [Message.text_message(f"slow {len(runs)}", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("slow", slow)
    graph.set_entry_point("slow")
    graph.add_edge("slow", END)
    app = graph.compile(store)
    task = asyncio.create_task(app.ainvoke(pay(), CFG))
    try:
        assert await asyncio.to_thread(started.wait, WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stopped = stopped_event(await records(store))
        assert stopped.in_flight == ["node 'slow'"]
        assert stopped.node == "slow"
        with pytest.raises(ThreadBusyError, match=r"node 'slow'"):
            await app.ainvoke(None, CFG)
    finally:
        release.set()
    await until_free(store)
    assert runs == ["slow"]
    result = await app.ainvoke(None, CFG, "partial")
    assert result["status"] == ExecutionStatus.COMPLETED.value
    assert runs == ["slow", "slow"]
    # What the abandoned run returned was discarded: only the second run's message is there.
    assert [m.text() for m in result["context"]] == ["pay", "slow 2"]


# --- Ctrl-C on the blocking invoke, in a real process --------------------------------------


def worker(db: Path, journal: Path, mode: str, hold: str) -> subprocess.Popen[str]:
    """The charge graph's worker process on `db` (see tests/workers/charge_graph.py); its
    tool waits `hold` seconds, or until the file `hold` names exists."""
    args = ["-m", "tests.workers.charge_graph", str(db), str(journal), "t1", mode, hold]
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.mark.parametrize("mode", ["start", "stream"], ids=["invoke", "stream"])
async def test_ctrl_c_on_invoke_is_recorded_and_never_charges_twice(
    tmp_path: Path, mode: str
) -> None:
    db, journal, go = tmp_path / "log.db", tmp_path / "journal.txt", tmp_path / "go"
    proc = worker(db, journal, mode, str(go))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

        def started() -> bool:
            assert proc.poll() is None, proc.communicate()
            return journal.exists() and "start" in journal.read_text()

        await until(started, timeout=WAIT, what="the tool to start")
        proc.send_signal(signal.SIGINT)

        async with SQLiteEventStore(db) as store:
            try:
                await until_stopped(store)
            except BaseException:  # say what the interrupted program said, its stacks, the log
                proc.send_signal(signal.SIGUSR1)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2)  # only gives the stack dump a moment to be written
                proc.kill()
                print(proc.communicate()[1], kinds(await records(store)))
                raise
            log = await records(store)
            assert kinds(log)[-3:] == ["tool_call_finished", "stop_requested", "stopped"]
            stopped = stopped_event(log)
            assert stopped.reason is not None
            # stream(): a Ctrl-C that lands while the caller handles a chunk (not while it
            # waits for the next) reaches the library only as the consumer leaving
            causes = ("Ctrl-C",) if mode == "start" else ("Ctrl-C", "stopped reading")
            assert any(cause in stopped.reason for cause in causes), stopped.reason
            assert stopped.in_flight == [f"tool call 'charge' ({CALL_ID})"]
            assert [(f.call_id, f.status) for f in finished_calls(log)] == [(CALL_ID, "abandoned")]
            # The tool still sleeps in the interrupted process, which owns the thread.
            assert journal.read_text().splitlines() == ["start 10"]
            with pytest.raises(ThreadBusyError, match=r"tool call 'charge'"):
                await charge_graph(store, []).ainvoke(None, CFG)
            with pytest.raises(ThreadStillBusyError, match=r"tool call 'charge'"):
                await charge_graph(store, []).await_idle(CFG, timeout=0.01)
            go.touch()  # the tool returns now
            # another process awaits the thread becoming free
            await charge_graph(store, []).await_idle(CFG, timeout=WAIT)
        _, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    *_, interrupted, waited = err.strip().splitlines()
    assert interrupted == "KeyboardInterrupt", err
    # the exiting program said what it waited for
    assert waited.startswith(
        f"agentlog: waiting for tool call 'charge' ({CALL_ID}) on thread 't1' to return"
    ), err
    assert journal.read_text().splitlines() == ["start 10", "finish 10"]

    again = worker(db, journal, "resume", "0")
    out, err = again.communicate(timeout=WAIT)
    assert again.returncode == 0, err
    assert out.splitlines() == ["ready", "result completed"]
    assert journal.read_text().splitlines() == ["start 10", "finish 10"], "charged twice"
    async with SQLiteEventStore(db) as store:
        log = await records(store)
        assert kinds(log).count("tool_call_started") == 1
        assert kinds(log)[-1] == "run_completed"
        state = await charge_graph(store, []).aget_state(CFG)
    check_transcript(state.context)
    assert [m.role for m in state.context] == ["user", "assistant", "tool", "assistant"]


# --- waiting for a thread that work left running holds ------------------------------------


@pytest.mark.parametrize("form", ["await_idle", "wait_idle"])
async def test_the_caller_can_await_a_thread_a_stopped_def_tool_still_holds(
    store: EventStore, form: str
) -> None:
    """After `astop` cut a `def` tool short, the next call is refused at once; `await_idle`
    (or the blocking `wait_idle`) waits for the tool to return, then the thread is free."""
    charge = SyncCharge()
    app = charge_graph(store, [charge.tool()])

    async def idle(timeout: float | None) -> None:
        if form == "await_idle":
            await app.await_idle(CFG, timeout=timeout)
        else:
            await asyncio.to_thread(app.wait_idle, CFG, timeout=timeout)

    try:
        task = asyncio.ensure_future(app.ainvoke(pay(), CFG))
        await charge.wait_started()
        assert await app.astop(CFG)
        paused = await asyncio.wait_for(task, WAIT)
        assert paused["__interrupt__"][0]["reason"] == "stop_requested"
        with pytest.raises(ThreadBusyError, match=r"tool call 'charge'") as busy:
            await app.ainvoke(None, CFG)
        assert "await app.await_idle(config" in str(busy.value)  # the refusal names the wait
        with pytest.raises(ThreadStillBusyError, match=r"still busy after 0.01s: .*'charge'"):
            await idle(0.01)
        waiting = asyncio.ensure_future(idle(None))
    finally:
        charge.release.set()
    await asyncio.wait_for(waiting, WAIT)
    assert await nobody_holds(store)
    result = await app.ainvoke(None, CFG)
    assert result["status"] == "completed"
    assert charge.starts == 1
    app.close()


async def test_await_idle_on_a_free_or_unknown_thread_returns_at_once(store: EventStore) -> None:
    app = charge_graph(store, [SyncCharge().tool()])
    await app.await_idle({"thread_id": "nobody"}, timeout=0.01)
    with pytest.raises(GraphError, match="timeout must be a number of seconds > 0"):
        await app.await_idle(CFG, timeout=-1)


async def test_async_with_closes_the_graph_once_the_work_its_runs_left_has_returned(
    store: EventStore,
) -> None:
    """`async with graph.compile(...) as app:` works, and leaving it waits for a `def` tool
    a run left running (its thread is then free) and stops the blocking methods' loop."""
    charge = SyncCharge()
    leaving, left = asyncio.Event(), asyncio.Event()

    async def use() -> CompiledGraph[AgentState]:
        async with charge_graph(store, [charge.tool()]) as app:
            await asyncio.to_thread(app.wait_idle, CFG)  # a blocking call starts its loop
            assert app._portal is not None
            await leave_by_task_cancel(app, charge.wait_started)
            leaving.set()
        left.set()
        return app

    using = asyncio.ensure_future(use())
    try:
        await asyncio.wait_for(leaving.wait(), WAIT)
        assert not left.is_set(), "the graph closed while its tool still ran"
    finally:
        charge.release.set()
    app = await asyncio.wait_for(using, WAIT)
    assert charge.events == ["start 10", "finish 10"]
    assert await nobody_holds(store)
    assert app._portal is None


# --- astop ------------------------------------------------------------------------------


async def test_astop_pauses_a_running_thread_at_the_next_boundary(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "agentlog.actors.engine.guard.STOP_POLL_S", 60.0
    )  # the node ends before a look
    entered, release = asyncio.Event(), asyncio.Event()
    runs: list[str] = []

    async def first(state: AgentState) -> list[Message]:
        runs.append("first")
        entered.set()
        await release.wait()
        return [Message.text_message("first", role="assistant")]

    async def second(state: AgentState) -> list[Message]:
        runs.append("second")
        return [Message.text_message("second", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("first", first)
    graph.add_node("second", second)
    graph.set_entry_point("first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    app = graph.compile(store)
    task = asyncio.create_task(app.ainvoke(pay(), CFG))
    await asyncio.wait_for(entered.wait(), WAIT)
    assert await app.astop(CFG) is True
    assert kinds(await records(store))[-1] == "stop_requested"
    assert await app.astop(CFG) is False, "a second stop while one is pending"
    release.set()
    result = await asyncio.wait_for(task, WAIT)
    assert runs == ["first"]
    assert [m.text() for m in result["messages"]] == ["pay", "first"]
    (pause,) = result["__interrupt__"]
    assert pause["reason"] == "stop_requested"
    log = await records(store)
    assert kinds(log)[-1] == "stopped"
    assert (stopped_event(log).node, stopped_event(log).when) == ("first", "after")

    done = await app.ainvoke(None, CFG)
    assert runs == ["first", "second"]
    assert done["status"] == ExecutionStatus.COMPLETED.value
    assert "__interrupt__" not in done


async def test_astop_on_a_finished_thread_is_false_and_writes_nothing(store: EventStore) -> None:
    charge = SyncCharge()
    charge.release.set()
    app = charge_graph(store, [charge.tool()])
    assert (await app.ainvoke(pay(), CFG))["status"] == "completed"
    before = await records(store)
    assert await app.astop(CFG) is False
    assert await records(store) == before


async def test_astop_on_a_paused_thread_is_false_and_writes_nothing(store: EventStore) -> None:
    charge = SyncCharge()
    charge.release.set()
    app = charge_graph(store, [charge.tool()], interrupt_before=["tools"])
    assert "__interrupt__" in await app.ainvoke(pay(), CFG)
    before = await records(store)
    stopped = await app.astop(CFG)
    assert (await records(store)) == before, "a stop request was recorded on a paused thread"
    assert stopped is False


async def test_astop_on_an_unknown_thread_is_thread_not_found() -> None:
    store = MemoryEventStore()
    app = charge_graph(store, [SyncCharge().tool()])
    with pytest.raises(ThreadNotFoundError, match="'nobody'"):
        await app.astop({"thread_id": "nobody"})
    assert await store.threads() == []


# --- new input on a thread that ended early ------------------------------------------------


def test_the_transcript_check_catches_a_result_out_of_place() -> None:
    user = Message.text_message("never mind", message_id="u-2")
    result = Message.tool_message([ToolResultBlock(call_id=CALL_ID, output="ok")])
    pay_msg = Message.text_message("pay")
    check_transcript([pay_msg, ask_message(10), result, user])
    with pytest.raises(AssertionError, match="answer"):
        check_transcript([pay_msg, ask_message(10), user, result])
    with pytest.raises(AssertionError, match="answer"):
        check_transcript([pay_msg, ask_message(10), user])
    with pytest.raises(AssertionError, match="no assistant turn"):
        check_transcript([pay_msg, result])


async def test_new_input_after_an_abandoned_tool_call_keeps_the_transcript_valid(
    store: EventStore,
) -> None:
    charge = SyncCharge()
    app = charge_graph(store, [charge.tool()])
    try:
        await leave_by_task_cancel(app, charge.wait_started)
    finally:
        charge.release.set()
    await until_free(store)
    later = {"messages": [Message.text_message("never mind", message_id="u-2")]}
    result = await app.ainvoke(later, CFG, "partial")
    assert charge.starts == 1
    messages: list[Message] = result["context"]
    check_transcript(messages)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    (tool_result,) = results_per_call(messages)[CALL_ID]
    assert tool_result.status == "abandoned"
    assert messages[3].message_id == "u-2"


async def test_new_input_on_a_thread_stopped_before_its_tools_rejects_the_calls(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "agentlog.actors.engine.guard.STOP_POLL_S", 60.0
    )  # the node ends before a look
    charge = SyncCharge()
    charge.release.set()
    entered, release = asyncio.Event(), asyncio.Event()

    async def agent(state: AgentState) -> dict[str, Any]:
        if any(m.role == "tool" for m in state.context):
            return {"messages": [Message.text_message("done", role="assistant")]}
        entered.set()
        await release.wait()
        return {"messages": [ask_message(10)]}

    def route(state: AgentState) -> str:
        return "tools" if state.context[-1].tool_calls() else END

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([charge.tool()]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    app = graph.compile(store)
    task = asyncio.create_task(app.ainvoke(pay(), CFG))
    await asyncio.wait_for(entered.wait(), WAIT)
    assert await app.astop(CFG)
    release.set()
    paused = await asyncio.wait_for(task, WAIT)
    assert paused["__interrupt__"][0]["node"] == "agent"  # paused after it, before the tools
    assert (await app.aget_state(CFG)).execution_meta.current_node == "tools"

    later = {"messages": [Message.text_message("never mind", message_id="u-2")]}
    result = await app.ainvoke(later, CFG, "partial")
    messages: list[Message] = result["context"]
    check_transcript(messages)
    assert charge.starts == 0, "the user answered instead of approving: the call must not run"
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    (tool_result,) = results_per_call(messages)[CALL_ID]
    assert (tool_result.status, tool_result.is_error) == ("rejected", True)


@pytest.mark.parametrize("seed", range(12))
async def test_a_run_cancelled_at_any_moment_leaves_the_thread_free_for_the_next_call(
    tmp_path: Path, seed: int
) -> None:
    """A cancelled run's commit still under way lands before the thread is given up, and a
    released run can no longer write: the next call never meets a writer that is gone (the
    old engine let such a late append break the next resume with ThreadBusyError)."""
    rng = random.Random(seed)

    async def turns(n: int) -> None:
        """Let the event loop go round `n` times: a moment counted in the loop's turns (a
        whole run here takes a few thousand), the same on a busy machine as on an idle one."""
        for _ in range(n):
            await asyncio.sleep(0)

    async def talk(state: AgentState) -> list[Message]:
        await turns(rng.randrange(3))
        return [Message.text_message(f"turn {len(state.context)}", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("talk", talk)
    graph.set_entry_point("talk")
    graph.add_conditional_edges(
        "talk",
        lambda state: "talk" if len(state.context) < 40 else END,
        {"talk": "talk", END: END},
    )
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        app = graph.compile(checkpointer=store, recursion_limit=100)
        first = asyncio.ensure_future(app.ainvoke("hi", CFG))
        await turns(rng.randrange(4000))
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        if await store.last_seq("t1") == 0:
            with pytest.raises(ThreadNotFoundError):
                await app.ainvoke(None, CFG)
            return
        out = await asyncio.wait_for(app.ainvoke(None, CFG, "partial"), WAIT)
        assert out["status"] == "completed"
        assert len(out["context"]) == 40
        assert (await store.verify("t1")).ok
        assert await store.holder("t1") is None


class HeldClaims(MemoryEventStore):
    """A store whose next claim waits, once armed, until the test lets it through."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.claiming = asyncio.Event()
        self.go = asyncio.Event()

    async def claim(self, thread_id: str, **how: Any) -> Any:
        if self.armed:
            self.armed = False
            self.claiming.set()
            await self.go.wait()
        return await super().claim(thread_id, **how)


def talk_graph(store: EventStore) -> CompiledGraph[AgentState]:
    """One node answering once."""

    async def talk(state: AgentState) -> list[Message]:
        return [Message.text_message(f"turn {len(state.context)}", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("talk", talk)
    graph.set_entry_point("talk")
    graph.add_edge("talk", END)
    return graph.compile(checkpointer=store)


@pytest.mark.parametrize("call", ["ainvoke", "aupdate_state", "acancel"])
async def test_a_call_cancelled_while_it_claims_the_thread_gives_it_back_before_it_returns(
    call: str,
) -> None:
    """The claim a cancelled caller was waiting for is released before the cancellation
    reaches the caller (it was released later, by a task of its own, so the caller's next
    call met `ThreadBusyError`)."""
    store = HeldClaims()
    app = talk_graph(store)
    await app.ainvoke("hi", CFG)
    calls = {
        "ainvoke": lambda: app.ainvoke("again", CFG),
        "aupdate_state": lambda: app.aupdate_state(CFG, {"messages": ["edit"]}),
        "acancel": lambda: app.acancel(CFG),
    }
    store.armed = True
    first = asyncio.ensure_future(calls[call]())
    await store.claiming.wait()
    first.cancel()
    store.go.set()  # the claim now goes through, after its caller was cancelled
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await store.holder("t1") is None
    out = await app.ainvoke("next", CFG)
    assert out["status"] == "completed"


async def test_a_store_closing_under_a_running_node_ends_its_stop_watch_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Shutting an app down mid-node is no trouble to warn about: the node's commit says it."""
    monkeypatch.setattr("agentlog.actors.engine.guard.STOP_POLL_S", 0.02)
    started, release = threading.Event(), threading.Event()

    class CountingReads(SQLiteEventStore):
        """Counts the reads of the log (the stop watch's looks), and those that failed."""

        looks = failed = 0

        async def read(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            self.looks += 1
            try:
                async for record in super().read(*args, **kwargs):
                    yield record
            except Exception:
                self.failed += 1
                raise

    def slow(state: AgentState) -> dict[str, Any]:
        started.set()
        release.wait(WAIT)
        return {"messages": [Message.text_message("done", role="assistant")]}

    builder = StateGraph()
    builder.add_node("slow", slow)
    builder.set_entry_point("slow")
    builder.add_edge("slow", END)
    store = CountingReads(tmp_path / "app.db")
    await store.open()
    graph = builder.compile(checkpointer=store)
    run = asyncio.create_task(graph.ainvoke(pay(), config=CFG))
    await asyncio.to_thread(started.wait, WAIT)
    looked = store.looks
    await until(lambda: store.looks >= looked + 3, what="the watch to look a few times")
    caplog.set_level("WARNING", logger="agentlog.actors")
    await store.close()
    await until(lambda: store.failed, what="the watch to meet the closed store")
    await wait_all_tasks_blocked()  # and to have taken what it found
    release.set()
    with contextlib.suppress(Exception):
        await run
    assert not [r for r in caplog.records if "stop watch" in r.getMessage()]
