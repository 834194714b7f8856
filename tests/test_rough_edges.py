"""What a new user hits first when building and running a graph: each edge refused early,
with a message that names the culprit and the fix."""

from __future__ import annotations

import json
from typing import Any, Literal, TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from agentlog.actors import END, START, Command, GraphError, StateGraph
from agentlog.events.errors import AgentlogError
from agentlog.projections import AgentState, Message, StreamChunk, StreamEvent
from agentlog.projections.messages import (
    ImageBlock,
    InvalidMessageError,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    normalize_input,
    to_messages,
)

CFG = {"thread_id": "rough"}


def said(text: str) -> list[Message]:
    return [Message.text_message(text, role="assistant")]


# ---- 1. routing by Command(goto=...) needs no dummy edge ---------------------------------


def router(state: AgentState) -> Command[Literal["left", "right"]]:
    last = state.context[-1].text() if state.context else ""
    return Command(update=said(f"routing {last}"), goto="left" if last == "l" else "right")


def left(state: AgentState) -> list[Message]:
    return said("went left")


def right(state: AgentState) -> list[Message]:
    return said("went right")


def to_end_or_left(state: AgentState) -> Command[Literal["left", "__end__"]] | None:
    return Command(goto=END)


def command_graph() -> StateGraph[AgentState]:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("router", router).add_node("left", left).add_node("right", right)
    graph.set_entry_point("router")
    graph.add_edge("left", END).add_edge("right", END)
    return graph


def test_a_command_annotation_declares_where_a_node_may_go() -> None:
    graph = command_graph()
    assert graph.destinations["router"] == ("left", "right")
    assert graph.successors("router") == {"left", "right"}
    graph.check()
    graph.add_node("maybe", to_end_or_left)
    assert graph.destinations["maybe"] == ("left", END)


async def test_a_node_routing_by_command_runs_without_an_edge() -> None:
    app = command_graph().compile()
    out = await app.ainvoke({"messages": [Message.text_message("l")]}, {"thread_id": "l"})
    assert [m.text() for m in out["messages"]] == ["l", "routing l", "went left"]
    out = await app.ainvoke({"messages": [Message.text_message("r")]}, {"thread_id": "r"})
    assert [m.text() for m in out["messages"]][-1] == "went right"


def test_destinations_given_to_add_node_replace_an_annotation() -> None:
    def untyped(state: AgentState) -> Command:  # type: ignore[type-arg]
        return Command(goto="left")

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("router", untyped, destinations=("left",)).add_node("left", left)
    graph.set_entry_point("router").add_edge("left", END)
    graph.check()
    assert graph.successors("router") == {"left"}
    with pytest.raises(GraphError, match="destinations"):
        graph.add_node("bad", untyped, destinations="left")  # a bare str is not a sequence


def test_a_declared_destination_must_be_a_node() -> None:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("router", router).add_node("left", left).set_entry_point("router")
    graph.add_edge("left", END)
    with pytest.raises(GraphError, match="'router' declares destination 'right'"):
        graph.check()


def test_a_node_with_no_way_out_is_named_with_the_fixes() -> None:
    def untyped(state: AgentState) -> Command:  # type: ignore[type-arg]
        return Command(goto=END)

    # `worker` leads to `router`, which has no edge: `router` is at fault, not `worker`.
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("worker", left).add_node("router", untyped).set_entry_point("worker")
    graph.add_edge("worker", "router")
    with pytest.raises(GraphError) as caught:
        graph.check()
    message = str(caught.value)
    assert "node 'router'" in message
    assert "'worker'" not in message
    for fix in ("add_edge", "add_conditional_edges", "destinations", "Command[Literal["):
        assert fix in message


def test_a_command_annotation_that_cannot_be_read_is_explained() -> None:
    def unreadable(state: AgentState) -> Command[Literal[Nowhere]]:  # type: ignore[name-defined]  # noqa: F821
        return Command(goto=END)

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("router", unreadable).set_entry_point("router")
    with pytest.raises(GraphError, match=r"node 'router'.*could not be read.*Nowhere"):
        graph.check()


def test_a_callable_object_and_an_async_node_are_read_too() -> None:
    class Router:
        def __call__(self, state: AgentState) -> Command[Literal["left"]]:
            return Command(goto="left")

    async def arouter(state: AgentState) -> Command[Literal["right", "left"]]:
        return Command(goto="right")

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("obj", Router()).add_node("coro", arouter)
    assert graph.destinations["obj"] == ("left",)
    assert set(graph.destinations["coro"]) == {"right", "left"}  # Literal's order is not kept


def test_check_goto_holds_a_node_to_its_declared_destinations() -> None:
    graph = command_graph()
    graph.check_goto("router", "left")
    graph.check_goto("left", "right")  # no declaration: the runtime checks it is a node
    with pytest.raises(GraphError, match=r"'router' chose to go to 'left2'.*'left', 'right'"):
        graph.check_goto("router", "left2")


# ---- 2. and 3. the state class is checked when the graph is made -------------------------


class NotAState(TypedDict):
    messages: list[str]


