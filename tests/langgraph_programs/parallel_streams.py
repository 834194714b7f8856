"""Stream modes over parallel steps: fan-out and join, Send, and a pause mid-run."""

import operator
from typing import Annotated

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt
from typing_extensions import TypedDict


class State(TypedDict):
    topic: str
    out: Annotated[list[str], operator.add]


def a(state: State):
    return {"out": ["a"]}


def x(state: State):
    return {"out": ["x"]}


def y(state: State):
    return {"out": ["y"], "topic": state["topic"] + "!"}


def z(state: State):
    return {"out": ["z"]}


fan = StateGraph(State)
for name, fn in (("a", a), ("x", x), ("y", y), ("z", z)):
    fan.add_node(name, fn)
fan.add_edge(START, "a")
fan.add_edge("a", "x")
fan.add_edge("a", "y")
fan.add_edge(["x", "y"], "z")
fan.add_edge("z", END)
fan_graph = fan.compile()


def by_step(stream):
    """Updates grouped by the values chunk after them, each group sorted: LangGraph yields a
    parallel step's updates as its branches finish."""
    group = []
    for mode, chunk in stream:
        if mode == "updates":
            group.append(chunk)
        else:
            for update in sorted(group, key=repr):
                print("  updates:", update)
            group = []
            print("  values:", chunk)


print("fan-out and join")
by_step(fan_graph.stream({"topic": "owls", "out": []}, stream_mode=["updates", "values"]))
updates = fan_graph.stream({"topic": "owls"}, stream_mode="updates")
print("updates only:", sorted(map(repr, updates)))


class Job(TypedDict):
    item: str


def plan(state: State):
    return {"out": ["plan"]}


def spread(state: State):
    return [Send("work", {"item": i}) for i in ("p", "q", "r")]


def work(job: Job):
    return {"out": ["work " + job["item"]]}


sends = StateGraph(State)
sends.add_node("plan", plan)
sends.add_node("work", work)
sends.add_node("z", z)
sends.add_edge(START, "plan")
sends.add_conditional_edges("plan", spread, ["work"])
sends.add_edge("work", "z")
sends.add_edge("z", END)
send_graph = sends.compile()

print("send")
by_step(send_graph.stream({"topic": "owls"}, stream_mode=["updates", "values"]))


def ask(state: State):
    answer = interrupt({"question": "which topic?"})
    return {"topic": answer, "out": ["ask"]}


pausing = StateGraph(State)
pausing.add_node("a", a)
pausing.add_node("ask", ask)
pausing.add_edge(START, "a")
pausing.add_edge("a", "ask")
pausing.add_edge("ask", END)
paused = pausing.compile(checkpointer=InMemorySaver())


def show(chunk):
    """A chunk with each pause shown by its value (an Interrupt's id differs run to run)."""
    if isinstance(chunk, tuple):
        return (chunk[0], show(chunk[1]))
    if isinstance(chunk, dict) and "__interrupt__" in chunk:
        return {**chunk, "__interrupt__": [i.value for i in chunk["__interrupt__"]]}
    return chunk


for mode in ("values", "updates"):
    config = {"configurable": {"thread_id": "t-" + mode}}
    print("pause,", mode)
    for chunk in paused.stream({"topic": "owls"}, config, stream_mode=mode):
        print(" ", show(chunk))
    for chunk in paused.stream(Command(resume="cats"), config, stream_mode=mode):
        print(" ", show(chunk))

config = {"configurable": {"thread_id": "t-v2"}}
print("pause, v2")
modes = ["values", "updates"]
for part in paused.stream({"topic": "owls"}, config, stream_mode=modes, version="v2"):
    pauses = [i.value for i in part.get("interrupts", ())]
    print(" ", part["type"], part["ns"], show(part["data"]), pauses)
config = {"configurable": {"thread_id": "t-many"}}
print("pause, values and updates")
for chunk in paused.stream({"topic": "owls"}, config, stream_mode=["values", "updates"]):
    print(" ", show(chunk))
