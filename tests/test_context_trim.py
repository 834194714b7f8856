"""Context trimming: `compile(context_manager=...)` bounds what the nodes see, each trim is
recorded in the commit that made the context too long, and the log keeps every message."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.actors.engine.committing import TRIMMER, ContextTrimError
from agentlog.events import (
    ContextSummarized,
    InvalidArgumentError,
    MemoryEventStore,
    MessageAppended,
    MessagesRemoved,
    MessagesReplaced,
)
from agentlog.projections import (
    AgentState,
    BaseContextManager,
    Message,
    MessageContextManager,
    ToolCallBlock,
    ToolResultBlock,
    check_pairs,
    event_history,
    open_calls,
    replay,
)
from agentlog.projections.context import ContextSummaryError, dropped
from tests.helpers import agent_with_tools


def lookup(topic: str) -> str:
    """A tool the agent calls once per turn."""
    return f"facts about {topic}"


class Agent:
    """Per user turn: a tool call, then an answer; remembers how many user messages it saw."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.ids = itertools.count(1)

    def __call__(self, state: AgentState) -> list[Message]:
        self.seen.append(sum(1 for m in state.context if m.role == "user"))
        last = state.context[-1]
        if last.role == "user":
            topic = {"topic": last.text()}
            call = ToolCallBlock(id=f"c{next(self.ids)}", name="lookup", args=topic)
            return [Message(role="assistant", content=[call])]
        return [Message.text_message(f"answer {len(self.seen)}", role="assistant")]


async def talk(manager: BaseContextManager[Any], turns: int) -> tuple[Any, Agent, Any]:
    store = MemoryEventStore()
    agent = Agent()
    app = agent_with_tools(agent, [lookup]).compile(checkpointer=store, context_manager=manager)
    config = {"thread_id": "t"}
    for i in range(turns):
        await app.ainvoke({"messages": [Message.text_message(f"question {i}")]}, config)
    return app, agent, store


async def records_of(store: MemoryEventStore) -> list[Any]:
    return [r async for r in store.read("t")]


async def test_the_bound_holds_for_every_node_and_the_log_keeps_everything() -> None:
    app, agent, store = await talk(MessageContextManager(max_messages=2), turns=6)
    assert max(agent.seen) <= 2  # no node ever saw more than two user turns
    state = await app.aget_state({"thread_id": "t"})
    assert [m.text() for m in state.context if m.role == "user"] == ["question 4", "question 5"]
    records = await records_of(store)
    appended = [r.event.message for r in records if isinstance(r.event, MessageAppended)]
    assert sum(1 for m in appended if m["role"] == "user") == 6  # every message is in the log
    trims = [r for r in records if isinstance(r.event, MessagesRemoved)]
    assert len(trims) == 4 and {r.actor for r in trims} == {TRIMMER}
    assert all("context trimmed by MessageContextManager" in (r.event.reason or "") for r in trims)
    assert replay(records).model_dump() == state.model_dump()  # replay == live
    check_pairs([], state.context, "the trimmed context")
    assert state.context_summary is None  # no summariser: no summary


async def test_the_trim_shows_in_history() -> None:
    _, _, store = await talk(MessageContextManager(max_messages=1), turns=3)
    rows = await event_history(store, "t", ["messages_removed"])
    assert len(rows) == 2
    assert rows[0].actor == TRIMMER
    assert rows[0].summary.startswith("removed 4 messages:")
    assert "context trimmed by MessageContextManager(max_messages=1" in rows[0].summary


async def test_a_summariser_writes_the_summary_into_the_state_and_the_log() -> None:
    calls: list[tuple[list[str], str | None]] = []

    async def summarise(gone: list[Message], previous: str | None) -> str:
        calls.append(([m.text() for m in gone if m.role == "user"], previous))
        return " | ".join(filter(None, [previous, *(m.text() for m in gone if m.role == "user")]))

    manager = MessageContextManager(max_messages=1, summarizer=summarise)
    app, _, store = await talk(manager, turns=3)
    state = await app.aget_state({"thread_id": "t"})
    assert state.context_summary == "question 0 | question 1"
    assert calls == [(["question 0"], None), (["question 1"], "question 0")]
    records = await records_of(store)
    summaries = [r.event for r in records if isinstance(r.event, ContextSummarized)]
    assert [s.summary for s in summaries] == ["question 0", "question 0 | question 1"]
    assert all(s.messages is None for s in summaries)  # the removal says what left
    assert replay(records).model_dump() == state.model_dump()


