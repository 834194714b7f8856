"""LangChain interop: messages both ways, LangChain tools in a ToolNode, tools_condition,
MessagesState, and a LangChain chat model as a node looping through the tool node."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages import RemoveMessage as LcRemoveMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, ToolException, tool

from agentlog import (
    END,
    AgentState,
    MessagesState,
    StateGraph,
    ToolNode,
    chat_model_node,
    tools_condition,
)
from agentlog.actors.engine.errors import GraphError
from agentlog.events import MemoryEventStore, ToolCallFinished, ToolCallStarted
from agentlog.events.kinds import Event
from agentlog.projections import (
    InvalidMessageError,
    Message,
    RemoveMessage,
    TextBlock,
    TokenUsages,
    ToolCallBlock,
    ToolResultBlock,
    replay,
    to_messages,
)
from agentlog.projections.errors import StateKeyError
from agentlog.projections.langchain import from_langchain, to_langchain, to_langchain_messages
from agentlog.projections.strategies import _objects, content_blocks, same, text
from tests.test_tools import FakeLog, asking, result_of

CFG = {"configurable": {"thread_id": "t1"}}

# ---- messages, both ways ------------------------------------------------------------------

_ids = st.text(min_size=1, max_size=12)
_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_-]{0,15}", fullmatch=True)
_counts = st.integers(0, 2**31)
_other_blocks = content_blocks(
    ["text", "image", "audio", "video", "document", "data", "reasoning", "annotation", "error"]
)


@st.composite
def _usages(draw: st.DrawFn) -> TokenUsages:
    prompt, completion = draw(_counts), draw(_counts)
    return TokenUsages(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        reasoning_tokens=draw(_counts),
        cache_read_input_tokens=draw(_counts),
        cache_creation_input_tokens=draw(_counts),
        audio_tokens=draw(_counts),
    )


@st.composite
def shared_messages(draw: st.DrawFn) -> Message:
    """Messages holding only what LangChain's messages hold too (see projections.langchain)."""
    role = draw(st.sampled_from(["user", "assistant", "system", "tool"]))
    metadata = draw(_objects().map(lambda d: {k: v for k, v in d.items() if k != "name"}))
    name = draw(st.none() | text)
    if name is not None:
        metadata["name"] = name
    data: dict[str, Any] = {
        "message_id": draw(_ids),
        "role": role,
        "metadata": metadata,
        "reasoning": draw(st.none() | text),
    }
    if role == "tool":
        failed = draw(st.booleans())
        block = ToolResultBlock(
            call_id=draw(_ids),
            output=draw(text),
            is_error=failed,
            status="failed" if failed else "completed",
        )
        data["content"] = [block]
    else:
        data["content"] = draw(st.lists(_other_blocks, max_size=3))
    if role == "assistant":
        call_ids = draw(st.lists(_ids, max_size=3, unique=True))
        data["content"] += [
            ToolCallBlock(id=i, name=draw(_names), args=draw(_objects())) for i in call_ids
        ]
        data["usages"] = draw(st.none() | _usages())
    return Message.model_validate(data)


def _shared(message: Message) -> dict[str, Any]:
    return message.model_dump(exclude={"timestamp"})


@settings(max_examples=150, deadline=None)
@given(shared_messages())
def test_agentlog_to_langchain_and_back_keeps_every_field_both_have(message: Message) -> None:
    back = from_langchain(to_langchain(message))
    assert isinstance(back, Message)
    assert same(_shared(back), _shared(message))


@settings(max_examples=100, deadline=None)
@given(shared_messages())
def test_langchain_to_agentlog_and_back_is_the_same_langchain_message(message: Message) -> None:
    first = to_langchain(message)
    again = from_langchain(first)
    assert isinstance(again, Message)
    assert to_langchain(again) == first


