"""Human edits, new input on a paused thread, and answers to a node's interrupts.

A person paused before the tools node may correct the tool call, answer it themselves
(`as_node="tools"`), or reply instead; every such change is recorded as who did what and
why, and the transcript stays valid for every model provider.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import END, Command, StateGraph, ThreadBusyError, interrupt
from agentlog.events import (
    EventRecord,
    EventStore,
    MessageAppended,
    MessageReplaced,
    SQLiteEventStore,
    ToolCallStarted,
)
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    InvalidStateUpdateError,
    Message,
    ToolResultBlock,
    interrupt_summary,
)
from tests.workers.charge_graph import CALL_ID, ask_message, charge_graph, check_transcript

CFG = {"thread_id": "t1"}
WAIT = 5.0


def pay() -> dict[str, Any]:
    return {"messages": [Message.text_message("pay", message_id="u-1")]}


async def records(store: EventStore, thread_id: str = "t1") -> list[EventRecord]:
    return [r async for r in store.read(thread_id)]


class Charges:
    """A sync `charge` tool recording the amount of every call."""

    def __init__(self) -> None:
        self.amounts: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()

    def charge(self, amount: int) -> str:
        """Charge the customer's card.

        Args:
            amount: how much, in cents.
        """
        self.amounts.append(amount)
        self.started.set()
        self.gate.wait(WAIT * 2)
        return f"charged {amount}"


async def paused_before_tools(store: EventStore, charges: Charges) -> Any:
    """The charge graph on `store`, paused before its tools node with one pending call."""
    app = charge_graph(store, [charges.charge], amount=10, interrupt_before=["tools"])
    result = await app.ainvoke(pay(), CFG)
    (pause,) = result["__interrupt__"]
    assert (pause["node"], pause["status"]) == ("tools", "interrupted_before")
    return app


# --- correcting a tool call --------------------------------------------------------------


async def test_a_corrected_tool_call_replaces_the_message_and_is_what_runs(
    store: EventStore,
) -> None:
    charges = Charges()
    app = await paused_before_tools(store, charges)
    before = (await app.aget_state(CFG)).context
    fixed = ask_message(25, message_id="a-1")  # the same message, the amount corrected
    assert fixed.message_id == before[1].message_id

    await app.aupdate_state(CFG, {"messages": [fixed]}, actor="alice", reason="fix amount")

    last = (await records(store))[-1]
    assert (last.kind, last.actor) == ("message_replaced", "alice")
    assert isinstance(last.event, MessageReplaced) and last.event.reason == "fix amount"
    after = (await app.aget_state(CFG)).context
    assert [m.message_id for m in after] == [m.message_id for m in before]
    assert after[1].tool_calls()[0].args == {"amount": 25}
    assert after[0] == before[0]

    result = await app.ainvoke(None, CFG, "partial")
    assert result["status"] == ExecutionStatus.COMPLETED.value
    assert charges.amounts == [25]
    started = [r.event for r in await records(store) if isinstance(r.event, ToolCallStarted)]
    assert [s.args for s in started] == [{"amount": 25}]
    check_transcript(result["context"])
    tool = [m for m in result["messages"] if m.role == "tool"]
    assert [m.text() for m in tool] == ["charged 25"]


async def test_the_reason_of_an_edit_that_adds_a_message_is_recorded(store: EventStore) -> None:
    app = await paused_before_tools(store, Charges())
    block = ToolResultBlock(call_id=CALL_ID, output="customer confirmed by phone")
    note = Message.tool_message([block], message_id="n-1")
    await app.aupdate_state(CFG, {"messages": [note]}, actor="bob", reason="phone call")
    last = (await records(store))[-1]
    assert (last.kind, last.actor) == ("message_appended", "bob")
    assert isinstance(last.event, MessageAppended) and last.event.reason == "phone call"
    assert (await app.aget_state(CFG)).context[-1].message_id == "n-1"


# --- answering a tool call as the tools node -----------------------------------------------


async def test_a_note_between_a_call_and_its_result_is_refused(store: EventStore) -> None:
    """A message added while the run waits at its tool node would sit between the calls
    and their results, an order no model provider takes: refused, nothing written."""
    app = await paused_before_tools(store, Charges())
    before = await store.last_seq("t1")
    note = Message.text_message("customer confirmed by phone", role="user")
    with pytest.raises(InvalidStateUpdateError, match="answer the open tool calls first"):
        await app.aupdate_state(CFG, {"messages": [note]}, actor="bob")
    assert await store.last_seq("t1") == before


async def test_a_human_answer_as_the_tools_node_skips_the_tool_and_pauses_at_the_agent(
    store: EventStore,
) -> None:
    charges = Charges()
    app = await paused_before_tools(store, charges)
    answer = Message.tool_message(
        [ToolResultBlock(call_id=CALL_ID, output="paid by phone")], message_id="tool-human"
    )
    await app.aupdate_state(CFG, {"messages": [answer]}, as_node="tools", actor="alice")

    state = await app.aget_state(CFG)
    pause = interrupt_summary(state.execution_meta)
    assert pause is not None and pause["node"] == "agent"
    assert pause["status"] == "interrupted_before"
    assert "alice" in str(pause["reason"])
    assert state.context[-1].message_id == "tool-human"
    kinds = [r.kind for r in await records(store)]
    assert "tool_call_started" not in kinds and "node_entered" not in kinds[-4:]

    result = await app.ainvoke(None, CFG, "partial")
    assert result["status"] == ExecutionStatus.COMPLETED.value
    assert charges.amounts == [], "the human answered the call: the tool must not run"
    assert [m.text() for m in result["context"]][-2:] == ["paid by phone", "done"]
    check_transcript(result["context"])


# --- edits against a run in flight ---------------------------------------------------------


async def test_an_edit_while_a_run_is_in_flight_is_refused_and_the_run_completes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    charges = Charges()
    charges.gate.clear()
    async with SQLiteEventStore(db) as store, SQLiteEventStore(db) as other:
        app = charge_graph(store, [charges.charge])
        elsewhere = charge_graph(other, [charges.charge])
        task = asyncio.create_task(app.ainvoke(pay(), CFG))
        try:
            assert await asyncio.to_thread(charges.started.wait, WAIT)
            seq = await store.last_seq("t1")
            note = {"messages": [Message.text_message("hold on", message_id="n-1")]}
            with pytest.raises(ThreadBusyError, match="'t1'"):
                await app.aupdate_state(CFG, note, actor="alice", reason="same app")
            with pytest.raises(ThreadBusyError, match="'t1'"):
                await elsewhere.aupdate_state(CFG, note, actor="bob", reason="second store")
            assert await store.last_seq("t1") == seq, "a refused edit wrote something"
        finally:
            charges.gate.set()
        result = await asyncio.wait_for(task, WAIT)
        assert result["status"] == ExecutionStatus.COMPLETED.value
        kinds = [r.kind for r in await records(store)]
        assert "run_failed" not in kinds and kinds[-1] == "run_completed"
        assert all(m.message_id != "n-1" for m in result["messages"])
        # Once the run is over, the same edit is accepted.
        await elsewhere.aupdate_state(CFG, note, actor="bob", reason="after the run")
        assert (await records(other))[-1].actor == "bob"


# --- new input where a tool call waits for approval --------------------------------------


async def test_new_input_before_an_approval_rejects_the_pending_call(store: EventStore) -> None:
    charges = Charges()
    app = await paused_before_tools(store, charges)
    reply = {"messages": [Message.text_message("actually, don't", message_id="u-2")]}
    result = await app.ainvoke(reply, CFG, "partial")

    assert charges.amounts == [], "the user replied instead of approving"
    messages: list[Message] = result["context"]
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    (block,) = messages[2].content
    assert isinstance(block, ToolResultBlock)
    assert (block.call_id, block.status, block.is_error) == (CALL_ID, "rejected", True)
    assert "user replied" in str(block.output)
    assert messages[3].message_id == "u-2"
    check_transcript(messages)
    log = await records(store)
    assert [r.kind for r in log].count("run_started") == 2
    assert "tool_call_started" not in [r.kind for r in log]
    assert result["status"] == ExecutionStatus.COMPLETED.value


# --- one resume value per interrupt() call -------------------------------------------------


async def test_each_interrupt_call_gets_its_own_resume_value(tmp_path: Path) -> None:
    asked: list[str] = []

    def profile(state: AgentState) -> list[Message]:
        name = interrupt("name?")
        asked.append(f"name={name!r}")
        age = interrupt("age?", {"after": name})
        asked.append(f"age={age!r}")
        return [Message.text_message(f"{name} is {age}", role="assistant")]

    def build(store: EventStore) -> Any:
        graph: StateGraph[AgentState] = StateGraph()
        graph.add_node("profile", profile)
        graph.set_entry_point("profile")
        graph.add_edge("profile", END)
        return graph.compile(store)

    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as store:
        first = await build(store).ainvoke(pay(), CFG)
    assert first["__interrupt__"][0]["reason"] == "name?"
    async with SQLiteEventStore(db) as store:  # each answer from a fresh process's view
        second = await build(store).ainvoke(Command(resume="Ann"), CFG)
    (pause,) = second["__interrupt__"]
    assert (pause["reason"], pause["data"]) == ("age?", {"after": "Ann"})
    async with SQLiteEventStore(db) as store:
        done = await build(store).ainvoke(Command(resume=42), CFG)
    assert done["status"] == ExecutionStatus.COMPLETED.value
    assert done["messages"][-1].text() == "Ann is 42"
    assert asked == ["name='Ann'", "name='Ann'", "age=42"]
