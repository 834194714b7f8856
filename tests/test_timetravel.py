"""Time travel: past states, history, diffs, forks and human edits, all read from the log.

The property tests drive a small scripted graph (one worker node looping until its count
reaches a target, nodes pausing by `interrupt()`, humans editing while it is paused or done)
and check that every point of the log reads back as the live run saw it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from pydantic import Field

from agentlog.actors import (
    END,
    Command,
    CompiledGraph,
    GraphError,
    RecursionLimitError,
    StateGraph,
    ThreadBusyError,
    interrupt,
)
from agentlog.events import (
    EventRecord,
    EventStore,
    MemoryEventStore,
    MessagesReplaced,
    SQLiteEventStore,
    ThreadNotFoundError,
)
from agentlog.events.codec import Row
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    ForkPointInCommitError,
    IllegalTransitionError,
    InvalidStateUpdateError,
    Message,
    PointOutOfRangeError,
    ToolCallBlock,
    ToolResultBlock,
    replay,
    state_at,
    step_seq,
)
from agentlog.projections.commits import inside_commits
from agentlog.projections.keys import ENTERED_KEY

from .helpers import agent_with_tools, line

CFG = {"thread_id": "t"}


# ---- the scripted graph ------------------------------------------------------------------


def keep_adding(left: list[str], right: list[str]) -> list[str]:
    return [*left, *right]


class Tally(AgentState):
    """`count` is the worker's steps so far; each run's input sets the `target` it stops at."""

    count: int = 0
    target: int = 0
    notes: Annotated[list[str], keep_adding] = Field(default_factory=list)
    label: str = ""


OPS = ("say", "note", "label", "state", "quiet")


@dataclass
class Script:
    """What the worker does at each count, where it pauses, and what it saw each time."""

    ops: list[str]
    pauses: set[int] = field(default_factory=set)
    seen: list[tuple[int, Tally]] = field(default_factory=list)


def clone(state: Tally) -> Tally:
    """A detached copy of the view a node was handed."""
    return Tally.model_validate(state.model_dump())


def tally_graph(script: Script, store: EventStore) -> StateGraph[Tally]:
    async def work(state: Tally, config: dict[str, Any]) -> Any:
        # The log's last record is this node's node_entered: the state handed to the node
        # must be exactly the state at that seq.
        script.seen.append((await store.last_seq(config["thread_id"]), clone(state)))
        n = state.count
        answer = interrupt("go on?", {"count": n}) if n in script.pauses else None
        op = script.ops[n % len(script.ops)]
        if op == "state":
            state.count, state.label = n + 1, f"state{n}"
            return state
        out: dict[str, Any] = {"count": n + 1}
        if op == "say":
            out["messages"] = [Message.text_message(f"step {n} {answer}", role="assistant")]
        elif op == "note":
            out["notes"] = [f"n{n}"]
        elif op == "label":
            out["label"] = f"label{n}"
        return out

    def route(state: Tally) -> str:
        return END if state.count >= state.target else "work"

    graph: StateGraph[Tally] = StateGraph(Tally)
    graph.add_node("work", work)
    graph.set_entry_point("work")
    graph.add_conditional_edges("work", route, {"work": "work", END: END})
    return graph


@dataclass(frozen=True)
class Edit:
    values: dict[str, Any]
    actor: str
    reason: str | None


edits = st.builds(
    lambda what, text, actor, reason: Edit(
        {
            "label": {"label": text},
            "notes": {"notes": [text]},
            "message": {"messages": [Message.text_message(f"human {text}")]},
            "both": {"label": text, "notes": [text, text]},
        }[what],
        actor,
        reason,
    ),
    st.sampled_from(["label", "notes", "message", "both"]),
    st.text(alphabet="abc", max_size=3),
    st.sampled_from(["user", "alice", "bob"]),
    st.none() | st.sampled_from(["typo", "policy"]),
)
steps = st.tuples(st.sampled_from(OPS), st.booleans(), st.none() | edits)
"""One worker step: what it does, whether it pauses first, the edit made while paused."""
runs = st.lists(
    st.tuples(st.lists(steps, min_size=1, max_size=5), st.none() | edits), min_size=1, max_size=3
)
"""Runs on one thread, each a list of steps and the edit made once it completed."""


@dataclass
class Drive:
    """What a scripted drive left behind: the app, and the live state at each stop."""

    app: CompiledGraph[Tally]
    script: Script
    stops: list[tuple[int, Tally]]
    edits: int = 0


async def drive(
    plan: list[tuple[list[tuple[str, bool, Edit | None]], Edit | None]],
    *,
    store: EventStore | None = None,
    snapshot_every: int | None = None,
    config: dict[str, Any] = CFG,
) -> Drive:
    """Run `plan` on a thread: resume every pause, make every edit, keep each stop's state."""
    store = store if store is not None else MemoryEventStore()
    flat = [s for run, _ in plan for s in run] or [("quiet", False, None)]
    script = Script([op for op, _, _ in flat], {i for i, (_, p, _) in enumerate(flat) if p})
    paused_edits = {i: e for i, (_, _, e) in enumerate(flat)}
    app = tally_graph(script, store).compile(checkpointer=store, snapshot_every=snapshot_every)
    stops: list[tuple[int, Tally]] = []
    done = Drive(app, script, stops)

    async def stop(out: dict[str, Any]) -> None:
        stops.append((await store.last_seq(config["thread_id"]), out["state"]))

    target = 0
    for r, (run, after) in enumerate(plan):
        target += len(run)
        start = {"messages": [Message.text_message(f"run {r}")], "target": target}
        out = await app.ainvoke(start, config, include_state=True)
        await stop(out)
        while out["state"].execution_meta.is_interrupted():
            count = out["state"].count
            edit = paused_edits[count]
            if edit is not None:
                await app.aupdate_state(config, edit.values, actor=edit.actor, reason=edit.reason)
                done.edits += 1
            out = await app.ainvoke(Command(resume=f"ok{count}"), config, include_state=True)
            await stop(out)
        assert out["state"].execution_meta.status == ExecutionStatus.COMPLETED
        if after is not None:
            await app.aupdate_state(config, after.values, actor=after.actor, reason=after.reason)
            done.edits += 1
    return done


