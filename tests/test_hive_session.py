"""hive's primary session sharing (issue 33, row 1): a timer or event run joins the user's
thread, sees what the user typed there and queues behind the user's run, with no retry loop;
isolation decides whether it may write there."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from agentlog import END, StateGraph
from agentlog.actors import interrupt
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RegistrationError, RuntimeConfig
from agentlog.actors.testing import FakeClock, until
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message


class InboxState(AgentState):
    rules: str = ""


class Intake:
    """The user-facing node: holds the user's run until the test lets it go."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def __call__(self, state: InboxState) -> list[Message]:
        self.entered.set()
        await self.go.wait()
        return [Message.text_message("noted", role="assistant")]


def check_inbox(state: InboxState) -> list[Message]:
    typed = [m.text() for m in state.context if m.role == "user"]
    text = f"rules={state.rules!r} seen={typed}"
    return [Message.text_message(text, role="assistant")]


def inbox_graph(store: Any, intake: Intake) -> Any:
    graph = StateGraph(InboxState, name="inbox")
    graph.add_node("intake", intake)
    graph.add_node("check-inbox", check_inbox)
    graph.set_entry_point("intake")
    graph.add_edge("intake", END)
    graph.add_edge("check-inbox", END)
    return graph.compile(checkpointer=store)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with SQLiteEventStore(tmp_path / "session.db") as s:
        yield s


def runtime_for(store: Any, clock: FakeClock, intake: Intake, **sweep: Any) -> AgentRuntime:
    runtime = AgentRuntime(store, RuntimeConfig(), clock=clock)
    runtime.add_graph("inbox", inbox_graph(store, intake))
    runtime.register_entry_point(
        EntryPoint(id="chat", graph_id="inbox", entry_node="intake", max_concurrent=1)
    )
    runtime.register_entry_point(
        EntryPoint(
            id="sweep",
            graph_id="inbox",
            trigger="timer",
            interval_s=60,
            entry_node="check-inbox",
            **sweep,
        )
    )
    return runtime


def ask_user(state: InboxState) -> list[Message]:
    answer = interrupt("which folder?")  # the user-facing node waits for the user
    return [Message.text_message(f"filed in {answer}", role="assistant")]


async def sweeps(store: Any) -> list[Any]:
    return [
        r.event
        async for r in store.read("__runtime__")
        if r.kind == "trigger_accepted" and r.event.entry_point == "sweep"
    ]


async def test_a_timer_run_shares_the_users_session(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(1_700_000_010.0)
    runtime = AgentRuntime(store, clock=clock)
    graph = StateGraph(InboxState, name="inbox")
    graph.add_node("intake", ask_user)
    graph.add_node("check-inbox", check_inbox)
    graph.set_entry_point("intake")
    graph.add_edge("intake", END)
    graph.add_edge("check-inbox", END)
    runtime.add_graph("inbox", graph.compile(checkpointer=store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="inbox"))
    runtime.register_entry_point(
        EntryPoint(id="sweep", graph_id="inbox", trigger="timer", interval_s=60,
                   entry_node="check-inbox", session="primary", isolation="shared")
    )  # fmt: skip
    caplog.set_level(logging.WARNING)
    async with runtime:
        thread = await runtime.trigger(
            "chat", {"rules": "archive newsletters", "messages": ["tidy my inbox"]}
        )
        paused = await runtime.wait(thread, timeout=30)
        assert paused["status"] == "interrupted_before"  # waiting for the user's answer
        clock.advance(60)
        assert await runtime.listeners.fire_due() == 1
        [first] = await sweeps(store)
        assert first.thread_id != thread  # the session, forked: the user's pause stays
        seen = (await runtime.wait(first.thread_id, timeout=30))["messages"][-1].text()
        assert seen.startswith("rules='archive newsletters' seen=['tidy my inbox', '{\"event\"")
        await runtime.inject_input(thread, "newsletters")  # the user answers, as asked
        answered = await runtime.wait(thread, timeout=30)
        assert answered["messages"][-1].text() == "filed in newsletters"

        clock.advance(60)  # the session is idle now: the run goes on in the user's thread
        assert await runtime.listeners.fire_due() == 1
        second = (await sweeps(store))[-1]
        assert second.thread_id == thread
        seen = (await runtime.wait(thread, timeout=30))["messages"][-1].text()
        assert seen.startswith("rules='archive newsletters' seen=['tidy my inbox', '{")
        assert runtime.active_thread == thread  # the background run took no focus
    assert not [r for r in caplog.records if "trying again" in r.getMessage()]


async def test_input_keys_from_a_session_still_queued_neither_wait_nor_retry(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    clock, intake = FakeClock(1_700_000_010.0), Intake()
    runtime = runtime_for(store, clock, intake, input_keys=["rules"])
    caplog.set_level(logging.WARNING)
    async with runtime:
        first = await runtime.trigger("chat", {"rules": "a", "messages": ["one"]})
        await intake.entered.wait()
        queued = await runtime.trigger("chat", {"rules": "b", "messages": ["two"]})
        assert runtime.active_thread == queued  # its run waits for the first (max 1)
        clock.advance(60)
        await runtime.listeners.fire_due()
        await until(lambda: runtime.stats()["entry_points"]["sweep"]["completed"] == 1)
        assert runtime.stats()["entry_points"]["chat"]["active"] == 1  # still held
        intake.go.set()
        await runtime.wait(first, timeout=30)
        await runtime.wait(queued, timeout=30)
    assert not [r for r in caplog.records if "trying again" in r.getMessage()]


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"session": "primary", "isolation": "shared"}, "runs nobody typed"),
        ({"trigger": "timer", "interval_s": 60, "session": "mine"}, "'own' or 'primary'"),
        (
            {
                "trigger": "timer",
                "interval_s": 60,
                "session": "primary",
                "isolation": "shared",
                "input_keys": ["rules"],
            },
            "reads the user's thread itself",
        ),
    ],
)
def test_a_session_is_refused_where_it_cannot_hold(entry: dict[str, Any], match: str) -> None:
    with pytest.raises(RegistrationError, match=match):
        EntryPoint(id="sweep", graph_id="inbox", **entry).check()


async def test_an_isolated_run_reads_the_session_and_never_writes_it(store: Any) -> None:
    clock = FakeClock(1_700_000_010.0)
    runtime = runtime_for(store, clock, Intake(), session="primary")  # isolated by default
    runtime.register_entry_point(EntryPoint(id="note", graph_id="inbox", entry_node="check-inbox"))
    async with runtime:
        user = "user-1"
        await runtime.trigger_and_wait(
            "note", {"rules": "keep receipts", "messages": ["hello"]}, thread_id=user, timeout=30
        )
        assert runtime.active_thread == user
        before = await store.last_seq(user)
        clock.advance(60)
        assert await runtime.listeners.fire_due() == 1
        [sweep] = await sweeps(store)
        assert sweep.thread_id != user  # idle, but isolated: a fork of the session
        seen = (await runtime.wait(sweep.thread_id, timeout=30))["messages"][-1].text()
        assert seen.startswith("rules='keep receipts' seen=['hello'")
        assert await store.last_seq(user) == before  # the user's thread is untouched