def test_each_langchain_message_kind_becomes_its_role_with_ids_calls_usage_and_name() -> None:
    ai = AIMessage(
        "thinking done",
        id="ai-1",
        name="planner",
        tool_calls=[{"name": "add", "args": {"a": 1}, "id": "c1"}],
        usage_metadata={
            "input_tokens": 5,
            "output_tokens": 3,
            "total_tokens": 8,
            "input_token_details": {"cache_read": 2},
            "output_token_details": {"reasoning": 1},
        },
    )
    read = to_messages(
        [
            SystemMessage("be brief", id="s"),
            HumanMessage("hi", id="h"),
            ai,
            ToolMessage("2", tool_call_id="c1", id="t"),
            ChatMessage("from chat", role="assistant", id="c"),
        ]
    )
    assert [m.role for m in read] == ["system", "user", "assistant", "tool", "assistant"]
    assert [m.message_id for m in read] == ["s", "h", "ai-1", "t", "c"]
    msg = read[2]
    assert msg.text() == "thinking done"
    assert msg.tool_calls() == [ToolCallBlock(id="c1", name="add", args={"a": 1})]
    assert msg.metadata["name"] == "planner"
    assert msg.usages is not None
    assert (msg.usages.prompt_tokens, msg.usages.completion_tokens) == (5, 3)
    assert (msg.usages.cache_read_input_tokens, msg.usages.reasoning_tokens) == (2, 1)
    (result,) = read[3].content
    assert isinstance(result, ToolResultBlock)
    assert (result.call_id, result.output, result.is_error) == ("c1", "2", False)


def test_langchains_media_and_reasoning_parts_become_our_blocks() -> None:
    from agentlog.projections import DocumentBlock, ImageBlock, ReasoningBlock

    human = HumanMessage(
        [
            {"type": "text", "text": "look"},
            {"type": "image", "url": "https://x/cat.png"},
            {"type": "image", "source_type": "base64", "data": "AAA=", "mime_type": "image/png"},
            {"type": "file", "file_id": "file-1"},
            {"type": "image_url", "image_url": {"url": "https://x/dog.png"}},
        ]
    )
    (message,) = to_messages(human)
    kinds = [type(b) for b in message.content]
    assert kinds == [TextBlock, ImageBlock, ImageBlock, DocumentBlock, ImageBlock]
    media = [b.media for b in message.content if isinstance(b, ImageBlock | DocumentBlock)]
    assert [(m.kind, m.url, m.data_base64, m.file_id) for m in media] == [
        ("url", "https://x/cat.png", None, None),
        ("data", None, "AAA=", None),
        ("file_id", None, None, "file-1"),
        ("url", "https://x/dog.png", None, None),
    ]
    thinking = AIMessage(
        [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "so"}]},
            {"type": "tool_use", "id": "c", "name": "f", "input": {}},
            "ok",
        ]
    )
    (answer,) = to_messages(thinking)
    assert answer.content == [
        ReasoningBlock(summary="hmm"),
        ReasoningBlock(summary="so"),
        TextBlock(text="ok"),
    ]


def test_a_chunk_is_stored_as_a_whole_message_with_its_parsed_tool_calls() -> None:
    chunk = AIMessageChunk(
        "on it",
        id="run-1",
        tool_call_chunks=[{"name": "add", "args": '{"a": 2}', "id": "c9", "index": 0}],
    )
    (message,) = to_messages(chunk)
    assert (message.role, message.delta, message.message_id) == ("assistant", False, "run-1")
    from langchain_core.messages import HumanMessageChunk, ToolMessageChunk

    human, tool_part = to_messages(
        [HumanMessageChunk("hi"), ToolMessageChunk("4", tool_call_id="c9")]
    )
    assert (human.role, human.text(), tool_part.role, tool_part.text()) == (
        "user",
        "hi",
        "tool",
        "4",
    )
    assert message.tool_calls() == [ToolCallBlock(id="c9", name="add", args={"a": 2})]


