"""Map-reduce with Send: one branch per subject, their jokes merged by a reducer."""

import operator
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from typing_extensions import TypedDict


class Overall(TypedDict):
    topic: str
    subjects: list[str]
    jokes: Annotated[list[str], operator.add]
    best: str


class JokeState(TypedDict):
    subject: str


def generate_topics(state: Overall):
    return {"subjects": [f"{state['topic']} {kind}" for kind in ("lions", "owls", "cats")]}


def continue_to_jokes(state: Overall):
    return [Send("generate_joke", {"subject": s}) for s in state["subjects"]]


def generate_joke(state: JokeState):
    return {"jokes": [f"Why did the {state['subject']} cross the road?"]}


def best_joke(state: Overall):
    return {"best": max(state["jokes"], key=len)}


builder = StateGraph(Overall)
builder.add_node("generate_topics", generate_topics)
builder.add_node("generate_joke", generate_joke)
builder.add_node("best_joke", best_joke)
builder.add_edge(START, "generate_topics")
builder.add_conditional_edges("generate_topics", continue_to_jokes, ["generate_joke"])
builder.add_edge("generate_joke", "best_joke")
builder.add_edge("best_joke", END)
graph = builder.compile()

result = graph.invoke({"topic": "zoo"})
print("jokes:", result["jokes"])
print("best:", result["best"])