class PlainModel(BaseModel):
    notes: list[str] = Field(default_factory=list)


@pytest.mark.parametrize("state_cls", [NotAState, PlainModel, dict, AgentState()])
def test_a_state_that_is_not_an_agent_state_is_refused(state_cls: Any) -> None:
    with pytest.raises(GraphError, match=r"AgentState subclass.*class MyState\(AgentState\)"):
        StateGraph(state_cls)


class NeedsTopic(AgentState):
    topic: str
    count: int
    notes: list[str] = Field(default_factory=list)


def test_a_state_field_without_a_default_is_named() -> None:
    with pytest.raises(GraphError) as caught:
        StateGraph(NeedsTopic)
    message = str(caught.value)
    assert "'topic'" in message and "'count'" in message
    assert "'notes'" not in message
    assert "NeedsTopic()" in message


def test_a_state_with_defaults_is_accepted() -> None:
    class Fine(AgentState):
        topic: str = ""

    assert StateGraph(Fine).state_cls is Fine


# ---- 4. input as a user would write it ------------------------------------------------------


def test_a_str_is_a_user_message() -> None:
    [message] = to_messages("hello")
    assert message.role == "user"
    assert message.content == [TextBlock(text="hello")]


def test_openai_style_messages_become_messages() -> None:
    given = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "look: "}, {"type": "text", "text": "x"}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": json.dumps({"order": 7})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "shipped"},
        {"role": "assistant", "content": "it shipped", "name": "bot"},
    ]
    system, user, call, result, answer = to_messages(given)
    assert (system.role, system.text()) == ("system", "be brief")
    assert user.text() == "look: x"
    assert call.role == "assistant"
    assert call.tool_calls() == [ToolCallBlock(id="call_1", name="lookup", args={"order": 7})]
    assert result.role == "tool"
    assert result.content == [ToolResultBlock(call_id="call_1", output="shipped")]
    assert answer.text() == "it shipped" and answer.metadata["name"] == "bot"


def test_an_image_part_keeps_its_url_or_its_inline_data() -> None:
    [message] = to_messages(
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        }
    )
    first, second = message.content
    assert isinstance(first, ImageBlock) and first.media.url == "https://x.test/a.png"
    assert isinstance(second, ImageBlock)
    assert (second.media.kind, second.media.mime_type, second.media.data_base64) == (
        "data",
        "image/png",
        "AAAA",
    )


def test_our_own_forms_pass_through() -> None:
    ours = Message.text_message("mine", role="assistant")
    dumped = ours.model_dump(mode="json")
    assert to_messages(ours) == [ours]
    assert to_messages(dumped) == [ours]
    assert to_messages([ours, "next"])[1].text() == "next"
    tool = {"role": "tool", "content": [{"type": "tool_result", "call_id": "c", "output": 1}]}
    assert to_messages(tool)[0].content == [ToolResultBlock(call_id="c", output=1)]


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (42, "int"),
        (b"hi", "bytes"),
        ({"role": "robot", "content": "hi"}, "'robot'"),
        ({"content": "hi"}, "role"),
        ({"role": "tool", "content": "done"}, "tool_call_id"),
        ({"role": "user", "content": [{"type": "hologram"}]}, "'hologram'"),
        ({"role": "user", "content": 3}, "content"),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}],
            },
            "arguments",
        ),
        (["fine", 7], "item 1"),
    ],
)
def test_bad_input_is_a_typed_error_naming_the_problem(bad: Any, named: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        to_messages(bad)
    assert isinstance(caught.value, AgentlogError)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert named in message
    assert "{'role': 'user', 'content': 'hi'}" in message  # the accepted forms are listed


def test_normalize_input_keeps_state_fields_and_converts_messages() -> None:
    assert normalize_input(None) is None
    state = AgentState()
    assert normalize_input(state) is state
    update = normalize_input({"messages": [{"role": "user", "content": "hi"}], "topic": "t"})
    assert isinstance(update, dict)
    assert update["topic"] == "t"
    assert [m.text() for m in update["messages"]] == ["hi"]
    assert normalize_input({"role": "user", "content": "hi"})[0].text() == "hi"  # type: ignore[index]
    assert normalize_input("yo")[0].role == "user"  # type: ignore[index]
    assert normalize_input({"notes": ["a"]}) == {"notes": ["a"]}
    with pytest.raises(InvalidMessageError, match="'messages' must be a list"):
        normalize_input({"messages": "not a list"})
    with pytest.raises(InvalidMessageError, match=r"in 'context': item 0.*'robot'"):
        normalize_input({"context": [{"role": "robot", "content": "x"}]})


@given(st.text())
def test_any_text_round_trips_as_a_user_message(text: str) -> None:
    [message] = to_messages(text)
    assert message.role == "user" and message.text() == text
    [again] = to_messages({"role": "user", "content": text})
    assert again.text() == text


async def test_ainvoke_takes_a_str_and_openai_dicts() -> None:
    app = StateGraph().add_node("echo", left).set_entry_point("echo").add_edge("echo", END)
    compiled = app.compile()
    out = await compiled.ainvoke("hello", {"thread_id": "s"})
    assert [m.text() for m in out["messages"]] == ["hello", "went left"]
    out = await compiled.ainvoke(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        {"thread_id": "d"},
    )
    assert [m.text() for m in out["messages"]] == ["hi", "went left"]


# ---- 5. a stream chunk's event is a StreamEvent ---------------------------------------------


async def test_stream_chunk_events_are_stream_events() -> None:
    chunk = StreamChunk(event="state")  # type: ignore[arg-type]
    assert chunk.event is StreamEvent.STATE and chunk.event == "state"
    assert StreamChunk().event is StreamEvent.MESSAGE
    assert StreamChunk.model_validate_json('{"event": "updates"}').event is StreamEvent.UPDATES
    assert json.loads(StreamChunk(event=StreamEvent.ERROR).model_dump_json())["event"] == "error"
    app = command_graph().compile()
    seen = [c.event async for c in app.astream({"messages": [Message.text_message("l")]}, CFG)]
    assert seen and all(isinstance(e, StreamEvent) for e in seen)
    assert {StreamEvent.MESSAGE, StreamEvent.UPDATES, StreamEvent.STATE} <= set(seen)


# ---- 6. node names the log can hold and that are not the engine's own ------------------------


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("", "empty"),
        ("\ud800", "surrogate"),
        ("a\x00b", "control character"),
        ("tab\there", "control character"),
        (START, "reserved"),
        (END, "reserved"),
        ("user", "reserved"),
        ("runtime", "reserved"),
        (3, "str"),
    ],
)
def test_a_node_name_the_log_cannot_hold_is_refused(name: Any, named: str) -> None:
    graph: StateGraph[AgentState] = StateGraph()
    with pytest.raises(GraphError, match=named):
        graph.add_node(name, left)
    assert graph.nodes == {}


