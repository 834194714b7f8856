"""Supersteps: several nodes in one step (edges fanning out, a condition naming several
nodes, `Send`s), run concurrently, merged by the field reducers in branch order, committed as
one step; a join waits for all its sources; two branches writing a field without a reducer
fail the step with `InvalidUpdateError`; the log replays to the live state."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from agentlog import END, START, AgentState, InvalidUpdateError, Send, StateGraph
from agentlog.actors import GraphError, interrupt
from agentlog.events import (
    BranchEntered,
    EventRecord,
    MemoryEventStore,
    NodeEntered,
    RunFailed,
    StateUpdated,
    StepAdvanced,
    TasksPlanned,
)
from agentlog.projections import ExecutionStatus, replay


class Notes(AgentState):
    items: Annotated[list[str], operator.add] = Field(default_factory=list)
    subjects: list[str] = Field(default_factory=list)
    last: str = ""


def adds(text: str) -> Any:
    return lambda state: {"items": [text]}


async def records(app: Any, thread: str = "t") -> list[EventRecord]:
    return [r async for r in app.store.read(thread)]


async def run(app: Any, input: Any = None, thread: str = "t") -> Notes:
    await app.ainvoke({} if input is None else input, {"thread_id": thread})
    state: Notes = await app.aget_state({"thread_id": thread})
    log = await records(app, thread)
    assert replay(log, Notes).model_dump() == state.model_dump()  # replay == live
    return state


def fan_graph() -> StateGraph[Notes]:
    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("a", adds("a"))
    graph.add_node("b", adds("b"))
    graph.add_node("c", adds("c"))
    graph.add_node("d", lambda state: {"items": [f"d saw {','.join(state.items)}"]})
    graph.add_edge(START, "a")
    graph.add_edge("a", "b")
    graph.add_edge("a", "c")
    graph.add_edge(["b", "c"], "d")
    graph.add_edge("d", END)
    return graph


async def test_two_edges_fan_out_into_one_step_and_a_join_waits_for_both() -> None:
    app = fan_graph().compile()
    state = await run(app)
    assert state.items == ["a", "b", "c", "d saw a,b,c"]
    assert state.execution_meta.step == 3  # a, then b and c together, then d
    log = await records(app)
    planned = [r.event for r in log if isinstance(r.event, TasksPlanned)]
    assert planned == [TasksPlanned(step=2, tasks=[{"node": "b"}, {"node": "c"}], joins={})]
    entered = [(r.event, r.actor) for r in log if isinstance(r.event, BranchEntered)]
    assert entered == [
        (BranchEntered(node="b", branch=0, step=2), "b"),
        (BranchEntered(node="c", branch=1, step=2), "c"),
    ]
    # the branches' outputs and the step's end are one commit, each output by its branch
    updates = [r for r in log if isinstance(r.event, StateUpdated) and r.actor in ("b", "c")]
    closing = next(r for r in log if isinstance(r.event, StepAdvanced) and r.event.step == 2)
    assert [r.actor for r in updates] == ["b", "c"]
    assert updates[-1].seq + 1 == closing.seq


async def test_a_join_waits_across_steps_for_a_longer_branch() -> None:
    graph: StateGraph[Notes] = StateGraph(Notes)
    for name in ("a", "a2", "b", "c"):
        graph.add_node(name, adds(name))
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    graph.add_edge("a", "a2")
    graph.add_edge(["a2", "b"], "c")
    graph.add_edge("c", END)
    app = graph.compile()
    state = await run(app)
    assert state.items == ["a", "b", "a2", "c"]  # c ran once, after a2 and b both had
    log = await records(app)
    assert [r.event.joins for r in log if isinstance(r.event, TasksPlanned)] == [
        {},  # a and b start together
        {"c": ["b"]},  # b is done, a2 still to run
        {},  # a2 done: c is planned, the join is clear again
    ]


async def test_a_condition_returning_a_list_runs_each_node() -> None:
    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("route", adds("route"))
    for name in ("x", "y", "z"):
        graph.add_node(name, adds(name))
        graph.add_edge(name, END)
    graph.add_edge(START, "route")
    graph.add_conditional_edges("route", lambda state: ["z", "x"], ["x", "y", "z"])
    state = await run(graph.compile())
    assert state.items == ["route", "z", "x"]  # in the order the condition named them


def map_reduce(
    gates: dict[str, asyncio.Event] | None = None, done: dict[str, asyncio.Event] | None = None
) -> StateGraph[Notes]:
    graph: StateGraph[Notes] = StateGraph(Notes)

    async def write(state: dict[str, Any]) -> dict[str, Any]:
        if gates is not None and done is not None:
            await gates[state["subject"]].wait()
            done[state["subject"]].set()
        return {"items": [f"joke about {state['subject']}"]}

    graph.add_node("plan", lambda state: {"subjects": ["cats", "dogs", "eels"]})
    graph.add_node("write", write)
    graph.add_node("best", lambda state: {"last": state.items[-1]})
    graph.add_edge(START, "plan")
    graph.add_conditional_edges(
        "plan", lambda state: [Send("write", {"subject": s}) for s in state.subjects], ["write"]
    )
    graph.add_edge("write", "best")
    graph.add_edge("best", END)
    return graph


async def test_send_maps_a_node_over_inputs_and_the_reducer_gathers_them() -> None:
    app = map_reduce().compile()
    state = await run(app)
    assert state.items == ["joke about cats", "joke about dogs", "joke about eels"]
    assert state.last == "joke about eels"  # "best" ran once, after all three
    log = await records(app)
    planned = next(r.event for r in log if isinstance(r.event, TasksPlanned))
    assert planned.tasks == [
        {"node": "write", "arg": {"subject": s}} for s in ("cats", "dogs", "eels")
    ]


@settings(max_examples=15)
@given(order=st.permutations(["cats", "dogs", "eels"]))
def test_the_merge_follows_branch_order_whatever_order_branches_finish_in(
    order: list[str],
) -> None:
    async def drive() -> Notes:
        gates = {s: asyncio.Event() for s in order}
        done = {s: asyncio.Event() for s in order}
        app = map_reduce(gates, done).compile()
        running = asyncio.ensure_future(app.ainvoke({}, {"thread_id": "t"}))
        for subject in order:  # release each branch, and let it finish, in this order
            gates[subject].set()
            await done[subject].wait()
        await running
        state: Notes = await app.aget_state({"thread_id": "t"})
        assert replay(await records(app), Notes).model_dump() == state.model_dump()
        return state

    state = asyncio.run(drive())
    assert state.items == ["joke about cats", "joke about dogs", "joke about eels"]


async def test_two_branches_writing_a_field_without_a_reducer_fail_the_step() -> None:
    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("a", lambda state: {"last": "a", "items": ["a"]})
    graph.add_node("b", lambda state: {"last": "b", "items": ["b"]})
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    graph.add_edge("a", END)
    graph.add_edge("b", END)
    app = graph.compile()
    with pytest.raises(InvalidUpdateError, match="'a', 'b' each wrote field 'last'"):
        await app.ainvoke({}, {"thread_id": "t"})
    log = await records(app)
    assert not any(isinstance(r.event, StateUpdated) and r.actor in ("a", "b") for r in log)
    assert isinstance(log[-1].event, RunFailed)
    assert log[-1].event.error_type == "InvalidUpdateError"
    assert issubclass(InvalidUpdateError, GraphError)


async def test_a_condition_at_start_may_send_from_the_input() -> None:
    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("write", lambda state: {"items": [state["subject"].upper()]})
    graph.add_conditional_edges(
        START, lambda state: [Send("write", {"subject": s}) for s in state.subjects]
    )
    graph.add_edge("write", END)
    state = await run(graph.compile(), {"subjects": ["a", "b"]})
    assert state.items == ["A", "B"]


async def test_an_interrupt_in_a_branch_pauses_the_step_and_resumes_it() -> None:
    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("ask", lambda state: {"items": [f"asked {interrupt('approve?')}"]})
    graph.add_node("other", adds("other"))
    graph.add_edge(START, "ask")
    graph.add_edge(START, "other")
    graph.add_edge("ask", END)
    graph.add_edge("other", END)
    app = graph.compile()
    await app.ainvoke({}, {"thread_id": "t"})
    paused = await app.aget_state({"thread_id": "t"})
    assert paused.execution_meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    assert paused.items == []  # nothing of the step committed
    from agentlog import Command

    await app.ainvoke(Command(resume="yes"), {"thread_id": "t"})
    state = await app.aget_state({"thread_id": "t"})
    assert state.items == ["asked yes", "other"]
    assert replay(await records(app), Notes).model_dump() == state.model_dump()


async def test_a_one_node_graph_logs_as_before() -> None:
    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("a", adds("a"))
    graph.add_node("b", adds("b"))
    graph.add_edge(START, "a")
    graph.add_edge("a", "b")
    graph.add_edge("b", END)
    app = graph.compile()
    await run(app)
    kinds = [r.kind for r in await records(app)]
    assert BranchEntered.KIND not in kinds and TasksPlanned.KIND not in kinds
    assert kinds.count(NodeEntered.KIND) == 2


async def test_a_send_to_an_unknown_node_is_named() -> None:
    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("a", adds("a"))
    graph.add_edge(START, "a")
    graph.add_conditional_edges("a", lambda state: [Send("nope", 1)])
    with pytest.raises(GraphError, match="chose 'nope', which is no node"):
        await graph.compile().ainvoke({}, {"thread_id": "t"})


# ---- replay == live for random branching graphs ------------------------------------------

widths = st.integers(min_value=1, max_value=4)


@settings(max_examples=25)
@given(
    fan=widths,
    sends=st.lists(st.text(alphabet="abc", min_size=1, max_size=3), max_size=4),
    joined=st.booleans(),
    messages=st.booleans(),
)
def test_branching_graphs_replay_to_the_live_state(
    fan: int, sends: list[str], joined: bool, messages: bool
) -> None:
    """A node fanning out to `fan` nodes, which then `Send` to a mapper or join."""

    async def drive() -> None:
        store = MemoryEventStore()
        graph: StateGraph[Notes] = StateGraph(Notes)
        graph.add_node("root", adds("root"))
        graph.add_edge(START, "root")
        names = [f"n{i}" for i in range(fan)]

        def branch(name: str) -> Any:
            def node(state: Notes) -> Any:
                out: dict[str, Any] = {"items": [name]}
                if messages:
                    out["messages"] = [{"role": "assistant", "content": f"from {name}"}]
                return out

            return node

        for name in names:
            graph.add_node(name, branch(name))
            graph.add_edge("root", name)
        graph.add_node("map", lambda state: {"items": [f"map {state}"]})
        graph.add_node("tail", adds("tail"))
        if joined:
            graph.add_edge(names, "tail")
        for name in names:
            graph.add_conditional_edges(
                name, lambda state: [Send("map", s) for s in sends] or END, ["map", END]
            )
        graph.add_edge("map", END)
        graph.add_edge("tail", END)
        app = graph.compile(store)
        await app.ainvoke({}, {"thread_id": "t"})
        state = await app.aget_state({"thread_id": "t"})
        log = [r async for r in store.read("t")]
        assert replay(log, Notes).model_dump() == state.model_dump()
        assert state.execution_meta.status == ExecutionStatus.COMPLETED
        assert state.items[: fan + 1] == ["root", *names]
        assert sorted(state.items).count("tail") == (1 if joined else 0)
        assert len([i for i in state.items if i.startswith("map")]) == fan * len(sends)

    asyncio.run(drive())


async def test_a_node_may_send_by_command_and_a_branch_changing_its_input_changes_no_log() -> None:
    from agentlog import Command

    def fan(state: Notes) -> Command[Any]:
        return Command(update={"items": ["fan"]}, goto=[Send("grab", {"n": 1}), "plain"])

    def grab(state: dict[str, Any]) -> dict[str, Any]:
        state["n"] = 99  # its own copy: the recorded input stays 1
        return {"items": ["grab"]}

    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("fan", fan, destinations=("grab", "plain"))
    graph.add_node("grab", grab)
    graph.add_node("plain", adds("plain"))
    graph.add_edge(START, "fan")
    graph.add_edge("grab", END)
    graph.add_edge("plain", END)
    app = graph.compile()
    state = await run(app)
    assert state.items == ["fan", "plain", "grab"]  # plain targets first, then the Sends
    planned = next(r.event for r in await records(app) if isinstance(r.event, TasksPlanned))
    assert planned.tasks == [{"node": "plain"}, {"node": "grab", "arg": {"n": 1}}]


async def test_an_edit_as_a_fanning_out_node_goes_on_into_all_its_branches() -> None:
    app = fan_graph().compile(interrupt_before=["a"])
    config = {"thread_id": "t"}
    await app.ainvoke({}, config)  # paused before a
    await app.aupdate_state(config, {"items": ["edited"]}, as_node="a")
    await app.ainvoke(None, config)
    state: Notes = await app.aget_state(config)
    assert state.items == ["edited", "b", "c", "d saw edited,b,c"]
    assert replay(await records(app), Notes).model_dump() == state.model_dump()


async def test_hooks_see_each_branch_and_may_recover_a_failing_one() -> None:
    from agentlog.actors import Callbacks, Invocation
    from agentlog.projections import Message

    seen: list[str] = []

    class Watch(Callbacks):
        def before(self, invocation: Invocation) -> None:
            seen.append(invocation.name)

        def on_error(self, invocation: Invocation, error: Exception) -> Message:
            return Message.text_message(f"recovered {invocation.name}", role="assistant")

    def broken(state: Notes) -> None:
        raise RuntimeError("down")

    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("ok", adds("ok"))
    graph.add_node("broken", broken)
    for name in ("ok", "broken"):
        graph.add_edge(START, name)
        graph.add_edge(name, END)
    app = graph.compile(callbacks=Watch())
    state = await run(app)
    assert sorted(seen) == ["broken", "ok"]
    assert state.items == ["ok"]
    assert [m.text() for m in state.context] == ["recovered broken"]


async def test_a_stop_during_a_superstep_cuts_every_branch_and_resume_runs_them_again() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    runs: list[str] = []

    async def slow(state: Notes) -> dict[str, Any]:
        runs.append("slow")
        started.set()
        await release.wait()
        return {"items": ["slow"]}

    async def quick(state: Notes) -> dict[str, Any]:
        runs.append("quick")
        return {"items": ["quick"]}

    graph: StateGraph[Notes] = StateGraph(Notes)
    graph.add_node("slow", slow)
    graph.add_node("quick", quick)
    for name in ("slow", "quick"):
        graph.add_edge(START, name)
        graph.add_edge(name, END)
    app = graph.compile()
    config = {"thread_id": "t"}
    running = asyncio.ensure_future(app.ainvoke({}, config))
    await started.wait()
    assert await app.astop(config)
    paused = await asyncio.wait_for(running, 10)
    assert paused["__interrupt__"][0]["reason"] == "stop_requested"
    assert (await app.aget_state(config)).items == []  # nothing of the step committed
    release.set()
    await app.ainvoke(None, config)
    state: Notes = await app.aget_state(config)
    assert state.items == ["slow", "quick"]
    assert runs == ["slow", "quick", "slow", "quick"]
    assert replay(await records(app), Notes).model_dump() == state.model_dump()


async def test_a_paused_superstep_names_each_of_its_branches_as_next() -> None:
    from agentlog.projections.present import next_nodes

    app = map_reduce().compile(interrupt_before=["write"])
    await app.ainvoke({}, {"thread_id": "t"})
    paused: Notes = await app.aget_state({"thread_id": "t"})
    assert next_nodes(paused.execution_meta) == ["write", "write", "write"]  # one per Send
    await app.ainvoke(None, {"thread_id": "t"})
    done: Notes = await app.aget_state({"thread_id": "t"})
    assert done.items == ["joke about cats", "joke about dogs", "joke about eels"]
    assert next_nodes(done.execution_meta) == []


async def test_a_fork_before_a_superstep_goes_on_into_its_branches() -> None:
    app = map_reduce().compile()
    await run(app)
    at_plan: Notes = await app.aget_state({"thread_id": "t"}, at_step=1)
    assert at_plan.items == [] and at_plan.subjects == ["cats", "dogs", "eels"]
    fork = {"thread_id": await app.afork({"thread_id": "t"}, at_step=1, new_thread_id="f")}
    await app.ainvoke(None, fork)
    state: Notes = await app.aget_state(fork)
    assert state.items == ["joke about cats", "joke about dogs", "joke about eels"]
    assert state.last == "joke about eels"
    assert replay(await records(app, "f"), Notes).model_dump() == state.model_dump()


async def test_a_breakpoint_after_a_branch_pauses_after_its_whole_step() -> None:
    app = fan_graph().compile(interrupt_after=["c"])
    config = {"thread_id": "t"}
    await app.ainvoke({}, config)
    paused: Notes = await app.aget_state(config)
    assert paused.execution_meta.status == ExecutionStatus.INTERRUPTED_AFTER
    assert paused.execution_meta.interrupted_node == "c"
    assert paused.items == ["a", "b", "c"]  # both branches of the step committed
    await app.ainvoke(None, config)
    state: Notes = await app.aget_state(config)
    assert state.items == ["a", "b", "c", "d saw a,b,c"]
    assert replay(await records(app), Notes).model_dump() == state.model_dump()
