"""Messages leave the context as events: `RemoveMessage`, remove-all, a declared
`replace_messages` reducer and a summary with a trim. Each is gated so no tool call loses its
result (or a result its call); the log keeps every message, and time travel gives removed
messages back. All through the public API on a real SQLite file."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from agentlog import actors, projections
from agentlog.actors import REMOVE_ALL_MESSAGES, Command, NodeError, RemoveMessage
from agentlog.events import (
    EventRecord,
    MessageAppended,
    MessagesRemoved,
    MessagesReplaced,
    RunCompleted,
    RunStarted,
    SQLiteEventStore,
)
from agentlog.events.kinds import Event
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    IllegalTransitionError,
    InvalidStateUpdateError,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    decide,
    message_appended,
    open_calls,
    replace_messages,
    replay,
    unpaired_results,
)

from .helpers import agent_with_tools, line

CFG = {"thread_id": "t"}


class Window(AgentState):
    """A state whose context a node's returned messages replace, as `replace_messages` says."""

    context: Annotated[list[Message], replace_messages] = Field(default_factory=list)


def ticking_clock() -> Callable[[], float]:
    """A clock read once per append: the records of one commit share `at`, commits differ."""
    counter = itertools.count(1)
    return lambda: float(next(counter))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore(tmp_path / "x.db", clock=ticking_clock()) as sqlite:
        yield sqlite


# ---- builders ----------------------------------------------------------------------------


def user(text: str, mid: str) -> Message:
    return Message.text_message(text, role="user", message_id=mid)


def said(text: str, mid: str) -> Message:
    return Message.text_message(text, role="assistant", message_id=mid)


def calling(mid: str, *call_ids: str) -> Message:
    """An assistant message asking for `weather` once per call id."""
    blocks = [ToolCallBlock(id=c, name="weather", args={"city": c}) for c in call_ids]
    return Message(role="assistant", content=[TextBlock(text="calling"), *blocks], message_id=mid)


def answer(call_id: str, mid: str) -> Message:
    """A tool message answering `call_id`."""
    block = ToolResultBlock(call_id=call_id, output="sunny", status="completed")
    return Message.tool_message([block], message_id=mid)


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def ids(state: AgentState) -> list[str | int]:
    return [m.message_id for m in state.context]


async def log_of(store: SQLiteEventStore, thread: str = "t") -> list[EventRecord]:
    return [r async for r in store.read(thread)]


def appended(records: list[EventRecord]) -> list[Any]:
    """The ids of the messages the log records joining, in order."""
    return [r.event.message["message_id"] for r in records if isinstance(r.event, MessageAppended)]


def replacing(record: EventRecord) -> list[Any]:
    """The ids of the context a `messages_replaced` record sets."""
    assert isinstance(record.event, MessagesReplaced)
    return [m["message_id"] for m in record.event.messages]


async def replayed(
    app: Any, store: SQLiteEventStore, state_cls: type[AgentState] = AgentState, thread: str = "t"
) -> Any:
    """The live state, after checking that the file, reopened, replays to exactly it."""
    live = await app.aget_state({"thread_id": thread})
    async with SQLiteEventStore(store.path) as fresh:
        records = [r async for r in fresh.read(thread)]
        assert (await fresh.verify(thread)).ok
    assert replay(records, state_cls) == live
    return live


def step_commit(records: list[EventRecord], node: str) -> list[EventRecord]:
    """The records `node`'s (last) step committed with its `step_advanced`, checked to be one
    commit: contiguous seqs sharing one `at`, the step's `node_entered` committed before."""
    entered = max(r.seq for r in records if r.kind == "node_entered" and r.event.node == node)  # type: ignore[union-attr]
    advanced = min(r.seq for r in records if r.kind == "step_advanced" and r.seq > entered)
    batch = [r for r in records if entered < r.seq <= advanced]
    assert [r.seq for r in batch] == list(range(entered + 1, advanced + 1))
    assert len({r.at for r in batch}) == 1, "the step's outputs were not one commit"
    assert records[entered - 1].at < batch[0].at  # node_entered was its own, earlier commit
    return batch


def once_then(first: Message, then: Message) -> Callable[[AgentState], list[Message]]:
    """An agent that says `first` on its first turn and `then` on every later one."""
    turns = itertools.count()

    def agent(state: AgentState) -> list[Message]:
        return [first if next(turns) == 0 else then]

    return agent


