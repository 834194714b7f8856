"""Subgraphs: a compiled graph as a node (shared fields) or called from a node with mapped
input runs on a thread of the parent's log under its namespace; the parent's step links it
by hash so one `verify_tree` covers the tree; a child's interrupt pauses the parent and the
parent's resume reaches it; its stream parts come under its namespace; replay == live."""

from __future__ import annotations

import asyncio
import json
import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from agentlog import END, START, AgentState, Command, Send, StateGraph
from agentlog.actors import SubgraphForkError, SubgraphStateError, interrupt
from agentlog.events import (
    EventRecord,
    EventStore,
    MemoryEventStore,
    SQLiteEventStore,
    SubgraphRan,
    verify_tree,
)
from agentlog.projections import ExecutionStatus, replay

from .helpers import agentlog


class Notes(AgentState):
    items: Annotated[list[str], operator.add] = Field(default_factory=list)
    topic: str = ""
    text: str = ""


class Research(AgentState):
    items: Annotated[list[str], operator.add] = Field(default_factory=list)
    topic: str = ""


class Draft(AgentState):
    points: list[str] = Field(default_factory=list)
    text: str = ""


async def records(store: EventStore, thread: str) -> list[EventRecord]:
    return [r async for r in store.read(thread)]


async def replayed(store: EventStore, thread: str, state_cls: type[AgentState]) -> AgentState:
    return replay(await records(store, thread), state_cls)


def research_graph(**compile: Any) -> Any:
    graph: StateGraph[Research] = StateGraph(Research)
    graph.add_node("gather", lambda state: {"items": [f"fact about {state.topic}"]})
    graph.add_node("check", lambda state: {"items": [f"checked {len(state.items)}"]})
    graph.add_edge(START, "gather")
    graph.add_edge("gather", "check")
    graph.add_edge("check", END)
    return graph.compile(**compile)


def draft_graph() -> Any:
    graph: StateGraph[Draft] = StateGraph(Draft)
    graph.add_node("draft", lambda state: {"text": "; ".join(state.points)})
    graph.add_edge(START, "draft")
    graph.add_edge("draft", END)
    return graph.compile()


def parent_graph(store: EventStore, *, sync_call: bool = False) -> Any:
    drafts = draft_graph()

    async def write(state: Notes) -> dict[str, Any]:
        done = await drafts.ainvoke({"points": state.items}, include_state=True)
        return {"text": done["state"].text.upper()}

    def write_sync(state: Notes) -> dict[str, Any]:
        done = drafts.invoke({"points": state.items}, include_state=True)
        return {"text": done["state"].text.upper()}

    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("plan", lambda state: {"items": [f"plan for {state.topic}"]})
    graph.add_node("research", research_graph())
    graph.add_node("write", write_sync if sync_call else write)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "research")
    graph.add_edge("research", "write")
    graph.add_edge("write", END)
    return graph.compile(store)


@pytest.mark.parametrize("sync_call", [False, True], ids=["ainvoke", "invoke"])
async def test_subgraphs_run_on_namespaced_threads_of_the_parents_log(sync_call: bool) -> None:
    store = MemoryEventStore()
    app = parent_graph(store, sync_call=sync_call)
    await app.ainvoke({"topic": "owls"}, {"thread_id": "t"})
    state = await app.aget_state({"thread_id": "t"})
    # the child's items come back whole and the parent's reducer adds them, as in LangGraph
    assert state.items == ["plan for owls", "plan for owls", "fact about owls", "checked 2"]
    assert state.text == "; ".join(state.items).upper()
    assert replay(await records(store, "t"), Notes).model_dump() == state.model_dump()
    links = [r.event for r in await records(store, "t") if isinstance(r.event, SubgraphRan)]
    assert [(e.node, e.status) for e in links] == [
        ("research", "completed"),
        ("write", "completed"),
    ]
    assert sorted(await store.threads()) == sorted(["t", *(e.thread_id for e in links)])
    for link in links:
        assert link.thread_id == f"t|{link.namespace}"
        assert link.namespace.startswith(f"{link.node}:")
        child = await records(store, link.thread_id)
        assert (child[-1].seq, child[-1].hash) == (link.seq, link.hash)
    research = await app.aget_state({"thread_id": "t", "checkpoint_ns": links[0].namespace})
    assert isinstance(research, Research) and research.items[-1] == "checked 2"
    draft = await app.aget_state({"configurable": {"thread_id": links[1].thread_id}})
    assert draft.text == "; ".join(state.items)  # read with the fields its log recorded
    assert all(r.ok for r in await app.averify({"thread_id": "t"}))
    threads = await store.threads()
    with pytest.raises(SubgraphForkError, match="add that graph as a node"):
        await app.afork({"thread_id": links[1].thread_id}, at_step=1)
    assert await store.threads() == threads  # refused before anything was written


