"""LangGraph's stream modes on agentlog: values, updates, messages, custom, tasks,
checkpoints and debug, alone or as a list, in v1 and v2 shapes, sync and async."""

from __future__ import annotations

import asyncio
import copy
import operator
from collections.abc import AsyncIterator
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog import (
    END,
    AgentState,
    Command,
    Message,
    Send,
    StateGraph,
    get_stream_writer,
    interrupt,
)
from agentlog.actors import (
    InvalidStreamModeError,
    StreamWriterOutsideNodeError,
    emit_message_chunk,
)
from agentlog.actors.engine.modes import ModeProjection, StreamMode, shaped, state_values
from agentlog.events import MemoryEventStore, ThreadNotFoundError
from agentlog.projections import add_messages
from agentlog.projections.fold import field_plan
from tests.test_models_node import QUESTION, app, node, openai_client
from tests.workers.fake_provider import FakeProvider

CFG = {"thread_id": "t1"}
SHIFTING = ("id", "timestamp", "config", "run_id", "thread_id")
"""Keys whose values differ between two runs of the same graph."""


@pytest.fixture
async def server() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as running:
        yield running


class Counted(AgentState):
    count: Annotated[int, operator.add] = 0
    note: str = ""


def said(text: str) -> Message:
    return Message.text_message(text, role="assistant")


def hello() -> dict[str, Any]:
    return {"context": [Message.text_message("hi")]}


def two_steps(store: MemoryEventStore | None = None) -> Any:
    """a (a `def` node: a message, count +1, a custom write) then b (async: count +2)."""

    def a(state: Counted) -> dict[str, Any]:
        get_stream_writer()({"progress": "a"})
        return {"context": [said("from a")], "count": 1}

    async def b(state: Counted) -> dict[str, Any]:
        get_stream_writer()("from b")
        return {"count": 2, "note": "b"}

    graph: StateGraph[Counted] = StateGraph(Counted)
    graph.add_node("a", a).add_node("b", b)
    graph.set_entry_point("a").add_edge("a", "b").add_edge("b", END)
    return graph.compile(checkpointer=store or MemoryEventStore())


async def collect(
    app: Any, config: dict[str, Any] = CFG, input: Any = None, **how: Any
) -> list[Any]:
    return [c async for c in app.astream(hello() if input is None else input, config, **how)]


def texts(values: dict[str, Any]) -> list[str]:
    return [m.text() for m in values["context"]]


# ---- each mode ---------------------------------------------------------------------------------


async def test_values_yields_the_state_after_the_input_and_after_each_step() -> None:
    app = two_steps()
    chunks = await collect(app, stream_mode="values")
    assert [(texts(c), c["count"], c["note"]) for c in chunks] == [
        (["hi"], 0, ""),
        (["hi", "from a"], 1, ""),
        (["hi", "from a"], 3, "b"),
    ]
    assert chunks[-1] == state_values(await app.aget_state(CFG))


async def test_updates_yields_what_each_node_wrote_under_its_name() -> None:
    chunks = await collect(two_steps(), stream_mode="updates")
    assert [list(c) for c in chunks] == [["a"], ["b"]]
    a, b = chunks[0]["a"], chunks[1]["b"]
    assert [m.text() for m in a["context"]] == ["from a"] and a["count"] == 1
    assert b == {"count": 2, "note": "b"}


async def test_custom_yields_what_the_writer_was_given_from_sync_and_async_nodes() -> None:
    assert await collect(two_steps(), stream_mode="custom") == [{"progress": "a"}, "from b"]


async def test_messages_yields_whole_messages_with_their_node_and_step() -> None:
    chunks = await collect(two_steps(), stream_mode="messages")
    [(message, meta)] = chunks  # the input is not a node's message
    assert message.text() == "from a"
    assert meta["langgraph_node"] == "a" and meta["langgraph_step"] == 1
    assert meta["thread_id"] == "t1" and meta["langgraph_checkpoint_ns"] == ""