async def answered_thread(store: SQLiteEventStore) -> Any:
    """A completed thread: u1, a1 (calls c1), the tool's result of c1, then a final answer."""
    app = agent_with_tools(once_then(calling("a1", "c1"), said("done", "a2")), [weather]).compile(
        checkpointer=store
    )
    await app.ainvoke([user("weather?", "u1")], CFG)
    state = await app.aget_state(CFG)
    assert [m.role for m in state.context] == ["user", "assistant", "tool", "assistant"]
    assert open_calls(state.context) == [] and unpaired_results(state.context) == []
    return app


# ---- a node removes messages -------------------------------------------------------------


@pytest.mark.parametrize(
    "returned",
    [
        lambda: RemoveMessage("u1"),
        lambda: [RemoveMessage("u1")],
        lambda: RemoveMessage(id="u1"),  # LangGraph's spelling
        lambda: {"messages": [RemoveMessage(id="u1")]},
        lambda: {"context": [RemoveMessage("u1")]},
        lambda: Command(update={"messages": [RemoveMessage("u1")]}),
    ],
    ids=["marker", "list", "langgraph-id", "messages-dict", "context-dict", "command"],
)
async def test_a_node_removes_a_message_and_the_log_keeps_it(
    store: SQLiteEventStore, returned: Callable[[], Any]
) -> None:
    app = line(("trim", lambda state: returned())).compile(checkpointer=store)
    await app.ainvoke([user("old", "u1"), user("new", "u2")], CFG)
    state = await replayed(app, store)
    assert ids(state) == ["u2"]
    assert state.execution_meta.status == ExecutionStatus.COMPLETED

    records = await log_of(store)
    kinds = [r.kind for r in step_commit(records, "trim")]
    assert kinds == ["messages_removed", "step_advanced"]
    (removal,) = [r.event for r in records if isinstance(r.event, MessagesRemoved)]
    assert removal.message_ids == ["u1"]
    assert appended(records) == ["u1", "u2"]  # the removed message is still in the log


async def test_a_removal_and_a_new_message_in_one_update(store: SQLiteEventStore) -> None:
    def trim(state: AgentState) -> dict[str, Any]:
        return {"messages": [RemoveMessage("u1"), said("hello", "a1")]}

    app = line(("trim", trim)).compile(checkpointer=store)
    await app.ainvoke([user("old", "u1"), user("new", "u2")], CFG)
    state = await replayed(app, store)
    assert ids(state) == ["u2", "a1"]
    batch = step_commit(await log_of(store), "trim")
    assert [r.kind for r in batch] == ["messages_removed", "message_appended", "step_advanced"]


def test_remove_message_takes_langgraphs_spelling_and_is_one_class() -> None:
    assert RemoveMessage(id="x") == RemoveMessage("x") == RemoveMessage(message_id="x")
    assert RemoveMessage(id="x").id == RemoveMessage("x").message_id == "x"
    assert RemoveMessage(id=7).message_id == 7  # int ids, as messages may have
    assert RemoveMessage(REMOVE_ALL_MESSAGES).removes_all and not RemoveMessage("x").removes_all
    assert actors.RemoveMessage is projections.RemoveMessage
    assert actors.REMOVE_ALL_MESSAGES == projections.REMOVE_ALL_MESSAGES == REMOVE_ALL_MESSAGES
    with pytest.raises(ValueError, match="needs the message_id"):
        RemoveMessage()


async def test_remove_all_then_new_messages_replaces_the_context(store: SQLiteEventStore) -> None:
    def restart(state: AgentState) -> list[Any]:
        # Messages before the marker go too: it removes everything before it.
        return [said("dropped", "x0"), RemoveMessage(REMOVE_ALL_MESSAGES), said("fresh", "a1")]

    app = line(("restart", restart)).compile(checkpointer=store)
    await app.ainvoke([user("old", "u1"), user("new", "u2")], CFG)
    state = await replayed(app, store)
    assert ids(state) == ["a1"]
    records = await log_of(store)
    (replaced, _) = step_commit(records, "restart")
    assert replacing(replaced) == ["a1"]
    assert appended(records) == ["u1", "u2"]  # x0 never joined; u1 and u2 stay in the log