async def log_of(store: EventStore, thread_id: str = "t") -> list[EventRecord]:
    return [r async for r in store.read(thread_id)]


def without_entered(state: Tally) -> Tally:
    copy = state.model_copy(deep=True)
    copy.execution_meta.internal_data.pop(ENTERED_KEY, None)
    return copy


def texts(messages: list[Message]) -> list[str]:
    return [m.text() for m in messages]


def fields(state: AgentState) -> dict[str, Any]:
    """Messages and custom fields: what a thread holds, apart from where its run stands."""
    return state.model_dump(exclude={"execution_meta"})


# ---- properties --------------------------------------------------------------------------


@settings(max_examples=40)
@given(plan=runs)
def test_the_state_at_every_point_is_the_state_the_live_run_had(plan: Any) -> None:
    async def check() -> None:
        run = await drive(plan)
        app, store = run.app, run.app.store
        records = await log_of(store)

        # Each node was handed exactly the state at its node_entered record.
        for seq, view in run.script.seen:
            assert records[seq - 1].kind == "node_entered"
            assert await app.aget_state(CFG, at_seq=seq) == view

        # Each stop (pause or end) is the state at the seq it stopped at, and the last is now.
        for seq, live in run.stops:
            assert await app.aget_state(CFG, at_seq=seq) == live
        assert await app.aget_state(CFG) == replay(records, Tally)

        # Step k is the state right after step k's step_advanced record.
        last_step = (await app.aget_state(CFG)).execution_meta.step
        for k in range(last_step + 1):
            seq = await step_seq(store, "t", k)
            at_k = await app.aget_state(CFG, at_step=k)
            assert at_k.execution_meta.step == k
            assert at_k == replay(records[:seq], Tally)
            if k:
                assert records[seq - 1].kind == "step_advanced"
                assert records[seq - 1].event.step == k  # type: ignore[union-attr]

        # A node entered straight after step k saw step k's state, and nothing else.
        straight = 0
        for seq, view in run.script.seen:
            before = records[seq - 2]
            if before.kind == "step_advanced":
                k = before.event.step  # type: ignore[union-attr]
                assert without_entered(view) == await app.aget_state(CFG, at_step=k)
                straight += 1
        event(f"nodes entered straight after a step: {min(straight, 3)}+")
        event(f"runs: {len(plan)}; human edits: {min(run.edits, 3)}+")
        event(f"pauses: {min(sum(r.kind == 'interrupt_raised' for r in records), 3)}+")

        # History: one entry per step, contiguous from seq 1 to the last step, each loading
        # the state at its step; its messages are the ones a diff from the step before adds.
        history = await app.aget_state_history(CFG)
        assert [e.step for e in history] == list(range(1, last_step + 1))
        assert history[0].first_seq == 1
        assert history[-1].last_seq == await step_seq(store, "t", last_step)
        for before, after in itertools.pairwise(history):
            assert after.first_seq == before.last_seq + 1
            added = (await app.adiff(CFG, before.step, after.step)).messages_added
            assert added == after.messages
        for entry in history:
            assert entry.node == "work"
            assert await entry.state() == await app.aget_state(CFG, at_step=entry.step)
        at_last = await app.aget_state(CFG, at_step=last_step)
        assert [m for e in history for m in e.messages] == at_last.context

    asyncio.run(check())


@settings(max_examples=30)
@given(plan=runs, every=st.integers(1, 4))
def test_snapshot_plus_tail_equals_a_full_replay_at_every_point(plan: Any, every: int) -> None:
    async def check() -> None:
        run = await drive(plan, snapshot_every=every)
        store = run.app.store
        records = await log_of(store)
        last = len(records)
        assert await store.load_snapshot("t") is not None or last < every
        for seq in range(last + 1):
            fast = await state_at(store, "t", seq, Tally)
            full = await state_at(store, "t", seq, Tally, use_snapshots=False)
            assert fast == full == replay(records[:seq], Tally)

    asyncio.run(check())