async def test_the_input_commit_is_trimmed_before_the_first_node_runs() -> None:
    store = MemoryEventStore()
    agent = Agent()
    app = agent_with_tools(agent, [lookup]).compile(
        checkpointer=store, context_manager=MessageContextManager(max_messages=2)
    )
    many = [Message.text_message(f"q{i}") for i in range(5)]
    await app.ainvoke({"messages": many}, {"thread_id": "t"})
    assert agent.seen[0] == 2
    records = await records_of(store)
    first = next(r for r in records if isinstance(r.event, MessagesRemoved))
    assert first.seq < next(r.seq for r in records if r.kind == "node_entered")


async def test_a_run_resumed_after_a_human_edit_starts_on_a_bounded_context() -> None:
    store = MemoryEventStore()
    agent = Agent()
    app = agent_with_tools(agent, [lookup]).compile(
        checkpointer=store,
        context_manager=MessageContextManager(max_messages=2),
        interrupt_before=["agent"],
    )
    config = {"thread_id": "t"}
    await app.ainvoke({"messages": [Message.text_message("first")]}, config)  # paused
    for text in ("edit 1", "edit 2", "edit 3"):
        await app.aupdate_state(config, {"messages": [Message.text_message(text)]})
    await app.ainvoke(None, config)  # resumed: the agent runs now
    assert agent.seen and max(agent.seen) <= 2
    records = await records_of(store)
    resumed = next(r.seq for r in records if r.kind == "resumed")
    trim = next(r for r in records if isinstance(r.event, MessagesRemoved) and r.seq > resumed)
    assert trim.seq == resumed + 1  # in the resume's own commit, before the node runs
    state = await app.aget_state(config)
    assert replay(records).model_dump() == state.model_dump()


class KeepLast(BaseContextManager[AgentState]):
    """A seed-style manager that keeps only the last message: it can split a tool call."""

    def trim_context(self, state: AgentState) -> AgentState:
        state.context = state.context[-1:]
        return state

    async def atrim_context(self, state: AgentState) -> AgentState:
        return self.trim_context(state)


async def test_a_manager_that_splits_a_tool_call_fails_the_step_naming_itself() -> None:
    store = MemoryEventStore()
    app = agent_with_tools(Agent(), [lookup]).compile(
        checkpointer=store, context_manager=KeepLast()
    )
    with pytest.raises(ContextTrimError, match="the trim by KeepLast would leave the result"):
        await app.ainvoke({"messages": [Message.text_message("q")]}, {"thread_id": "t"})
    state = await app.aget_state({"thread_id": "t"})
    assert state.execution_meta.status.value == "error"
    assert replay(await records_of(store)).context == state.context


class Digest(BaseContextManager[AgentState]):
    """A seed-style manager that folds all but the last turn into one system message."""

    def trim_context(self, state: AgentState) -> AgentState:
        users = [i for i, m in enumerate(state.context) if m.role == "user"]
        if len(users) > 1:
            digest = Message.text_message(
                f"{users[-1]} earlier messages", role="system", message_id="digest"
            )
            state.context = [digest, *state.context[users[-1] :]]
            state.context_summary = f"digest of {users[-1]}"
        return state

    async def atrim_context(self, state: AgentState) -> AgentState:
        return self.trim_context(state)