async def test_remove_all_alone_empties_the_context(store: SQLiteEventStore) -> None:
    app = line(("wipe", lambda state: [RemoveMessage(REMOVE_ALL_MESSAGES)])).compile(
        checkpointer=store
    )
    await app.ainvoke([user("old", "u1")], CFG)
    state = await replayed(app, store)
    assert state.context == []
    assert state.execution_meta.status == ExecutionStatus.COMPLETED


async def test_a_removed_id_may_join_again(store: SQLiteEventStore) -> None:
    def forget(state: AgentState) -> Any:
        return RemoveMessage("u1")

    def recall(state: AgentState) -> Any:
        return [user("back again", "u1")]

    app = line(("forget", forget), ("recall", recall)).compile(checkpointer=store)
    await app.ainvoke([user("old", "u1"), user("new", "u2")], CFG)
    state = await replayed(app, store)
    assert ids(state) == ["u2", "u1"]
    assert state.context[-1].text() == "back again"


# ---- the context's reducer ---------------------------------------------------------------


def keep_last_list(state: AgentState) -> Any:
    return state.context[-1:]


def keep_last_dict(state: AgentState) -> Any:
    return {"messages": state.context[-1:]}


def keep_last_state(state: AgentState) -> Any:
    state.context = state.context[-1:]
    return state


SHAPES = [keep_last_list, keep_last_dict, keep_last_state]


@pytest.mark.parametrize("node", SHAPES, ids=["list", "dict", "state"])
async def test_a_declared_replace_messages_replaces_the_context(
    store: SQLiteEventStore, node: Callable[[AgentState], Any]
) -> None:
    app = line(("window", node), state_cls=Window).compile(checkpointer=store)
    await app.ainvoke([user("old", "u1"), user("new", "u2")], CFG)
    state = await replayed(app, store, Window)
    assert ids(state) == ["u2"]
    (replaced, _) = step_commit(await log_of(store), "window")
    assert replacing(replaced) == ["u2"]


@pytest.mark.parametrize("node", SHAPES, ids=["list", "dict", "state"])
async def test_with_add_messages_a_shorter_context_removes_nothing(
    store: SQLiteEventStore, node: Callable[[AgentState], Any]
) -> None:
    app = line(("window", node)).compile(checkpointer=store)
    await app.ainvoke([user("old", "u1"), user("new", "u2")], CFG)
    state = await replayed(app, store)
    assert ids(state) == ["u1", "u2"]  # Agentflow's merge: only new ids count
    assert [r.kind for r in step_commit(await log_of(store), "window")] == ["step_advanced"]


async def test_a_replacing_node_cannot_drop_a_result_and_keep_its_call(
    store: SQLiteEventStore,
) -> None:
    def drop_result(state: AgentState) -> Any:
        return [m for m in state.context if m.role != "tool"]

    app = line(("window", drop_result), state_cls=Window).compile(checkpointer=store)
    with pytest.raises(NodeError) as raised:
        await app.ainvoke([user("q", "u1"), calling("a1", "c1"), answer("c1", "r1")], CFG)
    assert isinstance(raised.value.__cause__, InvalidStateUpdateError)
    assert "without their result" in str(raised.value.__cause__)
    state = await replayed(app, store, Window)
    assert ids(state) == ["u1", "a1", "r1"]
    assert (await log_of(store))[-1].kind == "run_failed"


# ---- a summary with a trim ---------------------------------------------------------------


