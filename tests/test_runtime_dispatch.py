"""A trigger dispatched in the same commit as its acceptance, and what may happen while
that commit is under way: a graph removed, the same thread's earlier input still being
accepted, a stop, a crash right after it."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig
from agentlog.actors.testing import until, wait_all_tasks_blocked, wait_for_record
from agentlog.events import MemoryEventStore, SQLiteEventStore
from agentlog.events.errors import StoreUnavailableError
from agentlog.events.kinds import TriggerAccepted, TriggerFinished
from agentlog.projections import Message
from tests.helpers import line


class HeldStore(MemoryEventStore):
    """Holds back the next runtime-thread append that `match` picks until `go` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.match: Any = None
        self.go = asyncio.Event()
        self.held = asyncio.Event()

    def hold(self, match: Any) -> None:
        self.match, self.go, self.held = match, asyncio.Event(), asyncio.Event()

    async def append(self, thread_id: str, events: Any, **kw: Any) -> Any:
        if thread_id == "__runtime__" and self.match is not None and self.match(events):
            self.match = None
            go = self.go
            self.held.set()
            await go.wait()
        return await super().append(thread_id, events, **kw)


def acceptance(events: Any) -> bool:
    return any(isinstance(e, TriggerAccepted) for e in events)


def finish(events: Any) -> bool:
    return any(isinstance(e, TriggerFinished) for e in events)


def said(state: Any) -> list[Any]:
    return [Message.text_message(f"ok {state.context[-1].text()}", role="assistant")]


