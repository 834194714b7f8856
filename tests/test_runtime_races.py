"""Races between a caller, the runtime's bookkeeping and a run's end: a caller that leaves
while its acceptance commits, a cancel that arrives as the run completes, an input sent
while an earlier one waits to be retried, a restart on the same object, a stop during a
submit. Each test fails on the code before its fix."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.runtime import (
    AgentRuntime,
    EntryPoint,
    RetryPolicy,
    RuntimeNotStartedError,
    ThreadBusyRunError,
    UnknownRunError,
)
from agentlog.actors.testing import until, wait_all_tasks_blocked
from agentlog.events import MemoryEventStore, SQLiteEventStore
from agentlog.events.kinds import TriggerAccepted
from tests.helpers import line
from tests.test_runtime_dispatch import HeldStore, acceptance, runtime_on, said, texts_of

WAIT = 10.0


async def _runtime_records(store: Any) -> list[Any]:
    if not await store.last_seq("__runtime__"):
        return []
    return [r async for r in store.read("__runtime__")]


@pytest.mark.parametrize("named", [True, False], ids=["named-thread", "new-thread"])
async def test_a_caller_leaving_mid_acceptance_keeps_its_key_taken(named: bool) -> None:
    store = HeldStore()
    async with store, runtime_on(store) as runtime:
        where = {"thread_id": "t"} if named else {}
        store.hold(acceptance)
        first = asyncio.ensure_future(runtime.submit("api", "one", idempotency_key="k", **where))
        await store.held.wait()  # its acceptance is being appended
        second = asyncio.ensure_future(runtime.submit("api", "one", idempotency_key="k", **where))
        await wait_all_tasks_blocked()  # the second waits on the first's key
        first.cancel()  # the client hung up; its acceptance still commits
        await wait_all_tasks_blocked()
        store.go.set()
        got = await second
        await runtime.wait(got.thread_id, timeout=WAIT)
        accepted = [r for r in await _runtime_records(store) if r.kind == "trigger_accepted"]
        assert [r.event.trigger_id for r in accepted] == [got.trigger_id]  # one, the first's
        assert got.input == "one"


async def test_a_caller_leaving_mid_acceptance_still_makes_its_thread_busy() -> None:
    store = HeldStore()
    async with store, runtime_on(store) as runtime:
        store.hold(acceptance)
        first = asyncio.ensure_future(runtime.submit("api", "one", thread_id="t"))
        await store.held.wait()
        first.cancel()
        await wait_all_tasks_blocked()
        try:
            with pytest.raises(ThreadBusyRunError):
                second = runtime.submit("api", "two", thread_id="t", multitask_strategy="reject")
                await asyncio.wait_for(second, timeout=5)  # accepted, it waits on the first
        finally:
            store.go.set()
        await until(  # the acceptance commits on its own
            lambda: "t" in runtime.ledger.by_thread, what="the acceptance to commit"
        )
        await runtime.wait("t", timeout=WAIT)
        state = await runtime.graphs["g"].app.aget_state({"thread_id": "t"})
        assert [m.text() for m in state.context] == ["one", "ok one"]


async def test_a_cancel_arriving_as_the_run_completes_leaves_it_completed() -> None:
    store = MemoryEventStore()
    async with store, runtime_on(store) as runtime:
        app = runtime.graphs["g"].app
        original, returned, gate = app.ainvoke_to, asyncio.Event(), asyncio.Event()

        async def held(*args: Any, **kwargs: Any) -> Any:
            result = await original(*args, **kwargs)
            returned.set()  # the thread holds run_completed; the runtime has not seen it yet
            await gate.wait()
            return result

        app.ainvoke_to = held  # type: ignore[method-assign]
        thread = await runtime.trigger("api", "hi")
        await returned.wait()
        cancelling = asyncio.ensure_future(runtime.cancel(thread, reason="too late"))
        await wait_all_tasks_blocked()  # the cancel waits on the run it came too late for
        gate.set()
        with pytest.raises(UnknownRunError, match="completed"):
            await cancelling
        assert (await runtime.wait(thread, timeout=WAIT))["status"] == "completed"
        ends = [
            r.event.outcome for r in await _runtime_records(store) if r.kind == "trigger_finished"
        ]
        assert ends == ["completed"]


async def test_an_input_waits_for_an_earlier_one_to_be_retried_on_its_thread() -> None:
    failed: set[str] = set()

    def flaky(state: Any) -> list[Any]:
        text = state.context[-1].text()
        if text == "A" and text not in failed:
            failed.add(text)
            raise RuntimeError("a passing failure")
        return said(state)

    store = MemoryEventStore()
    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("work", flaky)).compile(store))
    retry = RetryPolicy(max_attempts=3, backoff_s=0.3)
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g", retry=retry))
    async with store, runtime:
        a = await runtime.submit("api", "A", thread_id="t")
        await until(
            lambda: runtime.ledger.triggers[a.trigger_id].retry_at is not None,
            what="A's retry to be scheduled",
        )
        with pytest.raises(ThreadBusyRunError):  # A is not over: the thread is busy
            await runtime.submit("api", "C", thread_id="t", multitask_strategy="reject")
        b = await runtime.submit("api", "B", thread_id="t", multitask_strategy="enqueue")
        first = await runtime.wait_for(a.trigger_id, timeout=WAIT)
        await runtime.wait_for(b.trigger_id, timeout=WAIT)
        assert [m.text() for m in first["messages"]] == ["ok A"]
        state = await runtime.graphs["g"].app.aget_state({"thread_id": "t"})
        assert [m.text() for m in state.context] == ["A", "ok A", "B", "ok B"]


async def test_a_restarted_runtime_dispatches_nothing_before_its_recovery(
    tmp_path: Path,
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def node(state: Any) -> list[Any]:
        entered.set()
        if not release.is_set():  # the warm run is held until the runtime stopped
            await release.wait()
        return said(state)

    for attempt in range(8):  # the race is won some of the time on the code before
        async with SQLiteEventStore(tmp_path / f"log{attempt}.db") as store:
            entered.clear()
            release.clear()
            runtime = runtime_on(store, node)
            await runtime.start()
            warm = await runtime.trigger("api", "warm")
            await entered.wait()
            await runtime.stop(cancel=True)  # the warm run is cut short: in flight in the log
            release.set()
            starting = asyncio.ensure_future(runtime.start())
            while not runtime.started:
                await asyncio.sleep(0)
            threads = await asyncio.gather(*(runtime.trigger("api", f"m{k}") for k in range(5)))
            await starting
            for thread in [*threads, warm]:
                await runtime.wait(thread, timeout=WAIT)
            await runtime.stop()
            kinds: dict[str, list[str]] = {}
            for record in await _runtime_records(store):
                kinds.setdefault(record.event.trigger_id, []).append(record.kind)
            for trigger_id, seen in kinds.items():  # nothing dispatched after its end
                assert seen[-1] == "trigger_finished", (attempt, trigger_id, seen)


async def test_a_submit_caught_by_a_stop_records_nothing(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        runtime = runtime_on(store)
        await runtime.start()
        original, gate, reached = store.last_seq, asyncio.Event(), asyncio.Event()

        async def slow_last_seq(thread_id: str, *args: Any, **kwargs: Any) -> int:
            if thread_id == "late":
                reached.set()
                await gate.wait()
            return await original(thread_id, *args, **kwargs)

        store.last_seq = slow_last_seq  # type: ignore[method-assign]
        submit = asyncio.ensure_future(runtime.submit("api", "hi", thread_id="late"))
        await reached.wait()
        await runtime.stop()
        gate.set()
        with pytest.raises(RuntimeNotStartedError):
            await submit
        records = await _runtime_records(store)
        assert not [r for r in records if r.kind == "trigger_accepted"]


async def test_a_cancel_right_after_new_input_on_a_finished_thread_cancels_it(
    tmp_path: Path,
) -> None:
    """The thread's last run completed: that completion is not the new run's, so the cancel
    ends the new input at once instead of waiting for it to finish."""

    async def node(state: Any) -> list[Any]:
        if state.context[-1].text().startswith("b"):
            await asyncio.Event().wait()  # until cancelled
        return said(state)

    async with (
        SQLiteEventStore(tmp_path / "log.db") as store,
        runtime_on(store, node) as runtime,
    ):
        for k in range(4):
            thread = f"t{k}"
            await runtime.trigger_and_wait("api", "a", thread_id=thread, timeout=WAIT)
            b = await runtime.submit("api", f"b{k}", thread_id=thread)
            await asyncio.wait_for(runtime.cancel(thread, reason="stop"), timeout=3)
            assert runtime.ledger.triggers[b.trigger_id].outcome == "cancelled"


async def test_a_cancel_before_a_dispatch_is_recorded_never_calls_the_trigger_completed() -> None:
    """An earlier run completed and a later one was cancelled; a new input is cancelled
    while its dispatch reads the thread's head: the earlier completion is not its own."""

    async def node(state: Any) -> list[Any]:
        if state.context[-1].text() == "x":
            await asyncio.Event().wait()  # until cancelled
        return said(state)

    store = MemoryEventStore()
    async with store, runtime_on(store, node) as runtime:
        await runtime.trigger_and_wait("api", "a", thread_id="t", timeout=WAIT)
        await runtime.submit("api", "x", thread_id="t")
        await until(lambda: _running(runtime), what="x to run")
        await runtime.cancel("t")
        original, gate, hit = store.last_seq, asyncio.Event(), asyncio.Event()
        armed = [True]

        async def last_seq(thread_id: str, *args: Any, **kwargs: Any) -> int:
            if thread_id == "t" and armed[0]:  # the dispatcher reading the head for b
                armed[0] = False
                hit.set()
                await gate.wait()
            return await original(thread_id, *args, **kwargs)

        store.last_seq = last_seq  # type: ignore[method-assign]
        b = await runtime.submit("api", "b", thread_id="t")
        await hit.wait()
        cancelling = asyncio.ensure_future(runtime.cancel("t", reason="never mind"))
        await wait_all_tasks_blocked()
        gate.set()
        await cancelling
        ends = [
            r.event.outcome
            for r in await _runtime_records(store)
            if r.kind == "trigger_finished" and r.event.trigger_id == b.trigger_id
        ]
        assert ends == ["cancelled"]