async def test_a_summary_and_a_trim_commit_together_in_the_step(store: SQLiteEventStore) -> None:
    def summarize(state: AgentState) -> dict[str, Any]:
        return {
            "context_summary": "they greeted twice",
            "messages": [RemoveMessage("u1"), RemoveMessage("u2")],
        }

    app = line(("summarize", summarize)).compile(checkpointer=store)
    await app.ainvoke([user("hi", "u1"), user("hello", "u2"), user("so?", "u3")], CFG)
    state = await replayed(app, store)
    assert ids(state) == ["u3"]
    assert state.context_summary == "they greeted twice"

    records = await log_of(store)
    batch = step_commit(records, "summarize")
    assert [r.kind for r in batch] == ["messages_removed", "context_summarized", "step_advanced"]
    assert batch[0].event.message_ids == ["u1", "u2"]  # type: ignore[union-attr]
    after = records[batch[-1].seq]  # the next record is the run's end, a later commit
    assert after.kind == "run_completed" and after.at > batch[-1].at
    # Before the step the summary and the messages were there; after it, both changed at once.
    before = await app.aget_state(CFG, at_seq=batch[0].seq - 1)
    assert (ids(before), before.context_summary) == (["u1", "u2", "u3"], None)
    assert ids(await app.aget_state(CFG, at_seq=batch[-1].seq)) == ["u3"]
    rows = await app.ahistory(CFG, kinds=["messages_removed", "context_summarized"])
    assert [r.summary for r in rows] == [
        "removed 2 messages: 'u1', 'u2'",
        "context summarized: they greeted twice",
    ]
    assert {r.node for r in rows} == {"summarize"}


# ---- human edits -------------------------------------------------------------------------


async def test_aupdate_state_records_a_removal_with_its_reason(store: SQLiteEventStore) -> None:
    app = line(("noop", lambda state: None)).compile(checkpointer=store)
    await app.ainvoke([user("my card is 4242", "u1"), user("hello", "u2")], CFG)
    before = await store.last_seq("t")
    records = await app.aupdate_state(
        CFG, {"messages": [RemoveMessage(id="u1")]}, actor="alice", reason="privacy"
    )
    assert [(r.kind, r.actor, r.seq) for r in records] == [
        ("messages_removed", "alice", before + 1)
    ]
    removal = records[0].event
    assert isinstance(removal, MessagesRemoved)
    assert (removal.message_ids, removal.reason) == (["u1"], "privacy")
    state = await replayed(app, store)
    assert ids(state) == ["u2"]

    (row,) = await app.ahistory(CFG, kinds=["messages_removed"])
    assert (row.seq, row.actor, row.summary) == (
        before + 1,
        "alice",
        "removed 1 message: 'u1' (privacy)",
    )
    change = await app.adiff(CFG, before, before + 1, by="seq")
    assert [m.message_id for m in change.messages_removed] == ["u1"]
    assert change.messages_removed[0].text() == "my card is 4242"  # the log keeps it
    assert change.messages_added == [] and change.messages_changed == []
    assert ids(await app.aget_state(CFG, at_seq=before)) == ["u1", "u2"]


async def test_removing_an_id_not_in_the_context_is_refused_and_writes_nothing(
    store: SQLiteEventStore,
) -> None:
    app = line(("noop", lambda state: None)).compile(checkpointer=store)
    await app.ainvoke([user("hello", "u1")], CFG)
    await app.aupdate_state(CFG, {"messages": [RemoveMessage("u1")]})
    length = await store.last_seq("t")
    for gone in ("nope", "u1"):  # never there, and already removed
        with pytest.raises(InvalidStateUpdateError, match=f"no message with id\\(s\\) '{gone}'"):
            await app.aupdate_state(CFG, {"messages": [RemoveMessage(gone)]}, reason="tidy")
        assert await store.last_seq("t") == length
    assert ids(await replayed(app, store)) == []


async def test_a_node_removing_an_unknown_id_fails_and_removes_nothing(
    store: SQLiteEventStore,
) -> None:
    app = line(("trim", lambda state: [RemoveMessage("nope")])).compile(checkpointer=store)
    with pytest.raises(NodeError) as raised:
        await app.ainvoke([user("hello", "u1")], CFG)
    assert isinstance(raised.value.__cause__, InvalidStateUpdateError)
    records = await log_of(store)
    assert [r.kind for r in records][-2:] == ["node_entered", "run_failed"]
    assert not any(r.kind == "messages_removed" for r in records)
    state = await replayed(app, store)
    assert ids(state) == ["u1"] and state.execution_meta.status == ExecutionStatus.ERROR


# ---- tool calls and their results --------------------------------------------------------


