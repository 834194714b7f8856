"""The agent runtime on a real SQLite file: entry points, triggers, waiting, idempotency,
event and timer triggers, subscriptions, injected input, cancellation, retries, limits,
statistics, and a restart that carries on where the last runtime stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import Command
from agentlog.actors.engine.errors import NodeError
from agentlog.actors.runtime import (
    AgentRuntime,
    EntryPoint,
    RegistrationError,
    RetryPolicy,
    RunCancelledError,
    RunNotWaitingError,
    RuntimeConfig,
    RuntimeNotStartedError,
    RuntimeRunFailedError,
    UnknownEntryPointError,
    UnknownRunError,
)
from agentlog.actors.testing import FakeClock, until, until_idle, wait_for_record
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, ExecutionStatus, Message, replay
from tests.helpers import line


def reply(state: AgentState) -> list[Message]:
    return [Message.text_message(f"seen {len(state.context)}", role="assistant")]


def support_app(store: SQLiteEventStore) -> Any:
    graph = line(("agent", reply))
    graph.name = "support"
    return graph.compile(store)


class Gate:
    """An async node that waits until the test lets it go: a run held mid-way."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.running = 0
        self.most = 0

    async def __call__(self, state: AgentState) -> list[Message]:
        self.running += 1
        self.most = max(self.most, self.running)
        self.entered.set()
        try:
            await self.go.wait()
        finally:
            self.running -= 1
        return [Message.text_message("done", role="assistant")]


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with SQLiteEventStore(tmp_path / "runtime.db") as s:
        yield s


def runtime_with(store: Any, **entry: Any) -> AgentRuntime:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support_app(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support", **entry))
    return runtime


async def records_of(store: Any, thread: str) -> list[Any]:
    return [r async for r in store.read(thread)]


# ---- api triggers, waiting, idempotency -------------------------------------------------


async def test_a_trigger_returns_at_once_and_wait_gives_the_result(store: Any) -> None:
    async with runtime_with(store) as runtime:
        thread = await runtime.trigger("chat", {"messages": [Message.text_message("hi")]})
        result = await runtime.wait(thread, timeout=30)
    assert result["status"] == "completed"
    assert [m.text() for m in result["state"].context] == ["hi", "seen 1"]
    assert replay(await records_of(store, thread)).model_dump() == result["state"].model_dump()
    kinds = [r.kind for r in await records_of(store, "__runtime__")]
    assert kinds == ["trigger_accepted", "trigger_dispatched", "trigger_finished"]


async def test_an_idempotency_key_starts_nothing_the_second_time_even_after_a_restart(
    store: Any,
) -> None:
    async with runtime_with(store) as runtime:
        first = await runtime.trigger("chat", "hi", idempotency_key="req-17")
        again = await runtime.trigger("chat", "hi", idempotency_key="req-17")
        await runtime.wait(first, timeout=30)
    assert again == first
    async with runtime_with(store) as runtime:
        after = await runtime.trigger("chat", "hi", idempotency_key="req-17")
    assert after == first
    accepted = [r for r in await records_of(store, "__runtime__") if r.kind == "trigger_accepted"]
    assert len(accepted) == 1
    assert [m.text() for m in replay(await records_of(store, first)).context] == ["hi", "seen 1"]


async def test_trigger_and_wait(store: Any) -> None:
    async with runtime_with(store) as runtime:
        result = await runtime.trigger_and_wait("chat", "hello", timeout=30)
    assert result["status"] == "completed"


# ---- refusals: typed, nothing written ----------------------------------------------------


async def test_bad_registrations_are_refused_with_what_to_do(store: Any, tmp_path: Path) -> None:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support_app(store))
    bad = [
        (EntryPoint(id="x", graph_id="nope"), "no graph 'nope' is registered"),
        (EntryPoint(id="x", graph_id="support", entry_node="ghost"), "'ghost' is not a node"),
        (EntryPoint(id="x", graph_id="support", trigger="timer", cron="every day"), "not a cron"),
        (EntryPoint(id="x", graph_id="support", trigger="timer"), "exactly one of interval_s"),
        (EntryPoint(id="x", graph_id="support", trigger="timer", interval_s=-1), "interval_s"),
        (
            EntryPoint(id="x", graph_id="support", trigger="event", kinds=["nope"]),
            "not an event kind",
        ),
        (EntryPoint(id="x", graph_id="support", kinds=["run_failed"]), "belong to trigger='event'"),
        (
            EntryPoint(id="x", graph_id="support", trigger="event", from_graph="support"),
            "listens to its own graph",
        ),
        (EntryPoint(id="", graph_id="support"), "non-empty id"),
        (EntryPoint(id="x", graph_id="support", trigger="sms"), "trigger must be one of"),  # type: ignore[arg-type]
        (EntryPoint(id="x", graph_id="support", max_concurrent=0), "max_concurrent"),
    ]
    for entry, words in bad:
        with pytest.raises(RegistrationError, match=words):
            runtime.register_entry_point(entry)
    assert runtime.entry_points() == []
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    with pytest.raises(RegistrationError, match="registered already"):
        runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    with pytest.raises(RegistrationError, match="registered already"):
        runtime.add_graph("support", support_app(store))
    async with SQLiteEventStore(tmp_path / "other.db") as other:
        with pytest.raises(RegistrationError, match="compiled on another store"):
            runtime.add_graph("elsewhere", support_app(other))
    with pytest.raises(RegistrationError, match="max_concurrent_runs"):
        RuntimeConfig(max_concurrent_runs=0)
    with pytest.raises(RegistrationError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    assert await store.threads() == []


async def test_calls_on_a_runtime_that_is_not_running_are_refused(store: Any) -> None:
    runtime = runtime_with(store)
    with pytest.raises(RuntimeNotStartedError, match="async with runtime"):
        await runtime.trigger("chat", "hi")
    async with runtime:
        with pytest.raises(UnknownEntryPointError, match="no entry point 'nope'"):
            await runtime.trigger("nope", "hi")
        with pytest.raises(UnknownRunError):
            await runtime.wait("ghost")
        with pytest.raises(UnknownRunError):
            await runtime.cancel("ghost")
        with pytest.raises(RegistrationError, match="runtime's own thread"):
            await runtime.trigger("chat", "hi", thread_id="__runtime__")
    assert await store.threads() == []


async def test_a_second_runtime_on_the_same_store_is_refused(store: Any) -> None:
    async with runtime_with(store):
        with pytest.raises(Exception, match="one runtime per store"):
            await runtime_with(store).start()


# ---- limits and order ----------------------------------------------------------------------


async def test_at_most_max_concurrent_runs_execute_and_the_rest_queue_by_priority(
    store: Any,
) -> None:
    gate = Gate()
    graph = line(("agent", gate))
    runtime = AgentRuntime(store, RuntimeConfig(max_concurrent_runs=2))
    runtime.add_graph("g", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="low", graph_id="g"))
    runtime.register_entry_point(EntryPoint(id="high", graph_id="g", priority=5))
    async with runtime:
        threads = [await runtime.trigger("low", f"l{i}") for i in range(4)]
        urgent = await runtime.trigger("high", "urgent")
        await gate.entered.wait()
        await until(lambda: gate.running == 2 and runtime.stats()["queued"] == 3)
        assert runtime.stats()["executing"] == 2
        order: list[str] = []
        gate.go.set()
        for thread in [*threads, urgent]:
            await runtime.wait(thread, timeout=30)
        dispatched = [
            r.event.trigger_id
            for r in await records_of(store, "__runtime__")
            if r.kind == "trigger_dispatched"
        ]
        ids = {runtime.ledger.triggers[t].accepted.thread_id: t for t in dispatched}
        order = [ids and next(k for k, v in ids.items() if v == t) for t in dispatched]
    assert gate.most == 2
    assert order.index(urgent) == 2  # first of the queued, ahead of earlier low triggers