def runtime_on(store: Any, node: Any = said, **config: Any) -> AgentRuntime:
    runtime = AgentRuntime(store, RuntimeConfig(**config))
    runtime.add_graph("g", line(("work", node)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    return runtime


async def texts_of(runtime: AgentRuntime, thread: str) -> list[str]:
    state = await runtime.graphs["g"].app.aget_state({"thread_id": thread})
    return [m.text() for m in state.context]


async def test_a_graph_removed_while_an_acceptance_commits_leaves_the_run_waiting_for_it() -> None:
    """The run waits in the queue for its graph, as any queued run does, and holds no slot:
    once the graph is back both it and later runs complete."""
    store = HeldStore()
    async with store, runtime_on(store, max_concurrent_runs=1) as runtime:
        store.hold(acceptance)
        first = asyncio.ensure_future(runtime.submit("api", "one"))  # a new thread
        await store.held.wait()
        runtime.remove_graph("g")  # nothing executes or queues yet: allowed
        store.go.set()
        accepted = await first
        assert runtime.dispatcher.depth() == 1 and not runtime.dispatcher.executing
        runtime.add_graph("g", line(("work", said)).compile(store))  # its entry point too
        runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
        second = await runtime.trigger("api", "two", thread_id="t2")
        assert (await runtime.wait(second, timeout=60))["status"] == "completed"
        assert (await runtime.wait_for(accepted.trigger_id, timeout=60))["status"] == "completed"
        assert await texts_of(runtime, accepted.thread_id) == ["one", "ok one"]


async def test_a_thread_s_inputs_run_in_the_order_they_were_accepted() -> None:
    """B, sent while R ran, is still being accepted when R ends; C, sent after, must not
    start ahead of B by being dispatched with its own acceptance."""
    store = HeldStore()
    release = asyncio.Event()

    async def slow(state: Any) -> list[Any]:
        if state.context[-1].text() == "R":
            await release.wait()
        return said(state)

    async with store, runtime_on(store, slow) as runtime:
        await runtime.submit("api", "R", thread_id="t")
        await until(lambda: "t" in runtime.dispatcher.executing)
        store.hold(finish)  # R's end waits to commit
        release.set()
        await store.held.wait()
        r_end_go = store.go
        b = asyncio.ensure_future(runtime.submit("api", "B", thread_id="t"))  # t is busy
        await asyncio.sleep(0)
        store.hold(acceptance)  # B's acceptance waits to commit; R's end commits
        r_end_go.set()
        await store.held.wait()
        await until(lambda: "t" not in runtime.dispatcher.executing)
        c = asyncio.ensure_future(runtime.submit("api", "C", thread_id="t"))
        await wait_all_tasks_blocked()  # C queued behind B's held acceptance
        store.go.set()
        for accepted in (await b, await c):
            await runtime.wait_for(accepted.trigger_id, timeout=60)
        assert await texts_of(runtime, "t") == ["R", "ok R", "B", "ok B", "C", "ok C"]


@pytest.mark.parametrize("cancel", [False, True])
async def test_a_stop_while_an_acceptance_commits_leaves_the_run_to_the_next_runtime(
    cancel: bool,
) -> None:
    store = HeldStore()
    async with store:
        runtime = runtime_on(store)
        await runtime.start()
        store.hold(acceptance)
        submitted = asyncio.ensure_future(runtime.submit("api", "go"))  # a new thread
        await store.held.wait()
        stopping = asyncio.ensure_future(runtime.stop(cancel=cancel))
        await wait_all_tasks_blocked()  # the stop waits on the acceptance being committed
        store.go.set()
        accepted = await submitted
        await stopping
        assert not runtime.dispatcher.executing
        async with runtime_on(store) as restarted:
            await restarted.wait_for(accepted.trigger_id, timeout=60)
            assert await texts_of(restarted, accepted.thread_id) == ["go", "ok go"]


class NoRunCommits(MemoryEventStore):
    """Commits only the runtime's records, as a process dying before its run's first one
    would; once `dead`, every append fails (the runtime can then be stopped)."""

    def __init__(self) -> None:
        super().__init__()
        self.dead = asyncio.Event()

    async def append(self, thread_id: str, events: Any, **kw: Any) -> Any:
        if thread_id != "__runtime__" or self.dead.is_set():
            await self.dead.wait()
            raise StoreUnavailableError("the process is gone (test)")
        return await super().append(thread_id, events, **kw)


async def test_a_crash_right_after_the_combined_commit_runs_the_trigger_once_from_its_input() -> (
    None
):
    dying = NoRunCommits()
    async with dying:
        runtime = runtime_on(dying)
        await runtime.start()
        accepted = await runtime.submit("api", "go")  # a new thread
        await wait_for_record(dying, "__runtime__", "trigger_dispatched")
        records = [r async for r in dying.read("__runtime__")]
        assert [r.kind for r in records][-2:] == ["trigger_accepted", "trigger_dispatched"]
        dying.dead.set()
        with contextlib.suppress(StoreUnavailableError):
            await runtime.stop(cancel=True)
    after = MemoryEventStore()  # the log as the crash left it
    async with after:
        for r in records:
            await after.append("__runtime__", [r.event], actor=r.actor, expected_seq=r.seq - 1)
        async with runtime_on(after) as restarted:
            result = await restarted.wait_for(accepted.trigger_id, timeout=60)
            assert result["status"] == "completed"
            assert await texts_of(restarted, accepted.thread_id) == ["go", "ok go"]


async def test_inputs_sent_at_once_to_a_named_thread_are_logged_and_run_in_call_order(
    tmp_path: Path,
) -> None:
    """Eight inputs gathered on one named thread (on SQLite, whose reads yield to the loop):
    the log accepts them in the order they were sent, they run in that order, and `wait`
    on the thread returns after the last."""
    store = SQLiteEventStore(tmp_path / "order.db")
    async with store, runtime_on(store) as runtime:
        texts = [f"m{i}" for i in range(8)]
        await asyncio.gather(*(runtime.trigger("api", t, thread_id="same") for t in texts))
        result = await runtime.wait("same", timeout=60)
        thread = await texts_of(runtime, "same")
        records = [r async for r in store.read("__runtime__")]
    accepted = [r.event.input for r in records if r.kind == "trigger_accepted"]
    assert accepted == texts
    assert [m.text() for m in result["messages"]] == ["m7", "ok m7"]  # the last run's own
    assert thread == [x for t in texts for x in (t, f"ok {t}")]