def test_a_function_named_like_a_reserved_actor_is_refused() -> None:
    def user(state: AgentState) -> None:
        return None

    with pytest.raises(GraphError, match="'user' cannot name a node, it is reserved"):
        StateGraph().add_node(user)
    StateGraph().add_node("users", user)  # only the exact names are taken


# ---- what a hurried user passes by mistake -------------------------------------------------


async def test_a_config_that_is_not_a_dict_is_a_typed_error() -> None:
    from agentlog.actors import MissingThreadIdError

    app = _one_node_graph().compile()
    with pytest.raises(MissingThreadIdError, match="config must be a dict"):
        await app.ainvoke("hi", "t1")  # type: ignore[arg-type]


async def test_an_input_of_no_known_shape_blames_the_input_not_a_node() -> None:
    app = _one_node_graph().compile()
    with pytest.raises(GraphError, match="ainvoke's input must be") as caught:
        await app.ainvoke(42, {"thread_id": "t"})
    assert "node" not in str(caught.value).split(";")[0]
    assert await app.store.threads() == []


async def test_a_condition_that_returns_an_unmapped_value_is_blamed_itself() -> None:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("a", lambda state: None)
    graph.set_entry_point("a")
    graph.add_conditional_edges("a", lambda state: "oops", {"done": END})
    app = graph.compile()
    with pytest.raises(GraphError, match="condition after 'a'"):
        await app.ainvoke("hi", {"thread_id": "t"})
    state = await app.aget_state({"thread_id": "t"})
    assert state.execution_meta.status.value == "error"  # recorded as a failed run


async def test_a_wrongly_typed_field_names_the_field_in_plain_words() -> None:
    from agentlog.events.errors import AgentlogError as Base

    class Counted(AgentState):
        counter: int = 0

    graph: StateGraph[Counted] = StateGraph(Counted)
    graph.add_node("a", lambda state: None)
    graph.set_entry_point("a")
    graph.add_edge("a", END)
    app = graph.compile()
    with pytest.raises(Base, match="field 'counter' of Counted cannot take 'abc'") as caught:
        await app.ainvoke({"messages": ["hi"], "counter": "abc"}, {"thread_id": "t"})
    assert "errors.pydantic.dev" not in str(caught.value)
    assert await app.store.threads() == []


async def test_a_store_in_a_missing_directory_says_so(tmp_path: Any) -> None:
    from agentlog.events import SQLiteEventStore, StoreUnavailableError

    store = SQLiteEventStore(tmp_path / "nodir" / "x.db")
    with pytest.raises(StoreUnavailableError, match="does not exist"):
        await store.open()
    assert not (tmp_path / "nodir").exists()


def test_tools_need_names_providers_accept_and_named_arguments() -> None:
    from agentlog.actors import ToolNode

    with pytest.raises(GraphError, match="not one model providers accept"):
        ToolNode([lambda x: x])

    def kw(**kwargs: Any) -> None:
        """Takes anything."""

    with pytest.raises(GraphError, match=r"\*\*kwargs cannot be described"):
        ToolNode([kw])


def _one_node_graph() -> StateGraph[AgentState]:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("a", lambda state: None)
    graph.set_entry_point("a")
    graph.add_edge("a", END)
    return graph
