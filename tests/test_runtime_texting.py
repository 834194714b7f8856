"""Double-texting with a tool in flight: new input for a busy thread under each strategy.

A side-effect log kept by the tool itself shows what really ran: no two executions overlap
on one thread, no call runs twice, and every strategy leaves a transcript where each tool
call has exactly one result. `rollback` sets the thread back to the state before the run it
supersedes, with steps still counting and the superseded run still in the log.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.runtime import AgentRuntime, EntryPoint, ThreadBusyRunError
from agentlog.actors.testing import wait_for_record
from agentlog.events import MemoryEventStore, SQLiteEventStore
from agentlog.events.kinds import TriggerFinished
from agentlog.projections import AgentState, Message, ToolCallBlock, replay
from tests.helpers import agent_with_tools
from tests.workers.charge_graph import check_transcript

WAIT = 60.0


class SideEffects:
    """What the tool did, as (call id, start, end or None) per execution, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[list[Any]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.async_release = asyncio.Event()

    def begin(self, call: str) -> list[Any]:
        entry = [call, time.monotonic(), None]
        with self.lock:
            self.runs.append(entry)
        self.started.set()
        return entry

    def check(self) -> None:
        calls = [r[0] for r in self.runs]
        assert len(calls) == len(set(calls)), f"a call ran twice: {calls}"
        done = sorted((r for r in self.runs if r[2] is not None), key=lambda r: r[1])
        for a, b in itertools.pairwise(done):
            assert a[2] <= b[1], f"{a[0]} and {b[0]} overlapped"


def graph_for(effects: SideEffects, sync: bool, store: Any) -> Any:
    numbers = itertools.count(1)

    def agent(state: AgentState) -> list[Message]:
        """Asks for one tool call per user message, then says what the tool gave."""
        last = state.context[-1]
        if last.role == "user":
            call = ToolCallBlock(id=f"call-{next(numbers)}", name="work", args={"n": 1})
            return [Message(role="assistant", content=[call])]
        return [Message.text_message(f"done: {last.text()}", role="assistant")]

    if sync:

        def work(n: int, tool_call_id: str) -> str:
            entry = effects.begin(tool_call_id)
            effects.release.wait(WAIT)
            entry[2] = time.monotonic()
            return f"worked {tool_call_id}"

    else:

        async def work(n: int, tool_call_id: str) -> str:  # type: ignore[misc]
            entry = effects.begin(tool_call_id)
            await effects.async_release.wait()
            entry[2] = time.monotonic()
            return f"worked {tool_call_id}"

    return agent_with_tools(agent, [work]).compile(store)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with SQLiteEventStore(tmp_path / "log.db") as opened:
        yield opened


def runtime_for(store: Any, effects: SideEffects, sync: bool, **entry: Any) -> AgentRuntime:
    runtime = AgentRuntime(store)
    runtime.add_graph("g", graph_for(effects, sync, store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="g", **entry))
    return runtime


async def first_in_flight(store: Any, sync: bool) -> tuple[AgentRuntime, SideEffects]:
    """A started runtime whose first run's tool call on thread "t" is running."""
    effects = SideEffects()
    runtime = runtime_for(store, effects, sync)
    await runtime.start()
    await runtime.trigger("chat", "first", thread_id="t")
    await asyncio.to_thread(effects.started.wait, WAIT)
    return runtime, effects


async def double_text(store: Any, sync: bool, strategy: str) -> tuple[AgentRuntime, SideEffects]:
    """The first input's tool call is running when the second input arrives."""
    runtime, effects = await first_in_flight(store, sync)

    def release() -> None:
        effects.release.set()
        effects.async_release.set()

    asyncio.get_running_loop().call_later(0.2, release)
    await runtime.trigger("chat", "second", thread_id="t", multitask_strategy=strategy)  # type: ignore[arg-type]
    return runtime, effects


async def finished(runtime: AgentRuntime, store: Any) -> AgentState:
    result = await runtime.wait("t", timeout=WAIT)
    await runtime.stop()
    state = result["state"]
    records = [r async for r in store.read("t")]
    assert replay(records).model_dump(exclude={"execution_meta"}) == state.model_dump(
        exclude={"execution_meta"}
    )
    check_transcript(state.context)
    return state  # type: ignore[no-any-return]


@pytest.mark.parametrize("sync", [True, False], ids=["def-tool", "async-tool"])
async def test_enqueue_runs_the_input_after_the_run(store: Any, sync: bool) -> None:
    runtime, effects = await double_text(store, sync, "enqueue")
    state = await finished(runtime, store)
    effects.check()
    texts = [m.text() for m in state.context if m.role in ("user", "assistant") and m.text()]
    assert texts == ["first", "done: worked call-1", "second", "done: worked call-2"]


@pytest.mark.parametrize("sync", [True, False], ids=["def-tool", "async-tool"])
async def test_interrupt_lets_the_tool_finish_and_continues_with_progress_kept(
    store: Any, sync: bool
) -> None:
    runtime, effects = await double_text(store, sync, "interrupt")
    state = await finished(runtime, store)
    effects.check()
    assert all(r[2] is not None for r in effects.runs)  # the tool in flight finished
    texts = [m.text() for m in state.context if m.text()]
    assert texts[:2] == ["first", "worked call-1"]  # its result kept
    assert "second" in texts
    first = runtime.ledger.triggers[runtime.ledger.by_thread["t"][0]]
    assert first.outcome == "interrupted"


@pytest.mark.parametrize("sync", [True, False], ids=["def-tool", "async-tool"])
async def test_rollback_sets_the_thread_back_to_before_the_run(store: Any, sync: bool) -> None:
    runtime, effects = await double_text(store, sync, "rollback")
    state = await finished(runtime, store)
    effects.check()
    texts = [m.text() for m in state.context if m.text()]
    assert texts == ["second", "worked call-2", "done: worked call-2"]  # first run gone
    records = [r async for r in store.read("t")]
    kinds = [r.kind for r in records]
    superseded = [r.event for r in records if r.kind == "run_superseded"]
    assert len(superseded) == 1 and superseded[0].started_seq == 1
    assert superseded[0].run_id == records[0].run_id  # it names the first run
    ending = records[kinds.index("run_cancelled") : kinds.index("run_superseded") + 1]
    assert {r.run_id for r in ending} == {records[0].run_id}  # records of the run it ends
    assert kinds.index("run_superseded") > kinds.index("run_cancelled")
    assert state.execution_meta.step > 3  # steps keep counting over the superseded run
    first = runtime.ledger.triggers[runtime.ledger.by_thread["t"][0]]
    assert (first.outcome, first.rolled_back_to) == ("cancelled", 0)
    # the superseded run's tool call, and side effect, happened once and are in the log
    assert [r.event.call_id for r in records if r.kind == "tool_call_started"].count("call-1") >= 1
    assert len(effects.runs) == 2


async def test_rollback_returns_to_the_state_before_the_run_not_the_thread_start(
    store: Any,
) -> None:
    runtime, effects = await double_text(store, False, "enqueue")
    await runtime.wait("t", timeout=WAIT)  # both runs done: four messages each
    effects.started.clear()
    effects.async_release = asyncio.Event()
    await runtime.trigger("chat", "third", thread_id="t")
    await asyncio.to_thread(effects.started.wait, WAIT)
    before = await store.last_seq("t")
    asyncio.get_running_loop().call_later(0.1, effects.async_release.set)
    await runtime.trigger("chat", "fourth", thread_id="t", multitask_strategy="rollback")
    state = await finished(runtime, store)
    texts = [m.text() for m in state.context if m.role == "user"]
    assert texts == ["first", "second", "fourth"]
    third = runtime.ledger.triggers[runtime.ledger.by_thread["t"][2]]
    assert third.rolled_back_to is not None and third.rolled_back_to < before


async def test_reject_with_a_tool_in_flight_writes_nothing(store: Any) -> None:
    effects = SideEffects()
    runtime = runtime_for(store, effects, False, multitask_strategy="reject")
    async with runtime:
        await runtime.trigger("chat", "first", thread_id="t")
        await asyncio.to_thread(effects.started.wait, WAIT)
        head = await store.last_seq("__runtime__"), await store.last_seq("t")
        with pytest.raises(ThreadBusyRunError):
            await runtime.trigger("chat", "second", thread_id="t")
        assert (await store.last_seq("__runtime__"), await store.last_seq("t")) == head
        effects.async_release.set()
        await runtime.wait("t", timeout=WAIT)
    effects.check()


async def test_reject_sees_a_run_whose_acceptance_is_still_being_recorded(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two inputs sent at once to an idle thread: the first is accepted, and the second,
    arriving while the first's acceptance commits (a slow disk), is refused as
    double-texting."""
    effects = SideEffects()
    effects.async_release.set()
    runtime = runtime_for(store, effects, False, multitask_strategy="reject")
    record = runtime.journal.record
    recording, disk = asyncio.Event(), asyncio.Event()

    async def slow_record(*args: Any, **kwargs: Any) -> Any:
        recording.set()
        await disk.wait()  # the slow disk: held until the second input has been answered
        return await record(*args, **kwargs)

    monkeypatch.setattr(runtime.journal, "record", slow_record)
    async with runtime:
        first = asyncio.ensure_future(runtime.trigger("chat", "first", thread_id="t"))
        await recording.wait()  # the first's acceptance is being recorded
        try:
            with pytest.raises(ThreadBusyRunError):
                await asyncio.wait_for(runtime.trigger("chat", "second", thread_id="t"), WAIT)
        finally:
            disk.set()
        assert isinstance(await first, str)  # the first sent is the one accepted
        await runtime.wait("t", timeout=WAIT)
    assert len(runtime.ledger.by_thread["t"]) == 1


async def test_a_rollback_cut_short_by_a_crash_is_finished_by_the_next_runtime(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trigger's end is recorded, then the process dies before the thread is set back:
    the next runtime on the store finishes the rollback before running anything."""
    runtime, effects = await first_in_flight(store, False)

    async def dies(*args: Any, **kwargs: Any) -> bool:
        await runtime.stop(cancel=True)  # nothing of this process runs on
        raise SystemExit("the process died here")

    monkeypatch.setattr("agentlog.actors.runtime.dispatch.roll_back", dies)
    with pytest.raises(SystemExit):
        await runtime.trigger("chat", "second", thread_id="t", multitask_strategy="rollback")
    monkeypatch.undo()
    ends = [r.event async for r in store.read("__runtime__") if r.kind == "trigger_finished"]
    assert any(isinstance(e, TriggerFinished) and e.rolled_back_to == 0 for e in ends)
    assert "run_superseded" not in [r.kind async for r in store.read("t")]

    effects.async_release.set()
    again = runtime_for(store, effects, False)
    async with again:
        result = await again.wait("t", timeout=WAIT)
    state = result["state"]
    assert [m.text() for m in state.context if m.role == "user"] == ["second"]
    assert [r.kind async for r in store.read("t")].count("run_superseded") == 1
    check_transcript(state.context)


async def test_a_rollback_landing_before_the_run_wrote_anything_runs_the_new_input() -> None:
    """Input sent with "rollback" right behind a thread's first trigger finds a run that has
    recorded nothing yet: there is nothing to set back, and the caller hears no store error."""
    effects = SideEffects()
    effects.async_release.set()
    store = MemoryEventStore()
    runtime = runtime_for(store, effects, False)
    async with runtime:
        thread = await runtime.trigger("chat", "first")
        await runtime.trigger("chat", "second", thread_id=thread, multitask_strategy="rollback")
        result = await runtime.wait(thread, timeout=WAIT)
    state = result["state"]
    assert [m.text() for m in state.context if m.role == "user"][-1] == "second"
    check_transcript(state.context)


async def test_rolling_back_a_thread_with_nothing_recorded_writes_nothing(store: Any) -> None:
    from agentlog.actors.runtime.rollback import roll_back, rolled_back

    app = graph_for(SideEffects(), False, store)
    assert await roll_back(app, "never-written", 0, by="alice", reason=None) is False
    assert await rolled_back(store, "never-written", 0) is True  # nothing left to finish
    assert await store.last_seq("never-written") == 0


async def test_a_stale_rollback_never_sets_back_a_later_run(store: Any) -> None:
    """A rollback recorded for a run that completed before it landed (the race a restart
    finds unfinished) must not supersede the runs that came after it: here a later run
    paused at a breakpoint keeps its state, and nothing is written."""
    from agentlog.actors import END, StateGraph
    from agentlog.actors.runtime.rollback import roll_back

    graph = StateGraph()
    graph.add_node("a", lambda state: [Message.text_message("a", role="assistant")])
    graph.add_node("b", lambda state: [Message.text_message("b", role="assistant")])
    graph.set_entry_point("a")
    graph.add_edge("a", "b")
    graph.add_edge("b", END)
    app = graph.compile(store)
    config = {"thread_id": "t"}
    await app.ainvoke("first", config)  # the first run completes
    first_run_end = await store.last_seq("t")
    paused_app = graph.compile(store, interrupt_before=["b"])
    await paused_app.ainvoke("second", config)  # a later run, paused before b
    head = await store.last_seq("t")
    assert await roll_back(paused_app, "t", 0, by="runtime", reason="stale") is False
    assert await store.last_seq("t") == head > first_run_end
    state = await paused_app.aget_state(config)
    assert [m.text() for m in state.context if m.role == "user"] == ["first", "second"]


async def test_a_rollback_landing_just_after_the_run_completed_leaves_it_completed(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run commits `run_completed`, and the rollback arrives before the runtime records
    the run's end: the thread is not set back (its outcome stands), and the trigger's end
    says completed, not cancelled, in this process and after a restart."""
    from agentlog.actors.runtime.dispatch import Dispatcher

    ended = Dispatcher._ended
    gate = asyncio.Event()

    async def held(self: Dispatcher, *args: Any) -> None:
        await gate.wait()  # the run has completed on its thread; its end is not recorded
        await ended(self, *args)

    monkeypatch.setattr(Dispatcher, "_ended", held)
    monkeypatch.setattr(Dispatcher, "_mark_ending", lambda self, thread, state: None)
    effects = SideEffects()
    effects.release.set()
    runtime = runtime_for(store, effects, True)
    async with runtime:
        await runtime.trigger("chat", "first", thread_id="t")
        try:
            await wait_for_record(store, "t", "run_completed")
            await runtime.trigger("chat", "second", thread_id="t", multitask_strategy="rollback")
        finally:
            gate.set()  # never leave the held run's task waiting (stop would wait for it)
        await finished(runtime, store)
    first_id = runtime.ledger.by_thread["t"][0]
    assert runtime.ledger.triggers[first_id].outcome == "completed"
    assert "run_superseded" not in [r.kind async for r in store.read("t")]
    again = runtime_for(store, effects, True)
    async with again:
        assert again.ledger.triggers[first_id].outcome == "completed"
        assert again.ledger.triggers[first_id].rolled_back_to is None


async def test_rollback_also_cancels_the_input_queued_behind_the_run(store: Any) -> None:
    runtime, effects = await first_in_flight(store, False)
    queued = await runtime.submit("chat", "queued", thread_id="t")  # enqueue: waits its turn
    asyncio.get_running_loop().call_later(0.1, effects.async_release.set)
    await runtime.trigger("chat", "latest", thread_id="t", multitask_strategy="rollback")
    state = await finished(runtime, store)
    assert [m.text() for m in state.context if m.role == "user"] == ["latest"]
    ended = runtime.ledger.triggers[queued.trigger_id]
    assert ended.outcome == "cancelled" and "superseded" in (ended.message or "")
    assert not ended.dispatched  # it never ran