async def test_messages_yields_chunks_handed_to_the_hook_and_not_their_message_again() -> None:
    class Chunk:  # a chunk type of another library, with the id of the message it builds
        def __init__(self, id: str, text: str) -> None:
            self.id, self.text = id, text

    async def model(state: AgentState) -> list[Message]:
        for piece in ("Hel", "lo"):
            await emit_message_chunk(Chunk("m1", piece), ls_model_name="fake")
        return [Message(message_id="m1", role="assistant", content=said("Hello").content)]

    graph: StateGraph[AgentState] = StateGraph(AgentState)
    graph.add_node("model", model).set_entry_point("model").add_edge("model", END)
    chunks = await collect(graph.compile(), stream_mode="messages")
    assert [(c.text, meta["langgraph_node"], meta["ls_model_name"]) for c, meta in chunks] == [
        ("Hel", "model", "fake"),
        ("lo", "model", "fake"),
    ]


async def test_a_model_nodes_token_deltas_arrive_as_message_chunks(server: FakeProvider) -> None:
    graph = app(node(openai_client(server)))
    config = {"thread_id": "t1"}
    chunks = [
        c async for c in graph.astream({"messages": [QUESTION]}, config, stream_mode="messages")
    ]
    deltas = [m for m, meta in chunks if m.delta]
    assert len(deltas) >= 3 and all(meta["langgraph_node"] == "agent" for _, meta in chunks)
    said_text = "".join(m.text() for m in deltas)
    assert said_text == "Your order A-1042 is eligible for a refund of 89.90."
    assert [m for m, _ in chunks if not m.delta] == []  # not yielded again whole


async def test_debug_yields_tasks_and_checkpoints_in_order() -> None:
    chunks = await collect(two_steps(), stream_mode="debug")
    assert [(c["type"], c["step"]) for c in chunks] == [
        ("checkpoint", 0),
        ("task", 1),
        ("task_result", 1),
        ("checkpoint", 1),
        ("task", 2),
        ("task_result", 2),
        ("checkpoint", 2),
    ]
    assert chunks[2]["payload"]["name"] == "a" and chunks[5]["payload"]["result"]["note"] == "b"
    assert chunks[-1]["payload"]["next"] == [] and chunks[3]["payload"]["next"] == ["b"]


async def test_tasks_and_checkpoints_are_modes_of_their_own() -> None:
    chunks = await collect(two_steps(), stream_mode=["tasks", "checkpoints"])
    assert [mode for mode, _ in chunks] == ["checkpoints", *["tasks", "tasks", "checkpoints"] * 2]


async def test_an_interrupt_is_said_in_updates_and_values() -> None:
    graph: StateGraph[Counted] = StateGraph(Counted)
    graph.add_node("a", lambda state: {"count": 1}).add_node("b", lambda state: {"count": 1})
    graph.set_entry_point("a").add_edge("a", "b").add_edge("b", END)
    app = graph.compile(interrupt_before=["b"])
    chunks = await collect(app, stream_mode=["updates", "values"])
    assert [mode for mode, _ in chunks] == ["values", "updates", "values", "updates", "values"]
    (_, paused), (_, said_too) = chunks[-2:]
    assert list(paused) == ["__interrupt__"] and paused["__interrupt__"][0]["node"] == "b"
    # values says it beside the state's fields, as LangGraph's v1 does
    assert said_too == {**chunks[-3][1], "__interrupt__": paused["__interrupt__"]}
    v2 = await collect(app, {"thread_id": "t2"}, stream_mode="values", version="v2")
    assert [len(part["interrupts"]) for part in v2] == [0, 0, 1]


async def test_a_node_that_asks_pauses_the_stream_and_its_resume_streams_its_update() -> None:
    def ask(state: Counted) -> dict[str, Any]:
        answer = interrupt("how many?")
        return {"count": int(answer)}

    graph: StateGraph[Counted] = StateGraph(Counted)
    graph.add_node("ask", ask).set_entry_point("ask").add_edge("ask", END)
    app = graph.compile()
    paused = await collect(app, stream_mode="updates")
    [(only, pending)] = [next(iter(c.items())) for c in paused]
    assert only == "__interrupt__" and pending[0]["node"] == "ask"
    resumed = await collect(app, input=Command(resume="5"), stream_mode=["updates", "values"])
    assert resumed[-2:] == [("updates", {"ask": {"count": 5}}), ("values", resumed[-1][1])]
    assert resumed[-1][1]["count"] == 5


