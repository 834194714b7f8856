"""LangGraph's functional API (`@entrypoint`, `@task`) on agentlog's log: a task whose
result committed is answered from the log when its entrypoint runs again, after a pause or
a SIGKILL, so its side effect happens once."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.events import MemoryEventStore
from agentlog.langgraph import (
    Command,
    InMemorySaver,
    TaskError,
    UnsupportedOptionError,
    entrypoint,
    interrupt,
    task,
)

from .helpers import spawn_worker, wait_ready

TIMEOUT = 120.0


def test_a_task_runs_once_across_a_pause_and_the_entrypoint_returns_its_value() -> None:
    ran: list[str] = []

    @task
    def shout(word: str) -> str:
        ran.append(word)
        return word.upper()

    @entrypoint(checkpointer=InMemorySaver())
    def workflow(words: list[str], *, previous: Any = None) -> dict[str, Any]:
        loud = [f.result() for f in [shout(w) for w in words]]
        verdict = interrupt({"loud": loud})
        return {"loud": loud, "verdict": verdict, "previous": previous}

    config = {"configurable": {"thread_id": "f1"}}
    paused = workflow.invoke(["a", "b"], config)
    assert paused["__interrupt__"][0].value == {"loud": ["A", "B"]}
    assert workflow.get_state(config).next == ("workflow",)
    done = workflow.invoke(Command(resume="ok"), config)
    assert done == {"loud": ["A", "B"], "verdict": "ok", "previous": None}
    assert ran == ["a", "b"]  # not run again on resume
    assert workflow.get_state(config).values == done
    again = workflow.invoke(["c"], config)
    assert again["__interrupt__"][0].value == {"loud": ["C"]}
    assert workflow.invoke(Command(resume="no"), config)["previous"] == done


def test_final_returns_one_value_and_saves_another_and_tasks_stream_their_results() -> None:
    @task
    def double(n: int) -> int:
        return n * 2

    @entrypoint(checkpointer=MemoryEventStore())
    def counter(n: int, *, previous: Any = None) -> Any:
        total = (previous or 0) + double(n).result()
        return entrypoint.final(value=f"total {total}", save=total)

    config = {"configurable": {"thread_id": "f2"}}
    assert counter.invoke(1, config) == "total 2"
    assert list(counter.stream(3, config)) == [{"double": 6}, {"counter": "total 8"}]
    assert counter.get_state(config).values == 8


async def test_an_async_entrypoint_awaits_its_tasks() -> None:
    @task
    async def inc(n: int) -> int:
        return n + 1

    @entrypoint()
    async def chain(n: int) -> int:
        first, second = inc(n), inc(n + 10)
        return await first + await second

    assert await chain.ainvoke(1) == 2 + 12


def test_a_failed_task_fails_the_run_and_runs_again_on_the_next_invoke() -> None:
    attempts: list[int] = []

    @task
    def flaky(n: int) -> int:
        attempts.append(n)
        if len(attempts) == 1:
            raise ValueError("first time")
        return n

    @entrypoint(checkpointer=InMemorySaver())
    def run(n: int) -> int:
        return flaky(n).result()

    config = {"configurable": {"thread_id": "f3"}}
    with pytest.raises(Exception, match="first time"):
        run.invoke(5, config)
    assert run.invoke(None, config) == 5
    assert attempts == [5, 5]


def test_misuse_is_refused_with_the_fix() -> None:
    @task
    def lonely() -> int:
        return 1

    with pytest.raises(TaskError, match="outside an entrypoint"):
        lonely()
    with pytest.raises(UnsupportedOptionError, match="cache_policy"):
        task(cache_policy=object())

    @task
    def opaque() -> object:
        return object()

    @entrypoint()
    def uses(_: int) -> object:
        return opaque().result()

    with pytest.raises(Exception, match="cannot keep"):
        uses.invoke(1)


@given(st.lists(st.integers(-50, 50), max_size=5))
def test_what_invoke_returns_is_what_the_log_reads_back(numbers: list[int]) -> None:
    @task
    def square(n: int) -> int:
        return n * n

    @entrypoint(checkpointer=InMemorySaver())
    def squares(ns: list[int]) -> list[int]:
        return [f.result() for f in [square(n) for n in ns]]

    config = {"configurable": {"thread_id": "p"}}
    assert squares.invoke(numbers, config) == [n * n for n in numbers]
    assert squares.get_state(config).values == [n * n for n in numbers]


@pytest.mark.parametrize(("hold", "runs"), [("after-b", "abc"), ("in-b", "abbc")])
def test_sigkill_then_resume_runs_no_committed_task_again(
    hold: str, runs: str, tmp_path: Path
) -> None:
    """Killed after a and b committed, neither runs again; killed inside b, b (cut short)
    runs once more, a does not."""
    db, effects = tmp_path / "f.db", tmp_path / "effects.txt"
    proc = spawn_worker("functional_crash", db, effects, "t", hold)
    wait_ready(proc, TIMEOUT)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=TIMEOUT)
    resumed = spawn_worker("functional_crash", db, effects, "t", "none")
    out, err = resumed.communicate(timeout=TIMEOUT)
    assert resumed.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == {"a": 5, "b": 50, "c": 47}
    assert "".join(effects.read_text().split()) == runs
