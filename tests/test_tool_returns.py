"""Tools that return like nodes: a `Message` as the call's result, a `Command` that updates the
state and routes the run, each recorded in its `tool_call_finished` and replayed the same."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from agentlog.actors import END, Command, RemoveMessage, ToolCommandConflictError, interrupt
from agentlog.actors.tools.node import node_output
from agentlog.events import EventRecord, SQLiteEventStore, ToolCallFinished
from agentlog.projections import (
    AgentState,
    ImageBlock,
    MediaRef,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    replay,
)

from .helpers import agent_with_tools

CFG = {"thread_id": "t"}


class Notes(AgentState):
    """A state with a field of its own, for tools that update it."""

    notes: list[str] = Field(default_factory=list)
    label: str = ""


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore(tmp_path / "t.db") as sqlite:
        yield sqlite


def asking(*calls: tuple[str, str]) -> Callable[[AgentState], list[Message]]:
    """An agent that asks for `calls` (id, tool name) once, then answers "done"."""

    def agent(state: AgentState) -> list[Message]:
        if any(m.role == "tool" for m in state.context):
            return [Message.text_message("done", role="assistant")]
        blocks = [ToolCallBlock(id=cid, name=name) for cid, name in calls]
        return [Message(role="assistant", content=[TextBlock(text="calling"), *blocks])]

    return agent


def other(state: AgentState) -> list[Message]:
    """The node a tool may route to; it ends the run."""
    return [Message.text_message("other ran", role="assistant")]


def build(
    store: SQLiteEventStore,
    agent: Callable[[AgentState], list[Message]],
    tools: list[Callable[..., Any]],
    state_cls: type[AgentState] = AgentState,
) -> Any:
    graph = agent_with_tools(agent, tools, state_cls)
    graph.add_node("other", other)
    graph.add_edge("other", END)
    return graph.compile(checkpointer=store)


async def log_of(store: SQLiteEventStore) -> list[EventRecord]:
    return [r async for r in store.read("t")]


def finished(records: list[EventRecord]) -> dict[str, ToolCallFinished]:
    return {r.event.call_id: r.event for r in records if isinstance(r.event, ToolCallFinished)}


def results(state: AgentState) -> dict[str, tuple[Message, ToolResultBlock]]:
    """Each tool result of the context by its call id, with the message holding it."""
    return {
        b.call_id: (m, b)
        for m in state.context
        for b in m.content
        if isinstance(b, ToolResultBlock)
    }


def texts(state: AgentState) -> list[str]:
    return [m.text() for m in state.context]


async def same_as_replayed(app: Any, store: SQLiteEventStore, state_cls: type[AgentState]) -> Any:
    """The live state, checked equal to a fold of the log from its first record."""
    live = await app.aget_state(CFG)
    assert replay(await log_of(store), state_cls) == live
    return live


# ---- a Message --------------------------------------------------------------------------


async def test_a_returned_message_is_the_calls_result_paired_by_call_id(
    store: SQLiteEventStore,
) -> None:
    picture = ImageBlock(media=MediaRef(url="https://example.com/map.png"))

    def find() -> Message:
        message = Message(
            message_id="found-1",
            role="assistant",
            content=[TextBlock(text="found "), picture, TextBlock(text="it")],
            metadata={"source": "atlas"},
        )
        return message

    app = build(store, asking(("c1", "find")), [find])
    await app.ainvoke("where?", CFG)
    state = await same_as_replayed(app, store, AgentState)
    message, block = results(state)["c1"]
    assert message.message_id == "found-1"
    assert message.role == "tool"
    assert block == ToolResultBlock(call_id="c1", output="found it", status="completed")
    assert message.content == [block, picture]
    assert message.metadata == {"source": "atlas", "tool_name": "find"}
    assert texts(state)[-1] == "done"  # the agent ran again, after the tool

    record = finished(await log_of(store))["c1"]
    assert (record.status, record.output, record.update, record.goto) == (
        "completed",
        None,
        None,
        None,
    )
    assert Message.model_validate(record.message) == message


async def test_a_message_already_answering_the_call_is_kept_as_it_is(
    store: SQLiteEventStore,
) -> None:
    def lookup(tool_call_id: str) -> Message:
        block = ToolResultBlock(call_id=tool_call_id, output={"rows": 3}, status="completed")
        return Message(message_id="own", role="tool", content=[block])

    app = build(store, asking(("c1", "lookup")), [lookup])
    await app.ainvoke("count", CFG)
    state = await same_as_replayed(app, store, AgentState)
    message, block = results(state)["c1"]
    assert (message.message_id, block.output) == ("own", {"rows": 3})
    assert message.metadata == {"tool_name": "lookup"}


async def test_a_message_answering_another_call_fails_the_call_naming_both_ids(
    store: SQLiteEventStore,
) -> None:
    def stray() -> Message:
        block = ToolResultBlock(call_id="elsewhere", output="x")
        return Message(role="tool", content=[block])

    app = build(store, asking(("c1", "stray")), [stray])
    await app.ainvoke("go", CFG)
    state = await same_as_replayed(app, store, AgentState)
    assert "elsewhere" not in results(state)
    _, block = results(state)["c1"]
    assert (block.status, block.is_error) == ("failed", True)
    assert "'elsewhere'" in block.output and "'c1'" in block.output
    record = finished(await log_of(store))["c1"]
    assert (record.status, record.message) == ("failed", None)
    assert record.error is not None and "ToolReturnError" in record.error


# ---- a Command --------------------------------------------------------------------------


async def test_a_command_updates_a_field_and_routes_the_run(store: SQLiteEventStore) -> None:
    def remember(tool_call_id: str) -> Command[str]:
        return Command(update={"notes": ["seen " + tool_call_id]}, goto="other")

    app = build(store, asking(("c1", "remember")), [remember], Notes)
    await app.ainvoke("go", CFG)
    state = await same_as_replayed(app, store, Notes)
    assert state.notes == ["seen c1"]
    assert texts(state)[-1] == "other ran"  # "other", not the agent, came after the tools
    message, block = results(state)["c1"]
    assert block == ToolResultBlock(call_id="c1", output=None, status="completed")
    assert message.metadata == {"tool_name": "remember"}

    records = await log_of(store)
    steps = [r.event.next_node for r in records if r.kind == "step_advanced"]  # type: ignore[union-attr]
    assert steps == ["tools", "other", END]
    record = finished(records)["c1"]
    assert (record.output, record.update, record.goto) == (None, {"notes": ["seen c1"]}, "other")
    assert Message.model_validate(record.message) == message


async def test_a_langgraph_style_tool_message_in_a_command_is_the_calls_result(
    store: SQLiteEventStore,
) -> None:
    def label(tool_call_id: str) -> Command[str]:
        answer = {"role": "tool", "tool_call_id": tool_call_id, "content": "labelled"}
        aside = Message.text_message("a note for later", role="user", message_id="aside")
        return Command(update={"messages": [aside, answer], "label": "blue"})

    app = build(store, asking(("c1", "label")), [label], Notes)
    await app.ainvoke("go", CFG)
    state = await same_as_replayed(app, store, Notes)
    assert state.label == "blue"
    assert texts(state) == ["go", "calling", "labelled", "a note for later", "done"]
    message, block = results(state)["c1"]
    assert (message.role, block.output) == ("tool", "labelled")
    assert message.metadata == {"tool_name": "label"}

    record = finished(await log_of(store))["c1"]
    assert record.goto is None and record.update is not None
    assert record.update["label"] == "blue"
    (aside,) = record.update["messages"]
    assert Message.model_validate(aside).message_id == "aside"


async def test_a_command_may_remove_messages_and_the_removal_replays(
    store: SQLiteEventStore,
) -> None:
    def forget(state: AgentState) -> Command[str]:
        return Command(update={"messages": [RemoveMessage(state.context[0].message_id)]})

    app = build(store, asking(("c1", "forget")), [forget])
    await app.ainvoke(Message.text_message("secret", message_id="in-1"), CFG)
    state = await same_as_replayed(app, store, AgentState)
    assert texts(state) == ["calling", "", "done"]
    record = finished(await log_of(store))["c1"]
    assert record.update == {"messages": [{"type": "remove", "message_id": "in-1"}]}


async def test_a_command_the_tool_node_cannot_use_fails_the_call_and_applies_nothing(
    store: SQLiteEventStore,
) -> None:
    def broken() -> Command[str]:
        return Command(update=["not", "fields"], goto="other")

    app = build(store, asking(("c1", "broken")), [broken], Notes)
    await app.ainvoke("go", CFG)
    state = await same_as_replayed(app, store, Notes)
    _, block = results(state)["c1"]
    assert block.status == "failed" and "a dict of state fields" in block.output
    assert texts(state)[-1] == "done"  # its goto was not taken
    record = finished(await log_of(store))["c1"]
    assert (record.update, record.goto, record.message) == (None, None, None)


# ---- conflicts --------------------------------------------------------------------------


async def test_two_calls_going_to_different_nodes_fail_the_run(store: SQLiteEventStore) -> None:
    runs: list[str] = []

    def to_other() -> Command[str]:
        runs.append("to_other")
        return Command(goto="other")

    def to_agent() -> Command[str]:
        runs.append("to_agent")
        return Command(goto="agent")

    app = build(store, asking(("c1", "to_other"), ("c2", "to_agent")), [to_other, to_agent])
    with pytest.raises(ToolCommandConflictError) as caught:
        await app.ainvoke("go", CFG)
    for part in ("'c1' (to_other)", "'c2' (to_agent)", "'other'", "'agent'"):
        assert part in str(caught.value)
    state = await same_as_replayed(app, store, AgentState)
    assert state.execution_meta.status == "error"
    assert (await app.ahistory(CFG))[-1].kind == "run_failed"
    assert set(finished(await log_of(store))) == {"c1", "c2"}
    assert "c1" not in results(state)  # nothing of the step was applied

    # Retrying reads both results back from the log: the same conflict, no tool run again.
    with pytest.raises(ToolCommandConflictError):
        await app.ainvoke(None, CFG)
    assert sorted(runs) == ["to_agent", "to_other"]
    await same_as_replayed(app, store, AgentState)


async def test_two_calls_setting_one_field_fail_the_run(store: SQLiteEventStore) -> None:
    def red() -> Command[str]:
        return Command(update={"label": "red"})

    def blue() -> Command[str]:
        return Command(update={"label": "blue", "notes": ["blue"]})

    app = build(store, asking(("c1", "red"), ("c2", "blue")), [red, blue], Notes)
    with pytest.raises(ToolCommandConflictError, match=r"'c1' \(red\).*'c2' \(blue\).*'label'"):
        await app.ainvoke("go", CFG)
    state = await same_as_replayed(app, store, Notes)
    assert (state.label, state.notes, state.execution_meta.status) == ("", [], "error")


async def test_calls_agreeing_on_a_goto_and_setting_different_fields_are_merged(
    store: SQLiteEventStore,
) -> None:
    def first(tool_call_id: str) -> Command[str]:
        aside = Message.text_message("from first", role="user", message_id="m-first")
        return Command(update={"label": "x", "messages": [aside]}, goto="other")

    def second() -> Command[str]:
        aside = Message.text_message("from second", role="user", message_id="m-second")
        return Command(update={"notes": ["y"], "messages": [aside]}, goto="other")

    app = build(store, asking(("c1", "first"), ("c2", "second")), [first, second], Notes)
    await app.ainvoke("go", CFG)
    state = await same_as_replayed(app, store, Notes)
    assert (state.label, state.notes) == ("x", ["y"])
    # Results in call order, then each call's other messages in call order.
    assert [m.message_id for m in state.context[2:]][:4] == [
        "tool-c1",
        "tool-c2",
        "m-first",
        "m-second",
    ]
    assert texts(state)[-1] == "other ran"


# ---- plain values and the log ------------------------------------------------------------


async def test_a_plain_value_stays_the_output(store: SQLiteEventStore) -> None:
    def add() -> dict[str, int]:
        return {"sum": 5}

    app = build(store, asking(("c1", "add")), [add])
    await app.ainvoke("go", CFG)
    state = await same_as_replayed(app, store, AgentState)
    message, block = results(state)["c1"]
    assert (message.message_id, block.output, block.status) == ("tool-c1", {"sum": 5}, "completed")
    record = finished(await log_of(store))["c1"]
    assert (record.output, record.message, record.update, record.goto) == (
        {"sum": 5},
        None,
        None,
        None,
    )


async def test_a_command_recorded_before_an_interrupt_routes_the_run_on_resume(
    store: SQLiteEventStore,
) -> None:
    runs: list[str] = []

    def route() -> Command[str]:
        runs.append("route")
        return Command(update={"notes": ["routed"]}, goto="other")

    def approve() -> Message:
        answer = interrupt("approve?")
        return Message.text_message(f"approved: {answer}", message_id="approval")

    app = build(store, asking(("c1", "route"), ("c2", "approve")), [route, approve], Notes)
    paused = await app.ainvoke("go", CFG)
    assert paused["status"] == "interrupted_before"
    await app.ainvoke(Command(resume="yes"), CFG)
    assert runs == ["route"]  # answered from the log on resume, not run again
    state = await same_as_replayed(app, store, Notes)
    assert state.notes == ["routed"]
    assert results(state)["c2"][1].output == "approved: yes"
    assert texts(state)[-1] == "other ran"


def test_without_updates_or_gotos_the_node_returns_its_messages() -> None:
    plain = ToolCallFinished(call_id="a", name="t", status="completed", output=1)
    given = Message(message_id="g", role="tool", content=[ToolResultBlock(call_id="b")])
    returned = ToolCallFinished(
        call_id="b", name="t", status="completed", message=given.model_dump()
    )
    output = node_output([plain, returned])
    assert isinstance(output, list)
    assert [m.message_id for m in output] == ["tool-a", "g"]


def test_a_failed_calls_recorded_command_is_not_applied() -> None:
    failed = ToolCallFinished(
        call_id="a", name="t", status="failed", error="boom", update={"label": "x"}, goto="z"
    )
    assert [m.message_id for m in node_output([failed])] == ["tool-a"]  # type: ignore[union-attr]
