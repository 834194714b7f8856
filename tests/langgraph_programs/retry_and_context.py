"""A flaky node retried by its RetryPolicy, a node reading the run's context through its
Runtime, and runs in each durability mode."""

import operator
from dataclasses import dataclass
from typing import Annotated

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import RetryPolicy
from typing_extensions import TypedDict


@dataclass
class Caller:
    user_id: str
    greeting: str = "hello"


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


attempts = []


def fetch(state: State):
    attempts.append(len(attempts) + 1)
    if len(attempts) < 3:
        raise ConnectionError(f"attempt {len(attempts)}: the service did not answer")
    return {"steps": [f"fetched after {len(attempts)} attempts"]}


def greet(state: State, runtime: Runtime[Caller]):
    return {"steps": [f"{runtime.context.greeting}, {runtime.context.user_id}"]}


builder = StateGraph(State, context_schema=Caller)
builder.add_node(
    "fetch", fetch, retry_policy=RetryPolicy(initial_interval=0, jitter=False, max_attempts=4)
)
builder.add_node("greet", greet)
builder.add_edge(START, "fetch")
builder.add_edge("fetch", "greet")
builder.add_edge("greet", END)
graph = builder.compile(checkpointer=InMemorySaver())

config = {"configurable": {"thread_id": "1"}}
result = graph.invoke({"steps": []}, config, context=Caller("ada"), durability="sync")
print("steps:", result["steps"])
print("attempts:", attempts)
print("next:", graph.get_state(config).next)
for n, mode in enumerate(("async", "exit"), 2):
    attempts.clear()
    config = {"configurable": {"thread_id": str(n)}}
    result = graph.invoke({"steps": []}, config, context=Caller("bo", "hi"), durability=mode)
    print(mode, "steps:", result["steps"], "values:", graph.get_state(config).values)

attempts.clear()
broken = StateGraph(State)
broken.add_node("fetch", fetch, retry_policy=RetryPolicy(initial_interval=0, max_attempts=2))
broken.add_edge(START, "fetch")
try:
    broken.compile().invoke({"steps": []})
except ConnectionError as error:
    print("gave up:", error)
except Exception as error:
    print("gave up:", error.__cause__)
print("attempts:", attempts)