async def test_a_pause_in_values_keeps_the_state_beside_it_in_v1_and_apart_in_v2() -> None:
    def ask(state: Counted) -> dict[str, Any]:
        return {"count": int(interrupt("how many?"))}

    graph: StateGraph[Counted] = StateGraph(Counted)
    graph.add_node("a", lambda state: {"count": 1, "note": "a"}).add_node("ask", ask)
    graph.set_entry_point("a").add_edge("a", "ask").add_edge("ask", END)
    app = graph.compile()
    v1 = await collect(app, stream_mode="values")
    *_, before, paused = v1
    assert paused == {**before, "__interrupt__": paused["__interrupt__"]}
    assert paused["count"] == 1 and paused["note"] == "a"
    assert [p["reason"] for p in paused["__interrupt__"]] == ["how many?"]
    v2 = await collect(app, {"thread_id": "t2"}, stream_mode="values", version="v2")
    assert "__interrupt__" not in v2[-1]["data"] and v2[-1]["data"]["count"] == 1
    assert [p["reason"] for p in v2[-1]["interrupts"]] == ["how many?"]


# ---- parallel steps ----------------------------------------------------------------------------


class Outs(AgentState):
    out: Annotated[list[str], operator.add] = []
    count: Annotated[int, operator.add] = 0
    note: str = ""


def fan_out_join() -> Any:
    """a, then x and y at once (y also sets the note and says something), then z."""
    graph: StateGraph[Outs] = StateGraph(Outs)
    graph.add_node("a", lambda state: {"out": ["a"]})
    graph.add_node("x", lambda state: {"out": ["x"], "count": 1})
    graph.add_node("y", lambda state: {"context": [said("from y")], "out": ["y"], "note": "y"})
    graph.add_node("z", lambda state: {"out": ["z"]})
    graph.set_entry_point("a").add_edge("a", "x").add_edge("a", "y")
    graph.add_edge(["x", "y"], "z").add_edge("z", END)
    return graph.compile()


async def test_updates_of_a_parallel_step_are_one_per_branch_with_its_own_writes() -> None:
    updates = await collect(fan_out_join(), stream_mode="updates")
    assert [list(u) for u in updates] == [["a"], ["x"], ["y"], ["z"]]
    assert updates[1] == {"x": {"out": ["x"], "count": 1}}
    assert updates[2]["y"]["out"] == ["y"] and updates[2]["y"]["note"] == "y"
    assert [m.text() for m in updates[2]["y"]["context"]] == ["from y"]


async def test_tasks_of_a_parallel_step_start_and_end_each_branch() -> None:
    tasks = await collect(fan_out_join(), stream_mode="tasks")
    started = [t["name"] for t in tasks if "input" in t]
    ended = [(t["name"], t["result"].get("out")) for t in tasks if "result" in t]
    assert started == ["a", "x", "y", "z"]
    assert ended == [("a", ["a"]), ("x", ["x"]), ("y", ["y"]), ("z", ["z"])]
    ids = [t["id"] for t in tasks]
    assert len(set(ids)) == 4
    assert [t["id"] for t in tasks if "input" in t] == [t["id"] for t in tasks if "result" in t]
    debug = await collect(fan_out_join(), {"thread_id": "t2"}, stream_mode="debug")
    assert [(c["type"], c["step"]) for c in debug][4:8] == [
        ("task", 2),
        ("task", 2),
        ("task_result", 2),
        ("task_result", 2),
    ]


async def test_messages_of_a_parallel_step_name_the_branch_that_said_them() -> None:
    chunks = await collect(fan_out_join(), stream_mode="messages")
    assert [(m.text(), meta["langgraph_node"]) for m, meta in chunks] == [("from y", "y")]