async def test_a_manager_that_rewrites_the_context_replaces_it_in_the_log() -> None:
    app, _, store = await talk(Digest(), turns=3)
    state = await app.aget_state({"thread_id": "t"})
    assert state.context[0].message_id == "digest"
    assert sum(1 for m in state.context if m.role == "user") == 1
    records = await records_of(store)
    kinds = ContextSummarized | MessagesReplaced
    replaced = [r.event for r in records if isinstance(r.event, kinds)]
    assert replaced and all(isinstance(e, ContextSummarized) for e in replaced)
    assert all(e.messages for e in replaced if isinstance(e, ContextSummarized))
    assert replay(records).model_dump() == state.model_dump()


class Odd(BaseContextManager[AgentState]):
    """A custom manager whose trim hands back `result(state)`, whatever that is."""

    def __init__(self, result: Any) -> None:
        self.result = result

    def trim_context(self, state: AgentState) -> AgentState:
        return self.result(state)  # type: ignore[no-any-return]

    async def atrim_context(self, state: AgentState) -> AgentState:
        return self.trim_context(state)


def _with_summary(state: AgentState, summary: Any) -> AgentState:
    object.__setattr__(state, "context_summary", summary)
    return state


@pytest.mark.parametrize(
    ("result", "said"),
    [
        (lambda s: None, "returned NoneType None, not the state"),
        (lambda s: s.context[-1:], "returned list"),
        (lambda s: {"context": s.context}, "returned dict"),
        (lambda s: AgentState(context=[]).model_copy(update={"context": ["hi"]}), "left str"),
        (lambda s: _with_summary(s, 42), "context_summary to int 42"),
    ],
)
async def test_a_custom_manager_returning_no_state_fails_the_step_naming_it(
    result: Any, said: str
) -> None:
    store = MemoryEventStore()
    app = agent_with_tools(Agent(), [lookup]).compile(
        checkpointer=store, context_manager=Odd(result)
    )
    with pytest.raises(ContextTrimError, match=rf"Odd\.atrim_context .*{said}"):
        await app.ainvoke({"messages": [Message.text_message("q")]}, {"thread_id": "t"})
    assert await store.last_seq("t") == 0  # the run's first commit was refused whole


async def test_a_failing_summariser_or_manager_is_named_and_records_no_partial_trim() -> None:
    """A summariser that raises fails the step naming itself (not as if the node had
    raised), the step's messages are not recorded, and the run, invoked again, goes on."""
    down = {"now": True}

    async def summarise(gone: list[Message], previous: str | None) -> str:
        if down["now"]:
            raise RuntimeError("summary model down")
        return "earlier questions"

    store = MemoryEventStore()
    manager = MessageContextManager(max_messages=1, summarizer=summarise)
    app = agent_with_tools(Agent(), [lookup]).compile(checkpointer=store, context_manager=manager)
    config = {"thread_id": "t"}
    await app.ainvoke({"messages": [Message.text_message("q0")]}, config)
    with pytest.raises(ContextSummaryError) as caught:
        await app.ainvoke({"messages": [Message.text_message("q1")]}, config)
    said = str(caught.value)
    assert "the summarizer " in said and "summarise raised RuntimeError: summary model down" in said
    assert isinstance(caught.value.__cause__, RuntimeError)
    state = await app.aget_state({"thread_id": "t"})
    assert [m.text() for m in state.context if m.role == "user"] == ["q0"]  # q1 not recorded
    down["now"] = False
    await app.ainvoke({"messages": [Message.text_message("q1")]}, config)
    state = await app.aget_state({"thread_id": "t"})
    assert state.context_summary == "earlier questions"

    def boom(state: AgentState) -> AgentState:
        raise ValueError("boom")

    store = MemoryEventStore()
    app = agent_with_tools(Agent(), [lookup]).compile(checkpointer=store, context_manager=Odd(boom))
    with pytest.raises(ContextTrimError, match=r"Odd\.atrim_context raised ValueError: boom"):
        await app.ainvoke({"messages": [Message.text_message("q")]}, config)