async def test_a_compiled_graph_as_node_must_share_its_fields_by_name() -> None:
    graph: StateGraph[Research] = StateGraph(Research)
    with pytest.raises(SubgraphStateError, match=r"'points', 'text'.*child\.invoke"):
        graph.add_node("draft", draft_graph())


async def test_a_node_calling_a_graph_twice_gets_a_namespace_for_each_call() -> None:
    store = MemoryEventStore()
    drafts = draft_graph()

    async def twice(state: Notes) -> dict[str, Any]:
        one = await drafts.ainvoke({"points": ["a"]}, include_state=True)
        two = await drafts.ainvoke({"points": ["b"]}, include_state=True)
        return {"text": one["state"].text + two["state"].text}

    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("twice", twice)
    graph.add_edge(START, "twice")
    graph.add_edge("twice", END)
    app = graph.compile(store)
    await app.ainvoke({}, {"thread_id": "t"})
    assert (await app.aget_state({"thread_id": "t"})).text == "ab"
    links = [r.event for r in await records(store, "t") if isinstance(r.event, SubgraphRan)]
    assert [e.namespace for e in links] == ["twice:1", "twice:1+1"]


async def test_a_call_naming_a_thread_of_its_own_stays_an_ordinary_run() -> None:
    store, own = MemoryEventStore(), MemoryEventStore()
    drafts = draft_graph()
    drafts.engine.store = own

    async def call(state: Notes) -> dict[str, Any]:
        await drafts.ainvoke({"points": ["x"]}, {"thread_id": "elsewhere"})
        return {"text": "called"}

    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("call", call)
    graph.add_edge(START, "call")
    graph.add_edge("call", END)
    await graph.compile(store).ainvoke({}, {"thread_id": "t"})
    assert await store.threads() == ["t"] and await own.threads() == ["elsewhere"]


def review_graph() -> Any:
    class Review(AgentState):
        text: str = ""
        verdict: str = ""

    def ask(state: Review) -> dict[str, Any]:
        answer = interrupt("review", {"text": state.text})
        return {"verdict": f"{answer}: {state.text}"}

    graph: StateGraph[Review] = StateGraph(Review)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", END)
    return graph.compile(), Review


async def test_an_interrupt_in_a_subgraph_pauses_the_parent_and_its_resume_reaches_it() -> None:
    review, review_cls = review_graph()

    class Doc(AgentState):
        text: str = ""
        verdict: str = ""

    store = MemoryEventStore()
    graph: StateGraph[Doc] = StateGraph(Doc)
    graph.add_node("prepare", lambda state: {"text": state.text + "!"})
    graph.add_node("review", review)
    graph.add_edge(START, "prepare")
    graph.add_edge("prepare", "review")
    graph.add_edge("review", END)
    app = graph.compile(store)
    config = {"thread_id": "doc"}
    paused = await app.ainvoke({"text": "draft"}, config)
    (pause,) = paused["__interrupt__"]
    assert (pause["node"], pause["reason"], pause["data"]) == (
        "review",
        "review",
        {"text": "draft!"},
    )
    (child,) = [t for t in await store.threads() if t != "doc"]
    assert (await app.aget_state({"thread_id": child})).execution_meta.is_interrupted()
    done = await app.ainvoke(Command(resume="approved"), config)
    assert done["status"] == ExecutionStatus.COMPLETED.value
    state = await app.aget_state(config)
    assert state.verdict == "approved: draft!"
    assert replay(await records(store, "doc"), Doc).model_dump() == state.model_dump()
    child_state = await app.aget_state({"thread_id": child})
    assert (await replayed(store, child, review_cls)).model_dump() == child_state.model_dump()
    statuses = [
        r.event.status for r in await records(store, "doc") if isinstance(r.event, SubgraphRan)
    ]
    assert statuses == ["interrupted", "completed"]
    with pytest.raises(SubgraphForkError, match="fork it with the graph that ran it"):
        await app.afork({"thread_id": "doc|review:x"}, at_seq=1)


