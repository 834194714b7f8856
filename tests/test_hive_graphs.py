"""Graphs as first-class citizens (issue 33, row 3), as a hive program uses them: a secondary
graph added while the runtime runs, with its goal and entry points of every kind (namespaced
`graph::ep`), the primary graph, `active_graph_id`, `get_graph_registration` and
`intro_message`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog import END, StateGraph
from agentlog.actors.runtime import (
    AgentRuntime,
    EntryPoint,
    Goal,
    RegistrationError,
    SuccessCriterion,
    record_outcome,
)
from agentlog.actors.testing import until
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message


def replied(state: AgentState) -> list[Message]:
    record_outcome("replied", 1)  # counts towards the goal of the run's own graph
    return [Message.text_message("replied", role="assistant")]


def one_node(store: Any, name: str) -> Any:
    graph = StateGraph(name=name)
    graph.add_node("reply", replied)
    graph.set_entry_point("reply")
    graph.add_edge("reply", END)
    return graph.compile(checkpointer=store)


def goal(goal_id: str) -> Goal:
    return Goal(
        goal_id,
        success_criteria=[SuccessCriterion("replied", "replied", target=2, aggregate="sum")],
    )


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with SQLiteEventStore(tmp_path / "graphs.db") as s:
        yield s


async def test_a_graph_added_while_running_has_every_kind_of_entry_point(store: Any) -> None:
    runtime = AgentRuntime(store)
    runtime.add_graph_with(
        "support",
        one_node(store, "support"),
        goal=goal("support-goal"),
        entry_points={"api": EntryPoint(id="api", graph_id="support")},
    )
    runtime.intro_message = "Hi, I sort your inbox."
    async with runtime:
        assert runtime.graph_id == "support" and runtime.active_graph_id == "support"
        added = runtime.add_graph_with(
            "email_agent",
            one_node(store, "email_agent"),
            goal=goal("email-goal"),
            entry_points={
                "api": EntryPoint(id="api", graph_id="email_agent"),
                "on-support-done": EntryPoint(
                    id="on-support-done",
                    graph_id="email_agent",
                    trigger="event",
                    kinds=["run_completed"],
                    from_graph="support",
                ),
                "sweep": EntryPoint(
                    id="sweep",
                    graph_id="email_agent",
                    trigger="timer",
                    interval_s=3600,
                    run_immediately=True,
                ),
            },
        )
        assert added == ["email_agent::api", "email_agent::on-support-done", "email_agent::sweep"]
        await until(lambda: runtime.stats()["entry_points"]["email_agent::sweep"]["completed"])
        await runtime.trigger_and_wait("api", "hello", timeout=30)  # the primary's entry point
        await until(
            lambda: runtime.stats()["entry_points"]["email_agent::on-support-done"]["completed"]
        )
        await runtime.trigger_and_wait("email_agent::api", "and you?", timeout=30)

        registration = runtime.get_graph_registration("email_agent")
        assert registration is not None and not registration.primary
        assert sorted(registration.entry_points) == ["api", "on-support-done", "sweep"]
        assert registration.goal is not None and registration.goal.id == "email-goal"
        assert runtime.get_graph_registration("nope") is None
        primary = runtime.get_graph_registration("support")
        assert primary is not None and primary.primary and list(primary.entry_points) == ["api"]

        email = await runtime.goal_progress("email-goal")  # three runs of the email graph
        assert email["criteria"]["replied"]["value"] == 3, email
        support = await runtime.goal_progress("support-goal")  # one run of the support graph
        assert support["criteria"]["replied"]["value"] == 1, support

        runtime.active_graph_id = "email_agent"
        assert runtime.active_graph_id == "email_agent"
        with pytest.raises(ValueError, match="not registered"):
            runtime.active_graph_id = "nope"
        assert runtime.intro_message == "Hi, I sort your inbox."


def test_a_graph_with_a_wrong_entry_point_is_not_added() -> None:
    from agentlog.events import MemoryEventStore

    store = MemoryEventStore()
    runtime = AgentRuntime(store)
    with pytest.raises(RegistrationError, match="is not a node"):
        runtime.add_graph_with(
            "support",
            one_node(store, "support"),
            goal=goal("g"),
            entry_points={"api": EntryPoint(id="api", graph_id="x", entry_node="nope")},
        )
    assert runtime.list_graphs() == [] and runtime.entry_points() == [] and not runtime.goals
