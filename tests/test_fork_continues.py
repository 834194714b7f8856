"""A fork at a point mid-run goes on where its source was there, however the source thread
was created (`ainvoke`, or `POST /threads` whose log opens with `thread_created`); until it
is resumed it reads as paused at the fork point, so an edit `as_node=` works on it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors import END, Command, StateGraph, ToolNode, interrupt
from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.testing import FaultyStore, SimulatedCrashError
from agentlog.events import EventStore, MemoryEventStore, SQLiteEventStore
from agentlog.events.kinds import ThreadCreated
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    Message,
    ToolCallBlock,
    ToolResultBlock,
)

SOURCE = {"thread_id": "t"}


def weather_graph(calls: dict[str, int]) -> StateGraph[AgentState]:
    """agent -> tools -> agent -> END, counting what runs."""

    def agent(state: AgentState) -> list[Message]:
        calls["agent"] += 1
        results = [m for m in state.context if m.role == "tool"]
        if results:
            return [Message.text_message(f"it is {results[-1].text()}", role="assistant")]
        call = ToolCallBlock(id="w1", name="get_weather", args={"city": "Oslo"})
        return [Message(role="assistant", content=[call])]

    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls["tool"] += 1
        return f"sunny in {city}"

    def route(state: AgentState) -> str:
        return "tools" if state.context[-1].tool_calls() else END

    graph: StateGraph[AgentState] = StateGraph(name="weather")
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph


def texts(state: AgentState) -> list[str]:
    return [m.text() for m in state.context]


async def kinds(store: EventStore, thread: str) -> list[str]:
    return [r.kind async for r in store.read(thread)]


async def source_thread(app: Any, created: bool) -> None:
    """Thread "t", run to its end: created first as `POST /threads` does, or by `ainvoke`."""
    if created:
        made = ThreadCreated(by="alice", graph_id="weather", metadata={"team": "a"})
        await app.awrite_claimed("t", lambda fold: [made], actor="alice", what="a creation")
    done = await app.ainvoke("weather in Oslo?", SOURCE, include_state=True)
    assert done["status"] == "completed"


@pytest.mark.parametrize("created", [True, False], ids=["thread_created", "ainvoke"])
async def test_a_fork_mid_run_resumes_where_its_source_was(
    store: EventStore, created: bool
) -> None:
    calls = {"agent": 0, "tool": 0}
    app = weather_graph(calls).compile(store)
    await source_thread(app, created)
    source = await app.aget_state(SOURCE)
    assert calls == {"agent": 2, "tool": 1}
    fork = {"thread_id": await app.afork(SOURCE, at_step=1, new_thread_id="f")}
    done = await app.ainvoke(None, fork, include_state=True)
    assert done["status"] == "completed"
    assert calls == {"agent": 3, "tool": 2}  # the tool answered the call, the agent closed
    assert texts(done["state"]) == texts(source)
    assert "run_started" not in await kinds(store, "f")  # the run went on, not over
    assert (await store.verify("f")).ok


@pytest.mark.parametrize("created", [True, False], ids=["thread_created", "ainvoke"])
async def test_a_fork_mid_run_reads_as_paused_at_the_fork_point(
    store: EventStore, created: bool
) -> None:
    app = weather_graph({"agent": 0, "tool": 0}).compile(store)
    await source_thread(app, created)
    fork = {"thread_id": await app.afork(SOURCE, at_step=1, new_thread_id="f")}
    meta = (await app.aget_state(fork)).execution_meta
    assert (meta.status, meta.interrupted_node, meta.step) == (
        ExecutionStatus.INTERRUPTED_BEFORE,
        "tools",
        1,
    )
    assert meta.interrupt_reason == "forked"
    assert meta.interrupt_data is not None and meta.interrupt_data["thread_id"] == "t"
    assert (
        meta.internal_data["run_id"]
        != (await app.aget_state(SOURCE)).execution_meta.internal_data["run_id"]
    )
    assert await kinds(store, "f") == ["forked"]


@pytest.mark.parametrize("created", [True, False], ids=["thread_created", "ainvoke"])
async def test_a_fork_takes_a_different_tool_result_as_the_tool_node(
    store: EventStore, created: bool
) -> None:
    """The documented way to try another tool result: fork at the step, edit as the tool."""
    calls = {"agent": 0, "tool": 0}
    app = weather_graph(calls).compile(store)
    await source_thread(app, created)
    fork = {"thread_id": await app.afork(SOURCE, at_step=1)}
    other = Message(role="tool", content=[ToolResultBlock(call_id="w1", output="snowing in Oslo")])
    await app.aupdate_state(fork, {"messages": [other]}, as_node="tools", actor="bo")
    edited = (await app.aget_state(fork)).execution_meta
    assert (edited.status, edited.interrupted_node) == (ExecutionStatus.INTERRUPTED_BEFORE, "agent")
    done = await app.ainvoke(None, fork, include_state=True)
    assert texts(done["state"])[-1] == "it is snowing in Oslo"
    assert calls["tool"] == 1  # the edit answered the call: the tool never ran on the fork
    assert texts(await app.aget_state(SOURCE))[-1] == "it is sunny in Oslo"


async def test_a_fork_of_a_node_waiting_on_its_second_question_keeps_the_first_answer(
    store: EventStore,
) -> None:
    """A node paused in its second `interrupt()` has had its first answered: a fork of that
    point waits on the second question, so the value it is given answers that one."""
    answers: list[tuple[Any, Any]] = []

    def asker(state: AgentState) -> list[Message]:
        first, second = interrupt("which order?"), interrupt("how much?")
        answers.append((first, second))
        return [Message.text_message(f"{first}: {second}", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph(name="asker")
    graph.add_node("asker", asker)
    graph.set_entry_point("asker")
    graph.add_edge("asker", END)
    app = graph.compile(store)
    await app.ainvoke("refund please", SOURCE)
    await app.ainvoke(Command(resume="A-1"), SOURCE)  # the first question answered
    fork = {"thread_id": await app.afork(SOURCE, new_thread_id="f")}
    done = await app.ainvoke(Command(resume="10 EUR"), fork, include_state=True)
    assert done["status"] == "completed", done.get("__interrupt__")
    assert answers == [("A-1", "10 EUR")]
    assert texts(done["state"])[-1] == "A-1: 10 EUR"


async def test_a_fork_before_the_first_run_stays_idle_and_takes_input(store: EventStore) -> None:
    calls = {"agent": 0, "tool": 0}
    app = weather_graph(calls).compile(store)
    made = ThreadCreated(by="alice", graph_id="weather", metadata={})
    await app.awrite_claimed("t", lambda fold: [made], actor="alice", what="a creation")
    fork = {"thread_id": await app.afork(SOURCE, at_seq=1)}
    assert (await app.aget_state(fork)).execution_meta.status == ExecutionStatus.IDLE
    done = await app.ainvoke("weather?", fork, include_state=True)
    assert done["status"] == "completed" and calls == {"agent": 2, "tool": 1}


async def test_a_fork_whose_resume_crashed_right_after_recording_it_goes_on() -> None:
    """The resume answered the fork's pause (the log says so): after the crash the run
    carries on into the node, not pausing at the graph's breakpoint there a second time."""
    calls = {"agent": 0, "tool": 0}
    inner = MemoryEventStore()
    app = weather_graph(calls).compile(inner, interrupt_before=["tools"])
    await app.ainvoke("weather in Oslo?", SOURCE)
    await app.ainvoke(None, SOURCE)  # approved at the breakpoint: completes
    fork = {"thread_id": await app.afork(SOURCE, at_step=1, new_thread_id="f")}
    faulty = FaultyStore(inner, "f")
    crashing = weather_graph(calls).compile(faulty, interrupt_before=["tools"])
    faulty.crash_at(1, "after")  # the resume's first commit lands; the process dies
    with contextlib.suppress(SimulatedCrashError):
        await crashing.ainvoke(None, fork)
    assert faulty.crashed and (await kinds(inner, "f"))[-1] == "resumed"
    faulty.bury()
    restarted = weather_graph(calls).compile(inner, interrupt_before=["tools"])
    done = await restarted.ainvoke(None, fork, include_state=True)
    assert done["status"] == "completed"
    assert "interrupt_raised" not in await kinds(inner, "f")


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, int]]]:
    calls = {"agent": 0, "tool": 0}
    async with SQLiteEventStore(tmp_path / "serve.db") as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("weather", weather_graph(calls).compile(store))
        runtime.register_entry_point(EntryPoint(id="chat", graph_id="weather"))
        async with runtime:
            transport = httpx.ASGITransport(app=create_app(runtime))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                yield http, calls


