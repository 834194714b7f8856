"""Callbacks: hooks around node and tool invocations and at the run's lifecycle, each called
once per occurrence with what the log says; a hook's change is recorded as the hook's."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import (
    Callbacks,
    HookError,
    InputRejectedError,
    Invocation,
    InvocationType,
    Occurrence,
    StateGraph,
)
from agentlog.actors.testing import until_blocking
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message, ToolCallBlock, replay
from tests.helpers import agent_with_tools, line, spawn_worker, wait_ready
from tests.workers import hook_run

CFG = {"thread_id": "t"}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore(tmp_path / "hooks.db") as opened:
        yield opened


class Recording(Callbacks):
    """Writes down every hook call, with the seq of the record a lifecycle hook was given."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def before(self, invocation: Invocation) -> None:
        self.calls.append(f"before {invocation.type} {invocation.name}")

    async def after(self, invocation: Invocation, output: Any) -> None:
        self.calls.append(f"after {invocation.type} {invocation.name}")

    def on_run_start(self, occurrence: Occurrence) -> None:
        self.calls.append(f"on_run_start {occurrence.record.seq}")

    def on_run_end(self, occurrence: Occurrence) -> None:
        self.calls.append(f"on_run_end {occurrence.record.seq}")

    def on_interrupt(self, occurrence: Occurrence) -> None:
        self.calls.append(f"on_interrupt {occurrence.record.seq}")

    def on_resume(self, occurrence: Occurrence) -> None:
        self.calls.append(f"on_resume {occurrence.record.seq}")

    def on_stop(self, occurrence: Occurrence) -> None:
        self.calls.append(f"on_stop {occurrence.record.seq}")

    def on_run_error(self, occurrence: Occurrence) -> None:
        self.calls.append(f"on_run_error {occurrence.record.seq}")


def lookup(city: str) -> str:
    """Look up the weather."""
    return f"sunny in {city}"


def agent(state: AgentState) -> list[Message]:
    if state.context[-1].role == "tool":
        return [Message.text_message("done", role="assistant", message_id="m-done")]
    call = ToolCallBlock(id="c1", name="lookup", args={"city": "Oslo"})
    return [Message(role="assistant", content=[call], message_id="m-call")]


def tool_graph() -> StateGraph[AgentState]:
    return agent_with_tools(agent, [lookup])  # type: ignore[no-any-return]


async def seq_of(store: SQLiteEventStore, kind: str) -> list[int]:
    return [r.seq async for r in store.read("t") if r.kind == kind]


async def test_each_hook_fires_once_per_occurrence_in_order_with_the_logs_records(
    store: SQLiteEventStore,
) -> None:
    hooks = Recording()
    app = tool_graph().compile(store, callbacks=hooks, interrupt_before=["tools"])
    await app.ainvoke("weather?", CFG)
    await app.ainvoke(None, CFG)
    started, paused = await seq_of(store, "run_started"), await seq_of(store, "interrupt_raised")
    resumed, completed = await seq_of(store, "resumed"), await seq_of(store, "run_completed")
    assert hooks.calls == [
        f"on_run_start {started[0]}",
        "before node agent",
        "after node agent",
        f"on_interrupt {paused[0]}",
        f"on_resume {resumed[0]}",
        "before tool lookup",
        "after tool lookup",
        "before node agent",
        "after node agent",
        f"on_run_end {completed[0]}",
    ]
    live = await app.aget_state(CFG)
    assert replay([r async for r in store.read("t")]) == live


class Redactor(Callbacks):
    name = "redactor"

    def after(self, invocation: Invocation, output: Any) -> Any:
        if invocation.type is not InvocationType.NODE:
            return None
        return [
            m.model_copy(update={"content": [type(m.content[0])(text="[redacted]")]})
            for m in output
        ]