no_edits = st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from(OPS), st.booleans(), st.none()), min_size=1, max_size=5),
        st.none(),
    ),
    min_size=1,
    max_size=2,
)


@settings(max_examples=30)
@given(plan=no_edits, data=st.data())
def test_a_fork_at_any_step_holds_the_source_state_there_and_runs_on_to_the_end(
    plan: Any, data: st.DataObject
) -> None:
    async def check() -> None:
        run = await drive(plan)
        app, store = run.app, run.app.store
        source = await log_of(store)
        last_step = (await app.aget_state(CFG)).execution_meta.step
        k = data.draw(st.integers(0, last_step), label="fork at step")
        fork_cfg = {"thread_id": await app.afork(CFG, at_step=k)}
        assert fork_cfg["thread_id"] != "t"
        assert await log_of(store) == source, "forking changed the source thread"

        at_k = await app.aget_state(CFG, at_step=k)
        forked = await app.aget_state(fork_cfg)
        assert fields(forked) == fields(at_k)
        meta, source_meta = forked.execution_meta, at_k.execution_meta
        assert (meta.step, meta.current_node) == (source_meta.step, source_meta.current_node)
        ended = source_meta.current_node == END  # its last step taken: nothing left to run
        if source_meta.status == ExecutionStatus.RUNNING and ended:
            assert meta.status == ExecutionStatus.COMPLETED
        elif source_meta.status == ExecutionStatus.RUNNING:  # a run going there: paused at it
            assert meta.status == ExecutionStatus.INTERRUPTED_BEFORE
            assert (meta.interrupted_node, meta.interrupt_reason) == (meta.current_node, "forked")
        else:
            assert meta.status == source_meta.status
        assert meta.thread_id == fork_cfg["thread_id"]
        first = (await log_of(store, fork_cfg["thread_id"]))[0]
        assert first.kind == "forked"
        assert first.event.source_thread == "t"  # type: ignore[union-attr]
        assert first.event.source_seq == await step_seq(store, "t", k)  # type: ignore[union-attr]
        assert await app.aget_state(fork_cfg, at_step=k) == forked

        # Run the fork to the end of the run it was in: it ends as the source did then.
        out = {"state": forked}
        if not ended:
            out = await app.ainvoke(None, fork_cfg, include_state=True)
        while out["state"].execution_meta.is_interrupted():
            out = await app.ainvoke(
                Command(resume=f"ok{out['state'].count}"), fork_cfg, include_state=True
            )
        done = out["state"]
        assert done.execution_meta.status == ExecutionStatus.COMPLETED
        source_end = await app.aget_state(CFG, at_step=done.target)
        assert done.execution_meta.step == source_end.execution_meta.step == done.target
        assert texts(done.context) == texts(source_end.context)
        assert done.context[: len(at_k.context)] == at_k.context
        assert (done.count, done.notes, done.label) == (
            source_end.count,
            source_end.notes,
            source_end.label,
        )
        assert await log_of(store) == source, "running the fork changed the source thread"
        assert (await store.verify(fork_cfg["thread_id"])).ok
        again = await app.aget_state(fork_cfg, at_step=k)
        assert fields(again) == fields(forked)
        assert again.execution_meta.step == k
        history = await app.aget_state_history(fork_cfg)
        assert [e.step for e in history] == list(range(k + 1, done.target + 1))

    asyncio.run(check())


# ---- a tool-using graph for the worked examples ------------------------------------------


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def weather_agent(state: AgentState) -> list[Message]:
    last = state.context[-1]
    if last.role == "tool":
        return [Message.text_message(f"answer: {last.text()}", role="assistant")]
    call = ToolCallBlock(id=f"call-{len(state.context)}", name="get_weather", args={"city": "Oslo"})
    return [Message(role="assistant", content=[call])]


def weather_graph(state_cls: type[AgentState] = AgentState) -> StateGraph[Any]:
    graph: StateGraph[Any] = agent_with_tools(weather_agent, [get_weather], state_cls)
    return graph


# ---- history -----------------------------------------------------------------------------


async def test_history_has_one_entry_per_step_covering_the_log(store: EventStore) -> None:
    app = weather_graph().compile(checkpointer=store, interrupt_before=["tools"])
    question = Message.text_message("weather?")
    await app.ainvoke({"messages": [question]}, CFG)

    paused = await app.aget_state_history(CFG)
    assert [(e.step, e.node, e.status) for e in paused] == [(1, "agent", "interrupted")]

    await app.ainvoke(None, CFG)
    history = await app.aget_state_history(CFG)
    records = await log_of(store)
    assert [(e.step, e.node, e.status) for e in history] == [
        (1, "agent", "interrupted"),  # what followed the step: the pause before tools
        (2, "tools", "running"),
        (3, "agent", "completed"),
    ]
    assert history[0].first_seq == 1
    for before, after in itertools.pairwise(history):
        assert after.first_seq == before.last_seq + 1
        assert after.at >= before.at
    assert records[history[-1].last_seq - 1].kind == "step_advanced"
    assert [r.kind for r in records[history[-1].last_seq :]] == ["run_completed"]
    assert [texts(e.messages) for e in history] == [
        ["weather?", ""],
        ["sunny in Oslo"],
        ["answer: sunny in Oslo"],
    ]
    assert history[0].messages[0] == question
    assert history[0].messages[1].tool_calls()[0].name == "get_weather"
    for entry in history:
        assert entry.at == records[entry.last_seq - 1].at
        assert await entry.state() == await app.aget_state(CFG, at_step=entry.step)
    assert (await history[-1].state()).context == (await app.aget_state(CFG)).context


