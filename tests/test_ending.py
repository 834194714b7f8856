"""Every way a run ends early answers its tool calls as the log says they went: a call whose
result committed keeps it, a call still running is abandoned (its outcome unknown), and only
a call that never started is "not run". One function decides (`agentlog.actors.engine.ending`);
these tests
reach it through every way a run ends early: the runtime's cancel, its HTTP route, double-
texting's rollback and interrupt, astop, a node timeout, a caller that went away, and a
human edit that ends or moves the run on (whose answers must come in the order providers
demand)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.actors import NodeTimeoutError
from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.testing import ask_tools, reply, tool_call, until
from agentlog.events import (
    EventStore,
    MemoryEventStore,
    NodeEntered,
    RunStarted,
    StepAdvanced,
    Stopped,
    StopRequested,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    InvalidStateUpdateError,
    Message,
    ToolCallBlock,
    ToolResultBlock,
    message_appended,
    order_problems,
)
from agentlog.projections.transcript import results_of
from tests.helpers import agent_with_tools

CFG = {"thread_id": "t"}
GUARD_S = 300.0
"""A failure guard only: how long a held tool waits for the test to release it."""
"""Polls of 10 ms at most before a wait is called failed: a guard, never the synchronisation."""


class Mail:
    """A support agent that sends an email and looks something up at once: the email
    returns at once, the lookup waits on `gate` (forever, unless a test opens it)."""

    def __init__(self, store: EventStore, *, sync: bool = False) -> None:
        self.store = store
        self.sent: list[str] = []
        self.gate = asyncio.Event()
        self.sync = sync
        self.thread_gate = threading.Event()
        """What a `def` lookup (`sync`) waits on, on its worker thread."""
        self.thread_entered = threading.Event()
        """Set once the `def` lookup runs on its worker thread (its start record may come
        first: a busy machine can run the cancel before the executor runs the function)."""

    def graph(self) -> Any:
        async def send_email(to: str) -> str:
            """Send an email."""
            self.sent.append(to)
            return f"sent to {to}"

        async def lookup(query: str) -> str:
            """Look something up (slowly)."""
            await self.gate.wait()
            return f"found {query}"

        def lookup_sync(query: str) -> str:
            """Look something up (slowly)."""
            self.thread_entered.set()
            assert self.thread_gate.wait(GUARD_S), "the test never let the lookup return"
            return f"found {query}"

        if self.sync:
            lookup_sync.__name__ = "lookup"
            lookup = lookup_sync  # type: ignore[assignment]

        def agent(state: AgentState) -> list[Message]:
            last = state.context[-1]
            if last.role == "user" and last.text() == "mail bo":
                calls = [
                    tool_call("send_email", call_id="email", to="bo"),
                    tool_call("lookup", call_id="lookup", query="order"),
                ]
                return [ask_tools(*calls)]
            return [reply(f"done after {last.role}")]

        return agent_with_tools(agent, [send_email, lookup])

    async def email_sent_lookup_running(self, thread: str = "t") -> None:
        """Until the email's result is committed and the lookup has started."""

        async def check() -> bool:
            if await self.store.last_seq(thread) == 0:
                return False
            kinds = [
                (r.kind, getattr(r.event, "call_id", None)) async for r in self.store.read(thread)
            ]
            return ("tool_call_finished", "email") in kinds and (
                "tool_call_started",
                "lookup",
            ) in kinds

        await until(check, what="the email sent and the lookup running")


def answers(context: list[Message]) -> dict[str, ToolResultBlock]:
    return {r.call_id: r for m in context for r in results_of(m)}


def assert_told_the_truth(context: list[Message]) -> None:
    """The email keeps its real result; the lookup is abandoned, its outcome unknown."""
    found = answers(context)
    email, lookup = found["email"], found["lookup"]
    assert (email.status, email.output, email.is_error) == ("completed", "sent to bo", False)
    assert lookup.status == "abandoned" and lookup.is_error
    assert "unknown" in str(lookup.output) and "not run" not in str(lookup.output)
    assert not order_problems(context)


