"""State shared between runs (isolation levels), the active thread's keys, goals, and the
rest of the seed runtime's API: each recorded in the log, so it survives a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import END, NotInNodeError, StateGraph
from agentlog.actors.engine.errors import NodeError
from agentlog.actors.runtime import (
    AgentRuntime,
    Constraint,
    EntryPoint,
    Goal,
    RegistrationError,
    RuntimeConfig,
    SuccessCriterion,
    UnknownEntryPointError,
    create_agent_runtime,
    record_outcome,
    shared_state,
)
from agentlog.actors.runtime.shared import RunScope, SharedState
from agentlog.actors.testing import FakeClock, until
from agentlog.events import SQLiteEventStore
from agentlog.events.kinds import SharedWritten
from agentlog.projections import AgentState, Message
from tests.helpers import line

WAIT = 30.0


class Ticket(AgentState):
    customer: str = ""
    number: int = 0


def said(text: str) -> list[Message]:
    return [Message.text_message(text, role="assistant")]


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with SQLiteEventStore(tmp_path / "log.db") as opened:
        yield opened


def runtime_of(store: Any, node: Any, isolation: str = "shared", **config: Any) -> AgentRuntime:
    runtime = AgentRuntime(store, RuntimeConfig(**config))
    runtime.add_graph("g", line(("work", node)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g", isolation=isolation))  # type: ignore[arg-type]
    return runtime


async def run_many(runtime: AgentRuntime, count: int) -> list[dict[str, Any]]:
    threads = [await runtime.trigger("api", f"go {i}") for i in range(count)]
    return list(await asyncio.gather(*(runtime.wait(t, timeout=WAIT) for t in threads)))


@pytest.mark.parametrize("kind", ["def", "async"])
async def test_a_hundred_synchronized_increments_make_a_hundred_each_value_once(
    store: Any, kind: str
) -> None:
    handed: list[int] = []

    def counted(state: Ticket) -> dict[str, Any]:
        number = shared_state().increment("tickets")
        handed.append(number)
        return {"number": number}

    async def acounted(state: Ticket) -> dict[str, Any]:
        number = await shared_state().aincrement("tickets")
        handed.append(number)
        return {"number": number}

    runtime = AgentRuntime(store)
    runtime.add_graph(
        "g", line(("work", counted if kind == "def" else acounted), state_cls=Ticket).compile(store)
    )
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g", isolation="synchronized"))
    async with runtime:
        results = await run_many(runtime, 100)
        assert await runtime.shared_values("g") == {"tickets": 100}
    assert sorted(handed) == list(range(1, 101))
    assert sorted(r["state"].number for r in results) == list(range(1, 101))
    writes = [r async for r in store.read("__shared__/g/tickets")]
    assert [r.seq for r in writes] == list(range(1, 101))  # serialised on the key's thread
    assert all(isinstance(r.event, SharedWritten) and r.event.run_id for r in writes)


async def test_shared_writes_land_with_their_step_in_commit_order(store: Any) -> None:
    def work(state: AgentState) -> list[Message]:
        shared = shared_state()
        shared.increment("seen")
        shared.set("last", state.context[0].text())
        shared.append("log", state.context[0].text())
        shared.merge("by_text", {state.context[0].text(): True})
        return said("ok")

    runtime = runtime_of(store, work)
    async with runtime:
        await run_many(runtime, 100)
        values = await runtime.shared_values("g")
    assert values["seen"] == 100
    writes = [r async for r in store.read_all() if r.kind == "shared_written"]
    sets = [r for r in writes if r.event.op == "set"]
    assert len(sets) == 100 and values["last"] == sets[-1].event.value  # last write wins
    assert values["log"] == [r.event.value for r in writes if r.event.op == "append"]
    assert len(values["by_text"]) == 100
    for record in writes:  # who, which run, which operation: recorded per write
        assert record.actor == "work" and record.run_id and record.event.node == "work"
        assert record.thread_id.startswith("g-")  # in the writing run's own step commit


async def test_values_as_of_a_past_position_and_after_a_restart(store: Any) -> None:
    def work(state: AgentState) -> list[Message]:
        shared_state().increment("n", 2)
        return said("ok")

    runtime = runtime_of(store, work)
    async with runtime:
        await run_many(runtime, 3)
    positions = [r.position async for r in store.read_all() if r.kind == "shared_written"]
    again = runtime_of(store, work)
    async with again:
        assert await again.shared_values("g") == {"n": 6}
        assert await again.shared_values("g", at_position=positions[0]) == {"n": 2}
        assert await again.shared_values(at_position=positions[1]) == {"g/n": 4}
        assert await again.shared_values(at_position=0) == {}


async def test_keys_are_namespaced_by_graph_unless_global(store: Any) -> None:
    def work(state: AgentState) -> list[Message]:
        shared_state().increment("mine")
        shared_state().increment("everyone")
        return said("ok")

    runtime = AgentRuntime(store, RuntimeConfig(global_keys=["everyone"]))
    for graph_id in ("a", "b"):
        runtime.add_graph(graph_id, line(("work", work)).compile(store))
        runtime.register_entry_point(EntryPoint(id=graph_id, graph_id=graph_id, isolation="shared"))
    async with runtime:
        for graph_id in ("a", "b"):
            await runtime.trigger_and_wait(graph_id, "go", timeout=WAIT)
        assert await runtime.shared_values("a") == {"mine": 1, "everyone": 2}
        assert await runtime.shared_values() == {"a/mine": 1, "b/mine": 1, "*/everyone": 2}


async def test_an_isolated_run_cannot_touch_shared_keys(store: Any) -> None:
    def work(state: AgentState) -> list[Message]:
        shared_state().get("anything")
        return said("ok")

    runtime = runtime_of(store, work, isolation="isolated")
    async with runtime:
        with pytest.raises(NodeError, match="isolation='shared'"):
            await runtime.trigger_and_wait("api", "go", timeout=WAIT)


async def test_bad_shared_writes_are_typed_errors_and_write_nothing(store: Any) -> None:
    async def sync_call_in_async_node(state: AgentState) -> list[Message]:
        shared_state().increment("n")  # a synchronized write must be awaited here
        return said("ok")

    runtime = runtime_of(store, sync_call_in_async_node, isolation="synchronized")
    async with runtime:
        with pytest.raises(NodeError, match=r"await shared\.aincrement"):
            await runtime.trigger_and_wait("api", "go", timeout=WAIT)
        assert await runtime.shared_values() == {}
    with pytest.raises(NotInNodeError, match="inside a node"):
        shared_state()

    def bad(state: AgentState) -> list[Message]:
        shared_state().increment("n", "one")  # type: ignore[arg-type]
        return said("ok")

    runtime = runtime_of(store, bad)
    async with runtime:
        with pytest.raises(NodeError, match="increment takes a number"):
            await runtime.trigger_and_wait("api", "go", timeout=WAIT)


async def test_a_synchronized_write_made_again_by_a_rerun_step_is_not_applied_twice(
    store: Any,
) -> None:
    """A crash after the write and before the step's commit runs the step again with the
    same identity (thread, node_entered seq): the write is found and not redone."""
    runtime = runtime_of(store, lambda state: said("ok"), isolation="synchronized")
    async with runtime:
        scope = RunScope(runtime, runtime.entries["api"], asyncio.get_running_loop())
        first = SharedState(scope, "work", "t", "run-1", step_seq=7)
        assert await first._commit(first._event("n", "increment", 5)) == 5
        rerun = SharedState(scope, "work", "t", "run-2", step_seq=7)
        assert await rerun._commit(rerun._event("n", "increment", 5)) == 5
        other_step = SharedState(scope, "work", "t", "run-2", step_seq=9)
        assert await other_step._commit(other_step._event("n", "increment", 5)) == 10
        assert await runtime.shared_values("g") == {"n": 10}
    assert await store.last_seq("__shared__/g/n") == 2


async def test_an_event_run_copies_declared_keys_from_the_active_thread(store: Any) -> None:
    def intake(state: Ticket) -> dict[str, Any]:
        return {"customer": "ada", "messages": said("noted")}

    def follow_up(state: Ticket) -> list[Message]:
        return said(f"following up with {state.customer or 'nobody'}")

    runtime = AgentRuntime(store)
    runtime.add_graph("intake", line(("intake", intake), state_cls=Ticket).compile(store))
    runtime.add_graph("later", line(("follow", follow_up), state_cls=Ticket).compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="intake"))
    runtime.register_entry_point(
        EntryPoint(
            id="after", graph_id="later", trigger="event", kinds=["run_completed"],
            from_graph="intake", input_keys=["customer"],
        )
    )  # fmt: skip
    with pytest.raises(RegistrationError, match="not fields"):
        runtime.register_entry_point(
            EntryPoint(id="x", graph_id="later", trigger="event", input_keys=["nope"])
        )
    with pytest.raises(RegistrationError, match="event and timer"):
        EntryPoint(id="x", graph_id="later", input_keys=["customer"]).check()
    async with runtime:
        await runtime.trigger_and_wait("chat", "hello", thread_id="user-1", timeout=WAIT)
        assert runtime.active_thread == "user-1"
        before = await store.last_seq("user-1")
        done = await until(
            lambda: [
                t
                for t in runtime.ledger.triggers.values()
                if t.accepted.entry_point == "after" and t.done
            ]
        )
        state = (await runtime.wait_for(done[0].id, timeout=WAIT))["state"]
    assert state.customer == "ada"
    assert state.context[-1].text() == "following up with ada"
    assert await store.last_seq("user-1") == before  # the user's thread was never written


async def test_goal_progress_from_outcomes_survives_a_restart_and_reads_the_past(
    store: Any,
) -> None:
    goal = Goal(
        id="support",
        description="resolve tickets politely and cheaply",
        success_criteria=[
            SuccessCriterion(id="resolved", metric="tickets_resolved", target=4, aggregate="sum"),
            SuccessCriterion(id="polite", metric="politeness", target=True, weight=2),
        ],
        constraints=[Constraint(id="budget", metric="cost", max=1.0, aggregate="sum")],
    )

    def work(state: AgentState) -> list[Message]:
        record_outcome("resolved", 1)  # a criterion's id stands for its metric
        record_outcome("cost", 0.4)
        if state.context[0].text() == "go 1":
            record_outcome("politeness", True)
        if state.context[0].text() == "typo":
            record_outcome("resovled", 1)
        if state.context[0].text() == "other goal":
            record_outcome("resolved", 1, goal_id="sales")
        return said("ok")

    runtime = runtime_of(store, work)
    runtime.add_goal(goal)
    async with runtime:
        await runtime.trigger_and_wait("api", "go 0", timeout=WAIT)
        middle = await store.last_seq("__runtime__")
        await runtime.trigger_and_wait("api", "go 1", timeout=WAIT)
        await runtime.trigger_and_wait("api", "go 2", timeout=WAIT)
        with pytest.raises(NodeError, match=r"'resovled' names no criterion.*tickets_resolved"):
            await runtime.trigger_and_wait("api", "typo", timeout=WAIT)
        with pytest.raises(NodeError, match=r"no goal 'sales' \(goals: support\)"):
            await runtime.trigger_and_wait("api", "other goal", timeout=WAIT)
        now = await runtime.goal_progress()
    resolved = now["criteria"]["resolved"]
    assert (resolved["value"], resolved["progress"], resolved["status"]) == (3, 0.75, "in_progress")
    assert now["criteria"]["polite"]["status"] == "met"
    assert now["overall_progress"] == pytest.approx((0.75 * 1 + 1.0 * 2) / 3)
    assert [v["constraint"] for v in now["constraint_violations"]] == ["budget"]
    assert now["metrics"]["cost"]["count"] == 3

    again = AgentRuntime(store, goal=goal)
    async with again:
        assert await again.get_goal_progress() == now  # hive's name, after a restart
        positions = [r.position async for r in store.read_all() if r.kind == "outcome_recorded"]
        past = await again.goal_progress("support", at_position=positions[1])
    assert past["criteria"]["resolved"]["value"] == 1
    assert past["criteria"]["polite"]["status"] == "not_started"
    assert past["constraint_violations"] == []
    assert middle > 0


def test_malformed_goals_are_refused() -> None:
    runtime = AgentRuntime(SQLiteEventStore(":memory:"))
    cases = [
        (Goal(id=""), "non-empty id"),
        (
            Goal(id="g", success_criteria=[SuccessCriterion(id="c", metric="m", target=0)]),
            "non-zero",
        ),
        (
            Goal(
                id="g",
                success_criteria=[SuccessCriterion(id="s", metric="m")],
                constraints=[Constraint(id="c", metric="m")],
            ),
            "max, min",
        ),
        (Goal(id="g", description="no criteria"), "has no success_criteria"),
        (Goal(id="g", constraints=[Constraint(id="c", metric="m", max=1)]), "SuccessCriterion"),
        (Goal(id="g", success_criteria=SuccessCriterion(id="s", metric="m")), "are lists"),  # type: ignore[arg-type]
        (
            Goal(id="g", success_criteria=[SuccessCriterion(id="c", metric="m", aggregate="avg")]),  # type: ignore[arg-type]
            "aggregate",
        ),
    ]
    for goal, why in cases:
        with pytest.raises(RegistrationError, match=why):
            runtime.add_goal(goal)
    with pytest.raises(RegistrationError, match="no goal is added"):
        asyncio.run(runtime.goal_progress())
    runtime.add_goal(Goal(id="g", success_criteria=[SuccessCriterion(id="s", metric="m")]))
    for wrong in ("5", -1, 2.0, True):
        with pytest.raises(RegistrationError, match="at_position is a log position"):
            asyncio.run(runtime.goal_progress(at_position=wrong))  # type: ignore[arg-type]
        with pytest.raises(RegistrationError, match="at_position is a log position"):
            asyncio.run(runtime.shared_values(at_position=wrong))  # type: ignore[arg-type]


async def test_the_rest_of_the_seed_runtime_api(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    graph = line(("work", lambda state: said("ok"))).compile(store)
    runtime = create_agent_runtime(
        store, {"g": graph}, [EntryPoint(id="api", graph_id="g")], RuntimeConfig()
    )
    runtime.clock = clock
    assert (
        [e.id for e in runtime.entry_points()]
        == ["api"]
        == [e.id for e in runtime.get_entry_points()]
    )
    assert not runtime.is_running and runtime.user_idle_seconds == float("inf")
    seen: list[str] = []
    failing_calls: list[int] = []

    async def handler(record: Any) -> None:
        seen.append(record.kind)

    def failing(record: Any) -> None:
        failing_calls.append(record.position)
        raise RuntimeError("a handler's own bug")

    async with runtime:
        assert runtime.is_running
        subscription = runtime.subscribe_to_events(["run_completed"], handler, graph_id="g")
        runtime.subscribe_to_events(["run_completed"], failing)
        thread = await runtime.trigger("api", "hi", correlation_id="order-17")
        clock.advance(5)
        assert runtime.user_idle_seconds == 5
        await runtime.wait(thread, timeout=WAIT)
        await until(lambda: seen and failing_calls)
        assert seen == ["run_completed"]
        assert runtime.unsubscribe_from_events(subscription) is True
        assert runtime.unsubscribe_from_events(subscription) is False
        assert runtime.get_execution_result("api", thread)["status"] == "completed"  # type: ignore[index]
        assert await runtime.cancel_execution("api", thread) is False  # it has ended
        with pytest.raises(UnknownEntryPointError):
            runtime.get_execution_result("nope", thread)
        assert runtime.get_stats()["graphs"]["g"]["completed"] == 1
        with pytest.raises(RegistrationError, match="correlation_id"):
            await runtime.trigger("api", "hi", correlation_id="")
    assert not runtime.is_running
    accepted = [r.event async for r in store.read("__runtime__") if r.kind == "trigger_accepted"]
    assert accepted[0].correlation_id == "order-17"
    failures = [r for r in caplog.records if r.getMessage().startswith("event handler")]
    assert failures and "a handler's own bug" in str(failures[0].exc_info[1])  # type: ignore[index]
    runtime.unregister_entry_point("api")
    assert runtime.entry_points() == []


async def test_record_outcome_works_in_a_plain_graph_too() -> None:
    def work(state: AgentState) -> list[Message]:
        record_outcome("latency_ok", True)
        return said("ok")

    graph: StateGraph[Any] = StateGraph()
    graph.add_node("work", work)
    graph.set_entry_point("work")
    graph.add_edge("work", END)
    app = graph.compile()
    await app.ainvoke("hi", {"thread_id": "t"})
    outcomes = [r.event async for r in app.store.read("t") if r.kind == "outcome_recorded"]
    assert [(o.metric, o.value, o.node, o.goal_id) for o in outcomes] == [
        ("latency_ok", True, "work", None)
    ]
    with pytest.raises(RegistrationError, match="a number or a bool"):
        record_outcome("x", "high")  # type: ignore[arg-type]


async def test_a_shared_increment_of_a_key_holding_text_is_refused_not_dropped(
    store: Any,
) -> None:
    """Under `shared` a write rides in the step's commit; one the key's value cannot take
    (a string incremented) fails the node with a typed error instead of being recorded and
    silently left out of the values."""
    values = iter([("set", "bob"), ("increment", 1)])

    def work(state: AgentState) -> list[Message]:
        op, value = next(values)
        getattr(shared_state(), op)("name", value)
        return said("ok")

    runtime = runtime_of(store, work)
    async with runtime:
        await runtime.trigger_and_wait("api", "set it", timeout=WAIT)
        with pytest.raises(NodeError, match="'name' holds 'bob': it cannot be incremented"):
            await runtime.trigger_and_wait("api", "increment it", timeout=WAIT)
        assert await runtime.shared_values("g") == {"name": "bob"}
    ops = [r.event.op async for r in store.read_all() if isinstance(r.event, SharedWritten)]
    assert ops == ["set"]


async def test_handler_subscriptions_before_start_and_their_bad_filters(store: Any) -> None:
    """hive's order (subscribe, then start) works: the handler hears records from the start.
    A filter that can never match (an unknown kind, a kind given as one string, an unknown
    graph) is refused when subscribing, not left to fail unseen in the background."""
    graph = line(("work", lambda state: said("ok"))).compile(store)
    runtime = create_agent_runtime(store, {"g": graph}, [EntryPoint(id="api", graph_id="g")])
    early: list[str] = []
    dropped: list[str] = []
    runtime.subscribe_to_events(["run_completed"], lambda record: early.append(record.kind))
    gone = runtime.subscribe_to_events(["run_completed"], lambda r: dropped.append(r.kind))
    assert runtime.unsubscribe_from_events(gone) is True
    for kinds, why in [
        (["run_complete"], "run_complete"),
        ("run_completed", r"pass \['run_completed'\]"),
        ([], "kinds is empty"),
    ]:
        with pytest.raises(ValueError, match=why):
            runtime.subscribe_to_events(kinds, print)
    with pytest.raises(RegistrationError, match="no graph 'gg' is registered"):
        runtime.subscribe_to_events(None, print, graph_id="gg")
    with pytest.raises(RegistrationError, match="handler function"):
        runtime.subscribe_to_events(None, "print")  # type: ignore[arg-type]
    async with runtime:
        await runtime.trigger_and_wait("api", "hi", timeout=WAIT)
        await until(lambda: early)
        with pytest.raises(ValueError, match="run_complete"):
            runtime.subscribe(kinds=["run_complete"])  # checked at the call, not at first read
    assert early == ["run_completed"] and dropped == []


async def test_two_feeds_at_one_position_each_leave_the_statistics_once(store: Any) -> None:
    """Feeds are told apart by identity: a feed ending while another stands at the same
    position removes itself, not the other (which then failed with a ValueError when it
    ended in turn, at a shutdown)."""
    runtime = runtime_of(store, lambda state: said("ok"))
    async with runtime:
        await runtime.trigger_and_wait("api", "hi", timeout=WAIT)
        first, second = runtime.subscribe(after=0), runtime.subscribe(after=0)
        await anext(first)
        await anext(second)  # both stand at position 1
        assert len(runtime.subscribers) == 2
        await second.aclose()  # type: ignore[attr-defined]
        await anext(first)  # it moves on
        await first.aclose()  # type: ignore[attr-defined]
        assert runtime.subscribers == []


async def test_hive_names_for_handler_filters_and_unregistering(store: Any) -> None:
    """hive's `filter_graph` and `filter_stream` work as `graph_id` and `entry_point`, and
    `unregister_entry_point` returns True as hive's does, so `if runtime.unregister_...`
    holds when it removed one."""
    graph = line(("work", lambda state: said("ok"))).compile(store)
    runtime = create_agent_runtime(
        store,
        {"g": graph},
        [EntryPoint(id="api", graph_id="g"), EntryPoint(id="other", graph_id="g")],
    )
    by_stream: list[str] = []
    by_graph: list[str] = []
    runtime.subscribe_to_events(
        ["run_completed", "trigger_finished"],
        lambda record: by_stream.append(record.thread_id),
        filter_stream="api",
    )
    runtime.subscribe_to_events(
        ["run_completed"], lambda r: by_graph.append(r.thread_id), filter_graph="g"
    )
    with pytest.raises(UnknownEntryPointError, match="registered: api, other"):
        runtime.subscribe_to_events(None, print, filter_stream="ap")
    with pytest.raises(RegistrationError, match="not both"):
        runtime.subscribe_to_events(None, print, graph_id="g", filter_graph="h")
    async with runtime:
        mine = await runtime.trigger("api", "hi")
        theirs = await runtime.trigger("other", "hi")
        await runtime.wait(mine, timeout=WAIT)
        await runtime.wait(theirs, timeout=WAIT)
        await until(lambda: len(by_stream) >= 2 and len(by_graph) >= 2)
    assert sorted(by_stream) == ["__runtime__", mine]
    assert sorted(by_graph) == sorted([mine, theirs])
    assert runtime.unregister_entry_point("other") is True
    with pytest.raises(UnknownEntryPointError, match="no entry point 'other'"):
        runtime.unregister_entry_point("other")


async def test_a_blocking_def_handler_holds_no_run_up(store: Any) -> None:
    """A plain `def` handler that blocks (a sleep, a synchronous HTTP call) runs on a worker
    thread: runs go on meanwhile, and its records still come to it in order once it returns."""
    import threading

    release = threading.Event()
    heard: list[str] = []

    def blocking(record: Any) -> None:
        release.wait(5)
        heard.append(record.kind)

    runtime = runtime_of(store, lambda state: said("ok"))
    async with runtime:
        runtime.subscribe_to_events(["run_started", "run_completed"], blocking)
        for _ in range(3):
            await runtime.trigger_and_wait("api", "go", timeout=WAIT)
        assert not release.is_set() and heard == []  # the runs ended; it still blocks
        release.set()
        await until(lambda: len(heard) == 6)
    assert heard == ["run_started", "run_completed"] * 3


def test_global_keys_given_as_one_string_or_with_bad_names_are_refused() -> None:
    """`global_keys="counter"` read as characters would make "count" (and "c") global."""
    for wrong, why in [
        ("counter", r"write \['counter'\]"),
        (["a/b"], "without '/'"),
        ([""], "non-empty"),
        ([3], "list of shared key names"),
    ]:
        with pytest.raises(RegistrationError, match=why):
            RuntimeConfig(global_keys=wrong)  # type: ignore[arg-type]
    assert RuntimeConfig(global_keys=["counter"]).global_keys == ("counter",)
    runtime = AgentRuntime(SQLiteEventStore(":memory:"), RuntimeConfig(global_keys=["counter"]))
    assert runtime.shared_key("g", "count") == "g/count"
    assert runtime.shared_key("g", "counter") == "*/counter"


def test_create_agent_runtime_refuses_hive_shaped_arguments_in_one_line() -> None:
    """A hive caller passes one graph, one entry point, a config dict or a path: each is a
    RegistrationError saying what to pass, not an AttributeError from deep inside."""
    store = SQLiteEventStore(":memory:")
    app = line(("work", lambda state: said("ok"))).compile(store)
    entry = EntryPoint(id="api", graph_id="g")
    loose: Any = app, entry, {"max_concurrent_runs": 3}, "app.db"
    cases: list[tuple[Any, str]] = [
        (lambda: create_agent_runtime(store, loose[0], [entry]), "dict of graph id"),
        (lambda: create_agent_runtime(store, {"g": app}, loose[1]), "list of EntryPoint"),
        (lambda: AgentRuntime(store, loose[2]), r"RuntimeConfig\(\*\*your_dict\)"),
        (lambda: AgentRuntime(loose[3]), "opened event store"),
    ]
    for make, why in cases:
        with pytest.raises(RegistrationError, match=why):
            make()
    assert create_agent_runtime(store, {"g": app}, [entry]).entry_points() == [entry]


async def test_get_execution_result_tells_a_failed_run_and_survives_a_restart(
    store: Any,
) -> None:
    """hive's get_execution_result gave a failed run's result too (success False): here a
    failed or cancelled run, or one finished before a restart, is its end as the log has
    it, never None as if it were still running."""

    def work(state: AgentState) -> list[Message]:
        if state.context[-1].text() == "boom":
            raise ValueError("bad ticket")
        return said("ok")

    runtime = runtime_of(store, work)
    async with runtime:
        good = await runtime.trigger("api", "fine")
        await runtime.wait(good, timeout=WAIT)
        bad = await runtime.trigger("api", "boom")
        with pytest.raises(NodeError):
            await runtime.wait(bad, timeout=WAIT)
        failed = runtime.get_execution_result("api", bad)
        assert failed is not None and (failed["status"], failed["success"]) == ("failed", False)
        assert "bad ticket" in failed["error"]["message"]
        assert runtime.get_execution_result("api", good)["success"] is True  # type: ignore[index]
    again = runtime_of(store, work)
    async with again:
        after = again.get_execution_result("api", good)
        assert after is not None and (after["status"], after["success"]) == ("completed", True)
        assert again.get_execution_result("api", "no-such-thread") is None