def test_langchains_remove_message_removes_as_agentlogs_does() -> None:
    from agentlog.projections.messages import context_items

    assert context_items([LcRemoveMessage(id="m1")]) == [RemoveMessage("m1")]


def test_a_message_langchain_has_and_agentlog_has_not_is_a_typed_error() -> None:
    with pytest.raises(InvalidMessageError, match="FunctionMessage"):
        to_messages([FunctionMessage("x", name="f")])
    with pytest.raises(InvalidMessageError, match="role 'critic'"):
        to_messages(ChatMessage("x", role="critic"))
    with pytest.raises(InvalidMessageError, match="a object is not a message"):
        to_messages([object()])


def test_a_tool_message_without_a_result_has_no_langchain_form() -> None:
    bare = Message(role="tool", content=[TextBlock(text="loose")])
    with pytest.raises(InvalidMessageError, match="holds no tool result"):
        to_langchain(bare)


def test_a_tool_result_that_is_not_text_goes_to_langchain_as_json() -> None:
    block = ToolResultBlock(call_id="c", output={"n": 1})
    lc = to_langchain(Message(role="tool", content=[block]))
    assert isinstance(lc, ToolMessage)
    assert lc.content == '{"n": 1}'


# ---- nodes returning LangChain messages ---------------------------------------------------


async def _run(node: Any, given: Any, state_cls: type[AgentState] = AgentState) -> Any:
    graph = StateGraph(state_cls)
    graph.add_node("n", node)
    graph.set_entry_point("n")
    graph.add_edge("n", END)
    store = MemoryEventStore()
    app = graph.compile(store)
    result = await app.ainvoke(given, CFG)
    live = await app.aget_state(CFG)
    records = [r async for r in store.read("t1")]
    assert same(replay(records, state_cls), live)  # replay == live, exactly (NaN included)
    await app.aclose()
    return result, live


@pytest.mark.parametrize(
    "shape",
    [
        lambda m: m,
        lambda m: [m],
        lambda m: {"messages": [m]},
        lambda m: {"context": [m]},
    ],
    ids=["bare", "list", "messages", "context"],
)
async def test_a_node_may_return_a_langchain_message_in_any_form_a_message_takes(
    shape: Any,
) -> None:
    def node(state: AgentState) -> Any:
        return shape(AIMessage("hello", id="ai-1", name="bot"))

    _, state = await _run(node, [HumanMessage("hi", id="h-1")])
    assert [(m.message_id, m.role, m.text()) for m in state.context] == [
        ("h-1", "user", "hi"),
        ("ai-1", "assistant", "hello"),
    ]
    assert state.context[1].metadata["name"] == "bot"


@st.composite
def _conversations(draw: st.DrawFn) -> list[Message]:
    """Messages without tool traffic (a stored transcript must pair calls and results),
    ids unique across the conversation."""
    drawn = draw(st.lists(shared_messages(), min_size=1, max_size=4))
    plain = [m for m in drawn if m.role != "tool" and not m.tool_calls()]
    return [
        m.model_copy(update={"message_id": f"m{i}-{m.message_id}"}) for i, m in enumerate(plain)
    ]


@settings(max_examples=25, deadline=None)
@given(_conversations())
async def test_a_graph_fed_langchain_messages_stores_them_as_converted_and_replays_the_same(
    messages: list[Message],
) -> None:
    lc = to_langchain_messages(messages)
    half = len(lc) // 2

    def node(state: AgentState) -> Any:
        return {"messages": lc[half:]}

    _, state = await _run(node, {"messages": [HumanMessage("start", id="h0"), *lc[:half]]})
    stored = [_shared(m) for m in state.context[1:]]
    assert same(stored, [_shared(m) for m in messages])