async def test_history_shows_a_run_that_failed_or_stopped_after_a_step() -> None:
    said = [Message.text_message("a", role="assistant")]
    app = line(("a", lambda state: said), ("b", lambda state: said)).compile(recursion_limit=1)
    with pytest.raises(RecursionLimitError):
        await app.ainvoke({"messages": [Message.text_message("go")]}, CFG)
    assert [(e.step, e.node, e.status) for e in await app.aget_state_history(CFG)] == [
        (1, "a", "error")
    ]

    running, gate = asyncio.Event(), asyncio.Event()

    async def waits(state: AgentState) -> list[Message]:
        running.set()
        await gate.wait()
        return said

    app = line(("a", waits), ("b", lambda state: said)).compile()
    task = asyncio.ensure_future(app.ainvoke({"messages": [Message.text_message("go")]}, CFG))
    await asyncio.wait_for(running.wait(), 5)
    await app.astop(CFG)
    gate.set()
    await asyncio.wait_for(task, 5)
    assert [(e.step, e.node, e.status) for e in await app.aget_state_history(CFG)] == [
        (1, "a", "stopped")
    ]
    await app.ainvoke(None, CFG)
    assert [(e.step, e.node, e.status) for e in await app.aget_state_history(CFG)] == [
        (1, "a", "stopped"),
        (2, "b", "completed"),
    ]


async def test_ahistory_has_one_row_per_event() -> None:
    app = weather_graph().compile()
    await app.ainvoke({"messages": [Message.text_message("weather?")]}, CFG)
    await app.aupdate_state(
        CFG, {"messages": [Message.text_message("thanks")]}, actor="alice", reason="politeness"
    )
    rows = await app.ahistory(CFG)
    records = await log_of(app.store)
    assert [(r.seq, r.at, r.kind, r.actor) for r in rows] == [
        (r.seq, r.at, r.kind, r.actor) for r in records
    ]
    assert rows[0].node is None
    assert [r.node for r in rows if r.kind == "node_entered"] == ["agent", "tools", "agent"]
    by_kind = {r.kind: r for r in rows}
    assert by_kind["run_started"].summary == "entry_node=agent"
    assert by_kind["tool_call_finished"].summary == "get_weather completed"
    assert by_kind["tool_call_started"].node == "tools"
    assert rows[1].summary == "user: weather?"
    assert rows[-1].summary == "user: thanks"
    assert (rows[-1].kind, rows[-1].actor) == ("message_appended", "alice")
    asks = [r for r in rows if r.kind == "message_appended" and r.actor == "agent"]
    assert asks[0].summary == "assistant:  [calls get_weather]"
    assert asks[1].summary == "assistant: answer: sunny in Oslo"
    steps = await app.ahistory(CFG, kinds=["step_advanced"])
    assert [r.summary for r in steps] == ["step 1 -> tools", "step 2 -> agent", "step 3 -> __end__"]


# ---- diff and human edits ----------------------------------------------------------------


async def test_diff_between_steps_shows_messages_and_fields_with_old_and_new() -> None:
    run = await drive(
        [([("say", False, None), ("note", False, None), ("label", False, None)], None)]
    )
    app = run.app
    one = await app.adiff(CFG, 0, 1)
    assert texts(one.messages_added) == ["step 0 None"]
    assert one.fields == {"count": (0, 1)}
    assert one.step == (0, 1)
    assert (one.status, one.interrupt, one.messages_removed, one.messages_changed) == (
        None,
        None,
        [],
        [],
    )
    assert not one.empty
    three = await app.adiff(CFG, 1, 3)
    assert three.messages_added == []
    assert three.fields == {"count": (1, 3), "notes": ([], ["n1"]), "label": ("", "label2")}
    back = await app.adiff(CFG, 3, 1)
    assert back.fields == {k: (new, old) for k, (old, new) in three.fields.items()}
    same = await app.adiff(CFG, 2, 2)
    assert same.empty
    assert (same.a_seq, same.b_seq) == (
        await step_seq(app.store, "t", 2),
        await step_seq(app.store, "t", 2),
    )
    # By seq: the end of the run changes the status.
    end = await app.store.last_seq("t")
    done = await app.adiff(CFG, end - 1, end, by="seq")
    assert done.status == ("running", "completed")
    assert done.fields == {} and done.messages_added == []
    with pytest.raises(ValueError, match="by must be"):
        await app.adiff(CFG, 0, 1, by="time")


