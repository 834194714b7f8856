"""A fork point is a point the thread stood at: a seq inside a commit is refused.

A step's outputs commit with its `step_advanced`, a run opens with its input in one commit:
a fork at a record before the end of such a commit would hold half of it, and resuming it
would run the node again and add its output twice (tool calls answered once, a transcript
every provider refuses). Such a seq is refused, naming the nearest fork points, before
anything is written; every other seq forks into a thread that resumes to a valid transcript.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.actors import END, StateGraph, ToolNode
from agentlog.events import EventRecord, InvalidArgumentError, MemoryEventStore, SQLiteEventStore
from agentlog.projections import (
    AgentState,
    ForkPointInCommitError,
    Message,
    MessageContextManager,
    ToolCallBlock,
    ToolResultBlock,
    event_history,
    order_problems,
    timetravel,
)
from agentlog.projections.timetravel import inside_commits

from .helpers import agentlog
from .test_cli_commands import failed

CFG = {"thread_id": "t"}


class CommitsSeen(MemoryEventStore):
    """A store that remembers the last seq of each append: the commit ends, as written."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: set[int] = set()

    async def append(self, thread_id: str, events: Any, **how: Any) -> list[EventRecord]:
        records = await super().append(thread_id, events, **how)
        if records and thread_id == "t":
            self.ends.add(records[-1].seq)
        return records


def tool_graph(
    turns: list[int],
    interrupt_before: bool = False,
    store: Any = None,
    *,
    interrupt_after: bool = False,
    trim: bool = False,
) -> Any:
    """An agent asking, turn after turn, for `turns[i]` tool calls at once, then answering;
    with a breakpoint before the tool node or after the agent, and a context trimmed to a
    few messages, if asked."""

    def agent(state: AgentState) -> list[Message]:
        asked = sum(1 for m in state.context if m.role == "assistant")
        if asked >= len(turns):
            return [Message.text_message(f"done after {asked} turns", role="assistant")]
        calls = [
            ToolCallBlock(id=f"c{asked}-{i}", name="echo", args={"x": i})
            for i in range(turns[asked])
        ]
        return [Message(role="assistant", content=calls)]

    def echo(x: int) -> str:
        """Echo x."""
        return f"echo {x}"

    graph: StateGraph[AgentState] = StateGraph(AgentState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([echo]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent",
        lambda state: "tools" if state.context[-1].tool_calls() else END,
        {"tools": "tools", END: END},
    )
    graph.add_edge("tools", "agent")
    return graph.compile(
        store or MemoryEventStore(),
        interrupt_before=["tools"] if interrupt_before else (),
        interrupt_after=["agent"] if interrupt_after else (),
        context_manager=MessageContextManager(max_messages=4) if trim else None,
    )


async def run_to_end(app: Any, config: dict[str, str], payload: Any = None) -> dict[str, Any]:
    """Invoke until the run completes (a breakpoint pauses it once per tool step)."""
    out = await app.ainvoke(payload, config)
    for _ in range(50):
        if out["status"] == "completed":
            return dict(out)
        out = await app.ainvoke(None, config)
    raise AssertionError(f"thread {config} did not complete: {out['status']}")


def transcript_problems(context: list[Message]) -> list[str]:
    """What is wrong with a finished transcript: order, a call asked twice, a call answered
    other than once."""
    problems = list(order_problems(context))
    asked = Counter(c.id for m in context if m.role == "assistant" for c in m.tool_calls())
    answered = Counter(
        b.call_id for m in context for b in m.content if isinstance(b, ToolResultBlock)
    )
    problems += [f"call {i} asked {n} times" for i, n in asked.items() if n != 1]
    problems += [f"call {i} answered {answered[i]} times" for i in asked if answered[i] != 1]
    return problems


def agent_output_seq(records: list[EventRecord]) -> int:
    """The seq of the agent's first message: the record just before its step_advanced."""
    return next(
        r.seq
        for r, after in itertools.pairwise(records)
        if r.kind == "message_appended" and r.actor == "agent" and after.kind == "step_advanced"
    )


async def test_a_fork_inside_a_step_commit_is_refused_naming_the_points_around_it() -> None:
    app = tool_graph([2])
    await run_to_end(app, CFG, "go")
    records = [r async for r in app.store.read("t")]
    seq = agent_output_seq(records)
    threads = await app.store.threads()
    with pytest.raises(ForkPointInCommitError) as caught:
        await app.afork(CFG, at_seq=seq, new_thread_id="branch")
    error = caught.value
    assert isinstance(error, InvalidArgumentError)
    assert (error.seq, error.before, error.after) == (seq, seq - 1, seq + 1)
    assert records[seq - 2].kind == "node_entered" and records[seq].kind == "step_advanced"
    assert f"seq {seq - 1} or seq {seq + 1}" in str(error) and "inside a commit" in str(error)
    assert await app.store.threads() == threads  # nothing was written
    assert await app.store.last_seq("branch") == 0

    # the point after the commit forks, and the node is not run again
    branch = {"thread_id": await app.afork(CFG, at_seq=seq + 1)}
    out = await run_to_end(app, branch)
    state = await app.aget_state(branch)
    assert out["status"] == "completed" and transcript_problems(state.context) == []
    assert [m.role for m in state.context] == ["user", "assistant", "tool", "tool", "assistant"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=3),
    breakpoint=st.sampled_from([None, "before", "after"]),
    trim=st.booleans(),
)
def test_every_fork_point_resumes_to_a_valid_transcript_and_the_rest_are_refused(
    turns: list[int], breakpoint: str | None, trim: bool
) -> None:
    asyncio.run(every_fork_point(turns, breakpoint, trim))