async def test_a_cancel_the_store_failed_to_record_puts_the_queued_input_back() -> None:
    from agentlog.events.errors import StoreError
    from agentlog.events.kinds import TriggerFinished

    class FailsOneCancel(MemoryEventStore):
        armed = False

        async def append(self, thread_id: str, events: Any, **kw: Any) -> Any:
            cancels = [e for e in events if isinstance(e, TriggerFinished)]
            if self.armed and thread_id == "__runtime__" and cancels[:1]:
                self.armed = cancels[0].outcome != "cancelled"
                if not self.armed:
                    raise StoreError("the connection was lost (once)")
            return await super().append(thread_id, events, **kw)

    release = asyncio.Event()

    async def node(state: Any) -> list[Any]:
        if state.context[-1].text() == "a":
            await release.wait()  # a runs until the failed cancel is over
        return said(state)

    store = FailsOneCancel()
    async with store, runtime_on(store, node) as runtime:
        await runtime.submit("api", "a", thread_id="t")
        b = await runtime.submit("api", "b", thread_id="t", multitask_strategy="enqueue")
        await until(lambda: _running(runtime), what="a to run")
        store.armed = True
        with pytest.raises(StoreError):
            await runtime.cancel("t")
        release.set()
        c = await runtime.submit("api", "c", thread_id="t", multitask_strategy="enqueue")
        assert (await runtime.wait_for(b.trigger_id, timeout=WAIT))["status"] == "completed"
        assert (await runtime.wait_for(c.trigger_id, timeout=WAIT))["status"] == "completed"


