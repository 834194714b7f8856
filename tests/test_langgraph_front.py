"""The LangGraph front (`agentlog.langgraph`): LangGraph's state schemas and return shapes over
agentlog's engine and log."""

from __future__ import annotations

import dataclasses
import operator
from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from typing_extensions import TypedDict

from agentlog.events import SQLiteEventStore
from agentlog.langgraph import (
    END,
    START,
    Command,
    GraphError,
    Interrupt,
    SchemaError,
    StateGraph,
    StateSnapshot,
    add_messages,
    interrupt,
)
from agentlog.projections import Message
from agentlog.projections.errors import InvalidStateUpdateError


class Notes(TypedDict):
    messages: Annotated[list[Any], add_messages]
    topic: str
    notes: Annotated[list[str], operator.add]


def plan(state: Notes) -> dict[str, Any]:
    return {"notes": [f"planned {state['topic']}"], "messages": [("ai", f"on {state['topic']}")]}


def review(state: Notes) -> dict[str, Any]:
    answer = interrupt({"question": "ok?", "notes": state["notes"]})
    return {"notes": [f"review: {answer}"]}


def reviewed(checkpointer: Any = None) -> Any:
    builder = StateGraph(Notes)
    builder.add_node("plan", plan)
    builder.add_node("review", review)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "review")
    builder.add_edge("review", END)
    return builder.compile(checkpointer)


def texts(values: dict[str, Any]) -> list[str]:
    return [m.text() if isinstance(m, Message) else m.content for m in values["messages"]]


def test_invoke_returns_the_values_and_pauses_with_an_interrupt() -> None:
    graph = reviewed()
    config = {"configurable": {"thread_id": "t1"}}
    paused = graph.invoke({"topic": "refunds", "messages": [("user", "hi")]}, config)
    assert paused["topic"] == "refunds" and paused["notes"] == ["planned refunds"]
    assert texts(paused) == ["hi", "on refunds"]
    (pause,) = paused["__interrupt__"]
    assert isinstance(pause, Interrupt)
    assert pause.value == {"question": "ok?", "notes": ["planned refunds"]}
    done = graph.invoke(Command(resume="yes"), config)
    assert "__interrupt__" not in done
    assert done["notes"] == ["planned refunds", "review: yes"]


def test_a_pause_is_resumed_by_its_id() -> None:
    graph = reviewed()
    config = {"configurable": {"thread_id": "t-id"}}
    pause = graph.invoke({"topic": "a"}, config)["__interrupt__"][0]
    assert graph.get_state(config).interrupts == (pause,)
    done = graph.invoke(Command(resume={pause.id: "by id"}), config)
    assert done["notes"][-1] == "review: by id"


def test_get_state_is_a_snapshot_with_checkpoint_ids(tmp_path: Any) -> None:
    graph = reviewed(SQLiteEventStore(tmp_path / "lg.db"))
    config = {"configurable": {"thread_id": "t2"}}
    graph.invoke({"topic": "x"}, config)
    snapshot = graph.get_state(config)
    assert isinstance(snapshot, StateSnapshot)
    assert snapshot.next == ("review",)
    assert snapshot.tasks[0].name == "review" and snapshot.tasks[0].interrupts
    checkpoint = snapshot.config["configurable"]["checkpoint_id"]
    graph.invoke(Command(resume="ok"), config)
    after = graph.get_state(config)
    assert after.next == () and after.interrupts == ()
    assert after.values["notes"] == ["planned x", "review: ok"]
    then = graph.get_state({"configurable": {"thread_id": "t2", "checkpoint_id": checkpoint}})
    assert then.values == snapshot.values
    history = list(graph.get_state_history(config))
    assert history[0].values == after.values
    assert [s.next for s in history][-1] != ()
    with pytest.raises(GraphError, match="checkpoint_id"):
        graph.get_state({"configurable": {"thread_id": "t2", "checkpoint_id": "zz"}})
    # the time a snapshot was made is the time its record was written, whenever it is read
    assert graph.get_state(config).created_at == after.created_at == history[0].created_at
    assert history[-1].created_at <= history[0].created_at
    # a run at a past checkpoint goes on from there; the thread's latest state is that branch
    past = {"configurable": {"thread_id": "t2", "checkpoint_id": checkpoint}}
    again = graph.invoke(Command(resume="again"), past)
    assert again["notes"] == ["planned x", "review: again"]
    assert graph.get_state(config).values["notes"] == ["planned x", "review: again"]
    assert len(list(graph.get_state_history(config))) > len(history)


def test_without_a_checkpointer_invoke_needs_no_thread_and_with_one_it_does(tmp_path: Any) -> None:
    def count(state: Notes) -> dict[str, Any]:
        return {"notes": ["one"]}

    builder = StateGraph(Notes)
    builder.add_node("count", count)
    builder.add_edge(START, "count")
    builder.add_edge("count", END)
    assert builder.compile().invoke({"topic": "t"}) == {
        "messages": [],
        "topic": "t",
        "notes": ["one"],
    }
    with pytest.raises(GraphError, match="thread"):
        builder.compile(SQLiteEventStore(tmp_path / "t.db")).invoke({"topic": "t"})