async def test_send_branches_of_one_node_each_yield_their_update_in_branch_order() -> None:
    def spread(state: Outs) -> list[Send]:
        return [Send("work", {"item": i}) for i in ("p", "q", "r")]

    def work(state: dict[str, Any]) -> dict[str, Any]:
        update: dict[str, Any] = {"out": [f"work {state['item']}"], "count": 1}
        if state["item"] == "q":
            update["context"] = [said("q says")]
        return update

    graph: StateGraph[Outs] = StateGraph(Outs)
    graph.add_node("plan", lambda state: {"out": ["plan"]}).add_node("work", work)
    graph.set_entry_point("plan").add_conditional_edges("plan", spread, ["work"])
    graph.add_edge("work", END)
    app = graph.compile()
    updates = await collect(app, stream_mode="updates")
    assert [list(u) for u in updates] == [["plan"], ["work"], ["work"], ["work"]]
    assert [u["work"]["out"] for u in updates[1:]] == [["work p"], ["work q"], ["work r"]]
    assert [len(u["work"].get("context", [])) for u in updates[1:]] == [0, 1, 0]
    tasks = await collect(app, {"thread_id": "t2"}, stream_mode="tasks")
    inputs = [t["input"] for t in tasks if "input" in t and t["name"] == "work"]
    assert inputs == [{"item": "p"}, {"item": "q"}, {"item": "r"}]  # each Send's arg


# ---- shapes ------------------------------------------------------------------------------------


async def test_a_list_of_modes_yields_mode_and_chunk_tuples_in_run_order() -> None:
    chunks = await collect(two_steps(), stream_mode=["updates", "custom", "updates"])
    assert [(mode, chunk if mode == "custom" else list(chunk)) for mode, chunk in chunks] == [
        ("custom", {"progress": "a"}),
        ("updates", ["a"]),
        ("custom", "from b"),
        ("updates", ["b"]),
    ]
    single = await collect(two_steps(), stream_mode=["custom"])
    assert single == [("custom", {"progress": "a"}), ("custom", "from b")]


async def test_subgraphs_puts_the_namespace_first() -> None:
    one = await collect(two_steps(), stream_mode="custom", subgraphs=True)
    assert one == [((), {"progress": "a"}), ((), "from b")]
    several = await collect(two_steps(), stream_mode=["custom"], subgraphs=True)
    assert several == [((), "custom", {"progress": "a"}), ((), "custom", "from b")]


def test_a_nested_projection_names_its_namespace_in_its_parts() -> None:
    root = ModeProjection(frozenset({StreamMode.CUSTOM}), "t1")
    child = root.nested("sub:1", frozenset({"x"})).nested("inner:2")
    part = child.part(StreamMode.CUSTOM, "hello")
    assert part.ns == ("sub:1", "inner:2") and child.checkpoint_ns == "sub:1|inner:2"
    assert shaped(part, several=True, subgraphs=True, version="v1") == (
        ("sub:1", "inner:2"),
        "custom",
        "hello",
    )
    assert shaped(part, several=False, subgraphs=False, version="v2")["ns"] == part.ns


async def test_v2_yields_typed_dicts() -> None:
    chunks = await collect(two_steps(), stream_mode=["values", "custom"], version="v2")
    assert [(c["type"], c["ns"]) for c in chunks][:2] == [("values", ()), ("custom", ())]
    assert all(
        set(c) == {"type", "ns", "data", "interrupts"} for c in chunks if c["type"] == "values"
    )
    assert chunks[1]["data"] == {"progress": "a"}


def test_sync_stream_yields_the_same_as_astream() -> None:
    app = two_steps()
    try:
        updates = list(app.stream(hello(), CFG, stream_mode="updates"))
        assert [list(c) for c in updates] == [["a"], ["b"]]
        values = list(app.stream(hello(), {"thread_id": "t2"}, stream_mode=["values"]))
        assert [c["count"] for _, c in values] == [0, 1, 3]
        custom = list(app.stream(hello(), {"thread_id": "t3"}, stream_mode="custom", version="v2"))
        assert [c["data"] for c in custom] == [{"progress": "a"}, "from b"]
    finally:
        app.close()