async def test_a_run_returning_while_its_cancel_commits_is_not_called_completed_twice() -> None:
    from agentlog.events.kinds import TriggerFinished

    for _ in range(5):
        gate = asyncio.Event()

        async def node(state: Any, gate: asyncio.Event = gate) -> list[Any]:
            await gate.wait()
            return said(state)

        store = HeldStore()
        async with store, runtime_on(store, node) as runtime:
            a = await runtime.submit("api", "one", thread_id="t")
            await until(lambda: _running(runtime), what="the run to run")
            await wait_all_tasks_blocked()
            store.hold(
                lambda events: any(
                    isinstance(e, TriggerFinished) and e.outcome == "cancelled" for e in events
                )
            )
            cancelling = asyncio.ensure_future(runtime.cancel("t"))
            await asyncio.wait_for(store.held.wait(), 5)
            gate.set()  # the run returns while the cancel's end commits
            await wait_all_tasks_blocked()
            store.go.set()
            await cancelling
            ends = [
                r.event.outcome
                for r in await _runtime_records(store)
                if r.kind == "trigger_finished" and r.event.trigger_id == a.trigger_id
            ]
            assert len(ends) == 1, ends  # one end: it was cut short before it returned
            kinds = [r.kind async for r in store.read("t")]
            assert kinds.count("run_cancelled") + kinds.count("run_completed") == 1, kinds


