"""hive's free-form trigger input (issue 33, row 2), as a hive program sends it:
`trigger("api", {"query": "help"})` is refused before anything is recorded unless the
entry point declares how that input maps into the state (`input_schema=Model`); event runs
receive hive's `{"event": ...}`, timer runs a shapeable input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentlog import END, StateGraph
from agentlog.actors.runtime import (
    AgentRuntime,
    EntryPoint,
    InvalidTriggerInputError,
    RegistrationError,
)
from agentlog.actors.testing import until
from agentlog.events import SQLiteEventStore
from agentlog.events.follow import last_position
from agentlog.projections import AgentState, InvalidStateUpdateError, Message


class TicketState(AgentState):
    ticket_id: str = ""
    event: dict[str, Any] = {}


def answer(state: TicketState) -> list[Message]:
    asked = state.context[-1].text() if state.context else ""
    return [Message.text_message(f"ticket {state.ticket_id or '-'}: {asked}", role="assistant")]


def support_graph(store: Any, name: str = "support") -> Any:
    graph = StateGraph(TicketState, name=name)
    graph.add_node("process-request", answer)
    graph.set_entry_point("process-request")
    graph.add_edge("process-request", END)
    return graph.compile(checkpointer=store)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with SQLiteEventStore(tmp_path / "hive.db") as s:
        yield s


class Query(BaseModel):
    query: str
    ticket_id: str = ""


class Escalation(BaseModel):
    ticket_id: str
    reason: str

    def to_state(self) -> dict[str, Any]:
        text = f"escalated because {self.reason}"
        return {"ticket_id": self.ticket_id, "messages": [Message.text_message(text)]}


async def test_free_form_input_is_refused_before_anything_is_recorded(store: Any) -> None:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support_graph(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="support", trigger="api"))
    async with runtime:
        before = await last_position(store)
        with pytest.raises(InvalidStateUpdateError, match="no field 'query'") as refused:
            await runtime.trigger("api", {"query": "help"})
        assert "EntryPoint(id='api', ..., input_schema=Model)" in str(refused.value)
        assert await last_position(store) == before  # not even the acceptance
        assert runtime.stats()["entry_points"]["api"]["failed"] == 0


async def test_an_input_schema_maps_the_seed_example_into_the_state(store: Any) -> None:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support_graph(store))
    runtime.register_entry_point(
        EntryPoint(id="api", graph_id="support", trigger="api", input_schema=Query)
    )
    runtime.register_entry_point(
        EntryPoint(id="webhook", graph_id="support", input_schema=Escalation)
    )
    async with runtime:
        exec_2 = await runtime.trigger("api", {"query": "help"})
        result = await runtime.wait(exec_2, timeout=30)
        assert result["messages"][-1].text() == 'ticket -: {"query": "help"}'

        exec_1 = await runtime.trigger("api", {"query": "refund?", "ticket_id": "123"})
        result = await runtime.wait(exec_1, timeout=30)
        assert result["state"].ticket_id == "123"  # a field named like the state's is set
        assert result["messages"][-1].text() == 'ticket 123: {"query": "refund?"}'

        escalated = await runtime.trigger("webhook", Escalation(ticket_id="9", reason="angry"))
        result = await runtime.wait(escalated, timeout=30)
        assert result["messages"][-1].text() == "ticket 9: escalated because angry"

        before = await last_position(store)
        with pytest.raises(InvalidTriggerInputError, match="query: Field required"):
            await runtime.trigger("api", {"qurey": "help"})
        with pytest.raises(InvalidTriggerInputError, match="Escalation"):
            await runtime.trigger("webhook", {"ticket_id": "9"})
        assert await last_position(store) == before


def test_an_input_schema_is_a_model_class() -> None:
    with pytest.raises(RegistrationError, match="pydantic model class"):
        EntryPoint(id="api", graph_id="support", input_schema=dict).check()  # type: ignore[arg-type]


async def test_event_runs_receive_the_event_and_timer_runs_a_shaped_input(store: Any) -> None:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", support_graph(store))
    runtime.add_graph("guardian", support_graph(store, "guardian"))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="support", input_schema=Query))
    runtime.register_entry_point(
        EntryPoint(
            id="on-done",
            graph_id="guardian",
            trigger="event",
            kinds=["run_completed"],
            from_graph="support",
        )
    )
    runtime.register_entry_point(
        EntryPoint(
            id="sweep",
            graph_id="guardian",
            trigger="timer",
            interval_s=3600,
            run_immediately=True,
            input_from=lambda fired: {"ticket_id": "sweep", "messages": [
                Message.text_message(f"{fired['event']['reason']} sweep")
            ]},
        )
    )  # fmt: skip
    async with runtime:
        swept = await until(lambda: runtime.stats()["entry_points"]["sweep"]["completed"])
        assert swept
        thread = await runtime.trigger("api", {"query": "help"})
        await runtime.wait(thread, timeout=30)
        await until(lambda: runtime.stats()["entry_points"]["on-done"]["completed"])
        runs = {
            r.event.entry_point: r.event.thread_id
            async for r in store.read("__runtime__")
            if r.kind == "trigger_accepted"
        }
        guardian = runtime.graphs["guardian"].app
        answered = await guardian.aget_state({"thread_id": runs["on-done"]})
        assert answered.event["type"] == "run_completed"  # hive's {"event": event.to_dict()}
        assert answered.event["thread_id"] == thread
        assert answered.event["graph_id"] == "support"
        timed = await guardian.aget_state({"thread_id": runs["sweep"]})
        assert timed.ticket_id == "sweep" and timed.context[0].text() == "scheduled sweep"
