"""Random small graphs and inputs: the log replays to the live state at every step, and every
tool call the agents make ends with exactly one result, however the run ends."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Hashable
from pathlib import Path
from typing import Annotated, Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from agentlog.actors import (
    END,
    Command,
    GraphError,
    NodeError,
    RecursionLimitError,
    StateGraph,
    ToolNode,
)
from agentlog.events import MemoryEventStore, SQLiteEventStore
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    open_calls,
    replay,
    unpaired_results,
)
from agentlog.projections.invariants import thread_findings


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
        checkpointer=store,
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


# ---- tool calls: every call ends with exactly one result -------------------------------

TOOL_NAMES = ["lookup", "broken", "missing"]
"""What agents ask for: a tool that works, one that raises, one the ToolNode lacks."""


def lookup(q: str) -> str:
    """Look `q` up."""
    return f"found {q}"


def broken(q: str) -> str:
    """A tool that always fails."""
    raise RuntimeError(f"broken on {q}")


def make_agent(
    name: str, calls: list[int], tools: list[str], flaky: bool, failed: set[tuple[str, int]]
) -> Any:
    """An agent saying something at each step, asking for `calls[step]` tools (cycled);
    a flaky one fails once at some steps and succeeds when retried."""

    async def agent(state: AgentState) -> list[Message]:
        step = state.execution_meta.step
        if flaky and step % 3 == 1 and (name, step) not in failed:
            failed.add((name, step))
            raise RuntimeError(f"{name} fails once at step {step}")
        blocks = [
            ToolCallBlock(
                id=f"{name}.{step}.{i}", name=tools[(step + i) % len(tools)], args={"q": f"{step}"}
            )
            for i in range(calls[step % len(calls)])
        ]
        return [Message(role="assistant", content=[TextBlock(text=f"{name}@{step}"), *blocks])]

    agent.__name__ = name
    return agent


tool_graphs = st.integers(1, 3).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=4), min_size=n, max_size=n),
        st.lists(
            st.lists(st.sampled_from(TOOL_NAMES), min_size=1, max_size=3), min_size=n, max_size=n
        ),
        # Where each agent, then the tool node, may go: agents 0..n-1, n the tools, n+1 END;
        # an agent may always go to the tools or END too.
        st.lists(st.lists(st.integers(0, n + 1), min_size=1, max_size=3), min_size=n, max_size=n),
        st.lists(st.sampled_from([*range(n), n + 1]), min_size=1, max_size=3),
        st.lists(st.booleans(), min_size=n, max_size=n),
        st.sets(st.integers(0, n), max_size=2),
        st.integers(3, 10),
    )
)


@settings(max_examples=30)
@given(graph=tool_graphs, inputs=st.integers(1, 3), eager=st.booleans())
def test_every_tool_call_ends_with_exactly_one_result(graph: Any, inputs: int, eager: bool) -> None:
    """Runs complete, fail or pause (`eager`: the next input arrives while a run rests, calls
    pending at the tool node or elsewhere); at every rest no result lacks its call, and a
    completed run leaves no call without its result."""
    size, calls, tools, exits, tool_exits, flaky, interrupts, limit = graph
    names = [f"a{i}" for i in range(size)]
    failed: set[tuple[str, int]] = set()

    def target(i: int) -> str:
        return names[i] if i < size else "tools" if i == size else END

    builder: StateGraph[AgentState] = StateGraph(AgentState)
    for i, name in enumerate(names):
        builder.add_node(name, make_agent(name, calls[i], tools[i], flaky[i], failed))
        options = sorted({*(target(j) for j in exits[i]), "tools", END})
        choices: dict[Hashable, str] = {t: t for t in options}
        builder.add_conditional_edges(name, make_router(options), choices)
    builder.add_node("tools", ToolNode([lookup, broken]))
    back = sorted({*(target(j) for j in tool_exits), END})
    returns: dict[Hashable, str] = {t: t for t in back}
    builder.add_conditional_edges("tools", make_router(back), returns)
    builder.set_entry_point(names[0])
    config = {"thread_id": "t"}

    async def drive(path: Path) -> None:
        async with SQLiteEventStore(path) as store:
            app = builder.compile(
                checkpointer=store,
                interrupt_before=[target(i) for i in interrupts],
                recursion_limit=limit,
            )
            for turn in range(inputs):
                for attempt in range(limit + 2):  # resume through pauses, retry failures
                    text = Message.text_message(f"turn {turn}")
                    with contextlib.suppress(NodeError, RecursionLimitError):
                        await app.ainvoke([text] if attempt == 0 else None, config)
                    state = await app.aget_state(config)
                    records = [r async for r in store.read("t")]
                    assert replay(records, AgentState) == state
                    assert unpaired_results(state.context) == []
                    status = state.execution_meta.status
                    event(f"run {status.value}")
                    if status == ExecutionStatus.COMPLETED:
                        assert open_calls(state.context) == []
                        assert (await thread_findings(store, "t")).ok
                        break
                    if eager and turn + 1 < inputs:
                        event(f"new input while {status.value}")
                        break
            results = [
                b for m in state.context for b in m.content if isinstance(b, ToolResultBlock)
            ]
            for kind in sorted({b.status or "none" for b in results}):
                event(f"a call ended {kind}")

    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(drive(Path(folder) / "x.db"))
