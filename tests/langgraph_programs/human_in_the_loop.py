"""A tool that asks a human through interrupt(), resumed with Command(resume=...)."""

from typing import Annotated

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt
from scripted import ScriptedChat, show
from typing_extensions import TypedDict


class State(TypedDict):
    messages: Annotated[list, add_messages]


@tool
def human_assistance(query: str) -> str:
    """Request assistance from a human."""
    human_response = interrupt({"query": query})
    return human_response["data"]


llm = ScriptedChat(
    responses=[
        AIMessage(
            content="",
            tool_calls=[
                {"name": "human_assistance", "args": {"query": "Refund A-1042?"}, "id": "h1"}
            ],
        ),
        AIMessage(content="The expert says: refund approved."),
    ]
)


def chatbot(state: State):
    message = llm.bind_tools([human_assistance]).invoke(state["messages"])
    return {"messages": [message]}


builder = StateGraph(State)
builder.add_node("chatbot", chatbot)
builder.add_node("tools", ToolNode(tools=[human_assistance]))
builder.add_conditional_edges("chatbot", tools_condition)
builder.add_edge("tools", "chatbot")
builder.add_edge(START, "chatbot")
graph = builder.compile(checkpointer=InMemorySaver())

config = {"configurable": {"thread_id": "1"}}
paused = graph.invoke({"messages": [{"role": "user", "content": "I need an expert."}]}, config)
print("paused with:", [i.value for i in paused["__interrupt__"]])
print("next:", graph.get_state(config).next)
done = graph.invoke(Command(resume={"data": "Refund approved."}), config)
show(done["messages"])
print("next:", graph.get_state(config).next)