async def test_a_node_returning_a_foreign_object_still_fails_naming_it() -> None:
    from agentlog.actors.engine.errors import NodeError

    def node(state: AgentState) -> Any:
        return {"messages": [object()]}

    graph = StateGraph()
    graph.add_node("n", node)
    graph.set_entry_point("n")
    graph.add_edge("n", END)
    app = graph.compile()
    with pytest.raises((NodeError, InvalidMessageError), match="is not a message"):
        await app.ainvoke("hi", CFG)


# ---- MessagesState ------------------------------------------------------------------------


class Notes(MessagesState):
    topic: str = ""


async def test_messages_state_reads_its_context_by_langgraphs_name() -> None:
    seen: list[Any] = []

    def node(state: Notes) -> dict[str, Any]:
        seen.append((state["messages"], state.messages, state["topic"], state.get("nope", 7)))
        return {"messages": [AIMessage(f"{len(state['messages'])} so far", id="ai")], "topic": "x"}

    result, state = await _run(node, {"messages": [("hi")], "topic": "t"}, Notes)
    (by_key, by_attr, topic, missing) = seen[0]
    assert by_key == by_attr == list(by_key)
    assert [m.text() for m in by_key] == ["hi"]
    assert (topic, missing) == ("t", 7)
    assert [m.text() for m in result["messages"]] == ["hi", "1 so far"]
    assert state["topic"] == "x" and "messages" in state and "nope" not in state
    with pytest.raises(StateKeyError, match="has no field 'nope'"):
        state["nope"]


# ---- tools_condition ----------------------------------------------------------------------


def test_tools_condition_routes_on_the_last_message_of_any_state_shape() -> None:
    calls = AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "c"}])
    plain = AIMessage("done")
    assert tools_condition({"messages": [HumanMessage("x"), calls]}) == "tools"
    assert tools_condition({"messages": [calls, plain]}) == END
    assert tools_condition([calls]) == "tools"
    assert tools_condition({"chat": [calls]}, messages_key="chat") == "tools"
    state = AgentState(context=to_messages([HumanMessage("x"), calls]))
    assert tools_condition(state) == "tools"
    assert tools_condition(MessagesState(context=to_messages(plain))) == END
    answered = {"messages": [{"role": "assistant", "content": "ok"}]}
    assert tools_condition(answered) == END


def test_tools_condition_without_messages_is_a_typed_error() -> None:
    with pytest.raises(GraphError, match="found no messages"):
        tools_condition({"messages": []})
    with pytest.raises(GraphError, match="cannot read the last message"):
        tools_condition({"messages": [object()]})


# ---- LangChain tools in a ToolNode ----------------------------------------------------------


@tool
def add(a: int, b: int = 2) -> int:
    """Add two numbers."""
    return a + b


@tool
async def shout(word: str) -> str:
    """Say it louder."""
    return word.upper()


