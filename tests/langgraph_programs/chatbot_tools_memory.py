"""A chatbot with a tool and memory across turns (LangGraph's tutorial shape)."""

from typing import Annotated

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from scripted import ScriptedChat, show
from typing_extensions import TypedDict


class State(TypedDict):
    messages: Annotated[list, add_messages]


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"It is sunny in {city}."


llm = ScriptedChat(
    responses=[
        AIMessage(
            content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"}]
        ),
        AIMessage(content="Paris is sunny."),
        AIMessage(content="You asked about the weather in Paris."),
    ]
)
llm_with_tools = llm.bind_tools([get_weather])


def chatbot(state: State):
    return {"messages": [llm_with_tools.invoke(state["messages"])]}


builder = StateGraph(State)
builder.add_node("chatbot", chatbot)
builder.add_node("tools", ToolNode(tools=[get_weather]))
builder.add_conditional_edges("chatbot", tools_condition)
builder.add_edge("tools", "chatbot")
builder.add_edge(START, "chatbot")
memory = InMemorySaver()
graph = builder.compile(checkpointer=memory)

config = {"configurable": {"thread_id": "1"}}
for text in ["What is the weather in Paris?", "What did I ask?"]:
    result = graph.invoke({"messages": [{"role": "user", "content": text}]}, config)
    show(result["messages"][-1:])
snapshot = graph.get_state(config)
print("next:", snapshot.next, "messages:", len(snapshot.values["messages"]))
show(snapshot.values["messages"])
print("end is", END)