async def test_diff_shows_an_interrupt_raised_and_cleared() -> None:
    run = await drive([([("say", False, None), ("say", True, None)], None)])
    app, store = run.app, run.app.store
    raised = (await store.seqs_of_kind("t", "interrupt_raised"))[0]
    resumed = (await store.seqs_of_kind("t", "resumed"))[0]
    into = await app.adiff(CFG, await step_seq(store, "t", 1), raised, by="seq")
    expected = {
        "node": "work",
        "reason": "go on?",
        "data": {"count": 1},
        "status": "interrupted_before",
    }
    assert into.status == ("running", "interrupted_before")
    assert into.interrupt == (None, expected)
    out = await app.adiff(CFG, raised, resumed, by="seq")
    assert out.status == ("interrupted_before", "running")
    assert out.interrupt == (expected, None)
    across = await app.adiff(CFG, 1, 2)
    assert across.interrupt is None and across.status is None
    assert texts(across.messages_added) == ["step 1 ok1"]


async def test_diff_shows_messages_replaced() -> None:
    run = await drive([([("say", False, None), ("say", False, None)], None)])
    app, store = run.app, run.app.store
    state = await app.aget_state(CFG)
    first, *rest = state.context
    edited = first.model_copy(update={"content": Message.text_message("run 0, edited").content})
    new = Message.text_message("added by the trim")
    seq = await store.last_seq("t")
    await store.append(
        "t",
        [MessagesReplaced(messages=[m.model_dump(mode="json") for m in [edited, *rest[1:], new]])],
        expected_seq=seq,
        actor="user",
    )
    change = await app.adiff(CFG, seq, seq + 1, by="seq")
    assert change.messages_changed == [(first, edited)]
    assert change.messages_removed == [rest[0]]
    assert change.messages_added == [new]
    assert change.fields == {}


async def test_a_human_edit_is_recorded_with_who_and_why_and_shows_in_history_and_diff() -> None:
    app = weather_graph(Tally).compile(interrupt_before=["tools"])
    await app.ainvoke({"messages": [Message.text_message("weather?")]}, CFG)
    before = await app.store.last_seq("t")
    call = (await app.aget_state(CFG)).context[-1].tool_calls()[0]
    note = Message.tool_message([ToolResultBlock(call_id=call.id, output="20 C, by hand")])
    records = await app.aupdate_state(
        CFG,
        {"label": "checked", "notes": ["by alice"], "messages": [note]},
        actor="alice",
        reason="audit",
    )
    assert [r.kind for r in records] == ["message_appended", "state_updated"]
    assert {r.actor for r in records} == {"alice"}
    edit = records[-1].event
    assert (edit.values, edit.source, edit.reason) == (  # type: ignore[union-attr]
        {"label": "checked", "notes": ["by alice"]},
        "alice",
        "audit",
    )
    state = await app.aget_state(CFG)
    assert (state.label, state.notes, state.context[-1]) == ("checked", ["by alice"], note)
    assert state.execution_meta.status == ExecutionStatus.INTERRUPTED_BEFORE  # still paused

    rows = await app.ahistory(CFG, kinds=["state_updated"])
    assert [(r.kind, r.actor, r.summary) for r in rows] == [
        ("state_updated", "alice", "alice set label, notes (audit)")
    ]
    change = await app.adiff(CFG, before, before + len(records), by="seq")
    assert change.fields == {"label": ("", "checked"), "notes": ([], ["by alice"])}
    assert change.messages_added == [note]
    assert change.status is None

    out = await app.ainvoke(None, CFG, include_state=True)
    assert out["state"].execution_meta.status == ExecutionStatus.COMPLETED
    assert out["state"].label == "checked"
    history = await app.aget_state_history(CFG)
    assert note in history[1].messages  # the edit falls in the step it came before
    whole = await app.adiff(CFG, 0, history[-1].step)
    assert whole.fields["label"] == ("", "checked")
    assert note in whole.messages_added


async def test_an_edit_without_a_reason_records_the_actor_as_the_source() -> None:
    app = weather_graph(Tally).compile()
    await app.ainvoke({"messages": [Message.text_message("weather?")]}, CFG)
    await app.aupdate_state(CFG, {"label": "x"})
    (row,) = await app.ahistory(CFG, kinds=["state_updated"])
    assert (row.actor, row.summary) == ("user", "user set label")


# ---- snapshots ---------------------------------------------------------------------------


class CountingMemoryStore(MemoryEventStore):
    """Counts the records fetched from storage."""

    rows_read = 0

    async def _fetch(self, thread_id: str, from_seq: int, to_seq: int, limit: int) -> list[Row]:
        rows = await super()._fetch(thread_id, from_seq, to_seq, limit)
        self.rows_read += len(rows)
        return rows


class CountingSQLiteStore(SQLiteEventStore):
    """Counts the records fetched from the database file."""

    rows_read = 0

    async def _fetch(self, thread_id: str, from_seq: int, to_seq: int, limit: int) -> list[Row]:
        rows = await super()._fetch(thread_id, from_seq, to_seq, limit)
        self.rows_read += len(rows)
        return rows


