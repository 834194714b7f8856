"""Subgraphs: a compiled child added as a node (shared keys), and a node calling another
child with mapped input; a child's interrupt pauses the parent, resumed from the parent."""

import operator
from typing import Annotated

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict


class Parent(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]
    summary: str


class Research(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


def gather(state: Research):
    return {"notes": [f"fact about {state['topic']}"]}


def check(state: Research):
    return {"notes": [f"checked {len(state['notes'])} note(s)"]}


research_builder = StateGraph(Research)
research_builder.add_node("gather", gather)
research_builder.add_node("check", check)
research_builder.add_edge(START, "gather")
research_builder.add_edge("gather", "check")
research_builder.add_edge("check", END)
research = research_builder.compile()


class Writing(TypedDict):
    points: list[str]
    text: str


def draft(state: Writing):
    return {"text": "; ".join(state["points"])}


writing_builder = StateGraph(Writing)
writing_builder.add_node("draft", draft)
writing_builder.add_edge(START, "draft")
writing_builder.add_edge("draft", END)
writing = writing_builder.compile()


def write(state: Parent):
    done = writing.invoke({"points": state["notes"], "text": ""})
    return {"summary": done["text"].upper()}


def plan(state: Parent):
    return {"notes": [f"plan for {state['topic']}"]}


builder = StateGraph(Parent)
builder.add_node("plan", plan)
builder.add_node("research", research)
builder.add_node("write", write)
builder.add_edge(START, "plan")
builder.add_edge("plan", "research")
builder.add_edge("research", "write")
builder.add_edge("write", END)
graph = builder.compile()

result = graph.invoke({"topic": "owls", "notes": [], "summary": ""})
print("notes:", result["notes"])
print("summary:", result["summary"])


def names(ns):
    return tuple(segment.split(":")[0] for segment in ns)


for ns, update in graph.stream(
    {"topic": "cats", "notes": [], "summary": ""}, stream_mode="updates", subgraphs=True
):
    print("update:", names(ns), update)


class Review(TypedDict):
    text: str
    verdict: str


def ask(state: Review):
    answer = interrupt({"review": state["text"]})
    return {"verdict": f"{answer} ({state['text']})"}


review_builder = StateGraph(Review)
review_builder.add_node("ask", ask)
review_builder.add_edge(START, "ask")
review_builder.add_edge("ask", END)
review = review_builder.compile()


class Doc(TypedDict):
    text: str
    verdict: str


def prepare(state: Doc):
    return {"text": state["text"] + "!"}


outer = StateGraph(Doc)
outer.add_node("prepare", prepare)
outer.add_node("review", review)
outer.add_edge(START, "prepare")
outer.add_edge("prepare", "review")
outer.add_edge("review", END)
approval = outer.compile(checkpointer=InMemorySaver())

config = {"configurable": {"thread_id": "doc-1"}}
paused = approval.invoke({"text": "draft", "verdict": ""}, config)
print("paused with:", [i.value for i in paused["__interrupt__"]])
print("next:", approval.get_state(config).next)
inside = approval.get_state(config, subgraphs=True).tasks[0].state
print("inside:", inside.values, inside.next, [i.value for i in inside.interrupts])
done = approval.invoke(Command(resume="approved"), config)
print("verdict:", done["verdict"])
print("next:", approval.get_state(config).next)