async def test_a_fork_inside_a_subgraph_carries_the_subgraph_on_from_that_point() -> None:
    ran: list[str] = []

    def gather(state: Research) -> dict[str, Any]:
        ran.append("gather")
        return {"items": [f"fact about {state.topic}"]}

    def check(state: Research) -> dict[str, Any]:
        ran.append("check")
        return {"items": [f"checked {len(state.items)}"]}

    child: StateGraph[Research] = StateGraph(Research)
    child.add_node("gather", gather)
    child.add_node("check", check)
    child.add_edge(START, "gather")
    child.add_edge("gather", "check")
    child.add_edge("check", END)
    store = MemoryEventStore()
    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("plan", lambda state: {"items": ["plan"]})
    graph.add_node("research", child.compile())
    graph.add_node("tail", lambda state: {"text": ",".join(state.items)})
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "research")
    graph.add_edge("research", "tail")
    graph.add_edge("tail", END)
    app = graph.compile(store)
    await app.ainvoke({"topic": "owls"}, {"thread_id": "t"})
    original = await app.aget_state({"thread_id": "t"})
    assert ran == ["gather", "check"]
    inside = {"thread_id": "t", "checkpoint_ns": "research:2"}
    (entry,) = [e for e in await app.aget_state_history(inside) if e.step == 1]
    assert [item for item in (await entry.state()).items] == ["plan", "fact about owls"]
    fork = await app.afork(inside, at_step=1, new_thread_id="f")
    assert fork == "f" and "f|research:2" in await store.threads()
    await app.ainvoke(None, {"thread_id": "f"})
    assert ran == ["gather", "check", "check"]  # the fork carried on after gather
    forked = await app.aget_state({"thread_id": "f"})
    assert forked.items == original.items and forked.text == original.text
    assert (await replayed(store, "f", Notes)).model_dump() == forked.model_dump()
    assert all(r.ok for r in await verify_tree(store, "f"))


async def test_subgraph_parts_stream_under_their_namespace_with_subgraphs_true() -> None:
    app = parent_graph(MemoryEventStore())
    parts = [
        p
        async for p in app.astream(
            {"topic": "cats"}, {"thread_id": "t"}, stream_mode="updates", subgraphs=True
        )
    ]
    shown = [(tuple(s.split(":")[0] for s in ns), list(update)) for ns, update in parts]
    assert shown == [
        ((), ["plan"]),
        (("research",), ["gather"]),
        (("research",), ["check"]),
        ((), ["research"]),
        (("write",), ["draft"]),
        ((), ["write"]),
    ]
    plain = [
        p async for p in app.astream({"topic": "cats"}, {"thread_id": "u"}, stream_mode="updates")
    ]
    assert [list(p) for p in plain] == [["plan"], ["research"], ["write"]]