async def every_fork_point(turns: list[int], breakpoint: str | None, trim: bool) -> None:
    store = CommitsSeen()
    app = tool_graph(
        turns, breakpoint == "before", store, interrupt_after=breakpoint == "after", trim=trim
    )
    await run_to_end(app, CFG, "go")
    source = await app.aget_state(CFG)
    assert transcript_problems(source.context) == []
    records = [r async for r in app.store.read("t")]
    inside = inside_commits(records)
    # never a commit's end, as the store saw it; and every record inside a commit but a
    # step's own (the next node entered and its calls started with it: the same state)
    assert not inside & store.ends
    assert {r.seq for r in records if r.seq not in store.ends and r.seq not in inside} <= {
        r.seq for r in records if r.kind in ("step_advanced", "node_entered")
    }
    # every step's outputs lie inside its commit: the agent's message, the tool results
    assert {
        r.seq
        for r, after in itertools.pairwise(records)
        if after.kind == "step_advanced" and r.kind == "message_appended"
    } <= inside
    assert records[-1].seq not in inside
    for record in records:
        seq = record.seq
        threads = await app.store.threads()
        if seq in inside:
            with pytest.raises(ForkPointInCommitError) as caught:
                await app.afork(CFG, at_seq=seq)
            error = caught.value
            assert error.before not in inside and error.after not in inside
            assert error.after is not None  # a thread ends on a commit's end
            assert not {*range((error.before or 0) + 1, error.after)} - inside
            assert await app.store.threads() == threads  # nothing was written
            continue
        branch = {"thread_id": await app.afork(CFG, at_seq=seq)}
        payload = "go" if record.kind == "thread_created" else None
        await run_to_end(app, branch, payload)
        state = await app.aget_state(branch)
        assert transcript_problems(state.context) == [], (seq, record.kind)
        assert [m.role for m in state.context] == [m.role for m in source.context], seq


async def test_at_step_forks_stay_valid_points() -> None:
    """A step names the seq its `step_advanced` has: always a fork point."""
    app = tool_graph([1, 2])
    await run_to_end(app, CFG, "go")
    records = [r async for r in app.store.read("t")]
    inside = inside_commits(records)
    steps = [r.seq for r in records if r.kind == "step_advanced"]
    assert steps and not set(steps) & inside
    for step in range(len(steps) + 1):
        branch = {"thread_id": await app.afork(CFG, at_step=step)}
        await run_to_end(app, branch)
        assert transcript_problems((await app.aget_state(branch)).context) == []


def test_the_cli_refuses_a_fork_inside_a_commit_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "log.db"

    async def build() -> tuple[int, list[int]]:
        async with SQLiteEventStore(db) as store:
            app = tool_graph([2], store=store)
            await run_to_end(app, CFG, "go")
            records = [r async for r in store.read("t")]
            return agent_output_seq(records), sorted(inside_commits(records))

    seq, inside = asyncio.run(build())
    assert seq in inside
    before = db.read_bytes()
    line = failed(agentlog("fork", "t", "--seq", str(seq), "--to", "b", "--db", db))
    assert f"at seq {seq}" in line and f"seq {seq - 1} or seq {seq + 1}" in line
    failed(agentlog("fork", "t", "--seq", str(seq), "--db", db, "--json"), "inside a commit")
    rows = json.loads(agentlog("history", "t", "--db", db, "--json").stdout)
    assert [r["seq"] for r in rows if not r["fork_point"]] == inside
    assert db.read_bytes() == before  # nothing was written
    done = agentlog("fork", "t", "--seq", str(seq + 1), "--to", "b", "--db", db)
    assert done.returncode == 0 and done.stdout.strip() == "b", done.stderr