class _HeadReadHeld(MemoryEventStore):
    """Holds the dispatcher's next read of thread "t"'s head (a dispatch about to be made)."""

    armed = False

    def arm(self) -> None:
        self.armed, self.go, self.held = True, asyncio.Event(), asyncio.Event()

    async def last_seq(self, thread_id: str, *args: Any, **kwargs: Any) -> int:
        import sys

        if self.armed and thread_id == "t" and sys._getframe(1).f_code.co_name == "_run_trigger":
            self.armed = False
            self.held.set()
            await self.go.wait()
        return await super().last_seq(thread_id, *args, **kwargs)


@pytest.mark.parametrize("paused", [False, True], ids=["after-a-completed-run", "on-a-paused-run"])
async def test_a_rollback_of_a_run_not_yet_dispatched_sets_nothing_back(paused: bool) -> None:
    from agentlog.actors import Command, interrupt
    from agentlog.projections import Message

    def node(state: Any) -> list[Any]:
        text = state.context[-1].text()
        if text == "ask":
            return [Message.text_message(f"answer {interrupt('q?')}", role="assistant")]
        return said(state)

    store = _HeadReadHeld()
    async with store, runtime_on(store, node) as runtime:
        first, second = ("ask", Command(resume="yes")) if paused else ("hello", "second")
        a = await runtime.submit("api", first, thread_id="t")
        await runtime.wait_for(a.trigger_id, timeout=WAIT)
        app = runtime.graphs["g"].app
        before = [m.text() for m in (await app.aget_state({"thread_id": "t"})).context]
        store.arm()
        b = await runtime.submit("api", second, thread_id="t", multitask_strategy="enqueue")
        await asyncio.wait_for(store.held.wait(), 5)  # b runs: reading the head to dispatch
        newer = asyncio.ensure_future(
            runtime.submit("api", "new", thread_id="t", multitask_strategy="rollback")
        )
        await wait_all_tasks_blocked()
        store.go.set()
        c = await newer
        await runtime.wait_for(c.trigger_id, timeout=WAIT)
        after = [m.text() for m in (await app.aget_state({"thread_id": "t"})).context]
        assert after == [*before, "new", "ok new"]  # b wrote nothing; nothing was set back
        assert runtime.ledger.triggers[b.trigger_id].outcome == "cancelled"


def _running(runtime: AgentRuntime, thread_id: str = "t") -> bool:
    execution = runtime.dispatcher.executing.get(thread_id)
    return execution is not None and execution.running


@pytest.mark.parametrize("second", ["cancel", "rollback"])
@pytest.mark.parametrize("first", ["cancel", "rollback"])
async def test_two_ends_landing_at_once_on_one_thread_record_one_end(
    first: str, second: str
) -> None:
    """Two cancels (or a cancel and a rollback) of the running run, sent at once: its
    trigger ends once, and the thread records one `run_cancelled` (each used to record
    its own end of the same trigger)."""
    from agentlog.events.kinds import TriggerFinished

    gate, reached = asyncio.Event(), asyncio.Event()

    async def node(state: Any) -> list[Any]:
        if state.context[-1].text() == "one":
            reached.set()
            await gate.wait()
        return said(state)

    store = MemoryEventStore()
    async with store, runtime_on(store, node) as runtime:
        a = await runtime.submit("api", "one", thread_id="t")
        # in its node: its start is in the log (`running` is set before the run writes)
        await asyncio.wait_for(reached.wait(), WAIT)

        def end(how: str) -> Any:
            if how == "cancel":
                return runtime.cancel("t", reason="stop it")
            return runtime.submit("api", "instead", thread_id="t", multitask_strategy="rollback")

        outcomes = await asyncio.gather(end(first), end(second), return_exceptions=True)
        for outcome in outcomes:  # a cancel coming second finds nothing left to cancel
            assert not isinstance(outcome, BaseException) or isinstance(outcome, UnknownRunError), (
                outcome
            )
        gate.set()
        for accepted in outcomes:
            if isinstance(accepted, TriggerAccepted) and accepted.trigger_id != a.trigger_id:
                with contextlib.suppress(Exception):
                    await runtime.wait_for(accepted.trigger_id, timeout=WAIT)
        ends = [
            r.event
            for r in await _runtime_records(store)
            if isinstance(r.event, TriggerFinished) and r.event.trigger_id == a.trigger_id
        ]
        assert [e.outcome for e in ends] == ["cancelled"], ends
        kinds = [r.kind async for r in store.read("t")]
        assert kinds.count("run_cancelled") == 1, kinds