async def test_nested_subgraphs_name_each_level_and_verify_as_one_tree(tmp_path: Path) -> None:
    inner = research_graph()
    middle: StateGraph[Research] = StateGraph(Research)
    middle.add_node("inner", inner)
    middle.add_edge(START, "inner")
    middle.add_edge("inner", END)
    db = tmp_path / "x.db"
    async with SQLiteEventStore(db) as store:
        graph: StateGraph[Notes] = StateGraph(Notes)
        graph.add_node("middle", middle.compile())
        graph.add_edge(START, "middle")
        graph.add_edge("middle", END)
        app = graph.compile(store)
        await app.ainvoke({"topic": "eels"}, {"thread_id": "t"})
        threads = sorted(await store.threads())
        assert len(threads) == 3 and threads[2].count("|") == 2  # t|middle:N|inner:M
        assert [r.thread_id for r in await verify_tree(store, "t")] == threads
        deepest = await app.aget_state({"thread_id": threads[2]})
        assert isinstance(deepest, Research) and deepest.items[-1] == "checked 1"
    with sqlite3.connect(db) as conn:  # rewrite a record of the deepest run behind the log
        conn.execute(
            "UPDATE events SET payload = payload || x'00' WHERE thread_id = ? AND seq = 2",
            (threads[2],),
        )
    async with SQLiteEventStore(db) as store:
        reports = await verify_tree(store, "t")
        assert [r.ok for r in reports] == [True, True, False]
    shown = agentlog("verify", "t", "--db", db, "--json")  # the command checks the tree too
    assert shown.returncode == 1
    assert [t["ok"] for t in json.loads(shown.stdout)["threads"]] == [True, True, False]


# ---- replay == live for random graphs with subgraphs -------------------------------------


@settings(max_examples=20, deadline=None)
@given(
    sends=st.lists(st.text(alphabet="abc", min_size=1, max_size=2), max_size=3),
    before=st.lists(st.sampled_from(["x", "y"]), max_size=2),
    mapped=st.booleans(),
    messages=st.booleans(),
)
def test_graphs_with_subgraphs_replay_to_the_live_state(
    sends: list[str], before: list[str], mapped: bool, messages: bool
) -> None:
    """A parent of `before` nodes, then a child graph (a node, or called with mapped input)
    that `Send`s a branch per item of `sends`, then a tail node."""

    async def drive() -> None:
        store = MemoryEventStore()
        child: StateGraph[Research] = StateGraph(Research)

        def mapper(state: Any) -> dict[str, Any]:
            out: dict[str, Any] = {"items": [f"map {state}"]}
            if messages:
                out["messages"] = [{"role": "assistant", "content": f"mapped {state}"}]
            return out

        child.add_node("map", mapper)
        child.add_node("done", lambda state: {"topic": f"{len(state.items)} items"})
        child.add_conditional_edges(
            START, lambda state: [Send("map", s) for s in sends] or "done", ["map", "done"]
        )
        child.add_edge("map", "done")
        child.add_edge("done", END)
        compiled = child.compile(store)  # the same log: it reads its runs with its class

        async def call(state: Notes) -> dict[str, Any]:
            done = await compiled.ainvoke({"items": list(state.items)}, include_state=True)
            return {"text": done["state"].topic}

        graph: StateGraph[Notes] = StateGraph(Notes)
        names = [f"n{i}" for i in range(len(before))]
        previous = START
        for name, item in zip(names, before, strict=True):
            graph.add_node(name, lambda state, item=item: {"items": [item]})
            graph.add_edge(previous, name)
            previous = name
        graph.add_node("sub", call if mapped else compiled)
        graph.add_node("tail", lambda state: {"text": state.text + " tail"})
        graph.add_edge(previous, "sub")
        graph.add_edge("sub", "tail")
        graph.add_edge("tail", END)
        app = graph.compile(store)
        await app.ainvoke({}, {"thread_id": "t"})
        state = await app.aget_state({"thread_id": "t"})
        assert state.execution_meta.status == ExecutionStatus.COMPLETED
        assert (await replayed(store, "t", Notes)).model_dump() == state.model_dump()
        (thread,) = [t for t in await store.threads() if t != "t"]
        reader = compiled if mapped else app  # a node's own call is the node's to know
        child_state = await reader.aget_state({"thread_id": thread})
        assert (await replayed(store, thread, Research)).model_dump() == child_state.model_dump()
        assert sorted(child_state.items) == sorted([*before, *(f"map {s}" for s in sends)])
        assert all(r.ok for r in await verify_tree(store, "t"))

    asyncio.run(drive())