@pytest.mark.parametrize(
    ("removal", "why"),
    [
        (lambda result: [RemoveMessage("a1")], "without their call"),  # answers nothing
        (lambda result: [RemoveMessage(result.message_id)], "without their result"),
        (lambda result: [RemoveMessage(REMOVE_ALL_MESSAGES), result], "without their call"),
    ],
    ids=["the-call", "the-result", "all-but-the-result"],
)
async def test_a_removal_splitting_a_call_from_its_result_is_refused(
    store: SQLiteEventStore, removal: Callable[[Message], list[Any]], why: str
) -> None:
    app = await answered_thread(store)
    state = await app.aget_state(CFG)
    length = await store.last_seq("t")
    with pytest.raises(InvalidStateUpdateError, match=why):
        await app.aupdate_state(CFG, {"messages": removal(state.context[2])}, reason="trim")
    assert await store.last_seq("t") == length
    assert await replayed(app, store) == state


async def test_a_call_and_its_result_may_leave_together(store: SQLiteEventStore) -> None:
    app = await answered_thread(store)
    state = await app.aget_state(CFG)
    result = state.context[2].message_id
    await app.aupdate_state(CFG, {"messages": [RemoveMessage("a1"), RemoveMessage(result)]})
    state = await replayed(app, store)
    assert ids(state) == ["u1", "a2"]
    await app.ainvoke([user("and tomorrow?", "u2")], CFG)  # the thread goes on as usual
    state = await replayed(app, store)
    assert state.execution_meta.status == ExecutionStatus.COMPLETED
    assert open_calls(state.context) == [] and unpaired_results(state.context) == []


async def test_an_open_call_may_leave_with_its_message(store: SQLiteEventStore) -> None:
    ran: list[str] = []

    def tracked(city: str) -> str:
        """The weather, noting that it ran."""
        ran.append(city)
        return "sunny"

    tracked.__name__ = "weather"
    agent = once_then(calling("a1", "c1"), said("done", "a2"))
    app = agent_with_tools(agent, [tracked]).compile(checkpointer=store, interrupt_before=["tools"])
    await app.ainvoke([user("weather?", "u1")], CFG)
    paused = await app.aget_state(CFG)
    assert paused.execution_meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    assert [c.id for c in open_calls(paused.context)] == ["c1"]

    await app.aupdate_state(CFG, {"messages": [RemoveMessage("a1")]}, reason="not needed")
    assert ids(await replayed(app, store)) == ["u1"]
    await app.ainvoke(None, CFG)
    state = await replayed(app, store)
    assert state.execution_meta.status == ExecutionStatus.COMPLETED
    assert ids(state) == ["u1", "a2"] and ran == []  # the tool never ran
    assert open_calls(state.context) == [] and unpaired_results(state.context) == []


async def test_run_completed_is_refused_while_a_call_is_open(store: SQLiteEventStore) -> None:
    await store.append(
        "t", [RunStarted(entry_node="agent"), message_appended(calling("a1", "c1"))], expected_seq=0
    )
    state: AgentState = replay(await log_of(store))
    with pytest.raises(IllegalTransitionError, match=r"weather \(c1\) have no result"):
        decide(state, [RunCompleted()], seq=2)
    answered: list[Event] = [message_appended(answer("c1", "r1")), RunCompleted()]
    assert decide(state, answered, seq=2) == answered


async def test_the_engine_closes_open_calls_before_completing(store: SQLiteEventStore) -> None:
    app = line(("agent", lambda state: [calling("a1", "c1", "c2")])).compile(checkpointer=store)
    await app.ainvoke([user("weather?", "u1")], CFG)
    state = await replayed(app, store)
    assert state.execution_meta.status == ExecutionStatus.COMPLETED
    assert open_calls(state.context) == [] and unpaired_results(state.context) == []
    closing = [b for m in state.context[2:] for b in m.content]
    assert all(isinstance(b, ToolResultBlock) for b in closing)
    assert [(b.call_id, b.status, b.is_error) for b in closing] == [
        ("c1", "rejected", True),
        ("c2", "rejected", True),
    ]
    records = await log_of(store)
    last = [r for r in records if r.at == records[-1].at]
    assert [r.kind for r in last] == ["message_appended", "message_appended", "run_completed"]


# ---- time travel -------------------------------------------------------------------------