def test_a_sync_trim_names_a_failing_summariser() -> None:
    def summarise(gone: list[Message], previous: str | None) -> str:
        raise KeyError("k")

    state = AgentState(context=[Message.text_message(f"q{i}") for i in range(3)])
    manager = MessageContextManager(max_messages=1, summarizer=summarise)
    with pytest.raises(ContextSummaryError, match="summarise raised KeyError"):
        manager.trim_context(state)
    assert len(state.context) == 3  # left as it was


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"max_messages": -3}, "max_messages must be an int >= 0, got -3"),
        ({"max_messages": "20"}, "max_messages must be an int >= 0, got '20'"),
        ({"max_messages": True}, "max_messages must be an int >= 0, got True"),
        ({"max_messages": 2, "remove_tool_msgs": "yes"}, "remove_tool_msgs must be True or"),
        ({"max_messages": 2, "summarizer": "short"}, "summarizer must be a function"),
    ],
)
def test_a_manager_that_cannot_work_is_refused_when_made(
    options: dict[str, Any], said: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=said):
        MessageContextManager(**options)


def test_a_sync_trim_refuses_an_async_summariser() -> None:
    async def summarise(gone: list[Message], previous: str | None) -> str:
        return "never"

    state = AgentState(context=[Message.text_message(f"q{i}") for i in range(3)])
    with pytest.raises(ContextSummaryError, match="atrim_context"):
        MessageContextManager(max_messages=1, summarizer=summarise).trim_context(state)


# ---- the property: the trim never splits a tool exchange and never exceeds the bound ---------


