"""A value given where no node asked for one (a breakpoint before or after a node) has no
reader: it is refused, typed, before anything is written, through every way a run resumes,
and a node paused in `interrupt()` still receives its value."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors import END, Command, StateGraph, ToolNode, UnreadResumeValueError, interrupt
from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import EventStore, SQLiteEventStore
from agentlog.projections import AgentState, ExecutionStatus, Message, ToolCallBlock

NO = "NO, do not refund"
CFG = {"thread_id": "t"}


def support_graph(refunds: list[str], **compiled: Any) -> Any:
    """An agent that asks for a refund, a tool node that pays it, and a closing reply."""

    def agent(state: AgentState) -> list[Message]:
        if any(m.role == "tool" for m in state.context):
            return [Message.text_message("done", role="assistant")]
        call = ToolCallBlock(id="r1", name="refund", args={"order": "A-1"})
        return [Message(role="assistant", content=[call])]

    def refund(order: str) -> str:
        """Pay the order's money back."""
        refunds.append(order)
        return f"refunded {order}"

    def route(state: AgentState) -> str:
        return "refund" if state.context[-1].tool_calls() else END

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_node("refund", ToolNode([refund]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", route, {"refund": "refund", END: END})
    graph.add_edge("refund", "agent")
    graph.name = "support"
    return graph


async def log_of(store: EventStore, thread: str = "t") -> list[Any]:
    return [(r.seq, r.hash) async for r in store.read(thread)]


def says_what_works(error: BaseException) -> None:
    text = str(error)
    assert "nothing was written" in text
    assert "resume with None" in text  # approve
    assert "new input" in text  # reject
    assert "interrupt()" in text  # ask from inside the node


@pytest.mark.parametrize("entry", ["ainvoke", "astream", "update_and_resume"])
async def test_a_value_at_a_breakpoint_is_refused_and_writes_nothing(
    store: EventStore, entry: str
) -> None:
    refunds: list[str] = []
    app = support_graph(refunds).compile(store, interrupt_before=["refund"])
    paused = await app.ainvoke("refund my order", CFG, include_state=True)
    assert paused["state"].execution_meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    before = await log_of(store)
    with pytest.raises(UnreadResumeValueError, match="paused before node 'refund'") as caught:
        if entry == "ainvoke":
            await app.ainvoke(Command(resume=NO), CFG)
        elif entry == "astream":
            async for _ in app.astream(Command(resume=NO), CFG):
                pass
        else:
            note = {"messages": [Message.text_message("note")]}
            await app.ainvoke(Command(resume=NO, update=note), CFG)
    says_what_works(caught.value)
    assert "pending tool calls are answered as not run" in str(caught.value)
    assert refunds == [] and await log_of(store) == before
    done = await app.ainvoke(None, CFG, include_state=True)  # None approves
    assert refunds == ["A-1"] and done["status"] == "completed"


async def test_a_value_after_a_node_is_refused_and_input_rejects(store: EventStore) -> None:
    refunds: list[str] = []
    app = support_graph(refunds).compile(store, interrupt_after=["agent"])
    await app.ainvoke("refund my order", CFG)
    before = await log_of(store)
    with pytest.raises(UnreadResumeValueError, match="paused after node 'agent'") as caught:
        await app.ainvoke(Command(resume=NO), CFG)
    says_what_works(caught.value)
    assert refunds == [] and await log_of(store) == before
    rejected = await app.ainvoke(NO, CFG, include_state=True)  # new input rejects the call
    assert refunds == []
    results = [m for m in rejected["state"].context if m.role == "tool"]
    assert len(results) == 1 and "not run" in results[0].text()


def test_invoke_refuses_a_value_at_a_breakpoint() -> None:
    refunds: list[str] = []
    app = support_graph(refunds).compile(interrupt_before=["refund"])
    try:
        app.invoke("refund my order", CFG)
        with pytest.raises(UnreadResumeValueError):
            app.invoke(Command(resume=NO), CFG)
        assert refunds == []
        assert app.invoke(None, CFG)["status"] == "completed" and refunds == ["A-1"]
    finally:
        app.close()


async def test_a_node_that_asked_still_receives_its_value(store: EventStore) -> None:
    def ask(state: AgentState) -> list[Message]:
        answer = interrupt("refund the order?")
        return [Message.text_message(f"answer: {answer}", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("ask", ask)
    graph.set_entry_point("ask")
    graph.add_edge("ask", END)
    app = graph.compile(store, interrupt_before=["ask"])
    await app.ainvoke("refund?", CFG)
    with pytest.raises(UnreadResumeValueError, match="before node 'ask'"):
        await app.ainvoke(Command(resume=NO), CFG)  # the breakpoint: the node has not asked
    await app.ainvoke(None, CFG)  # past the breakpoint, the node asks
    done = await app.ainvoke(Command(resume=NO), CFG, include_state=True)
    assert [m.text() for m in done["state"].context] == ["refund?", f"answer: {NO}"]


def support_runtime(store: EventStore, refunds: list[str]) -> AgentRuntime:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support_graph(refunds).compile(store, interrupt_before=["refund"]))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    return runtime


async def test_the_runtime_refuses_a_value_at_a_breakpoint_before_accepting_it(
    store: EventStore,
) -> None:
    refunds: list[str] = []
    async with support_runtime(store, refunds) as runtime:
        thread = await runtime.trigger("chat", "refund my order")
        assert (await runtime.wait(thread, timeout=60))["status"] == "interrupted_before"
        before = await log_of(store, thread)
        runtime_log = await log_of(store, runtime.config.runtime_thread)
        with pytest.raises(UnreadResumeValueError) as caught:
            await runtime.inject_input(thread, NO, actor="alice")
        says_what_works(caught.value)
        with pytest.raises(UnreadResumeValueError):
            await runtime.trigger("chat", Command(resume=NO), thread_id=thread)
        assert await log_of(store, thread) == before
        assert await log_of(store, runtime.config.runtime_thread) == runtime_log  # no trigger
        assert refunds == []
        await runtime.inject_input(thread, None, actor="alice")  # approve
        assert (await runtime.wait(thread, timeout=60))["status"] == "completed"
    assert refunds == ["A-1"]


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, SQLiteEventStore]]:
    async with SQLiteEventStore(tmp_path / "serve.db") as store:
        refunds: list[str] = []
        runtime = support_runtime(store, refunds)
        async with runtime:
            transport = httpx.ASGITransport(app=create_app(runtime))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                http.refunds = refunds  # type: ignore[attr-defined]
                yield http, store


async def test_http_refuses_a_value_at_a_breakpoint_with_a_stable_code(client: Any) -> None:
    http, store = client
    paused = await http.post(
        "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "refund my order"}
    )
    assert paused.json()["status"] == "interrupted_before", paused.text
    before = await log_of(store)
    for path in ("/log/threads/t/runs/wait", "/log/threads/t/runs"):
        refused = await http.post(path, json={"assistant_id": "chat", "command": {"resume": NO}})
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "resume_value_unread"
        says_what_works(Exception(error["message"]))
    assert await log_of(store) == before and http.refunds == []
    done = await http.post(
        "/log/threads/t/runs/wait", json={"assistant_id": "chat", "command": {"resume": None}}
    )
    assert done.json()["status"] == "completed", done.text
    assert http.refunds == ["A-1"]


async def test_before_a_plain_node_the_refusal_says_to_cancel(store: EventStore) -> None:
    def reply(state: AgentState) -> list[Message]:
        return [Message.text_message("sent", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("draft", reply)
    graph.add_node("send", reply)
    graph.set_entry_point("draft")
    graph.add_edge("draft", "send")
    graph.add_edge("send", END)
    app = graph.compile(store, interrupt_before=["send"])
    await app.ainvoke("write to Bo", CFG)
    before = await log_of(store)
    with pytest.raises(UnreadResumeValueError, match="cancel the run") as caught:
        await app.ainvoke(Command(resume="no"), CFG)
    says_what_works(caught.value)
    assert await log_of(store) == before


async def test_a_value_for_a_failed_run_is_refused_too(store: EventStore) -> None:
    """A retry re-runs the node from the start: no `interrupt()` waits for the value."""
    broken = [True]

    def flaky(state: AgentState) -> list[Message]:
        if broken[0]:
            raise RuntimeError("down")
        return [Message.text_message("ok", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("flaky", flaky)
    graph.set_entry_point("flaky")
    graph.add_edge("flaky", END)
    app = graph.compile(store)
    with pytest.raises(Exception, match="down"):
        await app.ainvoke("go", CFG)
    before = await log_of(store)
    with pytest.raises(UnreadResumeValueError, match="failed at node 'flaky'"):
        await app.ainvoke(Command(resume="try harder"), CFG)
    assert await log_of(store) == before
    broken[0] = False
    assert (await app.ainvoke(None, CFG))["status"] == "completed"


async def test_a_value_queued_behind_a_running_run_is_refused_when_it_runs(
    store: EventStore,
) -> None:
    """Behind a run still going, where it will pause is not known yet: the runtime takes the
    resume in turn, and the engine refuses it then, writing nothing on the thread."""
    import asyncio

    refunds: list[str] = []
    go = asyncio.Event()
    graph = support_graph(refunds)
    agent = graph.nodes["agent"]

    async def held(state: AgentState) -> list[Message]:
        await go.wait()
        result: list[Message] = agent(state)
        return result

    graph.nodes["agent"] = held
    runtime = AgentRuntime(store)
    runtime.add_graph("support", graph.compile(store, interrupt_before=["refund"]))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    async with runtime:
        first = await runtime.submit("chat", "refund my order")
        thread = first.thread_id
        queued = await runtime.submit("chat", Command(resume=NO), thread_id=thread)
        go.set()
        assert (await runtime.wait_for(first.trigger_id, timeout=60))["status"] == (
            "interrupted_before"
        )
        paused_at = await store.last_seq(thread)
        with pytest.raises(UnreadResumeValueError):
            await runtime.wait_for(queued.trigger_id, timeout=60)
        assert await store.last_seq(thread) == paused_at and refunds == []


async def test_a_value_that_would_interrupt_a_running_run_is_refused_before_the_stop(
    store: EventStore,
) -> None:
    """`multitask_strategy='interrupt'` stops the running run, after which no node asks for
    a value: a resume value sent so is refused before the stop, so a refused request never
    halts the run it could not answer."""
    import asyncio

    refunds: list[str] = []
    go, entered = asyncio.Event(), asyncio.Event()
    graph = support_graph(refunds)
    agent = graph.nodes["agent"]

    async def held(state: AgentState) -> list[Message]:
        entered.set()
        await go.wait()
        result: list[Message] = agent(state)
        return result

    graph.nodes["agent"] = held
    runtime = AgentRuntime(store)
    runtime.add_graph("support", graph.compile(store, interrupt_before=["refund"]))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    async with runtime:
        first = await runtime.submit("chat", "refund my order")
        await entered.wait()
        thread = first.thread_id
        before = (await store.last_seq(thread), set(runtime.ledger.triggers))
        try:
            with pytest.raises(UnreadResumeValueError, match="enqueue") as refused:
                await runtime.submit(
                    "chat", Command(resume=NO), thread_id=thread, multitask_strategy="interrupt"
                )
            assert "nothing was written" in str(refused.value)
            assert (await store.last_seq(thread), set(runtime.ledger.triggers)) == before
        finally:
            go.set()
        ended = await runtime.wait_for(first.trigger_id, timeout=60)
        assert ended["status"] == "interrupted_before" and refunds == []  # not stopped