async def test_a_trigger_for_a_busy_thread_waits_for_the_run_before_it(store: Any) -> None:
    gate = Gate()
    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("agent", gate)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with runtime:
        await runtime.trigger("api", "one", thread_id="t")
        await gate.entered.wait()
        await runtime.trigger("api", "two", thread_id="t")
        await until(lambda: runtime.stats()["queued"] == 1)
        assert gate.running == 1
        gate.go.set()
        await runtime.wait("t", timeout=30)
    assert gate.most == 1
    texts = [m.text() for m in replay(await records_of(store, "t")).context]
    assert texts == ["one", "done", "two", "done"]


async def test_max_concurrent_per_entry_point(store: Any) -> None:
    gate = Gate()
    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("agent", gate)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g", max_concurrent=1))
    async with runtime:
        threads = [await runtime.trigger("api", str(i)) for i in range(3)]
        await gate.entered.wait()
        await until(lambda: runtime.stats()["queue_depth"] == {"api": 2})
        gate.go.set()
        for thread in threads:
            await runtime.wait(thread, timeout=30)
    assert gate.most == 1


# ---- failures and retries ------------------------------------------------------------------


async def test_a_failed_run_is_retried_from_the_log_and_each_attempt_recorded(
    store: Any,
) -> None:
    calls: list[int] = []

    def flaky(state: AgentState) -> list[Message]:
        calls.append(len(state.context))
        if len(calls) < 3:
            raise ConnectionError(f"try {len(calls)}")
        return [Message.text_message("finally", role="assistant")]

    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("agent", flaky)).compile(store))
    runtime.register_entry_point(
        EntryPoint(id="api", graph_id="g", retry=RetryPolicy(max_attempts=3, backoff_s=0))
    )
    async with runtime:
        result = await runtime.trigger_and_wait("api", "go", timeout=30)
    assert result["status"] == "completed"
    assert calls == [1, 1, 1]  # the input was recorded once; each retry re-ran the node only
    finished = [
        r.event for r in await records_of(store, "__runtime__") if r.kind == "trigger_finished"
    ]
    assert [(f.outcome, f.attempt) for f in finished] == [
        ("failed", 1),
        ("failed", 2),
        ("completed", 3),
    ]


async def test_a_fatal_error_is_not_retried_and_wait_raises_it(store: Any) -> None:
    def broken(state: AgentState) -> None:
        raise KeyError("no such order")

    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("agent", broken)).compile(store))
    runtime.register_entry_point(
        EntryPoint(id="api", graph_id="g", retry=RetryPolicy(3, 0, fatal=(KeyError,)))
    )
    async with runtime:
        thread = await runtime.trigger("api", "go")
        with pytest.raises(NodeError, match="no such order"):
            await runtime.wait(thread, timeout=30)
    async with AgentRuntime(store) as later:  # after a restart: the error from the log
        later.add_graph("g", line(("agent", broken)).compile(store))
        with pytest.raises(RuntimeRunFailedError, match=r"KeyError|NodeError"):
            await later.wait(thread)
    finished = [
        r.event for r in await records_of(store, "__runtime__") if r.kind == "trigger_finished"
    ]
    assert [(f.outcome, f.attempt) for f in finished] == [("failed", 1)]


async def test_wait_after_a_restart_gives_the_same_keys_and_messages_as_live(store: Any) -> None:
    """A run an earlier process ran reads back from the log in the shape `wait` gave live:
    the same keys, this run's own messages (not the next run's), its pause."""
    graph = line(("draft", reply), ("send", reply))

    def runtime_on() -> AgentRuntime:
        runtime = AgentRuntime(store)
        runtime.add_graph("g", graph.compile(store, interrupt_before=["send"]))
        runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
        return runtime

    async with runtime_on() as runtime:
        thread = await runtime.trigger("api", "write to Bo")
        paused = await runtime.wait(thread, timeout=30)
        first_id = runtime.ledger.latest_on(thread).id  # type: ignore[union-attr]
        await runtime.inject_input(thread, None, actor="alice")
        done = await runtime.wait(thread, timeout=30)
    async with runtime_on() as later:
        again = await later.wait(thread, timeout=30)
        first_again = await later.wait_for(first_id, timeout=30)
    for live, read in ((done, again), (paused, first_again)):
        assert set(read) == set(live)
        assert [m.text() for m in read["messages"]] == [m.text() for m in live["messages"]]
        assert read["token_usage"] == live["token_usage"]
    assert [m.text() for m in first_again["messages"]] == ["write to Bo", "seen 1"]
    assert first_again["__interrupt__"] == paused["__interrupt__"]
    assert first_again["status"] == paused["status"] == "interrupted_before"  # as it left it
    assert first_again["state"].model_dump() == paused["state"].model_dump()
    assert again["status"] == done["status"] == "completed"
    assert again["state"].model_dump() == done["state"].model_dump()


