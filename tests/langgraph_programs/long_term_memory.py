"""Long-term memory: a store shared across threads, read and written inside a node."""

from typing import Annotated

from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from typing_extensions import TypedDict


class State(TypedDict):
    messages: Annotated[list, add_messages]


def remember(state: State, config, *, store: BaseStore):
    user = config["configurable"]["user_id"]
    namespace = ("memories", user)
    text = state["messages"][-1].content
    if text.startswith("remember "):
        store.put(namespace, f"m{len(store.search(namespace))}", {"fact": text[9:]})
    facts = sorted(item.value["fact"] for item in store.search(namespace))
    return {"messages": [AIMessage(content=f"I know: {', '.join(facts) or 'nothing'}")]}


builder = StateGraph(State)
builder.add_node("remember", remember)
builder.add_edge(START, "remember")
graph = builder.compile(checkpointer=InMemorySaver(), store=InMemoryStore())

turns = [
    ("1", "ana", "remember I like owls"),
    ("2", "ana", "remember I live in Lyon"),
    ("3", "ana", "what do you know?"),
    ("4", "bo", "what do you know?"),
]
for thread, user, text in turns:
    config = {"configurable": {"thread_id": thread, "user_id": user}}
    result = graph.invoke({"messages": [{"role": "user", "content": text}]}, config)
    print(f"{user}@{thread}:", result["messages"][-1].content)
