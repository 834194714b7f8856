"""Retention on the runtime: a policy for every graph (`RuntimeConfig.retention`) or one
graph's own (`set_retention`), applied by the runtime's timer through `prune_thread`, on the
testing toolkit's FakeClock (no wall-clock wait)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.engine.retention import Retention
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RegistrationError, RuntimeConfig
from agentlog.actors.testing import FakeClock, until
from agentlog.events import InvalidArgumentError, SQLiteEventStore
from agentlog.projections import AgentState, Message
from tests.helpers import line

DAY = 86_400.0


def reply(state: AgentState) -> list[Message]:
    return [Message.text_message(f"seen {len(state.context)}", role="assistant")]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore(tmp_path / "runtime.db", clock=clock) as s:
        yield s


def runtime_of(store: Any, clock: FakeClock, retention: Retention | None = None) -> AgentRuntime:
    runtime = AgentRuntime(store, RuntimeConfig(retention=retention), clock=clock)
    for graph in ("a", "b"):
        runtime.add_graph(graph, line(("agent", reply)).compile(store))
        runtime.register_entry_point(EntryPoint(id=f"chat-{graph}", graph_id=graph))
    return runtime


async def runs(runtime: AgentRuntime, entry: str, thread: str, count: int) -> None:
    for i in range(count):
        done = await runtime.trigger(entry, {"messages": [Message.text_message(f"hi {i}")]},
                                     thread_id=thread)  # fmt: skip
        assert (await runtime.wait(done, timeout=30))["status"] == "completed"


async def records(store: SQLiteEventStore, thread: str) -> list[Any]:
    return [r async for r in store.read(thread)]


async def kinds(store: SQLiteEventStore, thread: str) -> list[str]:
    return [r.kind async for r in store.read(thread)]


async def test_the_runtime_policy_prunes_every_graph_on_its_timer(
    store: SQLiteEventStore, clock: FakeClock
) -> None:
    async with runtime_of(store, clock, Retention(keep_runs=1, every_s=60)) as runtime:
        await runs(runtime, "chat-a", "ta", 3)
        await runs(runtime, "chat-b", "tb", 2)
        await runs(runtime, "chat-a", "single", 1)
        assert await runtime.listeners.keep_due() == []  # the clock starts now
        clock.advance(59)
        assert await runtime.listeners.keep_due() == []
        clock.advance(1)
        await runtime.listeners.keep_due()  # or the runtime's own timer loop did, just now
        assert await runtime.listeners.keep_due() == []  # not again before every_s
        assert "pruned" not in await kinds(store, "single")  # it has one run
        for thread in ("ta", "tb"):
            found = await kinds(store, thread)
            assert found.count("run_started") == 1 and found.count("pruned") == 1
            assert (await store.verify(thread)).ok
        state = await runtime.graphs["a"].app.aget_state({"thread_id": "ta"})
        assert [m.text() for m in state.context][-2:] == ["hi 2", "seen 5"]
        pruned = next(r for r in await records(store, "ta") if r.kind == "pruned").event
        assert pruned.by == "retention:a" and pruned.reason == "retention policy"


async def test_a_graph_keeps_its_own_policy_or_none(
    store: SQLiteEventStore, clock: FakeClock
) -> None:
    async with runtime_of(store, clock) as runtime:
        await runs(runtime, "chat-a", "ta", 2)
        await runs(runtime, "chat-b", "tb", 2)
        runtime.set_retention("a", Retention(keep_runs=1, every_s=10))
        assert list(runtime.retentions()) == ["a"]
        await runtime.listeners.keep_due()
        clock.advance(10)
        await runtime.listeners.keep_due()  # or the runtime's own timer loop did, just now
        assert "pruned" in await kinds(store, "ta")
        assert "pruned" not in await kinds(store, "tb")
        with pytest.raises(RegistrationError, match="'nope' is not registered"):
            runtime.set_retention("nope", Retention(keep_runs=1))
        with pytest.raises(RegistrationError, match="retention is a Retention"):
            runtime.set_retention("b", {"keep_runs": 1})  # type: ignore[arg-type]
    over = runtime_of(store, clock, Retention(keep_runs=1))
    over.set_retention("b", None)  # this graph is kept whole though the runtime's prunes
    assert list(over.retentions()) == ["a"]


def test_a_wrong_policy_is_refused_naming_what_to_write() -> None:
    with pytest.raises(InvalidArgumentError, match="name what to keep"):
        Retention()
    with pytest.raises(InvalidArgumentError, match="name what to keep"):
        Retention(keep_runs=1, keep_days=2)
    with pytest.raises(InvalidArgumentError, match="every_s"):
        Retention(keep_runs=1, every_s=0)
    with pytest.raises(RegistrationError, match="retention is a Retention"):
        RuntimeConfig(retention=3)  # type: ignore[arg-type]


async def test_the_timer_loop_applies_keep_days_by_the_runtime_clock(
    store: SQLiteEventStore, clock: FakeClock
) -> None:
    async with runtime_of(store, clock, Retention(keep_days=1, every_s=3600)) as runtime:
        await runs(runtime, "chat-a", "ta", 1)
        clock.advance(2 * DAY)
        await runs(runtime, "chat-a", "ta", 1)
        assert "pruned" not in await kinds(store, "ta")
        runtime.listeners.poke()  # the loop sees the clock moved past every_s
        await until(
            timeout=20, predicate=lambda: kinds_has(store, "ta", "pruned"), what="the timer's prune"
        )
        found = await kinds(store, "ta")
        assert found.count("run_started") == 1 and (await store.verify("ta")).ok


async def kinds_has(store: SQLiteEventStore, thread: str, kind: str) -> bool:
    return kind in await kinds(store, thread)