async def test_a_redacting_hook_changes_the_output_through_a_recorded_event(
    tmp_path: Path,
) -> None:
    db = tmp_path / "redact.db"
    secret = "SSN 078-05-1120"
    async with SQLiteEventStore(db) as store:
        app = line(
            ("leak", lambda state: [Message.text_message(secret, role="assistant")])
        ).compile(store, callbacks=Redactor())
        await app.ainvoke("hi", CFG)
        records = [r async for r in store.read("t")]
        appended = [r for r in records if r.kind == "message_appended"]
        assert [r.actor for r in appended] == ["user", "redactor"]
        live = await app.aget_state(CFG)
        assert [m.text() for m in live.context] == ["hi", "[redacted]"]
        assert replay(records) == live
        assert (await store.verify("t")).ok
    raw = b"".join(
        bytes(row[0]) for row in sqlite3.connect(db).execute("SELECT payload FROM events")
    )
    assert secret.encode() not in raw, "the redacted text must never reach the log"


class Recovering(Callbacks):
    name = "fallback"

    def on_error(self, invocation: Invocation, error: Exception) -> Message | None:
        return Message.text_message(f"sorry ({error})", role="assistant")


async def test_an_on_error_recovery_continues_the_run_recorded_as_such(
    store: SQLiteEventStore,
) -> None:
    def broken(state: AgentState) -> list[Message]:
        raise RuntimeError("model timed out")

    app = line(
        ("broken", broken), ("after", lambda state: [Message.text_message("on", role="assistant")])
    ).compile(store, callbacks=Recovering())
    out = await app.ainvoke("hi", CFG)
    assert out["status"] == "completed"
    assert [m.text() for m in out["messages"]] == ["hi", "sorry (model timed out)", "on"]
    recovery = out["messages"][1]
    assert "recovery by fallback after RuntimeError" in recovery.metadata["recovery"]
    records = [r async for r in store.read("t")]
    assert [r.actor for r in records if r.kind == "message_appended"][1] == "fallback"
    assert replay(records) == await app.aget_state(CFG)


async def test_a_tool_error_recovered_by_a_hook_answers_the_call(store: SQLiteEventStore) -> None:
    def lookup(city: str) -> str:
        """Look up the weather."""
        raise ConnectionError("weather service down")

    graph = agent_with_tools(agent, [lookup])
    app = graph.compile(store, callbacks=Recovering())
    out = await app.ainvoke("weather?", CFG, "partial")
    assert out["status"] == "completed"
    (result,) = [m for m in out["context"] if m.role == "tool"]
    assert result.text() == "sorry (weather service down)"
    finished = [r async for r in store.read("t") if r.kind == "tool_call_finished"]
    assert finished[0].actor == "fallback"
    assert "recovered by fallback" in (finished[0].event.error or "")  # type: ignore[union-attr]


class Refusing(Callbacks):
    def before(self, invocation: Invocation) -> None:
        raise PermissionError("not allowed on weekends")


async def test_a_hook_that_raises_fails_the_run_naming_the_hook(store: SQLiteEventStore) -> None:
    app = line(("a", lambda state: [])).compile(store, callbacks=Refusing())
    with pytest.raises(HookError, match=r"hook Refusing\.before raised PermissionError"):
        await app.ainvoke("hi", CFG)
    failed = [r async for r in store.read("t") if r.kind == "run_failed"]
    assert failed[-1].event.error_type == "HookError"  # type: ignore[union-attr]
    assert "Refusing.before" in failed[-1].event.message  # type: ignore[union-attr]
    assert (await app.aget_state(CFG)).execution_meta.status.value == "error"


class Validating(Callbacks):
    def validate_input(self, thread_id: str, values: Any) -> None:
        if any("password" in m.text() for m in values if isinstance(m, Message)):
            raise InputRejectedError("input holds a password: remove it and send again")


async def test_an_input_validator_refuses_before_anything_is_written(
    store: SQLiteEventStore,
) -> None:
    app = line(("a", lambda state: [])).compile(store, callbacks=Validating())
    with pytest.raises(InputRejectedError, match="password"):
        await app.ainvoke("my password is hunter2", CFG)
    assert await store.last_seq("t") == 0
    out = await app.ainvoke("hello", CFG)
    assert out["status"] == "completed"


def test_callbacks_must_be_a_callbacks_object() -> None:
    from agentlog.actors import GraphError

    with pytest.raises(GraphError, match="Callbacks instance"):
        line(("a", lambda state: [])).compile(callbacks=object())  # type: ignore[arg-type]