async def test_the_timeline_marks_which_records_are_fork_points() -> None:
    app = tool_graph([2])
    await run_to_end(app, CFG, "go")
    records = [r async for r in app.store.read("t")]
    inside = inside_commits(records)
    rows = await event_history(app.store, "t")
    assert [r.seq for r in rows if not r.fork_point] == sorted(inside)
    seq = agent_output_seq(records)
    (row,) = await event_history(app.store, "t", first=seq, last=seq)  # its commit goes on
    assert (row.seq, row.fork_point) == (seq, False)
    (row,) = await event_history(app.store, "t", first=seq + 1, last=seq + 1)
    assert (row.kind, row.fork_point) == ("step_advanced", True)


def test_the_http_api_answers_a_fork_point_inside_a_commit_with_a_stable_code() -> None:
    """`POST /threads/{id}/copy` forks at steps, always fork points; the error the fork
    functions raise still has its own 422 code wherever a request reaches them."""
    from agentlog.actors.http.errors import classify

    error = ForkPointInCommitError("inside", seq=5, before=4, after=6)
    assert classify(error) == (422, "fork_point_in_commit", "inside")


async def test_a_stop_closing_started_calls_is_one_commit_and_forks_around_it_resume() -> None:
    """A stop cuts a tool node short: the calls it started are closed as abandoned in the
    stop's commit, which only a fork after it takes."""
    started, blocked = asyncio.Event(), [True]

    def agent(state: AgentState) -> list[Message]:
        if any(m.role == "tool" for m in state.context):
            return [Message.text_message("done", role="assistant")]
        calls = [ToolCallBlock(id=f"s{i}", name="slow", args={"x": i}) for i in range(2)]
        return [Message(role="assistant", content=calls)]

    async def slow(x: int) -> str:
        """Wait, the first time, until cut short."""
        if blocked[0]:
            started.set()
            await asyncio.Event().wait()
        return f"slow {x}"

    graph: StateGraph[AgentState] = StateGraph(AgentState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([slow]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent",
        lambda state: "tools" if state.context[-1].tool_calls() else END,
        {"tools": "tools", END: END},
    )
    graph.add_edge("tools", "agent")
    store = CommitsSeen()
    app = graph.compile(store)
    running = asyncio.create_task(app.ainvoke("go", CFG))
    await asyncio.wait_for(started.wait(), 60)  # a failure guard, not the synchronisation
    assert await app.astop(CFG)
    await running
    blocked[0] = False
    records = [r async for r in store.read("t")]
    assert records[-1].kind == "stopped"
    assert any(getattr(r.event, "status", None) == "abandoned" for r in records)
    inside = inside_commits(records)
    assert not inside & store.ends
    assert {r.seq for r in records if r.seq not in store.ends and r.seq not in inside} <= {
        r.seq for r in records if r.kind in ("step_advanced", "node_entered")
    }
    for record in records:
        if record.seq in inside:
            with pytest.raises(ForkPointInCommitError):
                await app.afork(CFG, at_seq=record.seq)
            continue
        branch = {"thread_id": await app.afork(CFG, at_seq=record.seq)}
        await run_to_end(app, branch)
        state = await app.aget_state(branch)
        assert transcript_problems(state.context) == [], (record.seq, record.kind)


@pytest.mark.parametrize("around", [1, 2, 3, 5, 512])
async def test_a_fork_point_is_told_from_the_records_around_it_as_from_the_whole_log(
    around: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check_fork_point` reads a window around the seq (the whole log when the commits
    reach past it): its answers are those of the whole log's."""
    monkeypatch.setattr(timetravel, "_AROUND", around)
    app = tool_graph([3, 1, 2], store=None, trim=True)
    await run_to_end(app, CFG, "go")
    records = [r async for r in app.store.read("t")]
    inside = inside_commits(records)
    points = sorted({r.seq for r in records} - inside)
    for record in records:
        try:
            await timetravel.check_fork_point(app.store, "t", record.seq)
        except ForkPointInCommitError as error:
            assert record.seq in inside
            assert error.before == max((s for s in points if s < record.seq), default=None)
            assert error.after == min(s for s in points if s > record.seq)
        else:
            assert record.seq not in inside
