"""The fold: every kind applied, decide-time refusals, purity, snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest

from agentlog.events import (
    ContextSummarized,
    Forked,
    InterruptRaised,
    MemoryEventStore,
    NodeEntered,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    Snapshot,
    SQLiteEventStore,
    StateUpdated,
    StepAdvanced,
    Stopped,
    StopRequested,
    ThreadNotFoundError,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.events.kinds import EVENT_TYPES, Event, ThreadCreated
from agentlog.events.record import EventRecord
from agentlog.projections import (
    END,
    AgentState,
    ExecutionStatus,
    IllegalTransitionError,
    InvalidStateUpdateError,
    Message,
    PointOutOfRangeError,
    StopRequestStatus,
    apply,
    decide,
    message_appended,
    messages_replaced,
    replay,
    state_at,
    state_updated,
    take_snapshot,
)
from agentlog.projections.fold import _HANDLERS

from .helpers import line, step_events, text_event


def records(events: list[Event], thread_id: str = "t") -> list[EventRecord]:
    return [
        EventRecord(
            thread_id=thread_id, seq=i + 1, position=i + 1, run_id="r", actor="a", at=0.0,
            kind=type(e).__struct_config__.tag, version=1, event=e, hash="",  # type: ignore[arg-type]
        )
        for i, e in enumerate(events)
    ]  # fmt: skip


def test_fold_is_total_over_the_union() -> None:
    assert set(_HANDLERS) == set(EVENT_TYPES)


def test_a_whole_run_folds_to_the_expected_state() -> None:
    events: list[Event] = [
        RunStarted(entry_node="agent"),
        text_event("hi", "m1"),
        *step_events(1),
        ToolCallStarted(call_id="c", name="f"),
        ToolCallFinished(call_id="c", name="f", output=1),
        InterruptRaised(node="tools", reason="approve", when="before", data={"x": 1}),
        Resumed(value="yes", by="user"),
        StopRequested(by="user"),
        Stopped(node="agent"),
        Resumed(),
        RunCompleted(),
    ]
    decide(AgentState(), events, seq=0)
    state = replay(records(events))
    meta = state.execution_meta
    assert meta.status is ExecutionStatus.COMPLETED and meta.current_node == END
    assert meta.step == 1 and meta.thread_id == "t"
    assert meta.stop_current_execution is StopRequestStatus.NONE
    assert [m.text() for m in state.context] == ["hi", "hello 1"]
    assert "pending_tool_calls" not in meta.internal_data


def test_interrupt_and_failure_are_recorded() -> None:
    state = replay(records([RunStarted(), InterruptRaised(node="n", reason="r", when="after")]))
    assert state.execution_meta.status is ExecutionStatus.INTERRUPTED_AFTER
    assert state.execution_meta.interrupted_node == "n"
    failed = replay(
        records([RunStarted(), RunFailed(node="n", error_type="KeyError", message="x")])
    )
    assert failed.execution_meta.status is ExecutionStatus.ERROR
    assert failed.execution_meta.internal_data["error"] == "KeyError: x"
    assert failed.execution_meta.internal_data["failed_node"] == "n"


def test_apply_is_pure() -> None:
    before = AgentState()
    after = apply(before, records([text_event("x")])[0])
    assert before.context == [] and len(after.context) == 1


def test_replay_does_not_touch_the_given_state() -> None:
    base = replay(records([text_event("x", "m1")]))
    more = replay(records([text_event("y", "m2")]), state=base)
    assert [m.message_id for m in base.context] == ["m1"]
    assert [m.message_id for m in more.context] == ["m1", "m2"]


def test_duplicate_message_ids_and_deltas_are_skipped() -> None:
    delta = Message(role="assistant", content=[], delta=True)
    state = replay(records([text_event("a", "m"), text_event("b", "m"), message_appended(delta)]))
    assert [m.text() for m in state.context] == ["a"]


def test_replace_and_summarize_rebuild_the_context() -> None:
    keep = Message.text_message("kept", message_id="k")
    events: list[Event] = [
        text_event("a", "m1"),
        messages_replaced([keep]),
        text_event("again", "m1"),
        ContextSummarized(summary="earlier: greetings", messages=[keep.model_dump(mode="json")]),
    ]
    state = replay(records(events))
    assert state.context == [keep] and state.context_summary == "earlier: greetings"


class Custom(AgentState):
    notes: Annotated[list[str], lambda old, new: old + new] = []
    mood: str = "calm"
    count: int = 0


def test_state_updates_merge_through_reducers() -> None:
    events: list[Event] = [
        state_updated({"notes": ["a"], "mood": "happy"}),
        state_updated({"notes": ["b"], "count": "3"}, source="user", reason="fix"),
        state_updated({"messages": [Message.text_message("via update").model_dump()]}),
    ]
    decide(Custom(), events)
    state = replay(records(events), Custom)
    assert state.notes == ["a", "b"] and state.mood == "happy" and state.count == 3
    assert state.context[0].text() == "via update"


def test_bad_state_updates_are_refused_at_decide_time() -> None:
    with pytest.raises(InvalidStateUpdateError, match="no field 'nope'") as typo:
        decide(Custom(), [state_updated({"nope": 1})])
    # The fields listed are the ones input may name, `messages` among them; the
    # transitions are named only for the one field that has them.
    assert "messages" in str(typo.value) and "transitions" not in str(typo.value)
    with pytest.raises(InvalidStateUpdateError, match="no field 'execution_meta'"):
        decide(Custom(), [state_updated({"execution_meta": {}})])
    with pytest.raises(InvalidStateUpdateError, match="field 'count' of Custom cannot take 'many'"):
        decide(Custom(), [state_updated({"count": "many"})])
    with pytest.raises(InvalidStateUpdateError):
        decide(
            AgentState(),
            [message_appended(Message.text_message("x")).__class__(message={"role": "x"})],
        )


def completed() -> AgentState:
    return replay(records([RunStarted(), RunCompleted()]))


def interrupted() -> AgentState:
    return replay(records([RunStarted(), InterruptRaised(node="n", reason="r")]))


@pytest.mark.parametrize(
    ("state", "events", "match"),
    [
        (completed, [StepAdvanced(step=1)], "completed"),
        (completed, [NodeEntered(node="n")], "completed"),
        (completed, [RunCompleted()], "already completed"),
        (AgentState, [StepAdvanced(step=5)], "does not follow"),
        (AgentState, [Resumed()], "no interrupt"),
        (interrupted, [NodeEntered(node="n")], "paused"),
        (AgentState, [Stopped()], "no stop was requested"),
        (AgentState, [StopRequested(), StopRequested()], "already stop_requested"),
        (AgentState, [ToolCallFinished(call_id="c", name="f")], "never started"),
        (AgentState, [Forked(source_thread="s", source_seq=1, state={})], "first event"),
        (AgentState, [RunStarted(), NodeEntered(node="a"), RunStarted()], "already in progress"),
        (AgentState, [ThreadCreated(by="ops")], "created once"),
        (completed, [ThreadCreated(by="ops")], "created once"),
    ],
)
def test_illegal_transitions_are_refused(state, events, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(IllegalTransitionError, match=match):
        decide(state(), events, seq=None if events and isinstance(events[0], Forked) else 1)


def test_decide_changes_nothing() -> None:
    state = AgentState()
    decide(state, [RunStarted(), *step_events(1)], seq=0)
    assert state == AgentState()


def test_a_new_run_after_completion_is_legal() -> None:
    state = completed()
    decide(state, [RunStarted(entry_node="agent"), NodeEntered(node="agent")])
    again = replay(records([RunStarted(), RunCompleted(), RunStarted(entry_node="agent")]))
    assert again.execution_meta.status is ExecutionStatus.RUNNING


def test_fork_starts_from_the_given_state() -> None:
    source = replay(records([RunStarted(), text_event("hi", "m1"), *step_events(1)]))
    fork = Forked(source_thread="t", source_seq=5, state=source.model_dump(mode="json"))
    decide(AgentState(), [fork], seq=0)
    state = replay(records([fork], thread_id="t2"))
    assert state.context == source.context
    assert state.execution_meta.thread_id == "t2"
    assert state.execution_meta.internal_data["forked_from"] == {"thread_id": "t", "seq": 5}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_state_at_uses_snapshot_and_tail(kind: str, tmp_path: Path) -> None:
    store = MemoryEventStore() if kind == "memory" else SQLiteEventStore(tmp_path / "s.db")
    async with store:
        seq = 0
        for step in range(1, 21):
            seq = (await store.append("t", step_events(step), expected_seq=seq))[-1].seq
        full = await state_at(store, "t", use_snapshots=False)
        snap = await take_snapshot(store, "t", 30)
        assert snap.seq == 30
        assert await state_at(store, "t") == full
        at30 = await state_at(store, "t", 30)
        assert at30.execution_meta.step == 10 and at30 == await state_at(
            store, "t", 30, use_snapshots=False
        )
        assert (await state_at(store, "t", 12)).execution_meta.step == 4
        with pytest.raises(PointOutOfRangeError, match="61"):
            await state_at(store, "t", 61)
        with pytest.raises(ThreadNotFoundError):
            await state_at(store, "missing")


async def test_snapshot_of_another_state_class_is_ignored() -> None:
    async with MemoryEventStore() as store:
        await store.append("t", [text_event("a"), text_event("b")], expected_seq=0)
        foreign = Snapshot(thread_id="t", seq=2, state={"context": "garbage"}, state_type="x.Y")
        await store.save_snapshot(foreign)
        assert await state_at(store, "t") == await state_at(store, "t", use_snapshots=False)


async def test_replaying_into_a_class_without_the_field_is_a_typed_error() -> None:
    async with MemoryEventStore() as store:
        await store.append("t", [state_updated({"mood": "sad"})], expected_seq=0)
        with pytest.raises(InvalidStateUpdateError, match="state_cls"):
            await state_at(store, "t")
        await take_snapshot(store, "t", state_cls=Custom)
        assert (await state_at(store, "t", state_cls=Custom)).mood == "sad"


def test_decide_turns_a_malformed_update_into_a_typed_error() -> None:
    with pytest.raises(InvalidStateUpdateError, match="list of messages"):
        decide(AgentState(), [StateUpdated(values={"context": None})])


def test_a_declared_context_reducer_is_honoured() -> None:
    from agentlog.projections import replace_messages

    class Replacing(AgentState):
        context: Annotated[list[Message], replace_messages] = []

    events: list[Event] = [
        state_updated({"context": [Message.text_message("a").model_dump()]}),
        state_updated({"context": [Message.text_message("b").model_dump()]}),
    ]
    assert [m.text() for m in replay(records(events), Replacing).context] == ["b"]


def test_a_paused_run_cannot_complete_or_fail() -> None:
    with pytest.raises(IllegalTransitionError, match="paused"):
        decide(interrupted(), [RunCompleted()])
    with pytest.raises(IllegalTransitionError, match="paused"):
        decide(interrupted(), [RunFailed(node="n", error_type="E", message="m")])


def test_resuming_a_failed_run_clears_the_failure() -> None:
    state = replay(
        records([RunStarted(), RunFailed(node="n", error_type="E", message="m"), Resumed()])
    )
    assert "failed_node" not in state.execution_meta.internal_data
    assert "error" not in state.execution_meta.internal_data


def test_a_created_thread_holds_who_and_its_metadata_and_is_otherwise_fresh_and_idle() -> None:
    created = ThreadCreated(by="alice", graph_id="support", metadata={"k": [1, "v"]})
    decide(AgentState(), [created], seq=0)
    state = replay(records([created]))
    meta = state.execution_meta
    assert meta.internal_data == {"created": {"by": "alice", "metadata": {"k": [1, "v"]}}}
    fresh = AgentState().execution_meta
    assert meta.model_copy(update={"internal_data": {}, "status": fresh.status}) == fresh
    assert state.context == [] and meta.status is ExecutionStatus.IDLE  # no run has begun
    started = replay(records([created, RunStarted(entry_node="agent")]))
    assert started.execution_meta.status is ExecutionStatus.RUNNING


def test_a_created_thread_takes_its_first_run_and_then_none_beside_it() -> None:
    created = ThreadCreated(by="alice")
    state = replay(records([created]))
    decide(state, [RunStarted(entry_node="agent"), NodeEntered(node="agent")], seq=1)
    running = replay(records([created, RunStarted(entry_node="agent"), NodeEntered(node="a")]))
    assert running.execution_meta.internal_data["created"] == {"by": "alice", "metadata": {}}
    with pytest.raises(IllegalTransitionError, match="already in progress"):
        decide(running, [RunStarted()], seq=3)
    with pytest.raises(IllegalTransitionError, match="created once"):
        decide(state, [created], seq=1)


async def test_a_run_on_a_created_thread_replays_to_its_live_state() -> None:
    def reply(state: AgentState) -> list[Message]:
        return [Message.text_message(f"seen {len(state.context)}", role="assistant")]

    async with MemoryEventStore() as store:
        app = line(("draft", reply), ("send", reply)).compile(store)
        created = ThreadCreated(by="alice", graph_id="g", metadata={"k": "v"})
        await app.awrite_claimed("t", lambda fold: [created], actor="alice", what="a creation")
        result = await app.ainvoke("hi", {"thread_id": "t"}, include_state=True)
        live = result["state"]
        assert live == await state_at(store, "t", use_snapshots=False)
        assert [m.text() for m in live.context] == ["hi", "seen 1", "seen 2"]
        meta = live.execution_meta
        assert meta.status is ExecutionStatus.COMPLETED and meta.step == 2
        assert meta.internal_data["created"] == {"by": "alice", "metadata": {"k": "v"}}
        kinds = [(r.kind, r.actor) async for r in store.read("t")]
        assert kinds[:2] == [("thread_created", "alice"), ("run_started", "user")]
        again = await app.ainvoke("more", {"thread_id": "t"}, include_state=True)
        assert again["state"] == await state_at(store, "t", use_snapshots=False)
        assert [r.kind async for r in store.read("t")].count("run_started") == 2
