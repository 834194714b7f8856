"""The graphs an `agentlog serve` answers LangGraph's clients with in the Agent Server tests:
LangGraph programs (agentlog.langgraph) with a scripted model, one that asks a human
(`interrupt`), one that writes to the custom stream and calls a fake streaming chat model
(`talk`), one that writes more custom parts at once than a stream buffers (`flood`), and
one whose nodes read the run's `context`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.runtime.live import BUFFER
from agentlog.events import EventStore
from agentlog.langgraph import Runtime, StateGraph, add_messages, get_stream_writer, interrupt


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]


def reply(state: Chat) -> dict[str, Any]:
    last = state["messages"][-1]
    text = last.content if isinstance(last.content, str) else "?"
    get_stream_writer()({"heard": text})
    return {"messages": [{"role": "assistant", "content": f"you said: {text}"}]}


def review(state: Chat) -> dict[str, Any]:
    answer = interrupt({"question": "send it?"})
    return {"messages": [{"role": "assistant", "content": f"reviewed: {answer}"}]}


ANSWER = "owls hunt at night"
FLOOD = BUFFER + 100
"""How many custom parts `flood` writes in one go: more than a stream holds untaken."""


def speak(state: Chat) -> dict[str, Any]:
    """Says it is thinking (custom), then answers with a chat model that streams its tokens."""
    get_stream_writer()({"thinking": True})
    model = GenericFakeChatModel(messages=iter([AIMessage(content=ANSWER)]))
    return {"messages": [model.invoke(state["messages"])]}


async def flood(state: Chat) -> dict[str, Any]:
    """Writes FLOOD custom parts, then answers with the streaming chat model, without giving
    the event loop a turn: no stream reads any of them until the node returns."""
    write = get_stream_writer()
    for n in range(FLOOD):
        write({"n": n})
    model = GenericFakeChatModel(messages=iter([AIMessage(content=ANSWER)]))
    return {"messages": [model.invoke(state["messages"])]}


@dataclass
class Caller:
    """The context a `greeter` run takes (`context_schema`)."""

    user_id: str
    tone: str = "plain"


def greet(state: Chat, runtime: Runtime[Caller]) -> dict[str, Any]:
    caller = runtime.context
    said = f"hi {caller.user_id} ({caller.tone.upper()})" if caller is not None else "hi nobody"
    return {"messages": [{"role": "assistant", "content": said}]}


def build(store: EventStore, clock: Callable[[], float] = time.time) -> AgentRuntime:
    runtime = AgentRuntime(store, clock=clock)
    chat = StateGraph(Chat)
    chat.add_node("reply", reply)
    chat.set_entry_point("reply")
    runtime.add_graph("chat", chat.compile(store).graph_engine)
    approval = StateGraph(Chat)
    approval.add_node("reply", reply)
    approval.add_node("review", review)
    approval.set_entry_point("reply")
    approval.add_edge("reply", "review")
    runtime.add_graph("approval", approval.compile(store).graph_engine)
    for name, node in (("talk", speak), ("flood", flood)):
        graph = StateGraph(Chat)
        graph.add_node(node.__name__, node)
        graph.set_entry_point(node.__name__)
        runtime.add_graph(name, graph.compile(store).graph_engine)
        runtime.register_entry_point(EntryPoint(id=name, graph_id=name))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="chat"))
    runtime.register_entry_point(EntryPoint(id="approval", graph_id="approval"))
    greeter = StateGraph(Chat, context_schema=Caller)
    greeter.add_node("greet", greet)
    greeter.set_entry_point("greet")
    runtime.add_graph("greeter", greeter.compile(store).graph_engine)
    runtime.register_entry_point(EntryPoint(id="greeter", graph_id="greeter"))
    return runtime
