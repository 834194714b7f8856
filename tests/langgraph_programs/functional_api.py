"""The functional API: tasks inside an entrypoint, a pause, and the previous return value."""

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint, task
from langgraph.types import Command, interrupt

calls = []


@task
def write_essay(topic: str) -> str:
    calls.append(topic)
    return f"An essay about {topic}"


@entrypoint(checkpointer=InMemorySaver())
def workflow(topic: str, *, previous=None) -> dict:
    texts = [write_essay(t).result() for t in (topic, topic + "s")]  # one after the other
    approved = interrupt({"essays": texts, "previous": previous})
    return {"essays": texts, "approved": approved}


config = {"configurable": {"thread_id": "1"}}
print("paused:", [i.value for i in workflow.invoke("cat", config)["__interrupt__"]])
print("next:", workflow.get_state(config).next)
print("done:", workflow.invoke(Command(resume=True), config))
for part in workflow.stream("dog", config):
    print(
        "part:", {k: ([i.value for i in v] if k == "__interrupt__" else v) for k, v in part.items()}
    )
print("done:", workflow.invoke(Command(resume=False), config))
print("state:", workflow.get_state(config).values)
print("tasks ran:", calls)


@entrypoint()
def doubler(n: int) -> entrypoint.final[int, int]:
    return entrypoint.final(value=n * 2, save=n)


print("final:", doubler.invoke(21))