async def runtime_for(store: EventStore, mail: Mail) -> AgentRuntime:
    runtime = AgentRuntime(store)
    runtime.add_graph("g", mail.graph().compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="g"))
    await runtime.start()
    return runtime


async def test_a_runtime_cancel_keeps_the_sent_email_and_abandons_the_running_lookup() -> None:
    store = MemoryEventStore()
    mail = Mail(store)
    runtime = await runtime_for(store, mail)
    try:
        await runtime.trigger("chat", "mail bo", thread_id="t")
        await mail.email_sent_lookup_running()
        await runtime.cancel("t", actor="alice", reason="duplicate")
        state = await runtime.graphs["g"].app.aget_state(CFG)
    finally:
        await runtime.stop()
    assert state.execution_meta.status == ExecutionStatus.CANCELLED
    assert_told_the_truth(state.context)
    assert mail.sent == ["bo"]


async def test_a_runtime_cancel_waits_for_a_def_lookup_and_still_calls_it_abandoned() -> None:
    """A `def` tool cannot be stopped: the cancel waits for its worker thread to return
    (the thread stays owned meanwhile), and the result it returns then is discarded."""
    store = MemoryEventStore()
    mail = Mail(store, sync=True)
    runtime = await runtime_for(store, mail)
    try:
        await runtime.trigger("chat", "mail bo", thread_id="t")
        await mail.email_sent_lookup_running()
        await until(mail.thread_entered.is_set, what="the def lookup on its worker thread")
        cancelling = asyncio.ensure_future(runtime.cancel("t", actor="alice"))

        async def abandoned() -> bool:
            return any(
                [
                    isinstance(r.event, ToolCallFinished) and r.event.call_id == "lookup"
                    async for r in store.read("t")
                ]
            )

        await until(abandoned, what="the lookup recorded as abandoned")
        assert not cancelling.done()  # the worker thread still owns the thread
        mail.thread_gate.set()
        await cancelling
        state = await runtime.graphs["g"].app.aget_state(CFG)
    finally:
        mail.thread_gate.set()
        await runtime.stop()
    assert state.execution_meta.status == ExecutionStatus.CANCELLED
    assert_told_the_truth(state.context)


async def test_an_http_cancel_keeps_the_sent_email_and_abandons_the_running_lookup() -> None:
    store = MemoryEventStore()
    mail = Mail(store)
    runtime = await runtime_for(store, mail)
    transport = httpx.ASGITransport(app=create_app(runtime))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            started = await client.post(
                "/log/threads/t/runs", json={"assistant_id": "chat", "input": "mail bo"}
            )
            assert started.status_code < 300, started.text
            await mail.email_sent_lookup_running()
            cancelled = await client.post(
                f"/log/threads/t/runs/{started.json()['run_id']}/cancel", json={"reason": "dup"}
            )
            assert cancelled.status_code == 200, cancelled.text
            state = (await client.get("/log/threads/t/state")).json()
    finally:
        await runtime.stop()
    assert state["status"] == "cancelled"
    assert_told_the_truth([Message.model_validate(m) for m in state["values"]["context"]])


async def test_a_rollback_records_the_sent_email_and_the_abandoned_lookup() -> None:
    store = MemoryEventStore()
    mail = Mail(store)
    runtime = await runtime_for(store, mail)
    try:
        await runtime.trigger("chat", "mail bo", thread_id="t")
        await mail.email_sent_lookup_running()
        await runtime.trigger("chat", "never mind", thread_id="t", multitask_strategy="rollback")
        await runtime.wait("t", timeout=30)
    finally:
        await runtime.stop()
    records = [r async for r in store.read("t")]
    superseded = next(i for i, r in enumerate(records) if r.kind == "run_superseded")
    before = [
        Message.model_validate(r.event.message)  # type: ignore[attr-defined]
        for r in records[:superseded]
        if r.kind == "message_appended"
    ]
    assert_told_the_truth(before)  # the rollback's commit answers both calls
    assert mail.sent == ["bo"]