@pytest.fixture(params=["memory", "sqlite"])
async def counting_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[CountingMemoryStore | CountingSQLiteStore]:
    if request.param == "memory":
        yield CountingMemoryStore()
    else:
        async with CountingSQLiteStore(tmp_path / "count.db") as sqlite:
            yield sqlite


async def test_loading_any_point_reads_only_the_records_after_the_nearest_snapshot(
    counting_store: CountingMemoryStore | CountingSQLiteStore,
) -> None:
    every, steps = 10, 60
    store = counting_store
    script = Script(["say", "note", "quiet"])
    app = tally_graph(script, store).compile(
        checkpointer=store, snapshot_every=every, recursion_limit=steps + 1
    )
    await app.ainvoke({"target": steps}, CFG)
    last = await store.last_seq("t")
    assert last > 3 * steps  # node_entered, outputs and step_advanced per step
    snapshots = sorted(
        {s.seq for seq in range(last + 1) if (s := await store.load_snapshot("t", seq))}
    )
    # About one snapshot per `every` records, each taken at the first commit past a multiple.
    assert len(snapshots) == last // every
    for m, seq in enumerate(snapshots, start=1):
        assert m * every <= seq < m * every + 3

    worst = 0
    for seq in range(last + 1):
        nearest = await store.load_snapshot("t", seq)
        base = nearest.seq if nearest is not None else 0
        store.rows_read = 0
        state = await app.aget_state(CFG, at_seq=seq)
        # the records after the snapshot, and the one it names, whose hash anchors them
        assert store.rows_read == seq - base + (1 if base else 0)
        worst = max(worst, store.rows_read)
        assert state == await state_at(store, "t", seq, Tally, use_snapshots=False)
    assert worst < every + 4
    for k in range(steps + 1):
        seq = await step_seq(store, "t", k)
        nearest = await store.load_snapshot("t", seq)
        store.rows_read = 0
        await app.aget_state(CFG, at_step=k)
        assert store.rows_read <= 2 + seq - (nearest.seq if nearest else 0)
    store.rows_read = 0
    await app.aget_state(CFG)
    assert store.rows_read < every + 3
    # Without snapshots the same load reads the whole thread.
    store.rows_read = 0
    await state_at(store, "t", last, Tally, use_snapshots=False)
    assert store.rows_read == last


async def test_snapshots_are_written_off_the_step_path() -> None:
    """A snapshot that cannot be saved yet does not hold up the steps after it."""
    release = asyncio.Event()
    saved: list[int] = []

    class SlowSnapshots(MemoryEventStore):
        async def save_snapshot(self, snapshot: Any) -> None:
            await release.wait()
            saved.append(snapshot.seq)
            await super().save_snapshot(snapshot)

    store = SlowSnapshots()
    script = Script(["say"])

    def finish(state: Tally) -> None:
        release.set()  # only the last step lets the snapshots through

    graph = tally_graph(script, store)
    graph.add_node("finish", finish)
    graph.branches.clear()
    graph.add_conditional_edges(
        "work",
        lambda s: "finish" if s.count >= s.target else "work",
        {"work": "work", "finish": "finish"},
    )
    graph.add_edge("finish", END)
    app = graph.compile(checkpointer=store, snapshot_every=4)
    out = await asyncio.wait_for(app.ainvoke({"target": 6}, CFG, include_state=True), timeout=5)
    assert out["state"].execution_meta.status == ExecutionStatus.COMPLETED
    assert saved, "no snapshot was taken"
    for seq in saved:
        assert await state_at(store, "t", seq, Tally) == await state_at(
            store, "t", seq, Tally, use_snapshots=False
        )


# ---- forks -------------------------------------------------------------------------------


async def test_a_fork_with_a_chosen_id_continues_with_tools_and_leaves_the_source(
    store: EventStore,
) -> None:
    app = weather_graph().compile(checkpointer=store)
    await app.ainvoke({"messages": [Message.text_message("weather?")]}, CFG)
    source = await log_of(store)
    new_id = await app.afork(CFG, at_step=1, new_thread_id="branch")
    assert new_id == "branch"
    assert await store.threads() == ["t", "branch"]
    branch = {"thread_id": "branch"}
    start = await app.aget_state(branch)
    assert start.context == (await app.aget_state(CFG, at_step=1)).context
    assert start.execution_meta.current_node == "tools"
    assert start.execution_meta.internal_data["forked_from"] == {"thread_id": "t", "seq": 5}
    row = (await app.ahistory(branch))[0]
    assert (row.seq, row.kind, row.actor, row.summary) == (1, "forked", "user", "from t@5")
    out = await app.ainvoke(None, branch, include_state=True)
    assert texts(out["state"].context) == texts((await app.aget_state(CFG)).context)
    assert out["state"].execution_meta.status == ExecutionStatus.COMPLETED
    assert [e.step for e in await app.aget_state_history(branch)] == [2, 3]
    assert await log_of(store) == source
    assert replay(await log_of(store, "branch")) == out["state"]
    assert (await store.verify("branch")).ok and (await store.verify("t")).ok


