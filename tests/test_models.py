"""The state models, reducers and context managers."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from agentlog.projections import (
    END,
    START,
    AgentState,
    ContentBlock,
    ExecutionState,
    ExecutionStatus,
    MediaRef,
    Message,
    MessageContextManager,
    StopRequestStatus,
    StreamChunk,
    StreamEvent,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    add_messages,
    append_items,
    generate_id,
    remove_tool_messages,
    replace_messages,
    replace_value,
)


def user(text: str, mid: str | None = None) -> Message:
    return Message.text_message(text, "user", mid)


def assistant(text: str = "", calls: bool = False) -> Message:
    content: list[ContentBlock] = [TextBlock(text=text)]
    if calls:
        content.append(ToolCallBlock(id=generate_id(None).__str__(), name="f"))
    return Message(role="assistant", content=content)


def tool() -> Message:
    return Message.tool_message([ToolResultBlock(call_id="c", output="ok")])


def test_constants_and_defaults() -> None:
    assert START == "__start__" and END == "__end__"
    state = AgentState()
    assert state.context == [] and state.context_summary is None
    meta = state.execution_meta
    assert meta.current_node == START and meta.step == 0
    assert meta.status is ExecutionStatus.RUNNING
    assert meta.stop_current_execution is StopRequestStatus.NONE
    assert meta.internal_data == {} and meta.thread_id is None


def test_execution_transitions() -> None:
    meta = ExecutionState(current_node="a")
    meta.advance_step()
    meta.set_current_node("b")
    assert (meta.step, meta.current_node) == (1, "b")
    meta.set_interrupt("b", "approve", ExecutionStatus.INTERRUPTED_BEFORE, {"x": 1})
    assert meta.is_interrupted() and not meta.is_running()
    assert (meta.interrupted_node, meta.interrupt_reason, meta.interrupt_data) == (
        "b",
        "approve",
        {"x": 1},
    )
    meta.clear_interrupt()
    assert meta.is_running() and meta.interrupted_node is None and meta.interrupt_data is None
    meta.stop_current_execution = StopRequestStatus.STOP_REQUESTED
    assert meta.is_stopped_requested()
    meta.error("boom")
    assert meta.status is ExecutionStatus.ERROR and meta.internal_data["error"] == "boom"
    meta.complete()
    assert meta.status is ExecutionStatus.COMPLETED


def test_agent_state_delegates_to_execution_meta() -> None:
    state = AgentState()
    state.set_current_node("x")
    state.advance_step()
    state.set_interrupt("x", "why", ExecutionStatus.INTERRUPTED_AFTER)
    assert state.is_interrupted() and state.execution_meta.current_node == "x"
    state.clear_interrupt()
    assert state.is_running() and not state.is_stopped_requested()
    state.error("bad")
    assert state.execution_meta.status is ExecutionStatus.ERROR
    state.complete()
    assert state.execution_meta.status is ExecutionStatus.COMPLETED


def test_execution_state_from_dict() -> None:
    meta = ExecutionState.from_dict(
        {"current_node": "n", "step": 4, "status": "interrupted_after", "_internal_data": {"k": 1}}
    )
    assert meta.step == 4 and meta.status is ExecutionStatus.INTERRUPTED_AFTER
    assert meta.internal_data == {"k": 1}


def test_message_helpers() -> None:
    m = Message.text_message("hi", role="assistant", message_id="m1")
    assert (m.message_id, m.role, m.text()) == ("m1", "assistant", "hi")
    assert isinstance(generate_id(None), str) and generate_id("x") == "x"
    assert Message.text_message("a").message_id != Message.text_message("a").message_id
    t = Message.tool_message([ToolResultBlock(call_id="c1", output="42")], meta={"k": 1})
    assert t.role == "tool" and t.text() == "42" and t.metadata == {"k": 1}
    m.attach_media(MediaRef(url="http://x/y.png"), "image")
    assert m.content[-1].type == "image"
    with pytest.raises(ValueError, match="cannot attach media"):
        m.attach_media(MediaRef(), "hologram")  # type: ignore[arg-type]


def test_every_block_kind_round_trips_through_the_union() -> None:
    media = {"kind": "url", "url": "http://x"}
    blocks = [
        {"type": "text", "text": "t"},
        {"type": "image", "media": media},
        {"type": "audio", "media": media, "transcript": "hi"},
        {"type": "video", "media": media},
        {"type": "document", "media": media, "pages": [1]},
        {"type": "data", "mime_type": "application/json"},
        {"type": "tool_call", "id": "1", "name": "f", "args": {"a": 1}},
        {"type": "remote_tool_call", "id": "2", "name": "g"},
        {"type": "tool_result", "call_id": "1", "output": {"x": 1}, "status": "completed"},
        {"type": "reasoning", "summary": "thinking"},
        {"type": "annotation", "refs": [{"url": "http://c"}], "spans": [[0, 3]]},
        {"type": "error", "message": "bad"},
    ]
    adapter = TypeAdapter(list[ContentBlock])
    parsed = adapter.validate_python(blocks)
    assert [b.type for b in parsed] == [b["type"] for b in blocks]
    assert adapter.validate_python(adapter.dump_python(parsed, mode="json")) == parsed
    with pytest.raises(ValidationError):
        adapter.validate_python([{"type": "nope"}])


def test_openai_style_tool_calls_are_read() -> None:
    m = Message(
        role="assistant",
        content=[],
        tools_calls=[
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {"y": 2}}},
        ],
    )
    assert [(c.id, c.name, c.args) for c in m.tool_calls()] == [
        ("c1", "f", {"x": 1}),
        ("c2", "g", {"y": 2}),
    ]


def test_add_messages_dedupes_and_drops_deltas() -> None:
    a, b = user("a", "1"), user("b", "2")
    delta = Message(role="assistant", content=[TextBlock(text="..")], delta=True)
    assert add_messages([a], [b, a, delta, b]) == [a, b]
    assert replace_messages([a], [b]) == [b]
    assert replace_value(1, 2) == 2


def test_append_items_dedupes_by_id() -> None:
    class Item:
        def __init__(self, id: int) -> None:
            self.id = id

    x, y, y2 = Item(1), Item(2), Item(2)
    assert append_items([x], [y, x, y2]) == [x, y]


def test_remove_tool_messages_only_complete_sequences() -> None:
    u, call, result, final = user("q"), assistant(calls=True), tool(), assistant("done")
    assert remove_tool_messages([u, call, result, final]) == [u, final]
    assert remove_tool_messages([u, call]) == [u, call]
    assert remove_tool_messages([u, call, result]) == [u, call, result]
    call2, result2, final2 = assistant(calls=True), tool(), assistant("again")
    assert remove_tool_messages([u, call, result, final, call2, result2, final2]) == [
        u,
        final,
        final2,
    ]
    assert remove_tool_messages([]) == []


def test_message_context_manager_keeps_system_and_last_user_turns() -> None:
    system = Message.text_message("be nice", "system")
    turns = [m for i in range(5) for m in (user(f"u{i}"), assistant(f"a{i}"))]
    state = AgentState(context=[system, *turns])
    trimmed = MessageContextManager(max_messages=2).trim_context(state)
    assert [m.text() for m in trimmed.context] == ["be nice", "u3", "a3", "u4", "a4"]
    untouched = AgentState(context=[system, *turns[:2]])
    assert MessageContextManager(max_messages=2).trim_context(untouched).context == [
        system,
        *turns[:2],
    ]
    with pytest.raises(ValueError):
        MessageContextManager(max_messages=-1)


async def test_message_context_manager_can_drop_tool_sequences() -> None:
    u, call, result, final = user("q"), assistant(calls=True), tool(), assistant("done")
    state = AgentState(context=[u, call, result, final])
    out = await MessageContextManager(max_messages=5, remove_tool_msgs=True).atrim_context(state)
    assert out.context == [u, final]


def test_stream_chunk_defaults() -> None:
    chunk = StreamChunk(message=user("x"), thread_id="t")
    assert chunk.event == StreamEvent.MESSAGE == "message"
    assert chunk.timestamp > 0 and chunk.state is None


def test_subclass_fields_with_reducers() -> None:
    from typing import Annotated

    class MyState(AgentState):
        notes: Annotated[list[str], lambda a, b: a + b] = []
        mood: str = "calm"

    state = MyState()
    assert state.notes == [] and state.mood == "calm" and state.execution_meta.current_node == START


def test_append_items_takes_plain_values_and_dicts_too() -> None:
    assert append_items(["a"], ["b", "a", "c"]) == ["a", "b", "c"]
    assert append_items([{"id": 1, "v": "x"}], [{"id": 1, "v": "y"}, {"id": 2}]) == [
        {"id": 1, "v": "x"},
        {"id": 2},
    ]
    assert append_items([[1]], [[1], [2]]) == [[1], [2]]  # unhashable values by their repr
