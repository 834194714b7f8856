"""Random small graphs and inputs: the log replays to the live state at every step."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from actors import END, Command, GraphError, NodeError, RecursionLimitError, StateGraph
from events import MemoryEventStore
from projections import AgentState, Message, replay


class Notes(AgentState):
    notes: Annotated[list[str], lambda old, new: old + new] = []
    last: str = ""


BEHAVIOURS = ["message", "update", "none", "state", "goto", "fail"]


def make_node(name: str, behaviour: str, targets: list[str], checks: list[str]) -> Any:
    """A node that first proves the log replays to the state it was handed, then acts."""

    async def node(state: Notes, config: dict[str, Any], store: MemoryEventStore) -> Any:
        records = [r async for r in store.read(config["thread_id"])]
        live = state.model_dump(exclude={"execution_meta"})
        assert replay(records, Notes).model_dump(exclude={"execution_meta"}) == live
        checks.append(name)
        step = state.execution_meta.step
        if behaviour == "message":
            return [Message.text_message(f"{name}@{step}", role="assistant")]
        if behaviour == "update":
            return {"notes": [f"{name}{step}"], "last": name}
        if behaviour == "state":
            state.last = f"state-{name}-{step}"
            return state
        if behaviour == "goto":
            return Command(update={"notes": [name]}, goto=targets[step % len(targets)])
        if behaviour == "fail" and step % 3 == 2:
            raise RuntimeError(f"{name} fails at step {step}")
        return None

    node.__name__ = name
    return node


def make_router(options: list[str]) -> Any:
    """A condition that cycles through `options` by step: deterministic, so replayable."""

    def route(state: Notes) -> str:
        return options[state.execution_meta.step % len(options)]

    return route


graphs = st.integers(1, 4).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.sampled_from(BEHAVIOURS), min_size=n, max_size=n),
        st.lists(st.lists(st.integers(0, n), min_size=1, max_size=3), min_size=n, max_size=n),
        st.sets(st.integers(0, n - 1), max_size=2),
        st.integers(3, 12),
    )
)


@settings(max_examples=30)
@given(graph=graphs, inputs=st.lists(st.text(max_size=8), min_size=1, max_size=3))
def test_random_graphs_replay_to_the_live_state(graph: Any, inputs: list[str]) -> None:
    size, behaviours, exits, interrupts, limit = graph
    names = [f"n{i}" for i in range(size)]
    checks: list[str] = []

    def target(i: int) -> str:
        return END if i == size else names[i]

    builder: StateGraph[Notes] = StateGraph(Notes)
    store = MemoryEventStore()
    builder.register("store", store)
    for i, name in enumerate(names):
        targets = [target(j) for j in exits[i]]
        builder.add_node(name, make_node(name, behaviours[i], targets, checks))
        choices = {t: t for t in {*targets, END}}
        builder.add_conditional_edges(name, make_router(sorted(choices)), choices)
    builder.set_entry_point(names[0])
    app = builder.compile(
        store=store,
        interrupt_before=[names[i] for i in interrupts],
        recursion_limit=limit,
    )
    config = {"thread_id": "t"}

    async def drive() -> None:
        for text in inputs:
            for _ in range(limit + 2):  # resume through interrupts, retry failures
                try:
                    out = await app.ainvoke(
                        {"messages": [Message.text_message(text)]} if _ == 0 else None,
                        config,
                        include_state=True,
                    )
                except (NodeError, RecursionLimitError, GraphError):
                    out = {"state": await app.aget_state(config)}
                records = [r async for r in store.read("t")]
                assert replay(records, Notes) == out["state"] == await app.aget_state(config)
                assert (await store.verify("t")).ok
                if out["state"].execution_meta.status.value == "completed":
                    break

    asyncio.run(drive())
    event(f"nodes run: {min(len(checks), 10)}+")
    assert checks, "no node ran: the graph never started"