def shape(chunk: Any) -> Any:
    """What a chunk is, without the ids and times that differ between two runs."""
    if isinstance(chunk, dict):
        return {
            k: shape(v)
            for k, v in chunk.items()
            if k not in ("id", "timestamp", "config", "run_id", "thread_id")
        }
    if isinstance(chunk, list | tuple):
        return [shape(c) for c in chunk]
    if isinstance(chunk, Message):
        return (chunk.role, chunk.text())
    return chunk if not isinstance(chunk, str) or ":" not in chunk else "<id>"


@pytest.mark.parametrize(
    "mode", ["values", "updates", "messages", "custom", "tasks", "checkpoints", "debug"]
)
async def test_each_mode_streams_the_same_sync_and_async(mode: str) -> None:
    app = two_steps()
    live = await collect(app, stream_mode=mode)
    blocking = await asyncio.to_thread(
        lambda: list(app.stream(hello(), {"thread_id": "t2"}, stream_mode=mode))
    )
    assert live and shape(blocking) == shape(live)
    await app.aclose()


async def test_the_default_stream_is_agentlogs_own_chunks() -> None:
    chunks = await collect(two_steps())
    assert chunks[-1].state is not None and chunks[-1].state.count == 3


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "how",
    [
        {"stream_mode": "tokens"},
        {"stream_mode": ["values", "nope"]},
        {"stream_mode": []},
        {"stream_mode": "values", "version": "v3"},
        {"version": "v2"},
        {"subgraphs": True},
    ],
)
async def test_a_bad_mode_is_refused_before_the_run_starts(how: dict[str, Any]) -> None:
    store = MemoryEventStore()
    app = two_steps(store)
    with pytest.raises(InvalidStreamModeError) as caught:
        app.astream(hello(), CFG, **how)
    if "stream_mode" in how and how.get("version") is None:
        assert "'values', 'updates', 'messages', 'custom'" in str(caught.value)
    with pytest.raises(InvalidStreamModeError):
        await asyncio.to_thread(app.stream, hello(), CFG, **how)
    with pytest.raises(ThreadNotFoundError):  # nothing was written
        [r async for r in store.read("t1")]
    await app.aclose()


def test_the_writer_outside_a_node_raises_a_typed_error() -> None:
    with pytest.raises(StreamWriterOutsideNodeError, match="inside a node"):
        get_stream_writer()


async def test_a_writer_with_no_one_reading_custom_does_nothing() -> None:
    app = two_steps()
    out = await app.ainvoke(hello(), CFG, include_state=True)
    assert out["state"].count == 3
    assert [list(c) for c in await collect(app, {"thread_id": "t2"}, stream_mode="updates")] == [
        ["a"],
        ["b"],
    ]


# ---- the modes agree with the log --------------------------------------------------------------


def fold_updates(start: dict[str, Any], updates: list[dict[str, Any]], cls: type[Any]) -> Any:
    """Fold `{node: update}` chunks onto the first values chunk, by each field's reducer."""
    plan = field_plan(cls)
    values = copy.deepcopy(start)
    for chunk in updates:
        for update in chunk.values():
            for name, value in update.items():
                reducer = plan[name][1]
                if name == "context":
                    values[name] = add_messages(values[name], value)
                elif reducer is None:
                    values[name] = value
                else:
                    values[name] = reducer(values[name], value)
    return values


def streamed(graph: StateGraph[Counted]) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """The values and updates chunks of a run of `graph`, and the state it ended in."""
    app = graph.compile()
    try:
        parts = list(app.stream(hello(), CFG, stream_mode=["values", "updates"]))
        final = state_values(app.get_state(CFG))
    finally:
        app.close()
    values = [chunk for mode, chunk in parts if mode == "values"]
    return values, [chunk for mode, chunk in parts if mode == "updates"], final


def writer(messages: int, add: int, note: str | None, tag: str) -> dict[str, Any]:
    update: dict[str, Any] = {"count": add}
    if messages:
        update["context"] = [said(f"{tag}.{k}") for k in range(messages)]
    if note is not None:
        update["note"] = note
    return update


