"""The seed's state package as its users write it: ids from the dependency container,
a container frozen by compile, a node returning a model's raw answer or a converter, a
`context` parameter, and `MessageContextManager(max_messages=0)`."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agentlog import END, AgentState, MemoryEventStore, Message, StateGraph
from agentlog.actors import GraphError, NodeContext
from agentlog.actors.models import ModelResponseConverter
from agentlog.events.errors import InvalidArgumentError
from agentlog.projections import MessageContextManager, generate_id
from agentlog.projections.ids import message_defaults

CONFIG = {"configurable": {"thread_id": "t"}}


def one_node(fn: Any) -> StateGraph[AgentState]:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("main", fn)
    graph.set_entry_point("main")
    graph.add_edge("main", END)
    return graph


def answer(state: AgentState) -> list[Message]:
    return [Message.text_message("hello", role="assistant")]


async def last_id(graph: StateGraph[AgentState]) -> str | int:
    app = graph.compile(checkpointer=MemoryEventStore())
    await app.ainvoke({"messages": [Message.text_message("hi", message_id="u1")]}, CONFIG)
    return (await app.aget_state(CONFIG)).context[-1].message_id


@pytest.mark.parametrize(("id_type", "kind", "bits"), [("int", int, 53), ("bigint", int, 63)])
async def test_generated_id_type_from_the_container(id_type: str, kind: type, bits: int) -> None:
    graph = one_node(answer)
    graph.register("generated_id_type", id_type)
    made = await last_id(graph)
    assert isinstance(made, kind) and 0 <= made < 2**bits
    assert isinstance(await last_id(one_node(answer)), str)  # the default: string ids
    assert isinstance(generate_id(None), str) and generate_id("abc123") == "abc123"
    with message_defaults(id_type="bigint"):  # a default of another type is replaced
        assert isinstance(generate_id("abc123"), int) and generate_id(7) == 7


async def test_generated_id_override_function_and_awaitable() -> None:
    counter = itertools.count(1)
    graph = one_node(answer)
    graph.register("generated_id", lambda: f"msg-{next(counter)}")
    assert await last_id(graph) == "msg-1"

    async def from_database() -> int:
        return 4242

    awaited = one_node(answer)
    awaited.register("generated_id_type", "int").register("generated_id", from_database())
    assert await last_id(awaited) == 4242


def test_an_unusable_id_setting_is_refused_at_compile() -> None:
    graph = one_node(answer)
    graph.register("generated_id_type", "uuid")
    with pytest.raises(GraphError, match=r"generated_id_type.*string, int, bigint"):
        graph.compile()

    async def next_id() -> str:
        return "x"

    other = one_node(answer)
    other.register("generated_id", next_id)
    with pytest.raises(GraphError, match="async function"):
        other.compile()


async def test_compile_freezes_the_dependency_container() -> None:
    def greet(state: AgentState, greeting: str) -> list[Message]:
        return [Message.text_message(greeting, role="assistant")]

    graph = one_node(greet)
    graph.register("greeting", "hello")
    app = graph.compile(checkpointer=MemoryEventStore())
    graph.register("greeting", "changed after compile")
    await app.ainvoke({"messages": [Message.text_message("hi")]}, CONFIG)
    assert (await app.aget_state(CONFIG)).context[-1].text() == "hello"


COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "converted"},
        }
    ],
}


async def test_a_node_returns_a_model_response_converter_or_the_raw_response() -> None:
    async def deferred() -> dict[str, Any]:
        return COMPLETION

    async def with_converter(state: AgentState) -> ModelResponseConverter:
        return ModelResponseConverter(response=deferred(), converter="openai")

    app = one_node(with_converter).compile(checkpointer=MemoryEventStore())
    await app.ainvoke({"messages": [Message.text_message("hi")]}, CONFIG)
    last = (await app.aget_state(CONFIG)).context[-1]
    assert (last.role, last.text()) == ("assistant", "converted")

    from openai.types.chat import ChatCompletion

    def raw(state: AgentState) -> ChatCompletion:
        return ChatCompletion.model_validate(COMPLETION)

    app = one_node(raw).compile(checkpointer=MemoryEventStore())
    await app.ainvoke({"messages": [Message.text_message("hi")]}, CONFIG)
    assert (await app.aget_state(CONFIG)).context[-1].text() == "converted"
    with pytest.raises(Exception, match="no converter named 'litellmx'"):
        ModelResponseConverter(COMPLETION, converter="litellmx")


async def test_a_node_parameter_named_context_is_injected() -> None:
    seen: list[Any] = []

    def node(state: AgentState, context: NodeContext) -> None:
        seen.append((context.thread_id, context.node))

    await one_node(node).compile().ainvoke({"messages": []}, CONFIG)
    assert seen == [("t", "main")]
    with pytest.raises(GraphError, match="'context' is injected"):
        one_node(node).register("context", {})


def test_max_messages_zero_keeps_only_the_system_messages() -> None:
    state = AgentState(
        context=[
            Message.text_message("be brief", role="system"),
            Message.text_message("q1"),
            Message.text_message("a1", role="assistant"),
            Message.text_message("q2"),
        ]
    )
    trimmed = MessageContextManager(max_messages=0).trim_context(state)
    assert [m.role for m in trimmed.context] == ["system"]
    with pytest.raises(InvalidArgumentError, match=">= 0"):
        MessageContextManager(max_messages=-1)
