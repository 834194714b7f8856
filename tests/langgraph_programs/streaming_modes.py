"""Stream modes: updates, values, custom data from get_stream_writer, and several at once."""

import operator
from typing import Annotated

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


class State(TypedDict):
    topic: str
    steps: Annotated[list[str], operator.add]


def research(state: State):
    writer = get_stream_writer()
    writer({"progress": f"reading about {state['topic']}"})
    return {"steps": ["research"]}


def write(state: State):
    get_stream_writer()({"progress": "writing"})
    return {"steps": ["write"]}


builder = StateGraph(State)
builder.add_node("research", research)
builder.add_node("write", write)
builder.add_edge(START, "research")
builder.add_edge("research", "write")
builder.add_edge("write", END)
graph = builder.compile()

for chunk in graph.stream({"topic": "owls"}):
    print("default:", chunk)
for chunk in graph.stream({"topic": "owls"}, stream_mode="values"):
    print("values:", chunk)
for mode, chunk in graph.stream({"topic": "owls"}, stream_mode=["updates", "custom"]):
    print(mode + ":", chunk)
for part in graph.stream({"topic": "owls"}, stream_mode=["custom"], version="v2"):
    print("v2:", part["type"], part["ns"], part["data"])


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


model = GenericFakeChatModel(messages=iter([AIMessage(content="owls hunt at night")]))


def answer(state: Chat):
    return {"messages": [model.invoke(state["messages"])]}


chat = StateGraph(Chat)
chat.add_node("answer", answer)
chat.add_edge(START, "answer")
chat = chat.compile()
for token, metadata in chat.stream({"messages": [("user", "owls?")]}, stream_mode="messages"):
    print("token:", repr(token.content), metadata["langgraph_node"], metadata["langgraph_step"])