async def test_a_stop_during_a_subgraph_stops_both_and_resume_carries_the_child_on() -> None:
    entered, release, ran = asyncio.Event(), asyncio.Event(), []

    def gather(state: Research) -> dict[str, Any]:
        ran.append("gather")
        return {"items": ["fact"]}

    async def slow(state: Research) -> dict[str, Any]:
        ran.append("slow")
        entered.set()
        await release.wait()
        return {"items": ["slow"]}

    child: StateGraph[Research] = StateGraph(Research)
    child.add_node("gather", gather)
    child.add_node("slow", slow)
    child.add_edge(START, "gather")
    child.add_edge("gather", "slow")
    child.add_edge("slow", END)
    store = MemoryEventStore()
    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("sub", child.compile())
    graph.add_edge(START, "sub")
    graph.add_edge("sub", END)
    app = graph.compile(store)
    config = {"thread_id": "t"}
    running = asyncio.ensure_future(app.ainvoke({"topic": "x"}, config))
    await entered.wait()
    assert await app.astop(config)
    await running
    (sub,) = [t for t in await store.threads() if t != "t"]
    for thread in ("t", sub):  # the cut node's run and the parent's both say they stopped
        assert [r.kind for r in await records(store, thread)][-1] == "stopped"
    release.set()
    done = await app.ainvoke(None, config)
    assert done["status"] == ExecutionStatus.COMPLETED.value
    assert (await app.aget_state(config)).items == ["fact", "slow"]
    assert ran == ["gather", "slow", "slow"]  # the committed step is not run again


def test_the_langgraph_front_takes_its_compiled_graphs_as_nodes_and_shows_them_paused() -> None:
    from typing_extensions import TypedDict

    from agentlog.langgraph import StateGraph as LangGraph
    from agentlog.langgraph import interrupt as ask_value

    class Doc(TypedDict):
        text: str
        verdict: str

    def ask(state: Doc) -> dict[str, Any]:
        return {"verdict": f"{ask_value({'text': state['text']})}: {state['text']}"}

    inner = LangGraph(Doc)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    outer = LangGraph(Doc)
    outer.add_node("review", inner.compile())
    outer.add_edge(START, "review")
    app = outer.compile(checkpointer=MemoryEventStore())
    config = {"configurable": {"thread_id": "d"}}
    paused = app.invoke({"text": "draft", "verdict": ""}, config)
    assert [i.value for i in paused["__interrupt__"]] == [{"text": "draft"}]
    (task,) = app.get_state(config, subgraphs=True).tasks
    assert task.name == "review" and task.state.next == ("ask",)
    assert task.state.config["configurable"]["checkpoint_ns"] == "review:1"
    again = app.get_state(task.state.config)  # the child's snapshot, by its config
    assert again.values == {"text": "draft", "verdict": ""}
    done = app.invoke(Command(resume="ok"), config)
    assert done == {"text": "draft", "verdict": "ok: draft"}


async def test_sends_to_a_subgraph_node_run_one_subgraph_each_with_its_argument() -> None:
    class Tally(AgentState):
        items: Annotated[list[str], operator.add] = Field(default_factory=list)

    child: StateGraph[Tally] = StateGraph(Tally)
    child.add_node("find", lambda state: {"items": [f"fact about {state.items[0]}"]})
    child.add_edge(START, "find")
    child.add_edge("find", END)
    store = MemoryEventStore()
    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("research", child.compile())
    graph.add_conditional_edges(
        START, lambda state: [Send("research", {"items": [t]}) for t in ("ants", "bees")]
    )
    graph.add_edge("research", END)
    app = graph.compile(store)
    await app.ainvoke({}, {"thread_id": "t"})
    state = await app.aget_state({"thread_id": "t"})
    assert state.items == ["ants", "fact about ants", "bees", "fact about bees"]
    assert sorted(t for t in await store.threads() if t != "t") == [
        "t|research:1.0",
        "t|research:1.1",
    ]
    assert replay(await records(store, "t"), Notes).model_dump() == state.model_dump()