def node_writing(spec: tuple[int, int, str | None], name: str) -> Any:
    return lambda state: writer(*spec, tag=name)


steps = st.lists(
    st.tuples(st.integers(0, 2), st.integers(-3, 3), st.none() | st.text(max_size=4)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=25, deadline=None)
@given(plan=steps)
def test_the_last_values_are_the_final_state_and_the_updates_fold_to_it(
    plan: list[tuple[int, int, str | None]],
) -> None:
    """Each node adds some messages, adds to a counter and maybe sets a note."""

    graph: StateGraph[Counted] = StateGraph(Counted)
    names = [f"n{i}" for i in range(len(plan))]
    for i, (name, step) in enumerate(zip(names, plan, strict=True)):
        graph.add_node(name, node_writing(step, name))
        graph.add_edge(name, names[i + 1] if i + 1 < len(names) else END)
    graph.set_entry_point(names[0])
    values, updates, final = streamed(graph)
    assert values[-1] == final
    assert [next(iter(u)) for u in updates] == names
    assert fold_updates(values[0], updates, Counted) == final


writes = st.tuples(st.integers(0, 2), st.integers(-3, 3), st.none() | st.text(max_size=4))
layers = st.lists(
    st.tuples(st.booleans(), st.lists(writes, min_size=1, max_size=3)), min_size=1, max_size=4
)


def router(name: str, specs: list[Any], *, first: bool) -> Any:
    """A `Send` to `name` per spec, setting no note unless `first`."""

    def route(state: Counted) -> list[Send]:
        mine = specs if first else [(m, add, None) for m, add, _ in specs]
        return [Send(name, {"spec": s, "tag": f"{name}.{k}"}) for k, s in enumerate(mine)]

    return route


@settings(max_examples=25, deadline=None)
@given(plan=layers)
def test_the_updates_of_parallel_steps_fold_to_the_final_state(
    plan: list[tuple[bool, list[tuple[int, int, str | None]]]],
) -> None:
    """Layers of nodes: each layer runs as one step, its nodes as branches (fanned out from
    the layer before and joined into the next), or, for a sent layer, as `Send`s to one
    node from each node of the layer before. Only a layer's first branch sets the note (two
    writes of a field with no reducer fail the step)."""
    graph: StateGraph[Counted] = StateGraph(Counted)
    graph.add_node("start", lambda state: {"count": 1})
    previous, expected = ["start"], [["start"]]
    for i, (sent, specs) in enumerate(plan):
        specs = [(m, add, note if k == 0 else None) for k, (m, add, note) in enumerate(specs)]
        if sent and i > 0:
            name = f"w{i}"
            graph.add_node(name, lambda state: writer(*state["spec"], tag=state["tag"]))

            for k, sender in enumerate(previous):
                once = k == 0 and expected[-1].count(sender) == 1  # one branch sets the note
                graph.add_conditional_edges(sender, router(name, specs, first=once), [name])
            # each branch of the step before sends
            expected.append([name] * len(specs) * len(expected[-1]))
            previous = [name]
            continue
        names = [f"n{i}_{k}" for k in range(len(specs))]
        for name, spec in zip(names, specs, strict=True):
            graph.add_node(name, node_writing(spec, name))
            graph.add_edge(previous if len(previous) > 1 else previous[0], name)
        expected.append(names)
        previous = names
    for name in previous:
        graph.add_edge(name, END)
    graph.set_entry_point("start")
    values, updates, final = streamed(graph)
    assert values[-1] == final and len(values) == len(expected) + 1
    assert [next(iter(u)) for u in updates] == [n for names in expected for n in names]
    assert fold_updates(values[0], updates, Counted) == final
    for update in updates:  # each branch's update holds its own messages alone
        [(name, wrote)] = update.items()
        tags = {m.text().rsplit(".", 1)[0] for m in wrote.get("context", [])}
        assert len(tags) <= 1 and all(t.startswith(name) for t in tags), update