def test_the_updates_stream_speaks_langgraph() -> None:
    graph = reviewed()
    parts = list(graph.stream({"topic": "s"}, {"configurable": {"thread_id": "t3"}}))
    assert parts[0]["plan"]["notes"] == ["planned s"]
    assert texts(parts[0]["plan"]) == ["on s"]
    assert isinstance(parts[-1]["__interrupt__"][0], Interrupt)
    values = list(
        graph.stream(
            Command(resume="v"), {"configurable": {"thread_id": "t3"}}, stream_mode="values"
        )
    )
    assert values[-1]["notes"] == ["planned s", "review: v"]


@dataclasses.dataclass
class Counter:
    total: Annotated[int, operator.add] = 0
    label: str = "none"


class Model(BaseModel):
    items: Annotated[list[int], operator.add] = []
    last: int | None = None


def test_a_dataclass_and_a_model_are_handed_to_nodes_as_themselves() -> None:
    seen: list[Any] = []

    def bump(state: Counter) -> dict[str, Any]:
        seen.append(state)
        return {"total": 2, "label": "bumped"}

    builder = StateGraph(Counter)
    builder.add_node("bump", bump)
    builder.add_edge(START, "bump")
    builder.add_edge("bump", END)
    assert builder.compile().invoke({"total": 1}) == {"total": 3, "label": "bumped"}
    assert isinstance(seen[0], Counter) and seen[0].total == 1

    def add(state: Model) -> dict[str, Any]:
        assert isinstance(state, Model)
        return {"items": [len(state.items)], "last": len(state.items)}

    builder2 = StateGraph(Model)
    builder2.add_node("add", add)
    builder2.add_edge(START, "add")
    builder2.add_edge("add", END)
    assert builder2.compile().invoke({"items": [7]}) == {"items": [7, 1], "last": 1}


def test_nodes_get_config_and_runtime_context() -> None:
    from agentlog.langgraph import Runtime

    def node(
        state: Notes, config: dict[str, Any], runtime: Runtime[dict[str, str]]
    ) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        return {"notes": [f"{thread}:{runtime.context['user']}"]}

    builder = StateGraph(Notes, context_schema=dict)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    out = builder.compile().invoke(
        {"topic": "c"}, {"configurable": {"thread_id": "ctx"}}, context={"user": "ana"}
    )
    assert out["notes"] == ["ctx:ana"]


def test_bad_schemas_and_nodes_are_refused_with_the_fix() -> None:
    with pytest.raises(SchemaError, match="TypedDict"):
        StateGraph(42)
    with pytest.raises(SchemaError, match="names no keys"):
        StateGraph(dict)

    class Clash(TypedDict):
        context: str

    with pytest.raises(SchemaError, match="rename it"):
        StateGraph(Clash)

    def stateless(*, config: Any) -> None:
        return None

    with pytest.raises(GraphError, match="first argument"):
        StateGraph(Notes).add_node("n", stateless)

    def needs(state: Notes, db: Any) -> None:
        return None

    with pytest.raises(GraphError, match="'db'"):
        StateGraph(Notes).add_node("n", needs)
    with pytest.raises(GraphError, match="dict of the state's keys"):
        reviewed().invoke("hi", {"configurable": {"thread_id": "bad"}})
    with pytest.raises(InvalidStateUpdateError, match="no field 'tpoic'"):
        reviewed().invoke({"tpoic": "typo"}, {"configurable": {"thread_id": "bad"}})
    with pytest.raises(GraphError, match="checkpointer="):
        StateGraph(Notes).compile(checkpointer=object())


@given(st.lists(st.integers(-5, 5), max_size=6), st.lists(st.text(max_size=3), max_size=3))
def test_values_read_from_the_log_equal_the_live_result(adds: list[int], words: list[str]) -> None:
    """replay == live through the front: what invoke returns is what get_state reads back."""

    def step(state: Model) -> dict[str, Any]:
        return {"items": adds, "last": len(words)}

    builder = StateGraph(Model)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    graph = builder.compile()
    config = {"configurable": {"thread_id": "p"}}
    live = graph.invoke({"items": [len(w) for w in words]}, config)
    assert graph.get_state(config).values == live
    assert live["items"] == [len(w) for w in words] + adds


def test_options_this_front_does_not_carry_out_are_refused_not_ignored() -> None:
    from agentlog.actors.langgraph import UnsupportedOptionError

    graph = reviewed()
    config = {"configurable": {"thread_id": "opts"}}
    with pytest.raises(UnsupportedOptionError, match="print_mode"):
        graph.invoke({"topic": "a"}, config, print_mode="updates")
    with pytest.raises(UnsupportedOptionError, match="stream"):
        graph.invoke({"topic": "a"}, config, stream_mode="updates")
    with pytest.raises(UnsupportedOptionError, match="defer"):
        StateGraph(Notes).add_node("plan", plan, defer=True)
    assert graph.get_state(config).values == {"messages": [], "notes": []}  # nothing written