async def test_an_interrupt_lets_the_running_lookup_finish_and_keeps_both_results() -> None:
    store = MemoryEventStore()
    mail = Mail(store)
    runtime = await runtime_for(store, mail)
    try:
        await runtime.trigger("chat", "mail bo", thread_id="t")
        await mail.email_sent_lookup_running()
        await runtime.trigger("chat", "and then?", thread_id="t", multitask_strategy="interrupt")
        mail.gate.set()  # the stop lets the running node finish and commit
        result = await runtime.wait("t", timeout=30)
    finally:
        await runtime.stop()
    found = answers(result["state"].context)
    assert found["email"].output == "sent to bo" and found["lookup"].output == "found order"
    assert not order_problems(result["state"].context)


async def stopped_by(how: str, store: MemoryEventStore, mail: Mail) -> Any:
    """The app, after the run's tool node was cut short `how`, the email sent."""
    limits = {"tools": 1.0} if how == "timeout" else {}
    app = mail.graph().compile(store, node_timeouts=limits)
    task = asyncio.ensure_future(app.ainvoke("mail bo", CFG))
    await mail.email_sent_lookup_running()
    if how == "astop":
        assert await app.astop(CFG)
        await task
    elif how == "caller":
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        with pytest.raises(NodeTimeoutError):
            await task
    return app


@pytest.mark.parametrize("how", ["astop", "caller", "timeout"])
async def test_a_cancel_after_the_node_was_cut_short_keeps_what_committed(how: str) -> None:
    store = MemoryEventStore()
    mail = Mail(store)
    app = await stopped_by(how, store, mail)
    assert await app.acancel(CFG, by="alice")
    state = await app.aget_state(CFG)
    assert state.execution_meta.status == ExecutionStatus.CANCELLED
    assert_told_the_truth(state.context)
    records = [r async for r in store.read("t")]
    closed = [r.event for r in records if isinstance(r.event, ToolCallFinished)]
    assert sorted((e.call_id, e.status) for e in closed) == [
        ("email", "completed"),
        ("lookup", "abandoned"),
    ]  # each started call is closed exactly once


@pytest.mark.parametrize("how", ["astop", "caller", "timeout"])
async def test_going_on_after_the_node_was_cut_short_keeps_what_committed(how: str) -> None:
    store = MemoryEventStore()
    mail = Mail(store)
    app = await stopped_by(how, store, mail)
    result = await app.ainvoke(None, CFG, include_state=True)
    assert result["status"] == "completed"
    assert_told_the_truth(result["state"].context)
    assert mail.sent == ["bo"]


async def test_calls_started_ahead_and_never_handed_to_their_tool_are_not_run() -> None:
    """A stop between the agent and its tool node, after the agent's commit entered the tool
    node and started its calls ahead: the calls never reached their tool, and a cancel says
    so (the log as a run leaves it, written directly: the window is too narrow to hit)."""
    store = MemoryEventStore()
    calls = [
        tool_call("send_email", call_id="email", to="bo"),
        tool_call("lookup", call_id="lookup", query="order"),
    ]
    await store.append(
        "t",
        [
            RunStarted(entry_node="agent"),
            message_appended(Message.text_message("mail bo", message_id="u")),
            NodeEntered(node="agent"),
            message_appended(ask_tools(*calls).model_copy(update={"message_id": "a"})),
            StepAdvanced(step=1, next_node="tools"),
            NodeEntered(node="tools"),
            *(ToolCallStarted(call_id=c.id, name=c.name, node="tools") for c in calls),
            StopRequested(by="alice", between_nodes=True),
            Stopped(node="agent", when="after"),
        ],
        expected_seq=0,
    )
    app = Mail(store).graph().compile(store)
    assert await app.acancel(CFG, by="alice")
    state = await app.aget_state(CFG)
    found = answers(state.context)
    for call in ("email", "lookup"):
        assert found[call].status == "rejected" and "not run" in str(found[call].output)
    assert not order_problems(state.context)
    assert "pending_tool_calls" not in state.execution_meta.internal_data


async def paused_before_tools(store: MemoryEventStore) -> Any:
    mail = Mail(store)
    mail.gate.set()
    app = mail.graph().compile(store, interrupt_before=["tools"])
    assert (await app.ainvoke("mail bo", CFG))["status"] == "interrupted_before"
    return app