async def test_a_fork_at_a_seq_and_at_step_zero() -> None:
    run = await drive([([("say", False, None), ("note", False, None)], None)])
    app, store = run.app, run.app.store
    records = [r async for r in store.read("t")]
    inside = inside_commits(records)
    assert inside  # the opening and each step's outputs are commits of several records
    for seq in range(1, len(records) + 1):
        if seq in inside:  # half a commit: refused (tests/test_fork_points.py)
            with pytest.raises(ForkPointInCommitError):
                await app.afork(CFG, at_seq=seq)
            continue
        forked = await app.aget_state({"thread_id": await app.afork(CFG, at_seq=seq)})
        assert fields(forked) == fields(await app.aget_state(CFG, at_seq=seq))
    zero = {"thread_id": await app.afork(CFG, at_step=0)}
    assert (await app.aget_state(zero)).context == (await app.aget_state(CFG, at_step=0)).context
    done = await app.ainvoke(None, zero, include_state=True)
    assert texts(done["state"].context) == texts((await app.aget_state(CFG)).context)
    end = await app.aget_state(CFG)
    assert (done["state"].count, done["state"].notes) == (end.count, end.notes) == (2, ["n1"])


async def test_a_fork_taken_at_a_node_interrupt_resumes_with_the_value() -> None:
    """The fork waits for the value as the source does (awaiting_resume is carried over)."""

    async def approve(state: AgentState) -> list[Message]:
        answer = interrupt("approve?", {"amount": 10})
        return [Message.text_message(f"approved: {answer}", role="assistant")]

    app = line(("approve", approve)).compile()
    await app.ainvoke({"messages": [Message.text_message("pay")]}, CFG)
    fork = {"thread_id": await app.afork(CFG, at_seq=await app.store.last_seq("t"))}
    assert (await app.aget_state(fork)).execution_meta.interrupt_reason == "approve?"
    out = await app.ainvoke(Command(resume="yes"), fork, include_state=True)
    source = await app.ainvoke(Command(resume="yes"), CFG, include_state=True)
    assert texts(source["state"].context) == ["pay", "approved: yes"]
    assert texts(out["state"].context) == ["pay", "approved: yes"]


async def test_a_fork_that_took_no_step_yet_answers_at_its_own_step() -> None:
    run = await drive([([("say", False, None), ("note", False, None)], None)])
    app = run.app
    fork = {"thread_id": await app.afork(CFG, at_step=1)}
    # A fork starts at its source's step: that is its first point, and nothing lies before.
    assert await app.aget_state(fork, at_step=1) == await app.aget_state(fork)
    with pytest.raises(PointOutOfRangeError):
        await app.aget_state(fork, at_step=0)
    assert await app.aget_state_history(fork) == []
    last = {"thread_id": await app.afork(CFG, at_step=2)}
    await app.ainvoke(None, last)  # completes at once: the source was at END after step 2
    assert (await app.aget_state(last)).execution_meta.status == ExecutionStatus.COMPLETED
    assert fields(await app.aget_state(last, at_step=2)) == fields(await app.aget_state(CFG))
    with pytest.raises(PointOutOfRangeError):
        await app.aget_state(last, at_step=3)


# ---- errors ------------------------------------------------------------------------------


async def test_points_out_of_range_are_refused(store: EventStore) -> None:
    app = weather_graph().compile(checkpointer=store)
    await app.ainvoke({"messages": [Message.text_message("weather?")]}, CFG)
    last = await store.last_seq("t")
    for point in ({"at_step": 4}, {"at_step": 99}, {"at_step": -2}, {"at_seq": last + 1}):
        with pytest.raises(PointOutOfRangeError):
            await app.aget_state(CFG, **point)
        with pytest.raises(PointOutOfRangeError):
            await app.afork(CFG, **point)
    with pytest.raises(PointOutOfRangeError):
        await app.aget_state(CFG, at_seq=-1)
    with pytest.raises(PointOutOfRangeError):
        await app.adiff(CFG, 0, 4)
    with pytest.raises(PointOutOfRangeError):
        await app.adiff(CFG, 0, last + 1, by="seq")
    assert isinstance(PointOutOfRangeError("x"), IndexError)
    # The ends of the range are fine.
    assert (await app.aget_state(CFG, at_step=3)).execution_meta.step == 3
    assert (await app.aget_state(CFG, at_step=0)).context[0].text() == "weather?"
    assert (await app.aget_state(CFG, at_seq=last)) == await app.aget_state(CFG)
    assert await app.aget_state(CFG, at_seq=0) == AgentState()
    assert await store.threads() == ["t"]


async def test_an_unknown_thread_is_refused_by_every_time_travel_call(store: EventStore) -> None:
    app = weather_graph(Tally).compile(checkpointer=store)
    nope = {"thread_id": "nope"}
    calls = [
        app.aget_state(nope, at_step=0),
        app.aget_state(nope, at_seq=1),
        app.aget_state_history(nope),
        app.ahistory(nope),
        app.adiff(nope, 0, 1),
        app.adiff(nope, 0, 1, by="seq"),
        app.afork(nope, at_step=0),
        app.aupdate_state(nope, {"label": "x"}),
    ]
    for call in calls:
        with pytest.raises(ThreadNotFoundError):
            await call
    assert await store.threads() == []