async def test_a_fork_over_http_resumes_where_its_source_was(client: Any) -> None:
    http, calls = client
    made = await http.post("/log/threads", json={"graph_id": "weather"})
    thread = made.json()["thread_id"]
    ran = await http.post(
        f"/log/threads/{thread}/runs/wait", json={"assistant_id": "chat", "input": "weather?"}
    )
    assert ran.json()["status"] == "completed", ran.text
    source = ran.json()["values"]["context"]
    copied = await http.post(f"/log/threads/{thread}/copy", json={"step": 1, "thread_id": "f"})
    assert copied.status_code == 200, copied.text
    shown = (await http.get("/log/threads/f")).json()
    assert shown["status"] == "interrupted_before", shown
    assert (await http.get("/log/threads/f/state")).json()["next"] == ["tools"]
    before = dict(calls)
    done = await http.post(
        "/log/threads/f/runs/wait", json={"assistant_id": "chat", "command": {"resume": None}}
    )
    assert done.json()["status"] == "completed", done.text
    assert calls == {"agent": before["agent"] + 1, "tool": before["tool"] + 1}
    context = done.json()["values"]["context"]
    assert [m["role"] for m in context] == [m["role"] for m in source]
    assert context[-1]["content"] == source[-1]["content"]  # "it is sunny in Oslo"