async def test_results_read_back_keep_each_run_to_its_own_records(store: Any) -> None:
    """Runs of one thread that ran out of arrival order (a higher priority first), and an
    edit after them: each run read back after a restart is what `wait` gave live."""
    hold = asyncio.Event()

    async def agent(state: AgentState) -> list[Message]:
        if state.context[-1].text() == "hold":
            await hold.wait()
        return [Message.text_message(f"seen {len(state.context)}", role="assistant")]

    app = line(("agent", agent)).compile(store)

    def runtime_on() -> AgentRuntime:
        runtime = AgentRuntime(store)
        runtime.add_graph("g", app)
        runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
        return runtime

    def shown(result: dict[str, Any]) -> tuple[Any, ...]:
        state = result["state"]
        return result["status"], [m.text() for m in result["messages"]], state.model_dump()

    async with runtime_on() as runtime:
        first = await runtime.submit("api", "hold")
        thread = first.thread_id
        await until(lambda: thread in runtime.dispatcher.executing)
        low = await runtime.submit("api", "low", thread_id=thread, priority=0)
        high = await runtime.submit("api", "high", thread_id=thread, priority=5)
        hold.set()
        live = {t.trigger_id: await runtime.wait_for(t.trigger_id, timeout=30)
                for t in (first, low, high)}  # fmt: skip
        edit = {"messages": [Message.text_message("edited later", role="user")]}
        await app.aupdate_state({"thread_id": thread}, edit, actor="bo")
    assert [m.text() for m in live[low.trigger_id]["messages"]] == ["low", "seen 5"]
    async with runtime_on() as later:
        for trigger_id, result in live.items():
            assert shown(await later.wait_for(trigger_id, timeout=30)) == shown(result)


# ---- input and cancellation ------------------------------------------------------------------


async def test_inject_input_answers_a_paused_run_and_is_refused_otherwise(store: Any) -> None:
    graph = line(("draft", reply), ("send", reply))
    runtime = AgentRuntime(store)
    runtime.add_graph("g", graph.compile(store, interrupt_before=["send"]))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with runtime:
        thread = await runtime.trigger("api", "write to Bo")
        paused = await runtime.wait(thread, timeout=30)
        assert paused["status"] == "interrupted_before"
        await runtime.inject_input(thread, None, actor="alice")
        done = await runtime.wait(thread, timeout=30)
        assert done["status"] == "completed"
        with pytest.raises(RunNotWaitingError, match="not paused at an interrupt"):
            await runtime.inject_input(thread, "again", actor="alice")
        with pytest.raises(UnknownRunError, match="'send' is a node; inject_input takes the"):
            await runtime.inject_input("send", "hive's way: a node id")
    resumed = [r for r in await records_of(store, thread) if r.kind == "resumed"]
    assert resumed[0].event.value is None and resumed[0].event.by == "alice"  # approved


async def test_cancel_ends_a_running_run_records_who_and_why_and_never_retries(
    store: Any,
) -> None:
    gate = Gate()
    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("agent", gate)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g", retry=RetryPolicy(5, 0)))
    async with runtime:
        thread = await runtime.trigger("api", "refund")
        await gate.entered.wait()
        await runtime.cancel(thread, actor="alice", reason="duplicate ticket")
        with pytest.raises(RunCancelledError, match="alice: duplicate ticket"):
            await runtime.wait(thread, timeout=30)
        assert runtime.stats()["graphs"]["g"]["cancelled"] == 1
        gate.go.set()
        again = await runtime.trigger_and_wait("api", "new question", thread_id=thread, timeout=30)
    assert again["status"] == "completed"
    records = await records_of(store, thread)
    cancelled = [r.event for r in records if r.kind == "run_cancelled"]
    assert [(c.by, c.reason) for c in cancelled] == [("alice", "duplicate ticket")]
    dispatched = [
        r for r in await records_of(store, "__runtime__") if r.kind == "trigger_dispatched"
    ]
    assert len(dispatched) == 2  # the cancelled run was not retried


async def test_cancel_a_queued_run_and_a_paused_one(store: Any) -> None:
    graph = line(("draft", reply), ("send", reply))
    runtime = AgentRuntime(store)
    runtime.add_graph("g", graph.compile(store, interrupt_before=["send"]))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with runtime:
        thread = await runtime.trigger("api", "write")
        await runtime.wait(thread, timeout=30)
        await runtime.cancel(thread, actor="bo", reason="changed my mind")
        state = replay(await records_of(store, thread))
        assert state.execution_meta.status == ExecutionStatus.CANCELLED
        with pytest.raises(UnknownRunError, match="nothing to cancel"):
            await runtime.cancel(thread, actor="bo")


# ---- event triggers --------------------------------------------------------------------------