async def test_naming_a_point_twice_is_a_value_error() -> None:
    run = await drive([([("say", False, None)], None)])
    with pytest.raises(ValueError, match="not both"):
        await run.app.aget_state(CFG, at_step=1, at_seq=3)
    with pytest.raises(ValueError, match="not both"):
        await run.app.afork(CFG, at_step=1, at_seq=3)
    assert await run.app.store.threads() == ["t"]


async def test_a_fork_onto_an_existing_thread_is_refused(store: EventStore) -> None:
    app = weather_graph().compile(checkpointer=store)
    await app.ainvoke({"messages": [Message.text_message("weather?")]}, CFG)
    await app.ainvoke({"messages": [Message.text_message("other")]}, {"thread_id": "other"})
    before = {t: await log_of(store, t) for t in await store.threads()}
    for target in ("t", "other"):
        with pytest.raises(IllegalTransitionError, match="already exists"):
            await app.afork(CFG, at_step=1, new_thread_id=target)
    await app.afork(CFG, at_step=1, new_thread_id="b")
    with pytest.raises(IllegalTransitionError):
        await app.afork(CFG, at_step=2, new_thread_id="b")
    assert {t: await log_of(store, t) for t in before} == before
    assert len(await log_of(store, "b")) == 1


@pytest.mark.parametrize(
    "values",
    [{"nope": 1}, {"label": "ok", "nope": 1}, {"count": "many"}, {"execution_meta": {}}, {}],
    ids=["unknown", "unknown-with-known", "bad-value", "meta", "empty"],
)
async def test_an_invalid_edit_writes_nothing(store: EventStore, values: dict[str, Any]) -> None:
    app = weather_graph(Tally).compile(checkpointer=store)
    await app.ainvoke({"messages": [Message.text_message("weather?")]}, CFG)
    before = await log_of(store)
    error = ValueError if not values else InvalidStateUpdateError
    with pytest.raises(error):
        await app.aupdate_state(CFG, values, reason="bad")
    assert await log_of(store) == before
    assert (await store.verify("t")).ok


async def test_edits_are_refused_while_the_thread_runs_or_for_an_unknown_node() -> None:
    gate = asyncio.Event()
    errors: list[BaseException] = []

    async def slow(state: Tally, config: dict[str, Any]) -> list[Message]:
        try:
            await app.aupdate_state(config, {"label": "sneaky"})
        except ThreadBusyError as exc:
            errors.append(exc)
        await gate.wait()
        return [Message.text_message("done", role="assistant")]

    app = line(("slow", slow), state_cls=Tally).compile()
    task = asyncio.ensure_future(app.ainvoke({"messages": [Message.text_message("go")]}, CFG))
    gate.set()  # the node's edit is refused before it waits for this, whenever it is set
    await task
    assert len(errors) == 1
    assert (await app.aget_state(CFG)).label == ""
    with pytest.raises(GraphError, match="as_node"):
        await app.aupdate_state(CFG, {"label": "x"}, as_node="ghost")


# ---- the blocking forms ------------------------------------------------------------------


def test_the_blocking_forms_match_the_async_ones() -> None:
    app = weather_graph(Tally).compile()
    try:
        app.invoke({"messages": [Message.text_message("weather?")]}, CFG)
        history = app.get_state_history(CFG)
        assert [e.step for e in history] == [1, 2, 3]
        assert app.get_state(CFG, at_step=1).execution_meta.current_node == "tools"
        assert app.get_state(CFG, at_seq=1).context == []
        app.update_state(CFG, {"label": "seen"}, actor="bob", reason="check")
        assert app.get_state(CFG).label == "seen"
        forked = app.fork(CFG, at_step=1, new_thread_id="b")
        assert forked == "b"
        assert app.get_state({"thread_id": "b"}).context == app.get_state(CFG, at_step=1).context
        with pytest.raises(PointOutOfRangeError):
            app.get_state(CFG, at_step=50)
    finally:
        app.close()


async def test_a_fork_before_the_first_record_is_refused_and_forks_record_the_fields() -> None:
    app = weather_graph(Tally).compile()
    await app.ainvoke({"messages": [Message.text_message("weather?")]}, CFG)
    with pytest.raises(PointOutOfRangeError, match="at_seq >= 1"):
        await app.afork(CFG, at_seq=0)
    assert await app.store.threads() == ["t"]  # nothing was written
    (first,) = [r async for r in app.store.read("t", 1, 1)]
    started = first.event
    assert started.fields == {  # type: ignore[union-attr]
        "count": None,
        "target": None,
        "notes": f"{keep_adding.__module__}.{keep_adding.__qualname__}",
        "label": None,
    }
    new_id = await app.afork(CFG, at_seq=2)  # the run's opening: run_started and its input
    (opening,) = [r async for r in app.store.read(new_id)]
    forked = opening.event
    assert forked.fields == started.fields  # type: ignore[union-attr]
    out = await app.ainvoke(
        {"messages": [Message.text_message("and Bergen?")]}, {"thread_id": new_id}
    )
    assert out["status"] == "completed"