@tool
def whoami(x: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Echo the call id."""
    return f"{x}:{tool_call_id}"


def _multiply(a: int, b: int) -> int:
    return a * b


multiply = StructuredTool.from_function(_multiply, name="multiply", description="Times.")


class Counter(BaseTool):
    name: str = "counter"
    description: str = "Counts its calls."
    calls: int = 0

    def _run(self, step: int) -> str:
        self.calls += step
        return f"count {self.calls}"


def test_langchain_tools_give_their_name_description_and_schema() -> None:
    node = ToolNode([add, shout, whoami, multiply])
    by_name = {s["function"]["name"]: s["function"] for s in node.schemas()}
    assert by_name["add"]["description"] == "Add two numbers."
    assert by_name["add"]["parameters"]["required"] == ["a"]
    assert by_name["add"]["parameters"]["properties"]["b"]["default"] == 2
    assert by_name["multiply"]["description"] == "Times."
    assert list(by_name["whoami"]["parameters"]["properties"]) == ["x"]  # injected: left out


async def test_langchain_tools_run_sync_and_async_with_the_calls_arguments() -> None:
    counter = Counter()
    log = FakeLog()
    state = asking(
        ("c1", "add", {"a": 1}),
        ("c2", "shout", {"word": "hey"}),
        ("c3", "whoami", {"x": "me"}),
        ("c4", "multiply", {"a": 3, "b": 4}),
        ("c5", "counter", {"step": 5}),
    )
    messages = await ToolNode([add, shout, whoami, multiply, counter]).run(state, log.context)
    assert isinstance(messages, list)
    outputs = [result_of(m).output for m in messages]
    assert outputs == ["3", "HEY", "me:c3", "12", "count 5"]
    assert [m.message_id for m in messages] == [
        "tool-c1",
        "tool-c2",
        "tool-c3",
        "tool-c4",
        "tool-c5",
    ]
    assert all(
        m.metadata["tool_name"] == n
        for m, n in zip(messages, ["add", "shout", "whoami", "multiply", "counter"], strict=True)
    )
    assert sorted(log.finished()) == ["c1", "c2", "c3", "c4", "c5"]


async def test_a_langchain_tools_bad_arguments_and_errors_are_failed_calls() -> None:
    @tool
    def broken(x: int) -> int:
        """Always fails."""
        raise ToolException("nope")

    def _handled(x: int) -> int:
        raise ToolException("handled nope")

    handled = StructuredTool.from_function(
        _handled, name="handled", description="Fails, answering.", handle_tool_error=True
    )

    log = FakeLog()
    state = asking(
        ("c1", "add", {"a": "not a number"}),
        ("c2", "broken", {"x": 1}),
        ("c3", "handled", {"x": 1}),
    )
    messages = await ToolNode([add, broken, handled]).run(state, log.context)
    assert isinstance(messages, list)
    results = [result_of(m) for m in messages]
    assert [r.is_error for r in results] == [True, True, True]
    assert "invalid arguments for 'add'" in results[0].output
    assert "nope" in results[1].output
    assert "handled nope" in results[2].output
    assert {e.status for e in log.finished().values()} == {"failed"}


async def test_a_committed_langchain_tool_result_is_never_run_again() -> None:
    counter = Counter()
    recorded: list[Event] = [
        ToolCallStarted(call_id="a", name="counter", args={"step": 1}, node="tools"),
        ToolCallStarted(call_id="b", name="counter", args={"step": 10}, node="tools"),
        ToolCallFinished(call_id="a", name="counter", output="count 1"),
    ]
    log = FakeLog(recorded)
    state = asking(("a", "counter", {"step": 1}), ("b", "counter", {"step": 10}))
    messages = await ToolNode([counter]).run(state, log.context)
    assert counter.calls == 10  # only b ran; a was answered from the log
    assert isinstance(messages, list)
    assert [result_of(m).output for m in messages] == ["count 1", "count 10"]
    assert all(isinstance(e, ToolCallFinished) for e in log.events)


async def test_a_plain_tool_may_answer_with_langchain_messages() -> None:
    from agentlog import Command

    def lookup(q: str, tool_call_id: str) -> ToolMessage:
        """Look it up."""
        return ToolMessage(f"found {q}", tool_call_id=tool_call_id, id=f"answer-{q}")

    def note(text: str, tool_call_id: str) -> Command[str]:
        """Take a note."""
        return Command(
            update={
                "messages": [
                    ToolMessage("noted", tool_call_id=tool_call_id, id="noted"),
                    HumanMessage(f"remember {text}", id="memo"),
                ]
            }
        )

    log = FakeLog()
    state = asking(("c1", "lookup", {"q": "x"}), ("c2", "note", {"text": "y"}))
    out = await ToolNode([lookup, note]).run(state, log.context)
    assert not isinstance(out, list)
    messages = out.update["messages"]  # type: ignore[index]
    assert [(m.message_id, m.role) for m in messages] == [
        ("answer-x", "tool"),
        ("noted", "tool"),
        ("memo", "user"),
    ]
    assert result_of(messages[0]).output == "found x"


def test_something_neither_a_function_nor_a_tool_is_refused_naming_both() -> None:
    with pytest.raises(GraphError, match="named function or a LangChain tool"):
        ToolNode([42])  # type: ignore[list-item]


# ---- a chat model as a node, looping through the tool node ----------------------------------


class ToolModel(FakeMessagesListChatModel):
    """A scripted chat model that takes bind_tools, as a real one does (and records them)."""

    bound: list[Any] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        self.bound.extend(tools)
        return self


def _agent(model: Any, tools: ToolNode, store: Any = None) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("agent", chat_model_node(model, tools=tools))
    graph.add_node("tools", tools)
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph.compile(store)


async def test_a_chat_model_with_bound_tools_loops_through_the_tool_node_and_ends() -> None:
    model = ToolModel(
        responses=[
            AIMessage(
                "",
                id="ai-1",
                tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "call-1"}],
                usage_metadata={"input_tokens": 4, "output_tokens": 2, "total_tokens": 6},
            ),
            AIMessage("2 + 3 = 5", id="ai-2"),
        ]
    )
    store = MemoryEventStore()
    app = _agent(model, ToolNode([add]), store)
    result = await app.ainvoke({"messages": [HumanMessage("2+3?", id="h")]}, CFG)
    assert [(m.role, m.message_id) for m in result["messages"]] == [
        ("user", "h"),
        ("assistant", "ai-1"),
        ("tool", "tool-call-1"),
        ("assistant", "ai-2"),
    ]
    assert result["messages"][-1].text() == "2 + 3 = 5"
    assert result["messages"][1].usages.total_tokens == 6
    assert result["token_usage"]["total_input_tokens"] == 4  # LangChain's usage_metadata counts
    assert [t["function"]["name"] for t in model.bound] == ["add"]
    live = await app.aget_state(CFG)
    assert isinstance(live, MessagesState)
    assert replay([r async for r in store.read("t1")], MessagesState) == live
    # the model saw the whole conversation, as LangChain messages
    assert [type(m) for m in to_langchain_messages(live.messages)] == [
        HumanMessage,
        AIMessage,
        ToolMessage,
        AIMessage,
    ]
    await app.aclose()


async def test_a_plain_chat_model_answers_as_a_node() -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage("hello there", id="ai")]))
    graph = StateGraph(MessagesState)
    graph.add_node("chat", chat_model_node(model))
    graph.set_entry_point("chat")
    graph.add_edge("chat", END)
    app = graph.compile()
    result = await app.ainvoke("hi", CFG)
    assert [m.text() for m in result["messages"]] == ["hi", "hello there"]


def test_chat_model_node_refuses_what_is_not_a_chat_model() -> None:
    with pytest.raises(GraphError, match="takes a LangChain chat model"):
        chat_model_node(object())
    with pytest.raises(GraphError, match="cannot bind tools"):
        chat_model_node(GenericFakeChatModel(messages=iter([])), tools=[add])


# ---- the core without langchain_core ---------------------------------------------------------


def test_agentlog_runs_a_graph_without_langchain_core_installed() -> None:
    script = """
import sys, asyncio
sys.modules["langchain_core"] = None  # import langchain_core now fails, as if not installed
import agentlog
from agentlog import StateGraph, ToolNode, tools_condition, MessagesState, END

def echo(text: str) -> str:
    '''Echo.'''
    return text

def agent(state):
    return {"messages": [{"role": "assistant", "content": "done"}]}

g = StateGraph(MessagesState)
g.add_node("agent", agent)
g.add_node("tools", ToolNode([echo]))
g.set_entry_point("agent")
g.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
g.add_edge("tools", "agent")
out = asyncio.run(g.compile().ainvoke("hi", {"configurable": {"thread_id": "t"}}))
assert [m.text() for m in out["messages"]] == ["hi", "done"], out
assert not any(name.startswith("langchain") and sys.modules[name] for name in sys.modules)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
