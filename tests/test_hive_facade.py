"""hive's runtime by hive's names (issue 33, row 6): a hive program ports by its imports.
`trigger_and_wait` gives an `ExecutionResult` (None on timeout, a failed one on failure),
`inject_input(node_id, content)` a bool, `unregister_entry_point` of an unknown id False,
`get_stats` hive's sections; cron runs in the configured time zone; results are kept up to
a cap and a TTL; runtime-level resources are named, never their secrets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentlog import END, StateGraph
from agentlog.actors import interrupt
from agentlog.actors.runtime import AgentRuntime as Runtime
from agentlog.actors.runtime import (
    EntryPoint,
    RegistrationError,
    Resources,
    RuntimeConfig,
    UnknownRunError,
)
from agentlog.actors.testing import FakeClock
from agentlog.events import MemoryEventStore
from agentlog.hive import (
    AgentRuntime,
    AgentRuntimeConfig,
    CheckpointConfig,
    EntryPointSpec,
    ExecutionResult,
    Goal,
    SuccessCriterion,
    create_agent_runtime,
)
from agentlog.projections import AgentState, Message


class TicketState(AgentState):
    ticket_id: str = ""
    approved: str = ""


class Slow:
    def __init__(self) -> None:
        self.go = asyncio.Event()

    async def __call__(self, state: TicketState) -> list[Message]:
        await self.go.wait()
        return [Message.text_message("slow done", role="assistant")]


def process_request(state: TicketState) -> list[Message]:
    if "boom" in state.context[-1].text():
        raise ConnectionError("the ticket system hung up")
    return [Message.text_message(f"handled {state.ticket_id}", role="assistant")]


def approve(state: TicketState) -> dict[str, Any]:
    answer = interrupt("approve the refund?")
    return {"approved": str(answer)}


def support_graph(slow: Slow) -> StateGraph[TicketState]:
    graph = StateGraph(TicketState, name="support")
    graph.add_node("process-request", process_request)
    graph.add_node("approve", approve)
    graph.add_node("slow", slow)
    graph.set_entry_point("process-request")
    graph.add_edge("process-request", END)
    graph.add_edge("approve", END)
    graph.add_edge("slow", END)
    return graph


def support_goal() -> Goal:
    return Goal("support", success_criteria=[SuccessCriterion("resolved", "resolved", target=1)])


class FakeLLM:
    model = "gpt-test"
    api_key = "sk-secret-never-shown"


async def test_a_hive_program_runs_by_its_own_names(tmp_path: Path) -> None:
    slow = Slow()
    runtime = create_agent_runtime(
        graph=support_graph(slow),
        goal=support_goal(),
        storage_path=tmp_path / "storage",
        entry_points=[
            EntryPointSpec(id="api", name="API Handler", entry_node="process-request",
                           trigger_type="api", isolation_level="shared"),
            EntryPointSpec(id="approval", entry_node="approve", trigger_type="api"),
            EntryPointSpec(id="slow", entry_node="slow", trigger_type="api"),
        ],
        llm=FakeLLM(),
        tools=[process_request],
        tool_provider_map={"process_request": "zendesk"},
        accounts_data=[{"name": "zendesk-main", "token": "secret-token"}],
        config=AgentRuntimeConfig(execution_result_max=50),
        checkpoint_config=CheckpointConfig(),
    )  # fmt: skip
    await runtime.start()
    try:
        result = await runtime.trigger_and_wait("api", {"ticket_id": "123", "messages": ["hi"]})
        assert isinstance(result, ExecutionResult) and result.success, result
        assert result.output["ticket_id"] == "123" and result.output["response"] == "handled 123"
        assert result.path == ["process-request"] and result.steps_executed == 1

        failed = await runtime.trigger_and_wait("api", "boom", timeout=30)
        assert failed is not None and not failed.success
        assert failed.error is not None and "ConnectionError" in failed.error

        assert await runtime.trigger_and_wait("slow", "wait", timeout=0.05) is None  # goes on
        stream = runtime.get_stream("slow")
        assert stream is not None and len(stream.active_execution_ids) == 1
        slow.go.set()

        paused = await runtime.trigger_and_wait("approval", "refund order 7", timeout=30)
        assert paused is not None and paused.paused_at == "approve"
        assert await runtime.inject_input("process-request", "yes") is False  # nobody waits there
        assert await runtime.inject_input("approve", "yes") is True
        done = await runtime.get_stream("approval").wait_for_completion(  # type: ignore[union-attr]
            paused.execution_id, timeout=30
        )
        assert done is not None and done.output["approved"] == "yes"

        assert runtime.unregister_entry_point("nope") is False
        assert runtime.get_stream("nope") is None
        stats = runtime.get_stats()
        assert {"running", "entry_points", "streams", "goal_id", "outcome_aggregator",
                "event_bus", "state_manager"} <= set(stats)  # fmt: skip
        assert stats["goal_id"] == "support" and stats["streams"]["api"]["failed"] == 1
        ended = runtime.get_execution_result("api", failed.execution_id)
        assert ended is not None and not ended.success
        kept = runtime.get_execution_result("api", result.execution_id)
        assert kept is not None and kept.success and kept.output["ticket_id"] == "123"
        progress = await runtime.get_goal_progress()
        assert progress["goal_id"] == "support"
        assert runtime.graph_id == "primary" and runtime.list_graphs() == ["primary"]
        named = repr(runtime.resources())
        assert "gpt-test" in named and "zendesk-main" in named and "zendesk" in named
        assert "secret" not in named
    finally:
        await runtime.stop()


async def test_session_state_joins_a_thread_with_its_memory() -> None:
    store = MemoryEventStore()
    runtime = AgentRuntime(support_graph(Slow()), None, store)
    runtime.register_entry_point(EntryPointSpec(id="api", entry_node="process-request"))
    await runtime.start()
    try:
        first = await runtime.trigger("api", "hello", session_state={"memory": {"ticket_id": "9"}})
        await runtime.trigger_and_wait("api", "again", session_state={"resume_session_id": first})
        result = await runtime.trigger_and_wait(
            "api", "more", session_state={"resume_session_id": first}
        )
        assert result is not None and result.execution_id == first
        assert result.output["response"] == "handled 9"  # the memory stayed in the thread
    finally:
        await runtime.stop()


def test_refusals() -> None:
    with pytest.raises(RegistrationError, match="leave checkpointing enabled"):
        AgentRuntime(support_graph(Slow()), None, MemoryEventStore(),
                     checkpoint_config=CheckpointConfig(enabled=False))  # fmt: skip
    with pytest.raises(RegistrationError, match="IANA zone"):
        RuntimeConfig(timezone="Mars/Olympus")
    with pytest.raises(RegistrationError, match="keep_results_ttl_s"):
        RuntimeConfig(keep_results_ttl_s=0)


async def test_cron_runs_in_the_configured_time_zone() -> None:
    store = MemoryEventStore()
    clock = FakeClock(1_700_000_000.0)  # 2023-11-14 22:13:20 UTC
    paris = Runtime(store, RuntimeConfig(timezone="Europe/Paris"), clock=clock)
    paris.add_graph("support", support_graph(Slow()).compile(checkpointer=store))
    paris.register_entry_point(
        EntryPoint(id="nightly", graph_id="support", trigger="timer", cron="0 2 * * *")
    )
    async with paris:
        assert paris.next_fire("nightly") == 1_700_010_000.0  # 02:00 in Paris, 01:00 UTC


async def test_ended_runs_are_kept_up_to_a_cap_and_a_ttl() -> None:
    clock = FakeClock(1_700_000_000.0)
    store = MemoryEventStore(clock=clock)
    runtime = Runtime(store, RuntimeConfig(keep_results=10, keep_results_ttl_s=60), clock=clock)
    runtime.add_graph("support", support_graph(Slow()).compile(checkpointer=store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="support"))
    async with runtime:
        old = await runtime.trigger("api", "first")
        await runtime.wait(old, timeout=30)
        clock.advance(61)
        new = await runtime.trigger("api", "second")
        await runtime.wait(new, timeout=30)
        with pytest.raises(UnknownRunError):  # older than the TTL: read it from the log
            await runtime.wait(old, timeout=30)
        assert runtime.stats()["entry_points"]["api"]["completed"] == 2  # still counted


async def test_the_core_runtime_keeps_its_resources_and_names_them() -> None:
    store = MemoryEventStore()
    resources = Resources(
        llm=FakeLLM(),
        tools=[process_request],
        accounts=[{"name": "zendesk-main", "token": "secret-token"}],
        tool_provider_map={"process_request": "zendesk-main"},
        checkpoint=CheckpointConfig(snapshot_every=100),
    )
    runtime = Runtime(store, resources=resources)
    assert runtime.resources.llm.api_key == "sk-secret-never-shown"  # kept for the program
    names = runtime.resources.names()
    assert names["llm"] == "FakeLLM:gpt-test" and names["tools"] == ["process_request"]
    assert names["accounts"] == ["zendesk-main"]
    assert names["tool_provider_map"] == {"process_request": "zendesk-main"}
    assert "secret" not in repr(names)
    options = CheckpointConfig(snapshot_every=100).compile_options()
    app = support_graph(Slow()).compile(checkpointer=store, **options)
    assert app.snapshot_every == 100


async def test_the_facade_keeps_results_up_to_its_cap() -> None:
    runtime = AgentRuntime(
        support_graph(Slow()), None, MemoryEventStore(),
        config=AgentRuntimeConfig(execution_result_max=1),
    )  # fmt: skip
    runtime.register_entry_point(EntryPointSpec(id="api", entry_node="process-request"))
    await runtime.start()
    try:
        first = await runtime.trigger_and_wait("api", {"ticket_id": "1", "messages": ["a"]})
        second = await runtime.trigger_and_wait("api", {"ticket_id": "2", "messages": ["b"]})
        assert first is not None and second is not None
        kept = runtime.get_execution_result("api", second.execution_id)
        assert kept is not None and kept.output["ticket_id"] == "2"
        older = runtime.get_execution_result("api", first.execution_id)
        assert older is None  # past the cap: forgotten, as hive forgets it (its thread stays)
    finally:
        await runtime.stop()


def test_hive_entry_point_specs_map_to_entry_points() -> None:
    guardian = EntryPointSpec(
        id="guardian",
        entry_node="approve",
        trigger_type="event",
        trigger_config={"event_types": ["execution_failed"], "exclude_own_graph": True},
        isolation_level="isolated",
    ).entry_point("primary")
    assert guardian.kinds == ["run_failed"] and not guardian.include_own
    assert guardian.session == "primary" and guardian.isolation == "isolated"
    hook = EntryPointSpec(
        id="on-ticket",
        trigger_type="event",
        trigger_config={"event_types": ["webhook_received"], "filter_stream": "zendesk"},
    ).entry_point("primary")
    assert hook.webhook == "zendesk" and hook.kinds is None
    every = EntryPointSpec(
        id="sweep", trigger_type="timer", trigger_config={"interval_minutes": 5}
    ).entry_point("primary")
    assert every.interval_s == 300 and every.cron is None
    nightly = EntryPointSpec(
        id="nightly", trigger_type="timer", trigger_config={"cron": "0 2 * * *"}
    ).entry_point("primary")
    assert nightly.cron == "0 2 * * *" and nightly.interval_s is None
    with pytest.raises(RegistrationError, match="trigger_type"):
        EntryPointSpec(id="x", trigger_type="carrier-pigeon").entry_point("primary")


async def test_the_resources_are_named_in_the_log_once_and_never_their_secrets(
    tmp_path: Path,
) -> None:
    from agentlog.events import SQLiteEventStore
    from agentlog.events.kinds import ResourcesNamed

    def resources(provider: str) -> Resources:
        return Resources(
            llm=FakeLLM(),
            tools=[process_request],
            accounts=[{"name": "zendesk-main", "token": "secret-token"}],
            tool_provider_map={"process_request": provider},
        )

    async def named_records(store: Any) -> list[dict[str, Any]]:
        thread = Runtime(store).config.runtime_thread
        return [r.event.names async for r in store.read(thread)
                if isinstance(r.event, ResourcesNamed)]  # fmt: skip

    db = tmp_path / "hive.db"
    for provider in ("zendesk-main", "zendesk-main", "zendesk-eu"):  # a restart, a change
        async with SQLiteEventStore(db) as store, Runtime(store, resources=resources(provider)):
            pass
    async with SQLiteEventStore(db) as store:
        named = await named_records(store)
    assert [n["tool_provider_map"] for n in named] == [
        {"process_request": "zendesk-main"},
        {"process_request": "zendesk-eu"},
    ]
    assert named[0]["llm"] == "FakeLLM:gpt-test" and named[0]["accounts"] == ["zendesk-main"]
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b"secret" not in stored  # neither the account's token nor the model's key