def test_a_graph_nobody_keeps_streams_to_its_end() -> None:
    """`builder.compile().stream(...)`: the graph may be collected while its stream runs."""
    import gc

    builder = StateGraph(Model)
    builder.add_node("step", lambda state: {"items": [1]})
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    parts = builder.compile().stream({"items": []}, stream_mode="updates")
    gc.collect()
    assert list(parts) == [{"step": {"items": [1]}}]


def test_a_node_letting_stop_iteration_out_fails_instead_of_hanging() -> None:
    exhausted: Any = iter([])

    def pull(state: Model) -> dict[str, Any]:
        return {"last": next(exhausted)}

    builder = StateGraph(Model)
    builder.add_node("pull", pull)
    builder.add_edge(START, "pull")
    builder.add_edge("pull", END)
    from agentlog.actors.engine.errors import NodeError

    with pytest.raises(NodeError, match="StopIteration"):
        builder.compile().invoke({"items": []})


def test_an_edit_of_a_past_checkpoint_branches_the_thread_there() -> None:
    graph = reviewed()
    config = {"configurable": {"thread_id": "past"}}
    graph.invoke({"topic": "a"}, config)
    graph.invoke(Command(resume="fine"), config)
    past = list(graph.get_state_history(config))[-1]
    edited = graph.update_state(past.config, {"topic": "rewritten"})
    now = graph.get_state(config)
    assert now.values["topic"] == "rewritten" and now.values["notes"] == ["planned a"]
    assert now.next == ("review",) and graph.get_state(edited).values == now.values
    history = list(graph.get_state_history(config))
    assert history[0].values == now.values and history[1].values["notes"][-1] == "review: fine"
    head = graph.update_state(graph.get_state(config).config, {"topic": "edited"})
    assert graph.get_state(head).values["topic"] == "edited"
    assert list(graph.get_state_history({"configurable": {"thread_id": "nobody"}})) == []


class Question(TypedDict):
    question: str


class Answer(TypedDict):
    answer: str


class Work(TypedDict):
    question: str
    answer: str
    scratch: str


def test_messages_state_is_extended_as_in_langgraph_and_output_schema_shapes_invoke() -> None:
    from agentlog.langgraph import MessagesState

    class Chat(MessagesState):
        user: str

    def greet(state: Chat) -> dict[str, Any]:
        return {"messages": [("ai", f"hello {state['user']}")]}

    builder = StateGraph(Chat)
    builder.add_node("greet", greet)
    builder.add_edge(START, "greet")
    out = builder.compile().invoke({"user": "ana", "messages": [("user", "hi")]})
    assert texts(out) == ["hi", "hello ana"] and out["user"] == "ana"

    def work(state: Work) -> dict[str, Any]:
        return {"answer": state["question"] + "!", "scratch": "notes"}

    shaped = StateGraph(Work, input_schema=Question, output_schema=Answer)
    shaped.add_node("work", work)
    shaped.add_edge(START, "work")
    assert shaped.compile().invoke({"question": "hi"}) == {"answer": "hi!"}


def test_batch_joins_into_end_and_the_recursion_error_has_langgraphs_name() -> None:
    from agentlog.langgraph import GraphRecursionError

    def double(state: Counter) -> dict[str, Any]:
        return {"total": state.total}

    def half(state: Counter) -> dict[str, Any]:
        return {"label": "half"}

    builder = StateGraph(Counter)
    builder.add_node("double", double)
    builder.add_node("half", half)
    builder.add_edge(START, "double")
    builder.add_edge(START, "half")
    builder.add_edge(["double", "half"], END)
    assert builder.compile().batch([{"total": 1}, {"total": 5}]) == [
        {"total": 2, "label": "half"},
        {"total": 10, "label": "half"},
    ]

    def loop(state: Counter) -> dict[str, Any]:
        return {"total": 1}

    looping = StateGraph(Counter)
    looping.add_node("loop", loop)
    looping.add_edge(START, "loop")
    looping.add_conditional_edges("loop", lambda state: "loop" if state.total < 10**6 else END)
    with pytest.raises(GraphRecursionError):
        looping.compile().invoke({"total": 0})


def test_an_error_from_a_blocking_call_is_not_chained_to_the_loop_check() -> None:
    import traceback

    with pytest.raises(InvalidStateUpdateError) as info:
        reviewed().invoke({"tpoic": "typo"}, {"configurable": {"thread_id": "chain"}})
    shown = "".join(traceback.format_exception(info.value))
    assert "no running event loop" not in shown


def test_a_config_that_is_not_a_dict_is_a_typed_error() -> None:
    from agentlog.actors import MissingThreadIdError

    for config in ("t1", ["thread_id", "t1"]):
        with pytest.raises(MissingThreadIdError, match="config must be a dict"):
            reviewed().invoke({"topic": "a"}, config)
