"""One presenter: every reader's shape of a thread, a state, a run's result and a record is
built by `agentlog.projections.present`, from the same pieces of the one fold."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from agentlog.actors.http import shapes as http
from agentlog.actors.http.limits import shown
from agentlog.events import MemoryEventStore
from agentlog.events.kinds import (
    Event,
    InterruptRaised,
    MessageAppended,
    NodeEntered,
    RunCancelled,
    RunCompleted,
    RunStarted,
    StepAdvanced,
    Stopped,
    StopRequested,
    ThreadCreated,
)
from agentlog.projections import AgentState, Message, present, replay
from agentlog.projections.edge import message_appended

HELLO = message_appended(Message.text_message("hi", message_id="m1")).message
STARTED: list[Event] = [RunStarted(entry_node="a"), MessageAppended(message=HELLO)]
STEPPED: list[Event] = [*STARTED, NodeEntered(node="a"), StepAdvanced(step=1, next_node="b")]

LIVES: dict[str, list[Event]] = {
    "idle": [ThreadCreated(by="alice", metadata={"k": [1, True]})],
    "running": STEPPED,
    "interrupted": [*STEPPED, InterruptRaised(node="b", reason="ask", data={"q": 1})],
    "stopped": [*STEPPED, StopRequested(by="x"), Stopped(node="b", when="after")],
    "completed": [*STEPPED, RunCompleted()],
    "cancelled": [*STEPPED, RunCancelled(by="ops", reason="late", node="b")],
}


async def _state(events: list[Event]) -> AgentState:
    store = MemoryEventStore()
    await store.append("t", events, expected_seq=0, actor="user")
    return replay([r async for r in store.read("t")], AgentState)


EXPECTED_HTTP: dict[str, tuple[str, list[str], bool]] = {
    # life: (status, next, paused)
    "idle": ("idle", ["__start__"], False),
    "running": ("running", ["b"], False),
    "interrupted": ("interrupted_before", ["b"], True),
    "stopped": ("interrupted_after", ["b"], True),
    "completed": ("completed", [], False),
    "cancelled": ("cancelled", [], False),
}


@pytest.mark.parametrize("life", list(LIVES))
async def test_the_http_shapes_say_what_the_fold_says(life: str) -> None:
    """The HTTP API's thread and state, shaped by the presenter: the status, the next node
    (none once the run is over), the pause, and the values the server may show."""
    state = await _state(LIVES[life])
    status, next_nodes, paused = EXPECTED_HTTP[life]
    values, why = shown(state)
    answer = http.state_json("t", state)
    assert answer == {
        "thread_id": "t",
        "values": values,
        "next": next_nodes,
        "step": state.execution_meta.step,
        "status": status,
        "interrupts": answer["interrupts"],
    }
    assert why is None and bool(answer["interrupts"]) == paused
    thread = http.thread_json("t", "g", state, 1.0, 2.0)
    assert (thread["status"], thread["interrupts"]) == (status, answer["interrupts"])
    assert thread["messages"] == len(state.context) and thread["hidden"] is False
    assert (thread["created_at"], thread["updated_at"], thread["graph_id"]) == (1.0, 2.0, "g")
    assert thread["metadata"] == ({"k": [1, True]} if life == "idle" else {})


async def test_the_pieces_say_the_folds_answers() -> None:
    stopped = (await _state(LIVES["stopped"])).execution_meta
    assert present.run_position(stopped) == {
        "status": "interrupted_after",
        "stop": "stopped",
        "step": 1,
        "node": "b",
    }
    assert present.interrupts(stopped)[0]["node"] == "b"
    cancelled = (await _state(LIVES["cancelled"])).execution_meta
    assert present.status(cancelled) == "cancelled" and present.next_nodes(cancelled) == []
    assert present.interrupts(cancelled) == [] and present.stop(cancelled) is None
    created = (await _state(LIVES["idle"])).execution_meta
    assert present.run_position(created)["status"] == "idle"


async def test_a_state_shows_its_custom_fields_but_the_unset_ones() -> None:
    class Notes(AgentState):
        topic: str = ""
        tags: list[str] = []

    state = Notes(topic="x", tags=["a"])
    assert present.fields(state) == {"context_summary": None, "topic": "x", "tags": ["a"]}
    shaped = present.state("t", 3, state, unset=["tags"])
    assert shaped["fields"] == {"context_summary": None, "topic": "x"} and shaped["seq"] == 3
    assert list(shaped) == [
        "thread_id", "seq", "step", "status", "stop", "node", "interrupt", "messages",
        "fields", "state",
    ]  # fmt: skip


async def test_a_record_shaped_for_each_reader() -> None:
    store = MemoryEventStore()
    await store.append("t", STARTED, expected_seq=0, actor="user")
    record = [r async for r in store.read("t")][1]
    whole = present.record(record)
    assert whole == json.loads(msgspec.json.encode(record))
    assert list(whole)[:8] == list(present.RECORD_KEYS) and whole["event"]["kind"] == (
        "message_appended"
    )
    sse = http.sse_record(record, "run-1")
    said = json.loads(sse.split("data: ", 1)[1])
    assert said == present.record_event(record, "run-1")
    update: dict[str, Any] = present.record_update(record)
    assert update["kind"] == "message_appended" and update["message"] == HELLO
    assert update["seq"] == 2 and update["actor"] == "user"