def test_a_crash_and_resume_does_not_call_the_hooks_of_committed_steps(tmp_path: Path) -> None:
    db, journal = tmp_path / "crash.db", tmp_path / "journal.txt"
    proc = spawn_worker("hook_run", db, journal, "run")
    wait_ready(proc)

    def four_steps() -> bool:  # kill mid-run: some steps committed, not all
        lines = journal.read_text().splitlines() if journal.exists() else []
        return sum(x.startswith("after") for x in lines) >= 4

    until_blocking(four_steps)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)

    def committed() -> list[str]:
        conn = sqlite3.connect(db)
        try:
            return [
                row[0]
                for row in conn.execute(
                    "SELECT actor FROM events WHERE kind = 'step_advanced' ORDER BY seq"
                )
            ]
        finally:
            conn.close()

    steps_at_kill = committed()
    assert 0 < len(steps_at_kill) < hook_run.STEPS, "the kill must land mid-run"
    resumer = spawn_worker("hook_run", db, journal, "resume")
    _, err = resumer.communicate(timeout=120)
    assert resumer.returncode == 0, err
    assert len(committed()) == hook_run.STEPS
    lines = journal.read_text().splitlines()
    after = [x.split()[1] for x in lines if x.startswith("after")]
    for node in steps_at_kill:  # committed before the kill: its hook ran exactly once
        assert after.count(node) == 1, (node, after)
    assert lines.count("on_run_start") == 1
    assert lines.count("on_run_end") == 1
    assert set(after) == {f"n{i}" for i in range(hook_run.STEPS)}


async def test_hooks_a_subclass_does_not_override_are_never_called(
    store: SQLiteEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default is no callbacks; an empty Callbacks object calls nothing either (the base
    class's hooks, made to raise here, are never reached), and only overridden hooks run."""
    for hook in ("before", "after", "on_error", "validate_input", "on_run_start", "on_run_end"):
        monkeypatch.setattr(Callbacks, hook, _never)
    graph = line(("a", lambda state: [Message.text_message("x", role="assistant")]))
    assert graph.compile(store).callbacks is None
    empty = graph.compile(store, callbacks=Callbacks())
    assert empty.hooked == frozenset()
    out = await empty.ainvoke("hi", {"thread_id": "e"})
    assert out["status"] == "completed"

    class OnlyEnd(Callbacks):
        def on_run_end(self, occurrence: Occurrence) -> None:
            ended.append(occurrence.record.seq)

    ended: list[int] = []
    some = graph.compile(store, callbacks=OnlyEnd())
    assert some.hooked == frozenset({"on_run_end"})
    await some.ainvoke("hi", {"thread_id": "f"})
    assert ended == await seq_of_thread(store, "f", "run_completed")


def _never(*args: object) -> None:
    raise AssertionError("a hook the callbacks object does not override was called")


async def seq_of_thread(store: SQLiteEventStore, thread: str, kind: str) -> list[int]:
    return [r.seq async for r in store.read(thread) if r.kind == kind]


async def test_stop_and_failure_hooks_fire_once_with_their_records(
    store: SQLiteEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "agentlog.actors.engine.guard.STOP_POLL_S", 60.0
    )  # the node ends before a look
    hooks = Recording()
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(state: AgentState) -> list[Message]:
        started.set()
        await release.wait()
        return [Message.text_message("slow", role="assistant")]

    def broken(state: AgentState) -> list[Message]:
        raise RuntimeError("down")

    app = line(("slow", slow), ("broken", broken)).compile(store, callbacks=hooks)
    task = asyncio.create_task(app.ainvoke("hi", CFG))
    await asyncio.wait_for(started.wait(), 20)
    assert await app.astop(CFG)
    release.set()
    await asyncio.wait_for(task, 20)
    stopped = await seq_of(store, "stopped")
    assert hooks.calls[-3:] == ["before node slow", "after node slow", f"on_stop {stopped[0]}"]
    with pytest.raises(Exception, match="down"):
        await app.ainvoke(None, CFG)
    failed = await seq_of(store, "run_failed")
    resumed = await seq_of(store, "resumed")
    assert hooks.calls[-3:] == [
        f"on_resume {resumed[0]}",
        "before node broken",
        f"on_run_error {failed[0]}",
    ]
    assert hooks.calls.count(f"on_stop {stopped[0]}") == 1