@st.composite
def interleaved(draw: st.DrawFn) -> list[Message]:
    """Legal contexts in any order the gate allows: results anywhere after their calls (a user
    message may come between), one tool message answering calls of several assistant
    messages, calls still open at the end, system messages anywhere."""
    out: list[Message] = []
    open_ids: list[str] = []
    ids = itertools.count()
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["user", "user", "system", "text", "call", "result"]))
        mid = f"m{next(ids)}"
        if kind in ("user", "system"):
            out.append(Message.text_message(mid, role=kind, message_id=mid))
        elif kind == "text":
            out.append(Message.text_message(mid, role="assistant", message_id=mid))
        elif kind == "call":
            calls = [f"c{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            open_ids.extend(calls)
            blocks = [ToolCallBlock(id=c, name="t", args={}) for c in calls]
            out.append(Message(role="assistant", content=blocks, message_id=mid))
        elif open_ids:
            pick = st.sampled_from(open_ids)
            answered = draw(st.lists(pick, min_size=1, max_size=3, unique=True))
            for c in answered:
                open_ids.remove(c)
            results = [ToolResultBlock(call_id=c, output="ok") for c in answered]
            out.append(Message.tool_message(results, message_id=mid))
    return out


@settings(max_examples=300)
@given(interleaved(), st.integers(0, 5), st.booleans())
def test_a_trim_keeps_tool_exchanges_whole_and_the_bound(
    context: list[Message], bound: int, remove_tool_msgs: bool
) -> None:
    manager: MessageContextManager[AgentState] = MessageContextManager(bound, remove_tool_msgs)
    kept = manager.trimmed(context)
    after = context if kept is None else kept
    assert sum(1 for m in after if m.role == "user") <= bound  # never over the bound
    check_pairs(context, after, "the trim")  # no call loses its result, no result its call
    positions = [context.index(m) for m in after]
    assert positions == sorted(positions)  # the order is kept
    asking = [m for m in context if m.role == "assistant"][-1:]
    waiting = {c.id for c in open_calls(context)} & {c.id for m in asking for c in m.tool_calls()}
    for call_id in waiting:  # the calls a tool node answers next stay
        assert any(call_id == c.id for m in after for c in m.tool_calls())
    users = [m for m in context if m.role == "user"]
    kept_users = [m for m in after if m.role == "user"]
    assert kept_users == users[len(users) - len(kept_users) :]  # the newest turns stay
    assert len(kept_users) == min(bound, len(users))
    assert dropped(context, after) == [m for m in context if m not in after]


# ---- the graph state machine with trimming on: crashes, stops, edits, forks, a shadow -------


SEEN: list[int] = []
"""The user turns each agent call saw, across the machine's examples (it changes nothing the
agent does, so the machine's shadow run agrees)."""


def answer_or_look_up(state: AgentState) -> list[Message]:
    """A deterministic agent: a user message gets a lookup call (its id from the message's),
    a tool result gets an answer."""
    SEEN.append(sum(1 for m in state.context if m.role == "user"))
    last = state.context[-1]
    if last.role == "user":
        call = ToolCallBlock(id=f"call-{last.message_id}", name="lookup", args={"topic": "x"})
        return [Message(role="assistant", content=[call])]
    return [Message.text_message("answer", role="assistant")]


def trimmed_loop(store: Any) -> Any:
    """The agent loop, compiled with a context of at most two user turns."""
    manager: MessageContextManager[AgentState] = MessageContextManager(max_messages=2)
    graph = agent_with_tools(answer_or_look_up, [lookup])
    return graph.compile(checkpointer=store, context_manager=manager, interrupt_before=["tools"])


def no_node_saw_more_than_two_turns(state: AgentState) -> bool:
    """Every node call saw at most two user turns, human edits, crashes and resumes
    included (an edit may leave more in the state: the next commit of a run trims)."""
    return max(SEEN, default=0) <= 2


def test_the_graph_machine_holds_with_trimming_on() -> None:
    from hypothesis import HealthCheck
    from hypothesis.stateful import run_state_machine_as_test

    from agentlog.actors.testing import graph_machine

    SEEN.clear()
    machine = graph_machine(
        trimmed_loop, name="TrimmedMachine", invariants=[no_node_saw_more_than_two_turns]
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=30,
            stateful_step_count=8,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    assert SEEN, "the agent never ran"


# ---- with a model node: what the provider is sent stays bounded -----------------------------


def lookup_order(order_id: str) -> str:
    """The tool the recorded answers call."""
    return f"order {order_id}: shipped"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_model_node_sends_only_the_bounded_context_and_the_summary(provider: str) -> None:
    """Three turns, each a loop of three tool calls, under max_messages=1 and a summariser:
    each request holds the current turn alone (its tool calls paired with their results, or
    the fake provider would refuse it with a 400) and the summary of what was dropped."""
    import anthropic
    import openai

    from agentlog.actors.models import ModelNode
    from tests.workers.fake_provider import FakeProvider, Reply

    async def summarise(gone: list[Message], previous: str | None) -> str:
        return f"{previous or ''}[{sum(1 for m in gone if m.role == 'user')} turn]"

    manager = MessageContextManager(max_messages=1, summarizer=summarise)
    async with FakeProvider() as server:
        client: Any
        if provider == "openai":
            client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="k", max_retries=0)
            call, answer = "chat_tool_call", "chat_text"
        else:
            client = anthropic.AsyncAnthropic(
                base_url=server.anthropic_url, api_key="k", max_retries=0
            )
            call, answer = "anthropic_tool_use", "anthropic_text"
        model = ModelNode(client, model="m", tools=[lookup_order], system_prompt="be brief")
        store = MemoryEventStore()
        app = agent_with_tools(model, [lookup_order]).compile(store, context_manager=manager)
        for turn in range(3):
            server.script(*[Reply(fixture=call)] * 3, Reply(fixture=answer))
            said = {"messages": [Message.text_message(f"turn {turn}")]}
            await app.ainvoke(said, {"thread_id": "t"})
        sent = [r.body for r in server.requests]
    assert len(sent) == 12
    for body in sent[-4:]:  # the last turn's requests: that turn alone, and the summary
        users = [m for m in body["messages"] if m["role"] == "user"]
        texts = [json.dumps(m["content"]) for m in users]
        assert sum("turn " in t for t in texts) == 1 and "turn 2" in texts[0]
        system = body["system"] if provider == "anthropic" else body["messages"][0]["content"]
        assert "be brief" in json.dumps(system) and "[1 turn][1 turn]" in json.dumps(system)
    assert len(sent[-1]["messages"]) < len(sent[3]["messages"]) + 3  # bounded, not growing
    state = await app.aget_state({"thread_id": "t"})
    assert state.context_summary == "[1 turn][1 turn]"
    assert replay(await records_of(store)).model_dump() == state.model_dump()