async def test_state_before_a_removal_and_a_fork_from_it_give_the_message_back(
    store: SQLiteEventStore,
) -> None:
    def chat(state: AgentState) -> Any:
        return [said("hi there", "a1")]

    def trim(state: AgentState) -> Any:
        return [RemoveMessage("u1")]

    app = line(("chat", chat), ("trim", trim)).compile(checkpointer=store)
    await app.ainvoke([user("hello", "u1")], CFG)
    assert ids(await replayed(app, store)) == ["a1"]
    assert ids(await app.aget_state(CFG, at_step=1)) == ["u1", "a1"]
    assert ids(await app.aget_state(CFG, at_step=2)) == ["a1"]
    change = await app.adiff(CFG, 1, 2)
    assert [m.message_id for m in change.messages_removed] == ["u1"]

    fork = await app.afork(CFG, at_step=1, new_thread_id="f")
    forked = await replayed(app, store, thread=fork)
    assert ids(forked) == ["u1", "a1"]
    assert forked.context[0].text() == "hello"
    assert ids(await replayed(app, store)) == ["a1"]  # the source is untouched
    await app.ainvoke(None, {"thread_id": fork})  # the fork runs on: trim removes it again
    assert ids(await replayed(app, store, thread=fork)) == ["a1"]


# ---- found broken ------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["result", "call"])
async def test_a_human_edit_cannot_split_a_call_from_its_result(
    store: SQLiteEventStore, target: str
) -> None:
    app = await answered_thread(store)
    state = await app.aget_state(CFG)
    mid = state.context[2 if target == "result" else 1].message_id
    length = await store.last_seq("t")
    plain = Message.text_message("edited", role="assistant", message_id=mid)
    with pytest.raises(InvalidStateUpdateError):
        await app.aupdate_state(CFG, {"messages": [plain]}, reason="edit")
    assert await store.last_seq("t") == length


async def test_a_node_cannot_append_a_result_without_its_call(store: SQLiteEventStore) -> None:
    app = line(("orphan", lambda state: [answer("ghost", "r1")])).compile(checkpointer=store)
    with pytest.raises(NodeError) as raised:
        await app.ainvoke([user("hi", "u1")], CFG)
    assert isinstance(raised.value.__cause__, InvalidStateUpdateError)


async def test_remove_all_may_bring_a_new_tool_call(store: SQLiteEventStore) -> None:
    def agent(state: AgentState) -> list[Any]:
        if state.context[-1].role == "user":
            keep = state.context[-1]
            return [RemoveMessage(REMOVE_ALL_MESSAGES), keep, calling("a1", "c1")]
        return [said("done", "a2")]

    app = agent_with_tools(agent, [weather]).compile(checkpointer=store)
    await app.ainvoke([user("old", "u0"), user("weather?", "u1")], CFG)
    state = await replayed(app, store)
    assert [m.role for m in state.context] == ["user", "assistant", "tool", "assistant"]


async def test_a_tool_node_works_under_replace_messages(store: SQLiteEventStore) -> None:
    def agent(state: AgentState) -> list[Message]:
        return [*state.context, said("done", "a2")]

    graph = agent_with_tools(agent, [weather], Window)
    app = graph.compile(checkpointer=store, interrupt_before=["agent"])
    await app.ainvoke([user("weather?", "u1")], CFG)
    # The call joins by a human edit as the agent (an edit appends), so only the tool step
    # meets the reducer.
    await app.aupdate_state(CFG, {"messages": [calling("a1", "c1")]}, as_node="agent")
    for _ in range(3):
        await app.ainvoke(None, CFG)
    state = await replayed(app, store, Window)
    assert [m.role for m in state.context] == ["user", "assistant", "tool", "assistant"]


async def test_a_call_id_reused_in_a_later_turn_still_gets_its_result(
    store: SQLiteEventStore,
) -> None:
    def agent(state: AgentState) -> list[Message]:
        if state.context[-1].role == "user":
            turn = sum(m.role == "user" for m in state.context)
            return [calling(f"a{turn}", "call_0")]  # providers that number calls per reply
        return [Message.text_message("done", role="assistant")]

    app = agent_with_tools(agent, [weather]).compile(checkpointer=store)
    await app.ainvoke([user("weather?", "u1")], CFG)
    await app.ainvoke([user("and now?", "u2")], CFG)
    state = await replayed(app, store)
    assert state.execution_meta.status == ExecutionStatus.COMPLETED
    assert [m.role for m in state.context] == ["user", "assistant", "tool", "assistant"] * 2