class _RunStartHeld(MemoryEventStore):
    """Holds the next append to thread "t" with a `kind` event (a run's start), until `go`."""

    def __init__(self, kind: type[Any] | None = None) -> None:
        from agentlog.events import RunStarted

        super().__init__()
        self.kind = kind or RunStarted
        self.armed = False
        self.held, self.go = asyncio.Event(), asyncio.Event()

    async def append(self, thread_id: str, events: Any, **kw: Any) -> Any:
        if self.armed and thread_id == "t" and any(isinstance(e, self.kind) for e in events):
            self.armed = False
            self.held.set()
            await self.go.wait()
        return await super().append(thread_id, events, **kw)


async def test_an_interrupt_or_a_stop_reaching_a_cancelled_thread_never_raises() -> None:
    """A run dispatched on a thread whose last run was cancelled, caught before it starts:
    an `interrupt` double-text and the runtime's stop ask it to stop. There is nothing to
    stop yet (the thread still reads cancelled): nothing is written, and neither call
    raises (both raised IllegalTransitionError, the stop leaving the runtime half-stopped,
    the double-text after its input was accepted)."""
    gate = asyncio.Event()

    async def node(state: Any) -> list[Any]:
        if state.context[-1].text() == "one":
            await gate.wait()
        return said(state)

    store = _RunStartHeld()
    async with store, runtime_on(store, node) as runtime:
        app = runtime.graphs["g"].app
        asked: asyncio.Queue[bool] = asyncio.Queue()
        astop = app.astop

        async def spied(*args: Any, **kwargs: Any) -> bool:
            stopped = await astop(*args, **kwargs)
            asked.put_nowait(stopped)
            return stopped

        app.astop = spied  # type: ignore[method-assign]
        await runtime.submit("api", "one", thread_id="t")
        await until(lambda: _running(runtime), what="the first run is running")
        await runtime.cancel("t")
        store.armed = True
        await runtime.submit("api", "two", thread_id="t")
        await asyncio.wait_for(store.held.wait(), WAIT)  # its run is about to start
        await runtime.submit("api", "three", thread_id="t", multitask_strategy="interrupt")
        assert await asyncio.wait_for(asked.get(), WAIT) is False
        stopping = asyncio.ensure_future(runtime.stop())
        assert await asyncio.wait_for(asked.get(), WAIT) is False
        store.go.set()
        await asyncio.wait_for(stopping, WAIT)
        kinds = [r.kind async for r in store.read("t")]
        assert "stop_requested" not in kinds[kinds.index("run_cancelled") :]


