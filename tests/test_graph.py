"""The graph engine end to end: StateGraph -> compile -> ainvoke / astream / stop / resume.

Every run is checked against the log: replaying `store.read(thread)` gives `aget_state`, which
is also the state `ainvoke(include_state=True)` returned. Tests that depend on the store run on
both the in-memory store and SQLite. Both stores get a ticking clock, so records committed
together share their `at` and the tests can see which events were committed atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from agentlog.actors import (
    END,
    START,
    Command,
    CompiledGraph,
    GraphError,
    MissingThreadIdError,
    NodeError,
    NodeReturnError,
    RecursionLimitError,
    StateGraph,
    ThreadBusyError,
    interrupt,
)
from agentlog.actors.testing import until, wait_for_record
from agentlog.actors.tools.node import ToolNode
from agentlog.events import (
    AgentlogError,
    EventRecord,
    EventStore,
    MemoryEventStore,
    SQLiteEventStore,
)
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    InvalidStateUpdateError,
    Message,
    StopRequestStatus,
    StreamChunk,
    StreamEvent,
    ToolCallBlock,
    ToolResultBlock,
    replay,
)

from .helpers import line

CFG = {"thread_id": "t1"}
WAIT = 60.0  # a failure guard for something that should happen at once, even on a busy machine


# ---- builders ----------------------------------------------------------------------------


def user(text: str) -> Message:
    return Message.text_message(text)


def said(text: str) -> Message:
    return Message.text_message(text, role="assistant")


def asks(*calls: tuple[str, str, dict[str, Any]]) -> Message:
    """An assistant message asking for tool calls (id, name, args)."""
    blocks = [ToolCallBlock(id=cid, name=name, args=args) for cid, name, args in calls]
    return Message(role="assistant", content=blocks)


def texts(messages: list[Message]) -> list[str]:
    return [m.text() for m in messages]


def inputs(*words: str) -> dict[str, Any]:
    return {"messages": [user(w) for w in words]}


async def log_of(store: EventStore, thread_id: str = "t1") -> list[EventRecord]:
    return [r async for r in store.read(thread_id)]


def kinds(records: list[EventRecord]) -> list[str]:
    return [r.kind for r in records]


def commits(records: list[EventRecord]) -> list[list[str]]:
    """The kinds of the log grouped by commit (records of one append share `at`)."""
    return [[r.kind for r in group] for _, group in itertools.groupby(records, lambda r: r.at)]


def entered(records: list[EventRecord]) -> list[str]:
    return [r.event.node for r in records if r.kind == "node_entered"]  # type: ignore[union-attr]


async def check_replay(
    app: CompiledGraph[Any], thread_id: str = "t1", returned: AgentState | None = None
) -> AgentState:
    """replay(log) == aget_state (== what ainvoke returned); the chain verifies."""
    records = await log_of(app.store, thread_id)
    replayed = replay(records, app.graph.state_cls)
    live = await app.aget_state({"thread_id": thread_id})
    assert type(live) is app.graph.state_cls
    assert live == replayed
    if returned is not None:
        assert returned == replayed
    assert (await app.store.verify(thread_id)).ok
    return replayed


def replying(text: str, calls: list[str] | None = None) -> Callable[..., Any]:
    """An async node answering `text` (counting its calls in `calls`)."""

    async def node(state: AgentState) -> list[Message]:
        if calls is not None:
            calls.append(text)
        return [said(text)]

    return node


def get_weather(city: str) -> str:
    """The weather in a city."""
    WEATHER_CALLS.append(city)
    return f"sunny in {city}"


WEATHER_CALLS: list[str] = []


async def weather_agent(state: AgentState) -> list[Message]:
    last = state.context[-1]
    if last.role == "tool":
        return [said(f"answer: {last.text()}")]
    call_id = f"call-{len(state.context)}"  # unique per turn of the conversation
    return [asks((call_id, "get_weather", {"city": "Oslo"}))]


def route(state: AgentState) -> str:
    return "tools" if state.context[-1].tool_calls() else END


def weather_graph(state_cls: type[AgentState] = AgentState) -> StateGraph[Any]:
    graph: StateGraph[Any] = StateGraph(state_cls)
    graph.add_node("agent", weather_agent)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph


@pytest.fixture(autouse=True)
def _fresh_weather_calls() -> None:
    WEATHER_CALLS.clear()


def keep_adding(left: list[str], right: list[str]) -> list[str]:
    return [*left, *right]


class NotesState(AgentState):
    """A user state: `notes` merges through a reducer, `count` is replaced."""

    notes: Annotated[list[str], keep_adding] = Field(default_factory=list)
    count: int = 0


# ---- compile -----------------------------------------------------------------------------


async def test_compile_without_a_store_runs_on_its_own_memory_store() -> None:
    graph = line(("a", replying("hi")))
    first, second = graph.compile(), graph.compile()
    assert isinstance(first.store, MemoryEventStore)
    assert first.store is not second.store
    out = await first.ainvoke(inputs("hello"), CFG)
    assert texts(out["messages"]) == ["hello", "hi"]
    assert await second.store.threads() == []
    assert await first.store.threads() == ["t1"]
    given = MemoryEventStore()
    assert graph.compile(checkpointer=given).store is given


def _unknown_target() -> StateGraph[AgentState]:
    return StateGraph().add_node("a", replying("x")).set_entry_point("a").add_edge("a", "ghost")


def _no_entry() -> StateGraph[AgentState]:
    return StateGraph().add_node("a", replying("x")).add_edge("a", END)


def _island() -> StateGraph[AgentState]:
    graph = StateGraph().add_node("a", replying("x")).add_node("island", replying("y"))
    return graph.set_entry_point("a").add_edge("a", END)


def _loop_forever() -> StateGraph[AgentState]:
    graph = StateGraph().add_node("a", replying("x")).add_node("b", replying("y"))
    return graph.set_entry_point("a").add_edge("a", "b").add_edge("b", "a")


@pytest.mark.parametrize(
    ("build", "kwargs", "named"),
    [
        (_unknown_target, {}, "'ghost'"),
        (_no_entry, {}, "entry point"),
        (_island, {}, "'island'"),
        (_loop_forever, {}, "cannot reach END"),
        (lambda: line(("a", replying("x"))), {"interrupt_before": ["nope"]}, "'nope'"),
        (lambda: line(("a", replying("x"))), {"interrupt_after": ["nada"]}, "'nada'"),
        (lambda: line(("a", replying("x"))), {"recursion_limit": 0}, "recursion_limit"),
    ],
)
def test_compile_rejects_a_bad_graph_naming_the_culprit(
    build: Callable[[], StateGraph[AgentState]], kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(GraphError, match=named):
        build().compile(**kwargs)


async def test_add_node_by_function_and_set_entry_point_is_an_edge_from_start() -> None:
    async def greet(state: AgentState) -> list[Message]:
        return [said("hello from greet")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node(greet)
    graph.set_entry_point("greet")
    graph.add_edge("greet", END)
    assert graph.edges[START] == "greet"
    app = graph.compile()
    out = await app.ainvoke(inputs("hi"), CFG, include_state=True)
    assert texts(out["messages"]) == ["hi", "hello from greet"]
    assert entered(await log_of(app.store)) == ["greet"]
    await check_replay(app, returned=out["state"])


# ---- the canonical tool-calling agent ----------------------------------------------------


async def test_weather_agent_runs_to_end_and_the_log_tells_the_whole_story(
    store: EventStore,
) -> None:
    app = weather_graph().compile(checkpointer=store)
    out = await app.ainvoke(inputs("weather in Oslo?"), CFG, include_state=True)

    state = out["state"]
    assert set(out) == {"messages", "state", "status", "token_usage"}
    assert out["status"] == "completed"
    assert out["messages"] == state.context  # all of it is this run's own
    assert [m.role for m in out["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert out["messages"][-1].text() == "answer: sunny in Oslo"
    (result,) = out["messages"][2].content
    assert isinstance(result, ToolResultBlock)
    assert (result.call_id, result.output, result.is_error) == ("call-1", "sunny in Oslo", False)
    assert WEATHER_CALLS == ["Oslo"]
    meta = state.execution_meta
    assert (meta.status, meta.current_node, meta.step) == (ExecutionStatus.COMPLETED, END, 3)
    assert meta.thread_id == "t1"

    records = await log_of(store)
    # A step's commit also enters the next node (and starts a tool node's calls) when that
    # node is sure to run next: one commit per step, plus one per tool result.
    assert commits(records) == [
        ["run_started", "message_appended"],
        ["node_entered"],
        ["message_appended", "step_advanced", "node_entered", "tool_call_started"],
        ["tool_call_finished"],
        ["message_appended", "step_advanced", "node_entered"],
        ["message_appended", "step_advanced"],
        ["run_completed"],
    ]
    assert [r.event.next_node for r in records if r.kind == "step_advanced"] == [  # type: ignore[union-attr]
        "tools",
        "agent",
        END,
    ]
    assert entered(records) == ["agent", "tools", "agent"]
    # who committed it: a node entered with the step before it is recorded by that step's node
    assert [r.actor for r in records if r.kind == "node_entered"] == ["agent", "agent", "tools"]
    assert records[0].actor == "user"
    assert records[0].event.entry_node == "agent"  # type: ignore[union-attr]
    assert len({r.run_id for r in records}) == 1
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    await check_replay(app, returned=state)

    plain = await app.ainvoke(inputs("and tomorrow?"), {"thread_id": "t2"})
    assert set(plain) == {"messages", "status", "token_usage"}


async def test_node_entered_is_committed_before_the_node_runs(store: EventStore) -> None:
    seen: list[tuple[str, list[str]]] = []

    async def look(state: AgentState, config: dict[str, Any], log: EventStore) -> None:
        records = await log_of(log, config["thread_id"])
        last = records[-1]
        seen.append((last.event.node, kinds(records)))  # type: ignore[union-attr]

    graph = line(("first", look), ("second", look))
    graph.register("log", store)
    app = graph.compile(checkpointer=store)
    await app.ainvoke(inputs("go"), CFG)

    assert seen == [
        ("first", ["run_started", "message_appended", "node_entered"]),
        (
            "second",
            ["run_started", "message_appended", "node_entered", "step_advanced", "node_entered"],
        ),
    ]
    await check_replay(app)


# ---- what a node receives ---------------------------------------------------------------


async def test_nodes_get_state_config_and_dependencies_by_parameter_name() -> None:
    got: dict[str, Any] = {}
    loop_thread = threading.get_ident()
    db = object()

    async def async_node(config: dict[str, Any], state: AgentState, db: object) -> None:
        got["async"] = (texts(state.context), config["thread_id"], config["user"], db)
        got["async_thread"] = threading.get_ident()

    def sync_node(state: AgentState, db: object, config: dict[str, Any]) -> None:
        got["sync"] = (texts(state.context), config["thread_id"], config["user"], db)
        got["sync_thread"] = threading.get_ident()

    def no_parameters() -> list[Message]:
        return [said("bare")]

    class Callable_:
        async def __call__(self, state: AgentState, limit: int) -> list[Message]:
            return [said(f"object with limit {limit}")]

    graph = line(("a", async_node), ("s", sync_node), ("bare", no_parameters), ("obj", Callable_()))
    graph.register("db", db).register("limit", 3)
    app = graph.compile()
    out = await app.ainvoke(inputs("hi"), {"thread_id": "t1", "user": "ana"})

    assert got["async"] == (["hi"], "t1", "ana", db)
    assert got["sync"] == (["hi"], "t1", "ana", db)
    assert got["async_thread"] == loop_thread
    assert got["sync_thread"] != loop_thread  # sync functions run off the event loop
    assert texts(out["messages"]) == ["hi", "bare", "object with limit 3"]
    await check_replay(app)


async def test_a_sync_node_does_not_block_the_event_loop() -> None:
    started, release = threading.Event(), threading.Event()

    def blocking(state: AgentState) -> list[Message]:
        started.set()
        assert release.wait(WAIT)  # would time out if it held the loop the test runs on
        return [said("unblocked")]

    app = line(("blocking", blocking)).compile()
    task = asyncio.create_task(app.ainvoke(inputs("go"), CFG))
    await until(started.is_set)
    assert kinds(await log_of(app.store))[-1] == "node_entered"  # the loop still serves us
    assert not task.done()
    release.set()
    out = await asyncio.wait_for(task, WAIT)
    assert texts(out["messages"]) == ["go", "unblocked"]


async def test_a_node_changing_its_view_of_the_state_changes_nothing() -> None:
    def meddle(state: NotesState) -> None:
        state.context.append(said("sneaky"))
        state.context.pop(0)
        state.notes.append("sneaky")
        state.count = 99
        state.execution_meta.status = ExecutionStatus.ERROR

    app = line(("meddle", meddle), state_cls=NotesState).compile()
    out = await app.ainvoke(inputs("hi"), CFG, include_state=True)
    state = out["state"]
    assert texts(state.context) == ["hi"]
    assert (state.notes, state.count) == ([], 0)
    assert state.execution_meta.status == ExecutionStatus.COMPLETED
    await check_replay(app, returned=state)


async def test_a_node_editing_a_message_in_place_does_not_touch_the_live_state() -> None:
    async def annotate(state: AgentState) -> None:
        state.context[0].metadata["seen"] = True
        state.context[0].content.clear()

    app = line(("annotate", annotate)).compile()
    out = await app.ainvoke(inputs("hi"), CFG, include_state=True)
    assert texts(out["messages"]) == ["hi"]
    assert out["messages"][0].metadata == {}
    await check_replay(app, returned=out["state"])


# ---- what a node may return --------------------------------------------------------------


async def test_every_supported_return_kind_is_merged_into_the_state(store: EventStore) -> None:
    async def messages(state: NotesState) -> list[Message]:
        return [said("one"), said("two")]

    async def fields(state: NotesState) -> dict[str, Any]:
        return {"messages": [said("three")], "notes": ["n1"], "count": 1}

    def whole_state(state: NotesState) -> NotesState:
        state.context.append(said("four"))  # only the new message is appended
        state.count = 2
        return state

    async def command(state: NotesState) -> Command:
        return Command(update={"notes": ["n3"], "messages": [said("five")]})

    async def nothing(state: NotesState) -> None:
        return None

    async def empty(state: NotesState) -> list[Message]:
        return []

    graph = line(
        ("messages", messages),
        ("fields", fields),
        ("whole_state", whole_state),
        ("command", command),
        ("nothing", nothing),
        ("empty", empty),
        state_cls=NotesState,
    )
    app = graph.compile(checkpointer=store)
    out = await app.ainvoke(inputs("hi"), CFG, include_state=True)
    state = out["state"]
    assert isinstance(state, NotesState)
    assert texts(state.context) == ["hi", "one", "two", "three", "four", "five"]
    assert state.notes == ["n1", "n3"]
    assert state.count == 2
    assert state.execution_meta.step == 6
    records = await log_of(store)
    updates = [r.event for r in records if r.kind == "state_updated"]
    assert [(u.source, u.values) for u in updates] == [  # type: ignore[union-attr]
        ("fields", {"notes": ["n1"], "count": 1}),
        ("whole_state", {"count": 2}),
        ("command", {"notes": ["n3"]}),
    ]
    await check_replay(app, returned=state)


async def test_input_may_set_custom_fields_and_plain_dict_messages() -> None:
    async def echo(state: NotesState) -> list[Message]:
        return [said(f"{state.count}:{','.join(state.notes)}")]

    app = line(("echo", echo), state_cls=NotesState).compile()
    given = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    out = await app.ainvoke({**given, "notes": ["x"], "count": 7}, CFG, include_state=True)
    assert texts(out["messages"]) == ["hi", "7:x"]
    await check_replay(app, returned=out["state"])


async def test_command_goto_overrides_the_edge() -> None:
    ran: list[str] = []

    async def a(state: AgentState) -> Command:
        return Command(update=[said("from a")], goto="c")

    graph = StateGraph().add_node("a", a).add_node("b", replying("b", ran))
    graph.add_node("c", replying("c", ran)).set_entry_point("a")
    graph.add_edge("a", "b").add_edge("b", "c").add_edge("c", END)
    app = graph.compile()
    out = await app.ainvoke(inputs("hi"), CFG)
    assert ran == ["c"]
    assert texts(out["messages"]) == ["hi", "from a", "c"]
    assert entered(await log_of(app.store)) == ["a", "c"]
    await check_replay(app)


async def test_conditional_edges_route_on_the_updated_state() -> None:
    async def decide(state: NotesState) -> dict[str, Any]:
        return {"count": len(state.context)}

    def pick(state: NotesState) -> str:
        return "many" if state.count > 1 else "few"

    graph: StateGraph[NotesState] = StateGraph(NotesState)
    graph.add_node("decide", decide).add_node("many", replying("many"))
    graph.add_node("few", replying("few")).set_entry_point("decide")
    graph.add_conditional_edges("decide", pick, {"many": "many", "few": "few"})
    graph.add_edge("many", END).add_edge("few", END)
    app = graph.compile()
    assert texts((await app.ainvoke(inputs("a"), {"thread_id": "one"}))["messages"])[-1] == "few"
    out = await app.ainvoke(inputs("a", "b"), {"thread_id": "two"})
    assert texts(out["messages"])[-1] == "many"


@pytest.mark.parametrize(
    ("returned", "type_name"),
    [
        (42, "int"),
        ("just text", "str"),
        ([Message.text_message("ok", role="assistant"), 1], "list"),
        ({"messages": "not a list"}, "str"),
        (object(), "object"),
        ((x for x in ()), "generator"),
    ],
)
async def test_an_unsupported_return_fails_the_run_naming_node_and_type(
    returned: Any, type_name: str
) -> None:
    async def bad(state: AgentState) -> Any:
        return returned

    app = line(("bad", bad)).compile()
    with pytest.raises(NodeError) as caught:
        await app.ainvoke(inputs("hi"), CFG)
    error = caught.value
    assert error.node == "bad"
    assert "'bad'" in str(error)
    assert isinstance(error.__cause__, NodeReturnError)
    assert error.__cause__.node == "bad"
    assert f"returned {type_name}" in str(error.__cause__)
    records = await log_of(app.store)
    assert kinds(records)[-2:] == ["node_entered", "run_failed"]
    failed = records[-1].event
    assert (failed.node, failed.error_type) == ("bad", "NodeReturnError")  # type: ignore[union-attr]
    assert "'bad'" in failed.message and type_name in failed.message  # type: ignore[union-attr]
    state = await check_replay(app)
    assert state.execution_meta.status == ExecutionStatus.ERROR


async def test_an_update_of_an_unknown_field_fails_the_run_and_writes_nothing_of_it() -> None:
    async def bad(state: AgentState) -> dict[str, Any]:
        return {"messages": [said("lost")], "no_such_field": 1}

    app = line(("bad", bad)).compile()
    with pytest.raises(NodeError) as caught:
        await app.ainvoke(inputs("hi"), CFG)
    assert caught.value.node == "bad"
    assert isinstance(caught.value.__cause__, InvalidStateUpdateError)
    records = await log_of(app.store)
    assert kinds(records) == ["run_started", "message_appended", "node_entered", "run_failed"]
    state = await check_replay(app)
    assert texts(state.context) == ["hi"]


async def test_bad_input_is_refused_before_anything_is_written() -> None:
    app = line(("a", replying("a"))).compile()
    with pytest.raises(AgentlogError):
        await app.ainvoke({"messages": "not a list"}, CFG)
    with pytest.raises(AgentlogError):
        await app.ainvoke(42, CFG)
    assert await app.store.threads() == []
    out = await app.ainvoke(inputs("fine"), CFG)  # and the thread is not left busy
    assert texts(out["messages"]) == ["fine", "a"]


async def test_a_call_without_a_thread_id_is_refused_naming_both_forms() -> None:
    app = line(("a", replying("a"))).compile()
    for config in (None, {}, {"configurable": {}}, {"user": "ann"}):
        with pytest.raises(MissingThreadIdError, match="configurable"):
            await app.ainvoke(inputs("hi"), config)
        with pytest.raises(MissingThreadIdError, match="thread_id"):
            await app.aget_state(config)  # type: ignore[arg-type]
    assert await app.store.threads() == []


async def test_langgraph_shaped_config_names_the_same_thread() -> None:
    app = line(("a", replying("a"))).compile()
    lg = {"configurable": {"thread_id": "chat-42"}}
    await app.ainvoke(inputs("hi"), lg)
    await app.ainvoke(inputs("again"), {"thread_id": "chat-42"})
    state = await app.aget_state(lg)
    assert [m.text() for m in state.context if m.role == "user"] == ["hi", "again"]
    assert await app.store.threads() == ["chat-42"]


# ---- the tool node -----------------------------------------------------------------------


async def test_tool_node_runs_every_call_at_once_and_turns_errors_into_results(
    store: EventStore,
) -> None:
    arrived: list[str] = []
    everyone = asyncio.Event()

    async def missing_has_failed() -> None:
        """The call of no tool fails at once: the others end only once its failure is in."""
        await wait_for_record(store, "t1", "tool_call_finished", timeout=WAIT)

    async def slow(tag: str) -> str:
        """Waits until the other slow calls have started too."""
        arrived.append(tag)
        if len(arrived) == 3:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), WAIT)  # times out when calls run one by one
        await missing_has_failed()
        return f"slow {tag}"

    async def boom(reason: str) -> str:
        """Always fails."""
        await missing_has_failed()
        raise ValueError(reason)

    calls = [
        ("c1", "slow", {"tag": "x"}),
        ("c2", "boom", {"reason": "kaput"}),
        ("c3", "slow", {"tag": "y"}),
        ("c4", "missing", {}),
        ("c5", "slow", {"tag": "z"}),
    ]

    async def plan(state: AgentState) -> list[Message]:
        return [asks(*calls)]

    graph = line(("plan", plan), ("tools", ToolNode([slow, boom])))
    app = graph.compile(checkpointer=store)
    out = await asyncio.wait_for(app.ainvoke(inputs("go"), CFG, include_state=True), WAIT * 2)

    tool_messages = [m for m in out["messages"] if m.role == "tool"]
    assert len(tool_messages) == len(calls)  # one tool message per call, in call order
    results = []
    for message in tool_messages:
        (block,) = message.content
        assert isinstance(block, ToolResultBlock)
        results.append(block)
    assert [b.call_id for b in results] == ["c1", "c2", "c3", "c4", "c5"]
    assert [b.is_error for b in results] == [False, True, False, True, False]
    assert [b.output for b in results[::2]] == ["slow x", "slow y", "slow z"]
    assert results[1].status == "failed" and "ValueError: kaput" in results[1].output
    assert results[3].status == "failed" and "missing" in results[3].output
    assert sorted(arrived) == ["x", "y", "z"]

    records = await log_of(store)
    step = kinds(records)[kinds(records).index("node_entered", 3) :]
    assert step[0] == "node_entered"
    assert step[1:6] == ["tool_call_started"] * 5  # every call starts before any finishes
    assert step[6:11] == ["tool_call_finished"] * 5
    assert step[11:] == ["message_appended"] * 5 + ["step_advanced", "run_completed"]
    started = [r.event.call_id for r in records if r.kind == "tool_call_started"]  # type: ignore[union-attr]
    finished = [r.event for r in records if r.kind == "tool_call_finished"]
    assert sorted(started) == ["c1", "c2", "c3", "c4", "c5"]
    # the order calls finish in is the clock's (a busy machine reorders the sleeps): each
    # call's own end is what is checked
    ends = {f.call_id: f.status for f in finished}  # type: ignore[union-attr]
    assert ends == {"c1": "completed", "c2": "failed", "c3": "completed", "c4": "failed",
                    "c5": "completed"}  # fmt: skip
    assert finished[0].call_id == "c4"  # type: ignore[union-attr]  # no tool: fails at once
    state = await check_replay(app, returned=out["state"])
    assert "pending_tool_calls" not in state.execution_meta.internal_data


async def test_tool_node_with_many_calls_finishing_together(store: EventStore) -> None:
    """Results committed at the same instant must not trip over each other."""
    gate = asyncio.Event()

    async def echo(n: int) -> int:
        """Echo a number once every call has started."""
        if n == 6:
            gate.set()
        await asyncio.wait_for(gate.wait(), WAIT)
        return n

    async def plan(state: AgentState) -> list[Message]:
        return [asks(*((f"c{i}", "echo", {"n": i}) for i in range(7)))]

    app = line(("plan", plan), ("tools", ToolNode([echo]))).compile(checkpointer=store)
    out = await app.ainvoke(inputs("go"), CFG, include_state=True)
    outputs = [m.content[0].output for m in out["messages"] if m.role == "tool"]  # type: ignore[union-attr]
    assert outputs == list(range(7))
    await check_replay(app, returned=out["state"])


async def test_tool_node_with_nothing_to_do_adds_nothing() -> None:
    app = line(("tools", ToolNode([get_weather]))).compile()
    out = await app.ainvoke(inputs("no calls here"), CFG, include_state=True)
    assert texts(out["messages"]) == ["no calls here"]
    assert "tool_call_started" not in kinds(await log_of(app.store))
    await check_replay(app, returned=out["state"])


# ---- streaming ---------------------------------------------------------------------------


def summary(chunk: StreamChunk) -> tuple[str, str]:
    """(event, what): the text of a message chunk, the kind of an update."""
    if chunk.event == StreamEvent.MESSAGE:
        assert chunk.message is not None
        return ("message", chunk.message.text())
    if chunk.event == StreamEvent.UPDATES:
        assert chunk.data is not None
        return ("updates", chunk.data["kind"])
    if chunk.event == StreamEvent.STATE:
        assert chunk.state is not None
        return ("state", chunk.state.execution_meta.status)
    assert chunk.data is not None
    return (str(chunk.event), chunk.data["error"])


async def test_astream_yields_messages_updates_and_the_final_state_in_order(
    store: EventStore,
) -> None:
    app = line(("a", replying("from a")), ("b", replying("from b"))).compile(checkpointer=store)
    chunks = [c async for c in app.astream(inputs("hi"), CFG)]
    assert [summary(c) for c in chunks] == [
        ("message", "hi"),
        ("message", "from a"),
        ("updates", "step_advanced"),
        ("message", "from b"),
        ("updates", "step_advanced"),
        ("updates", "run_completed"),
        ("state", "completed"),
    ]
    assert [c.data["next_node"] for c in chunks if c.data and "next_node" in c.data] == ["b", END]
    assert {c.thread_id for c in chunks} == {"t1"}
    assert len({c.run_id for c in chunks}) == 1 and chunks[0].run_id
    state = await check_replay(app, returned=chunks[-1].state)
    assert [c.message for c in chunks if c.message] == state.context


async def test_astream_delivers_a_chunk_while_the_run_goes_on() -> None:
    seen_a = asyncio.Event()

    async def b(state: AgentState) -> list[Message]:
        await asyncio.wait_for(seen_a.wait(), WAIT)  # only the consumer can set it
        return [said("from b")]

    app = line(("a", replying("from a")), ("b", b)).compile()
    got: list[tuple[str, str]] = []
    async for chunk in app.astream(inputs("hi"), CFG):
        got.append(summary(chunk))
        if got[-1] == ("message", "from a"):
            seen_a.set()
    assert ("message", "from b") in got and got[-1] == ("state", "completed")


async def test_astream_of_a_failing_run_ends_with_an_error_chunk_then_raises() -> None:
    async def broken(state: AgentState) -> None:
        raise KeyError("gone")

    app = line(("a", replying("from a")), ("broken", broken)).compile()
    got: list[tuple[str, str]] = []
    with pytest.raises(NodeError) as caught:
        async for chunk in app.astream(inputs("hi"), CFG):
            got.append(summary(chunk))
    assert caught.value.node == "broken"
    assert got == [
        ("message", "hi"),
        ("message", "from a"),
        ("updates", "step_advanced"),
        ("updates", "run_failed"),
        ("error", "NodeError"),
    ]
    await check_replay(app)


async def test_astream_of_an_interrupted_run_ends_with_the_paused_state() -> None:
    app = weather_graph().compile(interrupt_before=["tools"])
    chunks = [c async for c in app.astream(inputs("weather?"), CFG)]
    assert [summary(c) for c in chunks][-3:] == [
        ("updates", "step_advanced"),
        ("updates", "interrupt_raised"),
        ("state", "interrupted_before"),
    ]
    await check_replay(app, returned=chunks[-1].state)
    resumed = [summary(c) for c in [c async for c in app.astream(None, CFG)]]
    assert resumed == [
        ("message", "sunny in Oslo"),
        ("updates", "step_advanced"),
        ("message", "answer: sunny in Oslo"),
        ("updates", "step_advanced"),
        ("updates", "run_completed"),
        ("state", "completed"),
    ]


# ---- stop --------------------------------------------------------------------------------


async def test_astop_is_recorded_at_once_and_honoured_at_the_next_node_boundary(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The node finishes before the run looks for stops (which would cancel it): the stop
    # lands between nodes and pauses after the node, as Agentflow's does.
    monkeypatch.setattr("agentlog.actors.engine.guard.STOP_POLL_S", 60.0)
    started, release = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    async def a(state: AgentState) -> list[Message]:
        ran.append("a")
        started.set()
        await release.wait()
        return [said("a finished")]

    app = line(("a", a), ("b", replying("b", ran))).compile(checkpointer=store)
    task = asyncio.create_task(app.ainvoke(inputs("go"), CFG, include_state=True))
    await asyncio.wait_for(started.wait(), WAIT)

    await app.astop(CFG)
    assert kinds(await log_of(store))[-2:] == ["node_entered", "stop_requested"]
    during = await app.aget_state(CFG)
    assert during.execution_meta.stop_current_execution == StopRequestStatus.STOP_REQUESTED
    assert not task.done()

    release.set()
    out = await asyncio.wait_for(task, WAIT)  # returns normally
    assert ran == ["a"]  # the running node finished; no further node started
    assert texts(out["messages"]) == ["go", "a finished"]
    meta = out["state"].execution_meta
    assert meta.stop_current_execution == StopRequestStatus.STOPPED
    assert meta.status == ExecutionStatus.INTERRUPTED_AFTER
    assert (meta.interrupted_node, meta.interrupt_reason) == ("a", "stop_requested")
    assert meta.interrupt_data == {"source": "stop", "by": "user"}
    assert meta.current_node == "b"
    assert out["__interrupt__"][0]["reason"] == "stop_requested"
    records = await log_of(store)
    assert commits(records)[-4:] == [
        ["node_entered"],
        ["stop_requested"],
        ["message_appended", "step_advanced"],  # the running node's step still commits
        ["stopped"],
    ]
    stopped = records[-1].event
    assert (stopped.node, stopped.when) == ("a", "after")  # type: ignore[union-attr]
    await check_replay(app, returned=out["state"])

    later = await app.ainvoke(None, CFG, include_state=True)  # continues where it stopped
    assert ran == ["a", "b"]
    assert texts(later["messages"]) == ["b"]
    assert texts(later["state"].context) == ["go", "a finished", "b"]
    assert kinds(await log_of(store))[len(records) :] == [
        "resumed",
        "node_entered",
        "message_appended",
        "step_advanced",
        "run_completed",
    ]
    meta = later["state"].execution_meta
    assert meta.status == ExecutionStatus.COMPLETED
    assert meta.stop_current_execution == StopRequestStatus.NONE
    await check_replay(app, returned=later["state"])


async def test_astop_on_a_thread_with_no_run_does_not_break_it() -> None:
    ran: list[str] = []
    app = line(("a", replying("a", ran))).compile()
    with contextlib.suppress(AgentlogError):
        await app.astop({"thread_id": "fresh"})
    out = await app.ainvoke(inputs("hi"), {"thread_id": "fresh"})
    state = await app.aget_state({"thread_id": "fresh"})
    if state.execution_meta.stop_current_execution == StopRequestStatus.STOPPED:
        out = await app.ainvoke(None, {"thread_id": "fresh"})  # a stop may hold the first run
        state = await app.aget_state({"thread_id": "fresh"})
    assert ran == ["a"]
    assert texts(out["messages"]) == ["hi", "a"]
    assert state.execution_meta.status == ExecutionStatus.COMPLETED
    assert "run_started" in kinds(await log_of(app.store, "fresh"))
    await check_replay(app, "fresh")


async def test_astop_after_a_run_completed_leaves_the_thread_usable() -> None:
    ran: list[str] = []
    app = line(("a", replying("a", ran))).compile()
    await app.ainvoke(inputs("one"), CFG)
    with contextlib.suppress(AgentlogError):
        await app.astop(CFG)
    await app.ainvoke(inputs("two"), CFG)
    state = await app.aget_state(CFG)
    if state.execution_meta.stop_current_execution == StopRequestStatus.STOPPED:
        await app.ainvoke(None, CFG)
    assert ran == ["a", "a"]
    assert texts((await app.aget_state(CFG)).context) == ["one", "a", "two", "a"]
    await check_replay(app)


# ---- interrupts --------------------------------------------------------------------------


async def test_interrupt_before_pauses_and_a_plain_ainvoke_resumes(store: EventStore) -> None:
    app = weather_graph().compile(checkpointer=store, interrupt_before=["tools"])
    out = await app.ainvoke(inputs("weather in Oslo?"), CFG, include_state=True)

    meta = out["state"].execution_meta
    assert meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    assert (meta.interrupted_node, meta.current_node) == ("tools", "tools")
    assert WEATHER_CALLS == []
    assert [m.role for m in out["messages"]] == ["user", "assistant"]
    records = await log_of(store)
    assert entered(records) == ["agent"]
    assert kinds(records)[-1] == "interrupt_raised"
    raised = records[-1].event
    assert (raised.node, raised.when) == ("tools", "before")  # type: ignore[union-attr]
    await check_replay(app, returned=out["state"])

    done = await app.ainvoke(None, CFG, include_state=True)
    assert WEATHER_CALLS == ["Oslo"]
    assert done["messages"][-1].text() == "answer: sunny in Oslo"
    assert done["state"].execution_meta.status == ExecutionStatus.COMPLETED
    after = await log_of(store)
    assert kinds(after)[len(records) : len(records) + 2] == ["resumed", "node_entered"]
    assert entered(after) == ["agent", "tools", "agent"]
    assert kinds(after).count("run_started") == 1
    await check_replay(app, returned=done["state"])


async def test_resuming_with_new_input_appends_it_first() -> None:
    seen: list[list[str]] = []

    async def agent(state: AgentState) -> list[Message]:
        seen.append(texts(state.context))
        return [said(f"reply {len(seen)}")]

    graph = line(("agent", agent))
    app = graph.compile(interrupt_before=["agent"])
    out = await app.ainvoke(inputs("first"), CFG)
    assert texts(out["messages"]) == ["first"]
    out = await app.ainvoke(inputs("second"), CFG, include_state=True)
    assert seen == [["first", "second"]]
    assert texts(out["state"].context) == ["first", "second", "reply 1"]
    records = await log_of(app.store)
    assert commits(records)[:4] == [
        ["run_started", "message_appended"],
        ["interrupt_raised"],
        ["resumed", "message_appended"],
        ["node_entered"],
    ]
    await check_replay(app, returned=out["state"])


async def test_interrupt_before_a_node_in_a_loop_pauses_every_time() -> None:
    turns: list[int] = []

    async def agent(state: AgentState) -> list[Message]:
        turns.append(len(state.context))
        if len(turns) < 3:
            return [asks((f"call-{len(turns)}", "get_weather", {"city": "Rome"}))]
        return [said("done")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent).add_node("tools", ToolNode([get_weather]))
    graph.set_entry_point("agent").add_edge("tools", "agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    app = graph.compile(interrupt_before=["tools"])
    statuses = []
    out = await app.ainvoke(inputs("go"), CFG, include_state=True)
    statuses.append(out["state"].execution_meta.status)
    while out["state"].execution_meta.status != ExecutionStatus.COMPLETED:
        out = await app.ainvoke(None, CFG, include_state=True)
        statuses.append(out["state"].execution_meta.status)
    assert statuses == ["interrupted_before", "interrupted_before", "completed"]
    assert WEATHER_CALLS == ["Rome", "Rome"]
    await check_replay(app, returned=out["state"])


async def test_interrupt_after_pauses_once_the_step_is_committed(store: EventStore) -> None:
    app = weather_graph().compile(checkpointer=store, interrupt_after=["agent"])
    out = await app.ainvoke(inputs("weather?"), CFG, include_state=True)
    meta = out["state"].execution_meta
    assert meta.status == ExecutionStatus.INTERRUPTED_AFTER
    assert (meta.interrupted_node, meta.current_node, meta.step) == ("agent", "tools", 1)
    records = await log_of(store)
    assert commits(records)[-1] == ["message_appended", "step_advanced", "interrupt_raised"]
    assert records[-1].event.when == "after"  # type: ignore[union-attr]
    assert WEATHER_CALLS == []
    await check_replay(app, returned=out["state"])

    out = await app.ainvoke(None, CFG, include_state=True)
    assert WEATHER_CALLS == ["Oslo"]
    assert out["state"].execution_meta.status == ExecutionStatus.INTERRUPTED_AFTER  # agent again
    assert out["messages"][-1].text() == "answer: sunny in Oslo"
    out = await app.ainvoke(None, CFG, include_state=True)
    assert out["state"].execution_meta.status == ExecutionStatus.COMPLETED
    assert entered(await log_of(store)) == ["agent", "tools", "agent"]
    await check_replay(app, returned=out["state"])


def sync_approval(state: AgentState) -> list[Message]:
    answer = interrupt("approve?", {"amount": 10})
    return [said(f"approved: {answer}")]


async def async_approval(state: AgentState) -> list[Message]:
    answer = interrupt("approve?", {"amount": 10})
    return [said(f"approved: {answer}")]


@pytest.mark.parametrize("approve", [sync_approval, async_approval], ids=["sync", "async"])
async def test_a_node_interrupt_pauses_and_command_resume_hands_it_the_value(
    store: EventStore, approve: Callable[..., Any]
) -> None:
    app = line(("approve", approve), ("after", replying("after"))).compile(checkpointer=store)
    out = await app.ainvoke(inputs("pay"), CFG, include_state=True)
    meta = out["state"].execution_meta
    assert meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    assert (meta.interrupted_node, meta.interrupt_reason) == ("approve", "approve?")
    assert meta.interrupt_data == {"amount": 10}
    assert texts(out["messages"]) == ["pay"]
    records = await log_of(store)
    assert kinds(records)[-2:] == ["node_entered", "interrupt_raised"]
    raised = records[-1].event
    assert (raised.node, raised.reason, raised.data) == ("approve", "approve?", {"amount": 10})  # type: ignore[union-attr]
    await check_replay(app, returned=out["state"])

    done = await app.ainvoke(Command(resume="yes"), CFG, include_state=True)
    assert texts(done["state"].context) == ["pay", "approved: yes", "after"]
    assert done["state"].execution_meta.status == ExecutionStatus.COMPLETED
    after = await log_of(store)
    resumed = after[len(records)]
    assert (resumed.kind, resumed.event.value) == ("resumed", "yes")  # type: ignore[union-attr]
    assert entered(after) == ["approve", "approve", "after"]
    await check_replay(app, returned=done["state"])


async def test_a_plain_resume_of_a_node_interrupt_gives_it_none() -> None:
    app = line(("approve", async_approval)).compile()
    await app.ainvoke(inputs("pay"), CFG)
    out = await app.ainvoke(None, CFG, include_state=True)
    assert texts(out["state"].context) == ["pay", "approved: None"]
    await check_replay(app, returned=out["state"])


async def test_a_resume_value_is_given_once_then_the_node_may_interrupt_again() -> None:
    async def twice(state: AgentState) -> list[Message]:
        answer = interrupt("first?")
        return [said(f"got {answer}")]

    async def again(state: AgentState) -> list[Message]:
        answer = interrupt("second?")
        return [said(f"then {answer}")]

    app = line(("one", twice), ("two", again)).compile()
    out = await app.ainvoke(inputs("go"), CFG, include_state=True)
    assert out["state"].execution_meta.interrupt_reason == "first?"
    out = await app.ainvoke(Command(resume=1), CFG, include_state=True)
    assert out["state"].execution_meta.interrupted_node == "two"
    assert out["state"].execution_meta.interrupt_reason == "second?"
    out = await app.ainvoke(Command(resume={"n": 2}), CFG, include_state=True)
    assert texts(out["state"].context) == ["go", "got 1", "then {'n': 2}"]
    await check_replay(app, returned=out["state"])


async def test_a_completed_thread_given_new_input_starts_a_new_run(store: EventStore) -> None:
    app = weather_graph().compile(checkpointer=store)
    first = await app.ainvoke(inputs("weather?"), CFG)
    before = await log_of(store)
    second = await app.ainvoke(inputs("and again?"), CFG, include_state=True)
    records = await log_of(store)
    fresh = records[len(before) :]
    assert kinds(fresh)[:3] == ["run_started", "message_appended", "node_entered"]
    assert fresh[0].event.entry_node == "agent"  # type: ignore[union-attr]
    assert fresh[2].event.node == "agent"  # type: ignore[union-attr]
    assert kinds(records).count("run_started") == 2
    context = second["state"].context
    assert context[: len(first["messages"])] == first["messages"]  # conversation kept
    assert texts(context)[len(first["messages"])] == "and again?"
    assert texts(second["messages"])[0] == "and again?"  # the call's own messages
    assert second["messages"][-1].text() == "answer: sunny in Oslo"
    assert len(second["messages"]) == 4 and len(context) == 8
    assert WEATHER_CALLS == ["Oslo", "Oslo"]
    assert before[0].run_id != fresh[0].run_id
    assert {r.run_id for r in fresh} == {fresh[0].run_id}
    state = second["state"]
    assert state.execution_meta.status == ExecutionStatus.COMPLETED
    assert state.execution_meta.internal_data["run_id"] == fresh[0].run_id
    await check_replay(app, returned=state)


# ---- failure -----------------------------------------------------------------------------


class Flaky:
    """A node that raises the first `failures` times it runs."""

    def __init__(self, failures: int, error: Exception, asynchronous: bool = True) -> None:
        self.failures, self.error, self.runs = failures, error, 0
        self.asynchronous = asynchronous

    def run(self, state: AgentState) -> list[Message]:
        self.runs += 1
        if self.runs <= self.failures:
            raise self.error
        return [said(f"flaky ok after {self.runs}")]

    def node(self) -> Callable[..., Any]:
        if not self.asynchronous:
            return self.run

        async def node(state: AgentState) -> list[Message]:
            return self.run(state)

        return node


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
async def test_a_raising_node_fails_the_run_and_a_later_ainvoke_retries_it(
    store: EventStore, asynchronous: bool
) -> None:
    boom = ValueError("boom")
    flaky = Flaky(1, boom, asynchronous)
    ran: list[str] = []
    app = line(("a", replying("a", ran)), ("b", flaky.node()), ("c", replying("c", ran)))
    app = app.compile(checkpointer=store)
    with pytest.raises(NodeError) as caught:
        await app.ainvoke(inputs("go"), CFG)
    assert caught.value.node == "b"
    assert "'b'" in str(caught.value)
    assert caught.value.__cause__ is boom
    records = await log_of(store)
    assert kinds(records)[-2:] == ["node_entered", "run_failed"]
    failed = records[-1].event
    assert (failed.node, failed.error_type, failed.message) == ("b", "ValueError", "boom")  # type: ignore[union-attr]
    state = await check_replay(app)
    assert state.execution_meta.status == ExecutionStatus.ERROR
    assert state.execution_meta.current_node == "b"
    assert texts(state.context) == ["go", "a"]

    out = await app.ainvoke(None, CFG, include_state=True)
    assert ran == ["a", "c"]  # a is not run again
    assert flaky.runs == 2
    assert texts(out["state"].context) == ["go", "a", "flaky ok after 2", "c"]
    after = await log_of(store)
    assert kinds(after)[len(records) : len(records) + 2] == ["resumed", "node_entered"]
    assert entered(after) == ["a", "b", "b", "c"]
    assert out["state"].execution_meta.status == ExecutionStatus.COMPLETED
    assert kinds(after).count("run_started") == 1
    await check_replay(app, returned=out["state"])


async def test_a_failing_condition_fails_the_run_naming_the_node() -> None:
    def broken_route(state: AgentState) -> str:
        raise RuntimeError("no idea")

    graph = StateGraph().add_node("a", replying("a")).set_entry_point("a")
    graph.add_conditional_edges("a", broken_route, {"x": END})
    app = graph.compile()
    with pytest.raises(NodeError) as caught:
        await app.ainvoke(inputs("go"), CFG)
    assert caught.value.node == "a"
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert kinds(await log_of(app.store))[-1] == "run_failed"
    await check_replay(app)


async def test_command_goto_an_unknown_node_fails_the_run_instead_of_wedging_the_thread() -> None:
    async def lost(state: AgentState) -> Command:
        return Command(goto="ghost")

    app = line(("lost", lost)).compile()
    with pytest.raises(AgentlogError, match="ghost"):
        await app.ainvoke(inputs("go"), CFG)
    records = await log_of(app.store)
    assert kinds(records)[-1] == "run_failed"
    assert records[-1].event.node == "lost"  # type: ignore[union-attr]
    assert all(getattr(r.event, "next_node", None) != "ghost" for r in records)
    await check_replay(app)


async def test_the_recursion_limit_fails_the_run_and_is_recorded(store: EventStore) -> None:
    def again(state: AgentState) -> str:
        return "spin"

    graph = StateGraph().add_node("spin", replying("round")).set_entry_point("spin")
    graph.add_conditional_edges("spin", again, {"spin": "spin", "done": END})
    app = graph.compile(checkpointer=store, recursion_limit=3)
    with pytest.raises(RecursionLimitError, match="3"):
        await app.ainvoke(inputs("go"), CFG)
    records = await log_of(store)
    assert entered(records) == ["spin"] * 3
    assert kinds(records)[-2:] == ["step_advanced", "run_failed"]
    failed = records[-1].event
    assert (failed.node, failed.error_type) == ("spin", "RecursionLimitError")  # type: ignore[union-attr]
    state = await check_replay(app)
    assert state.execution_meta.status == ExecutionStatus.ERROR
    assert state.execution_meta.step == 3


async def test_the_recursion_limit_counts_steps_exactly() -> None:
    graph = line(("a", replying("a")), ("b", replying("b")))
    ok = graph.compile(recursion_limit=2)
    out = await ok.ainvoke(inputs("go"), CFG, include_state=True)
    assert out["state"].execution_meta.status == ExecutionStatus.COMPLETED

    short = graph.compile(recursion_limit=1)
    with pytest.raises(RecursionLimitError):
        await short.ainvoke(inputs("go"), CFG)
    records = await log_of(short.store)
    assert entered(records) == ["a"]
    assert records[-1].event.node == "b"  # type: ignore[union-attr]
    out = await short.ainvoke(None, CFG, include_state=True)  # a later ainvoke goes on
    assert texts(out["state"].context) == ["go", "a", "b"]
    assert out["state"].execution_meta.status == ExecutionStatus.COMPLETED
    await check_replay(short, returned=out["state"])


# ---- one run per thread at a time --------------------------------------------------------


async def test_a_second_ainvoke_on_a_busy_thread_gets_thread_busy_error(
    store: EventStore,
) -> None:
    started = {"t1": asyncio.Event(), "t2": asyncio.Event()}
    release = asyncio.Event()

    async def hold(state: AgentState, config: dict[str, Any]) -> list[Message]:
        started[config["thread_id"]].set()
        await release.wait()
        return [said("held")]

    app = line(("hold", hold)).compile(checkpointer=store)
    first = asyncio.create_task(app.ainvoke(inputs("one"), CFG))
    await asyncio.wait_for(started["t1"].wait(), WAIT)
    before = await log_of(store)
    for _ in range(2):  # a refused call must not free the thread for the next one
        with pytest.raises(ThreadBusyError, match="t1"):
            await asyncio.wait_for(app.ainvoke(inputs("two"), CFG), WAIT)
    assert await log_of(store) == before  # the refused input was never written
    other = asyncio.create_task(app.ainvoke(inputs("elsewhere"), {"thread_id": "t2"}))
    await asyncio.wait_for(started["t2"].wait(), WAIT)  # another thread runs meanwhile
    assert not first.done()
    release.set()
    out = await asyncio.wait_for(first, WAIT)
    assert texts(out["messages"]) == ["one", "held"]
    assert texts((await asyncio.wait_for(other, WAIT))["messages"]) == ["elsewhere", "held"]
    await check_replay(app)
    await check_replay(app, "t2")

    again = await app.ainvoke(inputs("three"), CFG)  # free once the first run ended
    assert texts(again["messages"]) == ["three", "held"]
    assert texts((await app.aget_state(CFG)).context) == ["one", "held", "three", "held"]


async def test_astream_on_a_busy_thread_raises_thread_busy_error() -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def hold(state: AgentState) -> None:
        entered.set()
        await release.wait()

    app = line(("hold", hold)).compile()
    first = asyncio.create_task(app.ainvoke(inputs("one"), CFG))
    await entered.wait()

    async def consume() -> list[StreamChunk]:
        return [c async for c in app.astream(None, CFG)]

    try:
        with pytest.raises(ThreadBusyError):
            await asyncio.wait_for(consume(), WAIT)
    finally:
        release.set()
        await first


async def test_two_apps_on_one_store_do_not_run_one_thread_twice(store: EventStore) -> None:
    started = {1: asyncio.Event(), 2: asyncio.Event()}
    release = asyncio.Event()
    ran: list[int] = []

    async def hold(state: AgentState, config: dict[str, Any]) -> list[Message]:
        ran.append(config["who"])
        started[config["who"]].set()
        await release.wait()
        return [said("held")]

    graph = line(("hold", hold))
    first_app, second_app = graph.compile(checkpointer=store), graph.compile(checkpointer=store)
    first = asyncio.create_task(first_app.ainvoke(inputs("one"), {**CFG, "who": 1}))
    await asyncio.wait_for(started[1].wait(), WAIT)
    second = asyncio.create_task(second_app.ainvoke(inputs("two"), {**CFG, "who": 2}))
    entered_twice = asyncio.create_task(started[2].wait())
    await asyncio.wait({second, entered_twice}, timeout=WAIT, return_when="FIRST_COMPLETED")
    entered_twice.cancel()
    release.set()
    outcomes = await asyncio.gather(first, second, return_exceptions=True)
    assert ran == [1]
    assert isinstance(outcomes[1], ThreadBusyError)
    assert texts(outcomes[0]["messages"]) == ["one", "held"]  # type: ignore[index]
    await check_replay(first_app)


async def test_a_cancelled_run_resumes_without_rerunning_finished_tool_calls(
    store: EventStore,
) -> None:
    calls: list[str] = []
    stuck = asyncio.Event()

    async def fast(n: int) -> int:
        """Returns at once."""
        calls.append("fast")
        return n

    async def slow(n: int) -> int:
        """Hangs the first time, as if the process died while it ran."""
        calls.append("slow")
        if calls.count("slow") == 1:
            stuck.set()
            await asyncio.Event().wait()
        return n

    async def plan(state: AgentState) -> list[Message]:
        return [asks(("c1", "fast", {"n": 1}), ("c2", "slow", {"n": 2}))]

    app = line(("plan", plan), ("tools", ToolNode([fast, slow]))).compile(checkpointer=store)
    task = asyncio.create_task(app.ainvoke(inputs("go"), CFG))
    await asyncio.wait_for(stuck.wait(), WAIT)
    await wait_for_record(store, CFG["thread_id"], "tool_call_finished")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cut = await log_of(store)
    # The caller left: the call still running is closed as abandoned, the run is stopped.
    assert kinds(cut)[-6:] == [
        "tool_call_started", "tool_call_started", "tool_call_finished",
        "tool_call_finished", "stop_requested", "stopped",
    ]  # fmt: skip
    abandoned = cut[-3].event
    assert (abandoned.call_id, abandoned.status) == ("c2", "abandoned")  # type: ignore[union-attr]
    assert "caller stopped waiting" in cut[-1].event.reason  # type: ignore[union-attr]
    paused = await app.aget_state(CFG)
    assert paused.execution_meta.stop_current_execution == StopRequestStatus.STOPPED
    # A stop is a pause before the node it landed in, as the status says.
    assert paused.execution_meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    assert paused.execution_meta.interrupted_node == "tools"
    assert (paused.execution_meta.interrupt_reason or "").startswith("abandoned: ")

    out = await asyncio.wait_for(app.ainvoke(None, CFG, include_state=True), WAIT)
    assert calls == ["fast", "slow"]  # neither call runs again: one finished, one abandoned
    results = [m.content[0] for m in out["messages"] if m.role == "tool"]
    assert results[0].output == 1  # type: ignore[union-attr]
    assert results[1].is_error and results[1].status == "abandoned"  # type: ignore[union-attr]
    records = await log_of(store)
    assert kinds(records).count("tool_call_started") == 2
    assert kinds(records)[len(cut) :] == [
        "resumed",
        "node_entered",
        "message_appended",
        "message_appended",
        "step_advanced",
        "run_completed",
    ]
    await check_replay(app, returned=out["state"])


# ---- replay equality, snapshots ----------------------------------------------------------


async def test_state_read_through_snapshots_equals_the_replay(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "snap.db") as store:
        app = weather_graph(NotesState).compile(checkpointer=store, snapshot_every=2)
        for turn in ("one", "two", "three"):
            out = await app.ainvoke(inputs(turn), CFG, include_state=True)
            await check_replay(app, returned=out["state"])
        assert await store.load_snapshot("t1") is not None
    async with SQLiteEventStore(tmp_path / "snap.db") as reopened:
        again = weather_graph(NotesState).compile(checkpointer=reopened)
        assert await again.aget_state(CFG) == out["state"]


# ---- the blocking API --------------------------------------------------------------------


def test_invoke_get_state_and_stream_block_without_an_event_loop() -> None:
    store = MemoryEventStore()
    app = weather_graph().compile(checkpointer=store, interrupt_before=["tools"])
    out = app.invoke(inputs("weather?"), CFG, include_state=True)
    assert out["state"].execution_meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    assert app.get_state(CFG) == out["state"]

    chunks = [summary(c) for c in app.stream(None, CFG)]
    assert chunks[0] == ("message", "sunny in Oslo")
    assert chunks[-1] == ("state", "completed")
    state = app.get_state(CFG)
    assert state.execution_meta.status == ExecutionStatus.COMPLETED
    assert state == replay(asyncio.run(log_of(store)))

    plain = app.invoke(inputs("again?"), CFG)
    assert set(plain) == {"messages", "token_usage", "status", "__interrupt__"}
    assert texts(plain["messages"])[0] == "again?" and len(app.get_state(CFG).context) == 6
    assert plain["__interrupt__"][0]["node"] == "tools"


def test_stop_blocks_until_recorded_and_the_run_pauses_at_the_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "agentlog.actors.engine.guard.STOP_POLL_S", 60.0
    )  # the node ends before a look
    store = SQLiteEventStore(tmp_path / "sync.db")
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def a(state: AgentState) -> list[Message]:
        ran.append("a")
        started.set()
        assert release.wait(WAIT)
        return [said("a finished")]

    app = line(("a", a), ("b", replying("b", ran))).compile(checkpointer=store)
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(out=app.invoke(inputs("go"), CFG)))
    try:
        worker.start()
        assert started.wait(WAIT)
        app.stop(CFG)
        meta = app.get_state(CFG).execution_meta
        assert meta.stop_current_execution == StopRequestStatus.STOP_REQUESTED
        release.set()
        worker.join(WAIT)
        assert not worker.is_alive()
        assert texts(result["out"]["messages"]) == ["go", "a finished"]
        assert ran == ["a"]
        meta = app.get_state(CFG).execution_meta
        assert meta.stop_current_execution == StopRequestStatus.STOPPED
        out = app.invoke(None, CFG)
        assert ran == ["a", "b"]
        assert texts(out["messages"]) == ["b"]
        final = app.get_state(CFG)
    finally:
        release.set()
        worker.join(WAIT)
        asyncio.run(store.close())

    async def reread() -> list[EventRecord]:
        async with SQLiteEventStore(tmp_path / "sync.db") as reopened:
            return await log_of(reopened)

    records = asyncio.run(reread())
    assert replay(records) == final
    assert "stopped" in kinds(records) and kinds(records)[-1] == "run_completed"


async def test_the_blocking_forms_refuse_to_run_inside_an_event_loop() -> None:
    app = line(("a", replying("a"))).compile()
    with pytest.raises(RuntimeError, match="ainvoke"):
        app.invoke(inputs("hi"), CFG)
    with pytest.raises(RuntimeError, match="aget_state"):
        app.get_state(CFG)
    with pytest.raises(RuntimeError, match="astop"):
        app.stop(CFG)
    assert await app.store.threads() == []


async def test_new_input_on_a_run_asking_a_person_starts_a_new_run_never_answers_it() -> None:
    """A node paused in `interrupt()` waits for `Command(resume=...)`: plain input is a new
    request (a new run from the entry, which asks again), never an approval with None."""
    answers: list[Any] = []

    def ask(state: AgentState) -> list[Message]:
        answers.append(interrupt("approve?"))
        return [said(f"approved={answers[-1]}")]

    store = MemoryEventStore()
    app = line(("ask", ask)).compile(store)
    out = await app.ainvoke(inputs("pay 100"), CFG)
    assert out["status"] == "interrupted_before"
    out = await app.ainvoke(inputs("something else"), CFG)
    assert out["status"] == "interrupted_before" and answers == []  # asked again, not run on
    kinds = [r.kind async for r in store.read("t1")]
    assert kinds.count("run_started") == 2 and "resumed" not in kinds
    out = await app.ainvoke(Command(resume="yes"), CFG)
    assert out["status"] == "completed" and answers == ["yes"]
    assert texts(out["messages"])[-1] == "approved=yes"