async def test_an_event_trigger_fires_once_per_record_and_never_on_its_own_graph(
    store: Any,
) -> None:
    def fails(state: AgentState) -> None:
        raise RuntimeError("the payment service is down")

    support = line(("agent", fails))
    support.name = "support"
    reviewer = line(("review", reply))
    reviewer.name = "reviewer"
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support.compile(store))
    runtime.add_graph("reviewer", reviewer.compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    runtime.register_entry_point(
        EntryPoint(
            id="triage",
            graph_id="reviewer",
            trigger="event",
            kinds=["run_failed"],
            from_graph="support",
        )
    )
    async with runtime:
        thread = await runtime.trigger("chat", "help")
        with pytest.raises(NodeError):
            await runtime.wait(thread, timeout=30)
        await until(lambda: runtime.stats()["entry_points"]["triage"]["completed"])
    accepted = [
        r.event for r in await records_of(store, "__runtime__") if r.kind == "trigger_accepted"
    ]
    triage = [a for a in accepted if a.entry_point == "triage"]
    assert len(triage) == 1 and triage[0].cause == "event"
    failed_at = [r.position for r in await records_of(store, thread) if r.kind == "run_failed"]
    assert triage[0].source_position == failed_at[0]
    review = replay(await records_of(store, triage[0].thread_id))
    assert (
        "run_failed" in review.context[0].text() and "payment service" in review.context[0].text()
    )
    async with runtime_again(store, support, reviewer) as later:  # a restart repeats nothing
        await until_idle(later)
        assert later.stats()["entry_points"]["triage"]["queued"] == 0
    again = [r for r in await records_of(store, "__runtime__") if r.kind == "trigger_accepted"]
    assert len(again) == len(accepted)


def runtime_again(store: Any, support: Any, reviewer: Any) -> AgentRuntime:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support.compile(store))
    runtime.add_graph("reviewer", reviewer.compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    runtime.register_entry_point(
        EntryPoint(
            id="triage",
            graph_id="reviewer",
            trigger="event",
            kinds=["run_failed"],
            from_graph="support",
        )
    )
    return runtime


# ---- timers ------------------------------------------------------------------------------------


def timer_runtime(store: Any, clock: FakeClock, **entry: Any) -> AgentRuntime:
    runtime = AgentRuntime(store, clock=clock)
    runtime.add_graph("report", line(("agent", reply)).compile(store))
    runtime.register_entry_point(
        EntryPoint(id="nightly", graph_id="report", trigger="timer", **entry)
    )
    return runtime


async def slots(store: Any) -> list[tuple[float, int]]:
    return [
        (r.event.slot, r.event.missed)
        for r in await records_of(store, "__runtime__")
        if r.kind == "trigger_accepted"
    ]


async def test_interval_slots_fire_once_and_missed_ones_coalesce_after_a_restart(
    store: Any,
) -> None:
    clock = FakeClock(1_700_000_000.0)  # on the 30 s grid + 20 s
    async with timer_runtime(store, clock, interval_s=30) as runtime:
        assert await runtime.listeners.fire_due() == 0
        assert runtime.next_fire("nightly") == 1_700_000_010.0
        clock.advance(10)
        assert await runtime.listeners.fire_due() == 1
        assert await runtime.listeners.fire_due() == 0  # the same slot never twice
        runtime.pause_timers()
        assert runtime.next_fire("nightly") is None
        clock.advance(30)
        assert await runtime.listeners.fire_due() == 0
        runtime.resume_timers()
        assert await runtime.listeners.fire_due() == 1
    clock.advance(95)  # three slots pass with no runtime
    async with timer_runtime(store, clock, interval_s=30) as runtime:
        await runtime.listeners.fire_due()
    assert await slots(store) == [(1_700_000_010.0, 0), (1_700_000_040.0, 0), (1_700_000_130.0, 2)]


async def test_run_immediately_fires_the_current_slot_once_at_start(store: Any) -> None:
    clock = FakeClock(1_700_000_000.0)
    async with timer_runtime(store, clock, cron="0 2 * * *", run_immediately=True) as runtime:
        assert runtime.next_fire("nightly") == 1_700_013_600.0  # 2023-11-15 02:00 UTC
    async with timer_runtime(store, clock, cron="0 2 * * *", run_immediately=True):
        pass
    assert await slots(store) == [(1_699_927_200.0, 0)]


async def test_real_timers_fire_on_a_short_interval(store: Any) -> None:
    runtime = AgentRuntime(store)
    runtime.add_graph("report", line(("agent", reply)).compile(store))
    runtime.register_entry_point(
        EntryPoint(id="tick", graph_id="report", trigger="timer", interval_s=0.2)
    )
    async with runtime:
        await until(lambda: runtime.stats()["entry_points"]["tick"]["completed"] >= 2)
        assert runtime.stats()["entry_points"]["tick"]["completed"] >= 2


# ---- subscriptions ---------------------------------------------------------------------------


async def test_subscribe_is_a_live_filtered_feed_resumable_from_a_position(store: Any) -> None:
    async with runtime_with(store) as runtime:
        seen: list[Any] = []

        feed = runtime.subscribe(kinds=["message_appended"], graph_id="support")

        async def watch() -> None:  # the feed starts at this call's head, read later or not
            async for record in feed:
                seen.append(record)
                if len(seen) == 4:
                    return

        watcher = asyncio.ensure_future(watch())
        for text in ("one", "two"):
            await runtime.trigger_and_wait("chat", text, timeout=30)
        await asyncio.wait_for(watcher, 30)
        assert [r.event.message["content"][0]["text"] for r in seen] == [
            "one", "seen 1", "two", "seen 1",
        ]  # fmt: skip
        later = runtime.subscribe(kinds=["message_appended"], after=seen[1].position)
        first = await anext(later)
        await later.aclose()
        assert first.position == seen[2].position
        stats = runtime.stats()
    assert stats["graphs"]["support"]["completed"] == 2
    assert stats["commit_latency_ms"]["p50"] is not None


# ---- stopping and restarting ---------------------------------------------------------------


async def test_stop_pauses_running_runs_and_the_next_runtime_finishes_them(store: Any) -> None:
    entered, release, steps = asyncio.Event(), asyncio.Event(), []

    async def slow(state: AgentState) -> list[Message]:
        steps.append("slow")
        if len(steps) == 1:  # the first runtime's run is held here until the stop is asked
            entered.set()
            await release.wait()
        return [Message.text_message("slow done", role="assistant")]

    graph = line(("a", slow), ("b", reply))
    runtime = AgentRuntime(store)
    runtime.add_graph("g", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    await runtime.start()
    thread = await runtime.trigger("api", "go")
    await entered.wait()
    stopping = asyncio.ensure_future(runtime.stop())  # the running step commits, then pauses
    await wait_for_record(store, thread, "stop_requested")
    release.set()
    await stopping
    assert (await records_of(store, thread))[-1].kind == "stopped"
    assert runtime.ledger.latest_on(thread) is not None
    later = AgentRuntime(store)
    later.add_graph("g", graph.compile(store))
    later.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with later:
        result = await later.wait(thread, timeout=30)
    assert result["status"] == "completed"
    assert [m.text() for m in result["state"].context] == ["go", "slow done", "seen 2"]
    assert (await store.verify(thread)).ok


async def test_commands_resume_through_the_runtime_input(store: Any) -> None:
    graph = line(("draft", reply), ("send", reply))
    runtime = AgentRuntime(store)
    runtime.add_graph("g", graph.compile(store, interrupt_before=["send"]))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with runtime:
        thread = await runtime.trigger("api", "x")
        await runtime.wait(thread, timeout=30)
        await runtime.trigger("api", Command(resume=None), thread_id=thread)
        assert (await runtime.wait(thread, timeout=30))["status"] == "completed"


async def test_an_input_no_run_takes_is_refused_before_anything_is_written(store: Any) -> None:
    from agentlog.actors import GraphError
    from agentlog.actors.runtime import InvalidTriggerInputError

    async with runtime_with(store) as runtime:
        with pytest.raises(GraphError, match="input must be a message"):
            await runtime.trigger("chat", 42)
        with pytest.raises(InvalidTriggerInputError, match="cannot be"):
            await runtime.trigger("chat", {"notes": object()})
        with pytest.raises(RegistrationError, match="update and goto are for nodes"):
            await runtime.trigger("chat", Command(goto="agent"))
        with pytest.raises(RegistrationError, match="idempotency_key"):
            await runtime.trigger("chat", "hi", idempotency_key="")
    assert await store.last_seq("__runtime__") == 0


async def test_concurrent_triggers_with_one_key_record_one_run(store: Any) -> None:
    async with runtime_with(store) as runtime:
        threads = await asyncio.gather(
            *(runtime.trigger("chat", "hi", idempotency_key="same") for i in range(5))
        )
        await runtime.wait(threads[0], timeout=30)
    assert len(set(threads)) == 1
    accepted = [r for r in await records_of(store, "__runtime__") if r.kind == "trigger_accepted"]
    assert len(accepted) == 1


def test_a_duplicate_acceptance_in_an_old_log_never_runs() -> None:
    from agentlog.actors.runtime.ledger import Ledger
    from agentlog.events import EventRecord
    from agentlog.events.kinds import TriggerAccepted

    ledger = Ledger()
    for seq, trigger in enumerate(["first", "second"], start=1):
        event = TriggerAccepted(
            trigger_id=trigger, entry_point="chat", graph_id="support", thread_id=trigger,
            cause="api", idempotency_key="k",
        )  # fmt: skip
        ledger.apply(
            EventRecord(
                thread_id="__runtime__", seq=seq, position=seq, run_id=None, actor="api",
                at=0.0, kind="trigger_accepted", version=1, event=event, hash="",
            )
        )  # fmt: skip
    assert ledger.keys[("chat", None, "k")] == "first"
    assert [t.id for t in ledger.pending()] == ["first"]


async def test_stop_then_start_on_one_object_runs_each_trigger_once(store: Any) -> None:
    gate = Gate()
    runtime = AgentRuntime(store, RuntimeConfig(max_concurrent_runs=1))
    runtime.add_graph("g", line(("agent", gate)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    await runtime.start()
    first = await runtime.trigger("api", "one")
    second = await runtime.trigger("api", "two")  # queued behind the first
    await gate.entered.wait()
    gate.go.set()
    await runtime.stop()
    await runtime.start()
    for thread in (first, second):
        await runtime.wait(thread, timeout=30)
    await runtime.stop()
    for thread, text in ((first, "one"), (second, "two")):
        assert [m.text() for m in replay(await records_of(store, thread)).context] == [text, "done"]


async def test_a_thread_takes_runs_of_its_own_graph_only(store: Any) -> None:
    runtime = runtime_with(store)
    runtime.add_graph("other", line(("agent", reply)).compile(store))
    runtime.register_entry_point(EntryPoint(id="other", graph_id="other"))
    async with runtime:
        await runtime.trigger_and_wait("chat", "hi", thread_id="t", timeout=30)
        with pytest.raises(RegistrationError, match="runs graph 'support'"):
            await runtime.trigger("other", "hi", thread_id="t")
        with pytest.raises(RunNotWaitingError, match="a resume answers a paused"):
            await runtime.trigger("chat", Command(resume="yes"), thread_id="t")


def test_interval_slots_survive_float_rounding() -> None:
    from agentlog.actors.runtime import Schedule

    schedule = Schedule(interval_s=3.3)
    slot = schedule.slot_at_or_before(1_700_000_000.0)
    for _ in range(1000):
        following = schedule.next_after(slot)
        assert following > slot
        assert schedule.due(slot, following + 0.01) == (following, 0)
        slot = following


async def test_double_texting_reject_writes_nothing_and_interrupt_continues_the_thread(
    store: Any,
) -> None:
    from agentlog.actors.runtime import ThreadBusyRunError

    gate = Gate()
    graph = line(("slow", gate), ("after", reply))
    runtime = AgentRuntime(store)
    runtime.add_graph("g", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g", multitask_strategy="reject"))
    async with runtime:
        await runtime.trigger("api", "first", thread_id="t")
        await gate.entered.wait()
        before = await store.last_seq("__runtime__")
        with pytest.raises(ThreadBusyRunError, match="multitask_strategy='reject'"):
            await runtime.trigger("api", "second", thread_id="t")
        assert await store.last_seq("__runtime__") == before
        await runtime.trigger("api", "second", thread_id="t", multitask_strategy="interrupt")
        gate.go.set()  # the node running finishes and commits; the run stops after it
        result = await runtime.wait("t", timeout=30)
    assert result["status"] == "completed"
    texts = [m.text() for m in result["state"].context]
    assert texts[:3] == ["first", "done", "second"]  # the first run's progress kept
    records = await records_of(store, "t")
    assert [r.kind for r in records].count("stopped") == 1
    first = runtime.ledger.triggers[runtime.ledger.by_thread["t"][0]]
    assert first.outcome == "interrupted"


def test_a_bad_multitask_strategy_is_refused() -> None:
    with pytest.raises(RegistrationError, match="multitask_strategy is one of"):
        EntryPoint(id="x", graph_id="g", multitask_strategy="bogus").check()  # type: ignore[arg-type]


# ---- the contract's other calls, and what a hurried caller gets wrong ---------------------------


@contextlib.asynccontextmanager
async def gated(runtime: AgentRuntime, gate: Gate) -> AsyncIterator[None]:
    """`async with runtime`, letting the gate go on the way out: a check that fails inside
    does not leave the runtime's stop waiting for a step held for ever."""
    async with runtime:
        try:
            yield
        finally:
            gate.go.set()


async def test_list_graphs_and_remove_graph_refused_while_its_runs_execute_or_queue(
    store: Any,
) -> None:
    gate = Gate()
    runtime = AgentRuntime(store, RuntimeConfig(max_concurrent_runs=1))
    runtime.add_graph("g", line(("agent", gate)).compile(store))
    runtime.add_graph("h", line(("agent", reply)).compile(store))
    assert runtime.list_graphs() == ["g", "h"]
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    runtime.register_entry_point(EntryPoint(id="other", graph_id="h"))
    async with gated(runtime, gate):
        running = await runtime.trigger("api", "one")
        await gate.entered.wait()
        queued = await runtime.trigger("other", "two")  # behind the limit of one
        with pytest.raises(RegistrationError, match=r"'g' has 1 run\(s\) executing and 0 queued"):
            runtime.remove_graph("g")
        with pytest.raises(RegistrationError, match=r"'h' has 0 run\(s\) executing and 1 queued"):
            runtime.remove_graph("h")  # its queued run would wait for it for ever
        with pytest.raises(RegistrationError, match="'other' has runs executing or queued"):
            runtime.unregister_entry_point("other")
        assert runtime.list_graphs() == ["g", "h"]
        gate.go.set()
        await runtime.wait(running, timeout=30)
        await runtime.wait(queued, timeout=30)
        runtime.remove_graph("h")
        assert runtime.list_graphs() == ["g"]
        assert [e.id for e in runtime.entry_points()] == ["api"]  # its entry points went too
        with pytest.raises(UnknownEntryPointError, match="no entry point 'other'"):
            await runtime.trigger("other", "three")
        with pytest.raises(RegistrationError, match="no graph 'h' is registered"):
            runtime.remove_graph("h")


async def test_wait_gives_up_after_its_timeout_naming_the_run_and_the_run_goes_on(
    store: Any,
) -> None:
    gate = Gate()
    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("agent", gate)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with gated(runtime, gate):
        thread = await runtime.trigger("api", "go", thread_id="t")
        await gate.entered.wait()
        with pytest.raises(TimeoutError, match=r"'t' is still running after 0\.05 s: it goes on"):
            await runtime.wait(thread, timeout=0.05)
        for bad in (-1, "30", float("nan"), True):
            with pytest.raises(RegistrationError, match="timeout is a number of seconds >= 0"):
                await runtime.wait(thread, timeout=bad)
        gate.go.set()
        result = await runtime.wait(thread, timeout=30)
    assert result["status"] == "completed"


async def test_cancel_a_run_still_queued_on_a_new_thread(store: Any) -> None:
    gate = Gate()
    runtime = AgentRuntime(store, RuntimeConfig(max_concurrent_runs=1))
    runtime.add_graph("g", line(("agent", gate)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with gated(runtime, gate):
        first = await runtime.trigger("api", "one")
        await gate.entered.wait()
        queued = await runtime.trigger("api", "two")  # its thread has no record yet
        await runtime.cancel(queued, actor="alice", reason="sent twice")
        with pytest.raises(RunCancelledError, match="cancelled by alice: sent twice"):
            await runtime.wait(queued, timeout=30)
        with pytest.raises(UnknownRunError, match=r"has ended \(cancelled\): nothing to cancel"):
            await runtime.cancel(queued, actor="alice")
        gate.go.set()
        await runtime.wait(first, timeout=30)
        assert runtime.stats()["entry_points"]["api"]["cancelled"] == 1
    assert await store.last_seq(queued) == 0  # it never started
    trigger_id = runtime.ledger.latest_on(queued).id  # type: ignore[union-attr]
    mine = [
        r.kind
        for r in await records_of(store, "__runtime__")
        if getattr(r.event, "trigger_id", None) == trigger_id
    ]
    assert mine == ["trigger_accepted", "trigger_finished"]


async def test_a_cancel_right_after_a_trigger_wins_over_its_dispatch(store: Any) -> None:
    """A trigger that can start at once is dispatched as it is accepted, so the run may
    begin while the cancel is being recorded: either way its node never runs, the run ends
    cancelled for good, and its thread (if the run began) says so."""
    gate = Gate()
    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("agent", gate)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with gated(runtime, gate):
        thread = await runtime.trigger("api", "go", thread_id="t")
        await runtime.cancel(thread, actor="alice")
        with pytest.raises(RunCancelledError, match="cancelled by alice"):
            await runtime.wait(thread, timeout=30)
    # the runtime has stopped: whatever dispatch was in flight has been recorded by now
    kinds = [r.kind for r in await records_of(store, "__runtime__")]
    assert kinds.count("trigger_finished") == 1
    state = runtime.ledger.latest_on(thread)
    assert state is not None and state.outcome == "cancelled" and not state.in_flight
    assert not gate.entered.is_set()  # the node never ran
    if await store.last_seq(thread):  # the run began before the cancel reached it
        kinds = [r.kind for r in await records_of(store, thread)]
        assert kinds[-1] == "run_cancelled"
    restarted = AgentRuntime(store)
    restarted.add_graph("g", line(("agent", gate)).compile(store))
    restarted.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with gated(restarted, gate):  # start() recovers every run in flight
        assert restarted.ledger.pending() == []  # nor after a restart: it is not in flight
        assert restarted.dispatcher.depth() == 0 and not restarted.dispatcher.running_ids()
    assert not gate.entered.is_set()


async def test_a_subscription_sees_what_commits_after_the_call_even_read_later(
    store: Any,
) -> None:
    async with runtime_with(store) as runtime:
        feed = runtime.subscribe(kinds=["run_completed"], graph_id="support")
        result = await runtime.trigger_and_wait("chat", "hi", timeout=30)
        record = await asyncio.wait_for(anext(feed), 10)  # read only now: nothing missed
        await feed.aclose()
    assert record.thread_id == result["thread_id"]


async def test_stop_with_cancel_abandons_running_steps_at_once_and_the_next_runtime_resumes(
    store: Any,
) -> None:
    stuck = Gate()  # never let go: only a cancel ends this step
    graph = line(("agent", stuck))
    runtime = AgentRuntime(store)
    runtime.add_graph("g", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    await runtime.start()
    thread = await runtime.trigger("api", "go")
    await stuck.entered.wait()
    await asyncio.wait_for(runtime.stop(cancel=True), 10)
    assert stuck.running == 0  # the async node was cancelled for real
    unfinished = [t.id for t in runtime.ledger.pending()]
    assert unfinished == [runtime.ledger.latest_on(thread).id]  # type: ignore[union-attr]
    later_gate = Gate()
    later_gate.go.set()
    later = AgentRuntime(store)
    later.add_graph("g", line(("agent", later_gate)).compile(store))
    later.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with later:
        result = await later.wait(thread, timeout=30)
    assert result["status"] == "completed"
    assert [m.text() for m in result["state"].context] == ["go", "done"]
    assert (await store.verify(thread)).ok


async def test_stats_say_every_figure_the_contract_names(store: Any) -> None:
    gate = Gate()
    runtime = AgentRuntime(store, RuntimeConfig(max_concurrent_runs=1))
    runtime.add_graph("g", line(("agent", gate)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    async with gated(runtime, gate):
        feed = runtime.subscribe()
        reading = asyncio.ensure_future(anext(feed))
        running = await runtime.trigger("api", "one")
        await gate.entered.wait()
        await runtime.trigger("api", "two")
        await reading  # one record read; it lags from there
        stats = runtime.stats()
        gate.go.set()
        await runtime.wait(running, timeout=30)
        await feed.aclose()
    counts = {"active": 1, "queued": 1, "completed": 0, "failed": 0, "interrupted": 0,
              "cancelled": 0}  # fmt: skip
    assert stats["graphs"] == {"g": counts}
    assert stats["entry_points"] == {"api": counts}
    assert (stats["executing"], stats["queued"], stats["queue_depth"]) == (1, 1, {"api": 1})
    assert stats["events_appended"] > 0 and stats["runtime_records"] >= 3
    assert set(stats["commit_latency_ms"]) == {"p50", "p99"}
    assert stats["commit_latency_ms"]["p50"] <= stats["commit_latency_ms"]["p99"]
    assert len(stats["subscriber_lag"]) == 1 and stats["subscriber_lag"][0] > 0


async def test_hurried_registrations_are_refused_naming_the_mistake(store: Any) -> None:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support_app(store))
    runtime.add_graph("reviewer", line(("review", reply)).compile(store))
    timer = {"graph_id": "support", "trigger": "timer"}
    bad = [
        ({**timer, "cron": "0 0 2 * * *"}, r"\(6 fields\): five fields"),  # Quartz, seconds first
        ({**timer, "cron": "0 2 30 2 *"}, "it has no next time"),  # February 30th
        ({**timer, "cron": "H 2 * * *"}, "hashed .H. fields give other slots after a restart"),
        ({**timer, "cron": "R 2 * * *"}, "random .R."),
        ({**timer, "cron": "61 * * * *"}, "croniter cannot read it"),
        (
            {"graph_id": "reviewer", "trigger": "event", "kinds": "run_failed"},
            r"write kinds=\['run_failed'\]",
        ),
        ({"graph_id": "reviewer", "trigger": "event", "kinds": []}, "kinds is empty"),
        (
            {"graph_id": "reviewer", "trigger": "event", "kinds": ["trigger_accepted"]},
            "only to the runtime's own thread",
        ),
        ({"graph_id": "support", "retry": 3}, "retry is a RetryPolicy"),
        ({"graph_id": "support", "thread_id": "t"}, "belong to trigger='event'"),
        ({"graph_id": "support", "input_from": str}, "belong to trigger='event'"),
    ]
    for fields, words in bad:
        with pytest.raises(RegistrationError, match=words):
            runtime.register_entry_point(EntryPoint(id="x", **fields))
    with pytest.raises(RegistrationError, match="fatal is a tuple of exception classes"):
        RetryPolicy(fatal=[1])  # type: ignore[list-item]
    assert RetryPolicy(fatal=KeyError).is_fatal("KeyError")  # type: ignore[arg-type]
    assert runtime.entry_points() == []
    runtime.register_entry_point(EntryPoint(id="daily", trigger="timer", graph_id="support",
                                            cron="@daily"))  # fmt: skip
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    async with runtime:
        at_start = await store.last_seq("__runtime__")  # the timer's first listening record
        late = EntryPoint(id="late", graph_id="reviewer", trigger="webhook", path="/late",
                          unsigned=True)  # fmt: skip
        with pytest.raises(RegistrationError, match="registered before the runtime starts"):
            runtime.register_entry_point(late)  # event and timer ones may: test_hive_graphs
        with pytest.raises(RegistrationError, match="priority must be an int"):
            await runtime.trigger("chat", "hi", priority="high")  # type: ignore[arg-type]
        assert await store.last_seq("__runtime__") == at_start
        paused = line(("draft", reply), ("send", reply)).compile(store, interrupt_before=["send"])
        runtime.add_graph("paused", paused)
        runtime.register_entry_point(EntryPoint(id="draft", graph_id="paused"))
        thread = await runtime.trigger("draft", "write")
        await runtime.wait(thread, timeout=30)
        before = await store.last_seq("__runtime__")
        paused_at = await store.last_seq(thread)
        with pytest.raises(RegistrationError, match="reason is text"):
            await runtime.cancel(thread, reason=5)  # type: ignore[arg-type]
        with pytest.raises(RegistrationError, match="actor names who cancels"):
            await runtime.cancel(thread, actor="")
        assert await store.last_seq("__runtime__") == before
        assert await store.last_seq(thread) == paused_at  # still paused, as it was
    assert [e.id for e in runtime.entry_points()] == ["daily", "chat", "draft"]


async def test_inject_input_answers_a_nodes_own_interrupt_call(store: Any) -> None:
    from agentlog.actors import interrupt

    def ask(state: AgentState) -> list[Message]:
        answer = interrupt("refund the order?")
        return [Message.text_message(f"answer: {answer}", role="assistant")]

    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("ask", ask)).compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="g"))
    async with runtime:
        thread = await runtime.trigger("chat", {"messages": [Message.text_message("refund?")]})
        assert (await runtime.wait(thread, timeout=30))["status"] == "interrupted_before"
        await runtime.inject_input(thread, "yes, refund it", actor="alice")
        done = await runtime.wait(thread, timeout=30)
    assert [m.text() for m in done["state"].context] == ["refund?", "answer: yes, refund it"]
    resumed = [r.event for r in await records_of(store, thread) if r.kind == "resumed"]
    assert [(r.value, r.by) for r in resumed] == [("yes, refund it", "alice")]


def test_queueing_many_triggers_at_once_costs_no_scan_per_trigger() -> None:
    """1,000s of triggers accepted in one commit are queued one by one: finding whether one
    is queued already must not scan the queue (10,000 scans of up to 10,000: ~9 s). The
    queue counts how many of its items are looked at; arrival order touches one each."""
    from agentlog.actors.runtime.dispatch import Dispatcher
    from agentlog.actors.runtime.ledger import TriggerState
    from agentlog.events.kinds import TriggerAccepted

    class CountingQueue(list[TriggerState]):
        looked_at = 0

        def __getitem__(self, index: Any) -> Any:
            item = super().__getitem__(index)
            CountingQueue.looked_at += len(item) if isinstance(index, slice) else 1
            return item

        def __iter__(self) -> Any:
            CountingQueue.looked_at += len(self)
            return super().__iter__()

        def __contains__(self, item: object) -> bool:
            CountingQueue.looked_at += len(self)
            return super().__contains__(item)

        def scans(name: str) -> Any:  # sort, index, count, remove, copy: each reads them all
            def scanning(self: CountingQueue, *args: Any, **kwargs: Any) -> Any:
                CountingQueue.looked_at += len(self)
                return getattr(list, name)(self, *args, **kwargs)

            return scanning

        sort = scans("sort")
        index = scans("index")
        count = scans("count")
        remove = scans("remove")
        copy = scans("copy")

    def state(i: int) -> TriggerState:
        accepted = TriggerAccepted(
            trigger_id=f"t{i}", entry_point="chat", graph_id="g", thread_id=f"th{i}",
            cause="api",
        )  # fmt: skip
        return TriggerState(accepted, position=i)

    dispatcher = Dispatcher(runtime=None)  # type: ignore[arg-type]  # enqueue needs none
    dispatcher.queue = CountingQueue()
    states = [state(i) for i in range(10_000)]
    for each in states:
        dispatcher.enqueue(each)
    for each in states[:100]:
        dispatcher.enqueue(each)  # queued already: ignored
    looked_at = CountingQueue.looked_at
    assert looked_at <= 2 * len(states), f"{looked_at} queue items looked at for 10,000"
    assert [s.id for s in list.__iter__(dispatcher.queue)] == [s.id for s in states]


async def test_event_entry_points_filter_by_thread_and_node_and_answer_their_own_graph_if_asked(
    store: Any,
) -> None:
    support = line(("agent", reply), ("tidy", reply))
    support.name = "support"
    audit = line(("note", reply))
    audit.name = "audit"
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support.compile(store))
    runtime.add_graph("audit", audit.compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    runtime.register_entry_point(EntryPoint(id="audit", graph_id="audit"))
    event = {"graph_id": "audit", "trigger": "event"}
    runtime.register_entry_point(
        EntryPoint(id="on_tidy", kinds=["message_appended"], node="tidy", **event)
    )
    runtime.register_entry_point(
        EntryPoint(
            id="on_t1",
            kinds=["run_completed"],
            thread_id="t1",
            input_from=lambda record: f"{record.kind} on {record.thread_id}",
            **event,
        )
    )
    own = {"kinds": ["run_completed"], "thread_id": "a1"}
    runtime.register_entry_point(EntryPoint(id="own", include_own=True, **own, **event))
    runtime.register_entry_point(EntryPoint(id="not_own", **own, **event))
    expected = {"on_tidy": 2, "on_t1": 1, "own": 1, "not_own": 0}  # tidy: one message a run
    async with runtime:
        for thread in ("t1", "t2"):
            await runtime.trigger_and_wait("chat", "hi", thread_id=thread, timeout=30)
        await runtime.trigger_and_wait("audit", "note this", thread_id="a1", timeout=30)
        await until_idle(runtime)  # every event answered and run: nothing more comes
    accepted = [
        r.event for r in await records_of(store, "__runtime__") if r.kind == "trigger_accepted"
    ]
    fired = {e: [a for a in accepted if a.entry_point == e] for e in expected}
    assert {e: len(a) for e, a in fired.items()} == expected
    assert {a.cause for e in expected for a in fired[e]} == {"event"}
    t1_done = [r.position for r in await records_of(store, "t1") if r.kind == "run_completed"]
    assert fired["on_t1"][0].source_position == t1_done[0]
    answer = replay(await records_of(store, fired["on_t1"][0].thread_id))
    assert answer.context[0].text() == "run_completed on t1"  # what input_from made of it


class AppendLog(SQLiteEventStore):
    """A SQLite store noting the kinds of each append on the runtime thread, which can be
    held back (`hold`) to catch a caller mid-commit."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.appends: list[list[str]] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def append(self, thread_id: str, events: Any, **kwargs: Any) -> Any:
        if thread_id == "__runtime__":
            self.appends.append([type(e).__name__ for e in events])
            await self.hold.wait()
        return await super().append(thread_id, events, **kwargs)


async def test_a_trigger_that_can_start_at_once_is_accepted_and_dispatched_in_one_commit(
    tmp_path: Path,
) -> None:
    """An idle runtime records a trigger's acceptance and dispatch together (one commit
    before the run starts); a trigger that must queue has its dispatch recorded on its own
    when its turn comes. The log says the same either way, and a restart finds nothing."""
    gate = Gate()
    async with AppendLog(tmp_path / "one.db") as store:
        runtime = AgentRuntime(store, RuntimeConfig(max_concurrent_runs=1))
        runtime.add_graph("g", line(("agent", gate)).compile(store))
        runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
        async with gated(runtime, gate):
            first = await runtime.trigger("api", "one")
            await asyncio.wait_for(gate.entered.wait(), 10)
            second = await runtime.trigger("api", "two")  # the one slot is taken: it queues
            assert runtime.dispatcher.depth() == 1
            gate.go.set()
            for thread in (first, second):
                assert (await runtime.wait(thread, timeout=30))["status"] == "completed"
        together = ["TriggerAccepted", "TriggerDispatched"]
        assert store.appends[0] == together
        assert ["TriggerAccepted"] in store.appends and ["TriggerDispatched"] in store.appends
        records = await records_of(store, "__runtime__")
        kinds = [r.kind for r in records]
        assert kinds.count("trigger_dispatched") == 2 and kinds.count("trigger_finished") == 2
        assert {r.actor for r in records if r.kind == "trigger_accepted"} == {"api"}
        assert {r.actor for r in records if r.kind == "trigger_dispatched"} == {"runtime"}
        restarted = AgentRuntime(store)
        restarted.add_graph("g", line(("agent", gate)).compile(store))
        restarted.register_entry_point(EntryPoint(id="api", graph_id="g"))
        async with restarted:
            assert restarted.ledger.pending() == []


async def test_a_trigger_whose_caller_leaves_mid_commit_still_runs(tmp_path: Path) -> None:
    """Cancelling `trigger` while its acceptance commits does not lose the run: once the
    acceptance is in the log the run starts, whoever is still waiting."""
    async with AppendLog(tmp_path / "left.db") as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("g", support_app(store))
        runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
        async with runtime:
            store.hold.clear()
            caller = asyncio.ensure_future(runtime.trigger("api", "hello", thread_id="t"))
            await until(lambda: store.appends)
            caller.cancel()
            with pytest.raises(asyncio.CancelledError):
                await caller
            store.hold.set()
            await until(lambda: runtime.ledger.latest_on("t"))
            result = await runtime.wait("t", timeout=30)
        assert result["status"] == "completed"
        assert [m.text() for m in result["messages"]] == ["hello", "seen 1"]


async def test_a_trigger_without_input_for_a_new_thread_is_refused_writing_nothing(
    store: Any,
) -> None:
    async with runtime_with(store) as runtime:
        for where in ({}, {"thread_id": "never-seen"}):
            with pytest.raises(RegistrationError, match="needs input"):
                await runtime.trigger("chat", **where)
        assert runtime.ledger.triggers == {}
        thread = await runtime.trigger("chat", {"messages": [Message.text_message("hi")]})
        await runtime.wait(thread, timeout=30)
        await runtime.trigger("chat", thread_id=thread)  # an existing thread may go on


async def test_two_starts_at_once_start_the_runtime_once(store: Any) -> None:
    """A second `start()` while the first one runs waits for it, instead of failing as if
    another runtime held the store."""
    runtime = runtime_with(store)
    await asyncio.gather(runtime.start(), runtime.start())
    assert runtime.started
    thread = await runtime.trigger("chat", "hello")
    await runtime.wait(thread, timeout=30)
    await runtime.stop()
    other = runtime_with(store)
    await other.start()  # the first released the store when it stopped
    await other.stop()