async def test_a_cancel_cutting_a_run_whose_completion_is_committing_records_one_end() -> None:
    """The cancel lands while the run's `run_completed` is being committed: the run is cut
    short first, its completion lands, and the trigger ends once, completed (it was called
    cancelled, then completed as a correction: two ends for one run)."""
    from agentlog.events import RunCompleted
    from agentlog.events.kinds import TriggerFinished

    store = _RunStartHeld(RunCompleted)
    async with store, runtime_on(store) as runtime:
        store.armed = True
        a = await runtime.submit("api", "one", thread_id="t")
        await asyncio.wait_for(store.held.wait(), WAIT)  # its completion is committing
        cancelling = asyncio.ensure_future(runtime.cancel("t", reason="too late"))
        await until(
            lambda: runtime.dispatcher.executing["t"].cancelled_by is not None, what="the cut"
        )
        store.go.set()
        with pytest.raises(UnknownRunError, match="completed"):
            await asyncio.wait_for(cancelling, WAIT)
        ends = [
            r.event
            for r in await _runtime_records(store)
            if isinstance(r.event, TriggerFinished) and r.event.trigger_id == a.trigger_id
        ]
        assert [e.outcome for e in ends] == ["completed"], ends
        kinds = [r.kind async for r in store.read("t")]
        assert kinds[-1] == "run_completed" and "run_cancelled" not in kinds, kinds
        assert (await runtime.wait("t", timeout=WAIT))["status"] == "completed"


async def test_recovery_never_takes_a_persons_edit_for_the_progress_of_a_run_cut_before_it_began(
    tmp_path: Path,
) -> None:
    """A trigger dispatched on a thread whose earlier run completed; the runtime dies before
    the run writes anything, and a person edits the thread meanwhile. The restart used to
    take the edit for the run's progress: it called the trigger completed (the thread read
    completed) and its input never ran. The run's opening names its trigger: the restart
    finds none, and runs it from its input."""
    from agentlog.actors.runtime import RuntimeConfig

    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as store:
        runtime = runtime_on(store)
        async with runtime:
            await runtime.trigger_and_wait("api", "one", thread_id="t", timeout=WAIT)
            app = runtime.graphs["g"].app
            began, never = asyncio.Event(), asyncio.Event()

            async def cut_before_it_writes(*args: Any, **kwargs: Any) -> Any:
                began.set()  # dispatched; the process dies before the run's first commit
                await never.wait()

            app.ainvoke_to = cut_before_it_writes  # type: ignore[method-assign]
            two = await runtime.submit("api", "two", thread_id="t")
            await asyncio.wait_for(began.wait(), WAIT)
            await runtime.stop(cancel=True)
        fresh = runtime_on(store).graphs["g"].app
        await fresh.aupdate_state({"thread_id": "t"}, {"messages": ["a note"]}, actor="alice")
        again = AgentRuntime(store, RuntimeConfig())
        again.add_graph("g", fresh)
        again.register_entry_point(EntryPoint(id="api", graph_id="g"))
        async with again:
            result = await again.wait_for(two.trigger_id, timeout=WAIT)
            assert result["status"] == "completed"
            texts = [m.text() for m in (await fresh.aget_state({"thread_id": "t"})).context]
            assert texts == ["one", "ok one", "a note", "two", "ok two"], texts


async def test_a_rollback_cutting_a_run_whose_completion_is_committing_records_one_end() -> None:
    """As for a cancel: the rollback cuts the run short first, the completion it was
    committing lands and stands, nothing is set back, and the trigger ends once (it was
    called cancelled, then completed as a correction)."""
    from agentlog.events import RunCompleted
    from agentlog.events.kinds import TriggerFinished

    store = _RunStartHeld(RunCompleted)
    async with store, runtime_on(store) as runtime:
        store.armed = True
        a = await runtime.submit("api", "one", thread_id="t")
        await asyncio.wait_for(store.held.wait(), WAIT)  # its completion is committing
        rolling = asyncio.ensure_future(
            runtime.submit("api", "instead", thread_id="t", multitask_strategy="rollback")
        )
        await until(
            lambda: runtime.dispatcher.executing["t"].cancelled_by is not None, what="the cut"
        )
        store.go.set()
        instead = await asyncio.wait_for(rolling, WAIT)
        assert (await runtime.wait_for(instead.trigger_id, timeout=WAIT))["status"] == "completed"
        ends = [
            r.event
            for r in await _runtime_records(store)
            if isinstance(r.event, TriggerFinished) and r.event.trigger_id == a.trigger_id
        ]
        assert [e.outcome for e in ends] == ["completed"], ends
        kinds = [r.kind async for r in store.read("t")]
        assert "run_superseded" not in kinds and "run_cancelled" not in kinds, kinds
        texts = await texts_of(runtime, "t")
        assert texts == ["one", "ok one", "instead", "ok instead"], texts