async def test_an_edit_as_node_that_ends_the_run_answers_the_calls_before_its_message() -> None:
    store = MemoryEventStore()
    app = await paused_before_tools(store)
    await app.aupdate_state(CFG, {"messages": [reply("never mind")]}, as_node="agent")
    state = await app.aget_state(CFG)
    assert state.execution_meta.status == ExecutionStatus.COMPLETED
    assert [m.role for m in state.context] == ["user", "assistant", "tool", "tool", "assistant"]
    assert not order_problems(state.context)
    assert all("not run" in str(r.output) for r in answers(state.context).values())


async def test_a_node_going_on_past_open_calls_has_them_answered_before_its_message() -> None:
    """A graph that routes an assistant message's calls to a node that is no tool node: the
    calls never run, and their answers come before that node's message, not at the end."""
    from agentlog.actors import END, StateGraph

    def agent(state: AgentState) -> list[Message]:
        return [ask_tools(tool_call("lookup", call_id="lookup", query="order"))]

    def summarize(state: AgentState) -> list[Message]:
        return [reply("summed up")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_node("summarize", summarize)
    graph.set_entry_point("agent")
    graph.add_edge("agent", "summarize")
    graph.add_edge("summarize", END)
    result = await graph.compile(MemoryEventStore()).ainvoke("go", CFG, include_state=True)
    context = result["state"].context
    assert [m.role for m in context] == ["user", "assistant", "tool", "assistant"]
    assert "not run: node 'summarize' went on" in str(answers(context)["lookup"].output)
    assert not order_problems(context)


async def test_a_plain_edit_that_would_split_calls_from_results_is_refused() -> None:
    store = MemoryEventStore()
    app = await paused_before_tools(store)
    before = await store.last_seq("t")
    with pytest.raises(InvalidStateUpdateError, match="answer the open tool calls first"):
        await app.aupdate_state(CFG, {"messages": [Message.text_message("also this")]})
    assert await store.last_seq("t") == before


def _edit_message(kind: str, n: int) -> Message:
    if kind == "user":
        return Message.text_message(f"user {n}", message_id=f"e{n}")
    if kind == "assistant":
        return Message.text_message(f"assistant {n}", role="assistant", message_id=f"e{n}")
    if kind == "calls":
        call = ToolCallBlock(id=f"new{n}", name="lookup", args={"query": "x"})
        return Message(message_id=f"e{n}", role="assistant", content=[call])
    call_id = "email" if kind == "answer-email" else "lookup"
    block = ToolResultBlock(call_id=call_id, output=f"by hand {n}")
    return Message(message_id=f"e{n}", role="tool", content=[block])


EDITS = st.lists(
    st.sampled_from(["user", "assistant", "calls", "answer-email", "answer-lookup"]),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60)
@given(
    first=EDITS,
    first_as=st.sampled_from([None, "agent", "tools"]),
    second=EDITS,
    second_as=st.sampled_from([None, "agent", "tools"]),
)
def test_every_edit_leaves_a_transcript_every_provider_takes(
    first: list[str], first_as: str | None, second: list[str], second_as: str | None
) -> None:
    """Two edits of any kind in a row on a run paused before its tool node: each is either
    refused (writing nothing) or leaves the context in an order providers accept, and so
    does the run going on from there."""

    async def scenario() -> None:
        store = MemoryEventStore()
        app = await paused_before_tools(store)
        n = 0
        for kinds, as_node in ((first, first_as), (second, second_as)):
            messages = []
            for kind in kinds:
                n += 1
                messages.append(_edit_message(kind, n))
            before = await store.last_seq("t")
            try:
                await app.aupdate_state(CFG, {"messages": messages}, as_node=as_node)
            except Exception as exc:  # a refusal is typed and writes nothing
                assert type(exc).__name__ in (
                    "InvalidStateUpdateError",
                    "IllegalTransitionError",
                ), exc
                assert await store.last_seq("t") == before
                continue
            state = await app.aget_state(CFG)
            assert not order_problems(state.context), order_problems(state.context)
        if (await app.aget_state(CFG)).execution_meta.is_interrupted():
            result = await asyncio.wait_for(app.ainvoke(None, CFG, include_state=True), 30)
            context = result["state"].context
            assert not order_problems(context), order_problems(context)

    asyncio.run(scenario())


PAUSES = ["before-tools", "before-review", "after-agent", "after-review", "asks", "fails"]
"""Every kind of pause a run can hold open tool calls in: a breakpoint before the tool node
or before a node that is none, one after a node, a node asking a person (`interrupt()`), and
a failed step."""


async def paused_with_calls_open(store: MemoryEventStore, pause: str) -> Any:
    """A run of agent -> review -> tools -> agent paused as `pause` says, its agent's two
    calls open (no result yet)."""
    from agentlog.actors import END, StateGraph, ToolNode, interrupt

    async def lookup(query: str) -> str:
        """Look something up."""
        return f"found {query}"

    def agent(state: AgentState) -> list[Message]:
        last = state.context[-1]
        if last.role == "user":
            calls = [tool_call("lookup", call_id=f"c{i}", query=last.text()) for i in (1, 2)]
            return [ask_tools(*calls)]
        return [reply(f"done after {last.role}")]

    failed: list[bool] = []

    def review(state: AgentState) -> None:
        if pause == "asks":
            interrupt("approve these calls?")
        if pause == "fails" and not failed:
            failed.append(True)
            raise RuntimeError("the reviewer is down")

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_node("review", review)
    graph.add_node("tools", ToolNode([lookup]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent",
        lambda state: "review" if state.context[-1].tool_calls() else END,
        {"review": "review", END: END},
    )
    graph.add_edge("review", "tools")
    graph.add_edge("tools", "agent")
    before = {"before-tools": ["tools"], "before-review": ["review"]}.get(pause, [])
    after = {"after-agent": ["agent"], "after-review": ["review"]}.get(pause, [])
    app = graph.compile(store, interrupt_before=before, interrupt_after=after)
    try:
        await app.ainvoke("order 1", CFG)
    except Exception as exc:
        assert pause == "fails", exc
    state = await app.aget_state(CFG)
    assert order_problems([*state.context, Message.text_message("x")]), pause
    return app


@settings(max_examples=40)
@given(
    pause=st.sampled_from(PAUSES),
    steps=st.lists(st.sampled_from(["input", "edit", "edit-as-agent"]), min_size=1, max_size=3),
)
def test_new_input_at_every_kind_of_pause_leaves_a_transcript_every_provider_takes(
    pause: str, steps: list[str]
) -> None:
    """New input (and edits) on a run paused in any way with tool calls open: each is refused
    (writing nothing) or leaves a context every provider accepts, and the open calls it
    passes are answered as not run, naming the new input, before its message."""

    async def scenario() -> None:
        store = MemoryEventStore()
        app = await paused_with_calls_open(store, pause)
        for n, step in enumerate(steps):
            before = await store.last_seq("t")
            earlier = set(answers((await app.aget_state(CFG)).context))
            try:
                if step == "input":
                    await asyncio.wait_for(app.ainvoke(f"order {n + 2}", CFG), 30)
                else:
                    as_node = "agent" if step == "edit-as-agent" else None
                    message = Message.text_message(f"note {n}", role="user")
                    await app.aupdate_state(CFG, {"messages": [message]}, as_node=as_node)
            except Exception as exc:  # a refusal is typed and writes nothing
                assert type(exc).__name__ in (
                    "InvalidStateUpdateError",
                    "IllegalTransitionError",
                ), exc
                assert await store.last_seq("t") == before
                continue
            context = (await app.aget_state(CFG)).context
            assert not order_problems(context), (pause, steps, order_problems(context))
            if step == "input":
                found = answers(context)
                for call in {"c1", "c2"} - earlier:
                    if found[call].status == "rejected":
                        assert "new input" in str(found[call].output) or "replied" in str(
                            found[call].output
                        )

    asyncio.run(scenario())


async def test_new_input_before_a_node_that_is_no_tool_node_answers_the_open_calls_first() -> None:
    """A run paused before a plain node while its calls are open: new input answers them as
    not run (the reason names the new input) before its message, and a new run starts."""
    store = MemoryEventStore()
    app = await paused_with_calls_open(store, "before-review")
    result = await app.ainvoke("order 2", CFG, include_state=True)
    context = result["state"].context
    assert not order_problems(context), order_problems(context)
    found = answers(context)
    for call in ("c1", "c2"):
        assert found[call].status == "rejected"
        assert "not run: the user sent new input" in str(found[call].output)
    roles = [m.role for m in context]
    assert roles[:5] == ["user", "assistant", "tool", "tool", "user"]
    kinds = [r.kind async for r in store.read("t")]
    assert kinds.count("run_started") == 2


async def test_calls_a_client_leaves_unanswered_are_not_run_before_its_next_message() -> None:
    """A client answers one of its two calls and says something in the same input: the other
    call is answered as not run (by `closing_events`, as every early end) right after the
    client's result, before its message, so no provider refuses the transcript."""
    from agentlog.actors import END, StateGraph
    from agentlog.projections import RemoteToolCallBlock

    def agent(state: AgentState) -> list[Message]:
        if state.context[-1].role == "user" and state.context[-1].text() == "where?":
            calls = [RemoteToolCallBlock(id=f"r{i}", name="locate") for i in (1, 2)]
            return [Message(role="assistant", content=calls)]
        return [reply("noted")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent",
        lambda s: "agent" if s.context[-1].tool_calls() else END,
        {"agent": "agent", END: END},
    )
    app = graph.compile(MemoryEventStore())
    assert (await app.ainvoke("where?", CFG))["status"] == "interrupted_after"
    answer = [
        {"role": "tool", "tool_call_id": "r1", "content": "Oslo"},
        {"role": "user", "content": "and hurry"},
    ]
    result = await app.ainvoke(answer, CFG, include_state=True)
    context = result["state"].context
    assert not order_problems(context), order_problems(context)
    found = answers(context)
    assert found["r1"].output == "Oslo"
    assert found["r2"].status == "rejected"
    assert found["r2"].output == (
        "not run: the client answered other calls of this message but not this one"
    )
    assert [m.role for m in context] == ["user", "assistant", "tool", "tool", "user", "assistant"]


@pytest.mark.parametrize("started", [False, True], ids=["calls-not-started", "calls-started"])
async def test_new_input_on_a_run_a_crash_cut_short_answers_its_open_calls_first(
    started: bool,
) -> None:
    """A crash left a run mid-way with its calls open (started ahead, or not yet): new input
    answers them before its message (a started call abandoned, its outcome unknown, as the
    crash left it; one never started not run), and the run goes on from there with it; the
    email the input came instead of is never sent."""
    store = MemoryEventStore()
    calls = [
        tool_call("send_email", call_id="email", to="bo"),
        tool_call("lookup", call_id="lookup", query="order"),
    ]
    events: list[Any] = [
        RunStarted(entry_node="agent"),
        message_appended(Message.text_message("mail bo", message_id="u")),
        NodeEntered(node="agent"),
        message_appended(ask_tools(*calls).model_copy(update={"message_id": "a"})),
        StepAdvanced(step=1, next_node="tools"),
    ]
    if started:
        events += [NodeEntered(node="tools")]
        events += [ToolCallStarted(call_id=c.id, name=c.name, node="tools") for c in calls]
    await store.append("t", events, expected_seq=0)
    mail = Mail(store)
    mail.gate.set()
    app = mail.graph().compile(store)
    result = await app.ainvoke("actually, do not", CFG, include_state=True)
    context = result["state"].context
    assert not order_problems(context), order_problems(context)
    assert [m.role for m in context] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    found = answers(context)
    for call in ("email", "lookup"):
        if started:
            assert found[call].status == "abandoned" and "unknown" in str(found[call].output)
        else:
            assert found[call].status == "rejected" and "not run" in str(found[call].output)
        assert "new input" in str(found[call].output)
    assert mail.sent == []
