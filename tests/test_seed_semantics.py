"""The seed framework's run semantics: stops that cancel a running node, node timeouts, client
tool calls, state methods called inside a node, the result shapes, and `Message.text()`.

Each stop or timeout is followed by a resume whose final state equals that of a run never
interrupted, with a side-effect journal showing that no node ever ran twice at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import (
    END,
    GraphError,
    NodeError,
    NodeTimeoutError,
    ResponseGranularity,
    StateGraph,
    ThreadBusyError,
)
from agentlog.actors.testing import until
from agentlog.events import SQLiteEventStore, Stopped, ToolCallFinished
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    Message,
    ReasoningBlock,
    RemoteToolCallBlock,
    StateMethodError,
    StopRequestStatus,
    TextBlock,
    TokenUsages,
    ToolCallBlock,
    ToolResultBlock,
    replay,
)
from tests.helpers import agent_with_tools, line

WAIT = 20.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore(tmp_path / "seed.db") as opened:
        yield opened


def said(text: str, key: str) -> Message:
    """An assistant message whose id is fixed, so two runs can be compared message by message."""
    return Message.text_message(text, role="assistant", message_id=key)


def transcript(state: AgentState) -> list[tuple[str, str, Any]]:
    return [(m.role, m.text(), m.message_id) for m in state.context]


async def live_equals_replay(app: Any, store: SQLiteEventStore, thread: str) -> AgentState:
    state: AgentState = await app.aget_state({"thread_id": thread})
    records = [r async for r in store.read(thread)]
    assert replay(records, type(state)) == state
    return state


class Journal:
    """A side-effect journal: what each node did, in order, across threads of execution."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def write(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)

    def assert_never_overlapped(self) -> None:
        """Every `start` is closed (`end` or `cancelled`) before the next `start`."""
        running = False
        for entry in self.lines:
            if entry == "start":
                assert not running, f"two executions of the node overlapped: {self.lines}"
                running = True
            elif entry in ("end", "cancelled"):
                assert running, f"an execution ended that never started: {self.lines}"
                running = False
        assert not running, f"an execution never ended: {self.lines}"


def three_steps(slow: Any) -> StateGraph[AgentState]:
    def before(state: AgentState) -> list[Message]:
        return [said("before", "m-before")]

    def after(state: AgentState) -> list[Message]:
        return [said("after", "m-after")]

    return line(("before", before), ("slow", slow), ("after", after))  # type: ignore[no-any-return]


async def reference(graph: StateGraph[AgentState], store: SQLiteEventStore) -> AgentState:
    """The final state of the same graph run once without interruption."""
    app = graph.compile(store)
    out = await app.ainvoke(Message.text_message("go", message_id="m-go"), {"thread_id": "ref"})
    assert out["status"] == "completed"
    return await live_equals_replay(app, store, "ref")


def same_outcome(state: AgentState, ref: AgentState) -> None:
    assert transcript(state) == transcript(ref)
    assert state.execution_meta.status == ref.execution_meta.status == ExecutionStatus.COMPLETED
    assert state.execution_meta.step == ref.execution_meta.step


# ---- a stop landing in a running node ------------------------------------------------------


async def test_a_stop_cancels_a_slow_async_node_which_runs_again_on_resume(
    store: SQLiteEventStore,
) -> None:
    journal, started = Journal(), asyncio.Event()
    attempts: list[int] = []

    async def slow(state: AgentState) -> list[Message]:
        attempts.append(1)
        journal.write("start")
        started.set()
        try:
            if len(attempts) == 2:  # the reference run is first; this one never ends
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal.write("cancelled")
            raise
        journal.write("end")
        return [said("slow done", "m-slow")]

    graph = three_steps(slow)
    ref = await reference(graph, store)
    journal.lines.clear()
    started.clear()

    app = graph.compile(store)
    config = {"thread_id": "t"}
    task = asyncio.create_task(app.ainvoke(Message.text_message("go", message_id="m-go"), config))
    await asyncio.wait_for(started.wait(), WAIT)
    begun = time.monotonic()
    assert await app.astop(config) is True
    out = await asyncio.wait_for(task, WAIT)
    assert time.monotonic() - begun < 30, "the stop must not wait for the node's minute"
    assert journal.lines == ["start", "cancelled"]
    assert out["status"] == "interrupted_before"
    meta = (await live_equals_replay(app, store, "t")).execution_meta
    assert (meta.interrupted_node, meta.interrupt_reason) == ("slow", "stop_requested")
    assert meta.stop_current_execution == StopRequestStatus.STOPPED
    assert meta.interrupt_data == {"source": "stop", "by": "user"}
    assert [r.kind for r in await app.ahistory(config)].count("stopped") == 1
    log = [r.event async for r in store.read("t")]
    (event,) = [e for e in log if isinstance(e, Stopped)]
    assert (event.node, event.when) == ("slow", "before")

    done = await app.ainvoke(None, config)
    assert done["status"] == "completed"
    assert [m.text() for m in done["messages"]] == ["slow done", "after"]
    same_outcome(await live_equals_replay(app, store, "t"), ref)
    assert journal.lines == ["start", "cancelled", "start", "end"]
    journal.assert_never_overlapped()


async def test_a_stop_abandons_a_slow_sync_node_and_the_thread_waits_for_it(
    store: SQLiteEventStore,
) -> None:
    journal, started, release = Journal(), threading.Event(), threading.Event()
    attempts: list[int] = []

    def slow(state: AgentState) -> list[Message]:
        attempts.append(1)
        journal.write("start")
        started.set()
        if len(attempts) == 1:
            assert release.wait(WAIT)
        journal.write("end")
        return [said(f"slow done {len(attempts)}", "m-slow")]

    graph = three_steps(slow)
    app = graph.compile(store)
    config = {"thread_id": "t"}
    task = asyncio.create_task(app.ainvoke(Message.text_message("go", message_id="m-go"), config))
    assert await asyncio.to_thread(started.wait, WAIT)
    assert await app.astop(config) is True
    out = await asyncio.wait_for(task, WAIT)  # returns while the sync node still runs
    assert not release.is_set() and journal.lines == ["start"]
    assert out["status"] == "interrupted_before"
    meta = (await live_equals_replay(app, store, "t")).execution_meta
    assert meta.interrupted_node == "slow"
    assert meta.interrupt_data is not None
    assert meta.interrupt_data["in_flight"] == ["node 'slow'"]

    with pytest.raises(ThreadBusyError, match="still running on a worker thread"):
        await app.ainvoke(None, config)  # the abandoned node still holds the thread
    release.set()

    async def resumed() -> dict[str, Any] | None:  # the worker returns, and gives the thread up
        try:
            return await app.ainvoke(None, config)  # type: ignore[no-any-return]
        except ThreadBusyError:
            return None

    done = await until(resumed, what="the thread given up after the abandoned node returned")
    assert done["status"] == "completed"
    state = await live_equals_replay(app, store, "t")
    assert [m.text() for m in state.context] == ["go", "before", "slow done 2", "after"]
    journal.assert_never_overlapped()  # the second run began only after the first returned
    assert journal.lines == ["start", "end", "start", "end"]


# ---- node timeouts -------------------------------------------------------------------------


async def test_a_node_timeout_fails_the_step_recorded_and_a_retry_runs_it_again(
    store: SQLiteEventStore,
) -> None:
    journal = Journal()
    attempts: list[int] = []

    async def slow(state: AgentState) -> list[Message]:
        attempts.append(1)
        journal.write("start")
        try:
            if len(attempts) == 2:  # the reference run is first; this one never ends
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal.write("cancelled")
            raise
        journal.write("end")
        return [said("slow done", "m-slow")]

    graph = three_steps(slow)
    ref = await reference(graph, store)
    journal.lines.clear()
    app = graph.compile(store, node_timeout=0.2)
    config = {"thread_id": "t"}
    with pytest.raises(NodeTimeoutError, match=r"'slow' ran past its timeout of 0\.2s") as caught:
        await app.ainvoke(Message.text_message("go", message_id="m-go"), config)
    assert isinstance(caught.value, NodeError) and caught.value.node == "slow"
    state = await live_equals_replay(app, store, "t")
    assert state.execution_meta.status == ExecutionStatus.ERROR
    failed = [r.event async for r in store.read("t") if r.kind == "run_failed"]
    assert [f.error_type for f in failed] == ["NodeTimeoutError"]  # type: ignore[union-attr]

    done = await app.ainvoke(None, config)  # retryable: the node runs again
    assert done["status"] == "completed"
    same_outcome(await live_equals_replay(app, store, "t"), ref)
    assert journal.lines == ["start", "cancelled", "start", "end"]
    journal.assert_never_overlapped()


async def test_timeouts_per_node_and_per_call(store: SQLiteEventStore) -> None:
    gate = asyncio.Event()

    async def slow(state: AgentState) -> list[Message]:
        await gate.wait()  # opened once the bounded runs have timed out
        return [said("slow done", "m-slow")]

    graph = three_steps(slow)
    exempt = graph.compile(store, node_timeout=0.1, node_timeouts={"slow": None})
    exempt_run = asyncio.ensure_future(exempt.ainvoke("go", {"thread_id": "exempt"}))
    bounded = graph.compile(store)
    with pytest.raises(NodeTimeoutError):
        await bounded.ainvoke("go", {"thread_id": "per-call", "node_timeout": 0.1})
    own = graph.compile(store, node_timeouts={"slow": 0.1})
    with pytest.raises(NodeTimeoutError):
        await own.ainvoke("go", {"thread_id": "per-node"})
    assert not exempt_run.done()  # it waited longer than the timeouts that cut the others
    gate.set()
    out = await exempt_run
    assert out["status"] == "completed"


@pytest.mark.parametrize("bad", [0, -1, "5", True])
def test_a_node_timeout_that_is_not_seconds_is_refused(bad: Any) -> None:
    graph = three_steps(lambda state: [])
    with pytest.raises(GraphError, match="node_timeout"):
        graph.compile(node_timeout=bad)
    with pytest.raises(GraphError, match="node_timeouts"):
        graph.compile(node_timeouts={"slow": bad})
    with pytest.raises(GraphError, match="not a node"):
        graph.compile(node_timeouts={"nowhere": 1.0})


async def test_a_timed_out_tool_call_is_recorded_abandoned_and_never_run_again(
    store: SQLiteEventStore,
) -> None:
    runs: list[str] = []

    async def charge(amount: int) -> str:
        """Charge the card."""
        runs.append("charge")
        await asyncio.Event().wait()  # never ends: the node's timeout cuts it
        return "charged"

    def agent(state: AgentState) -> list[Message]:
        if state.context[-1].role == "tool":
            return [said("done", "m-done")]
        call = ToolCallBlock(id="c1", name="charge", args={"amount": 5})
        return [Message(role="assistant", content=[call], message_id="m-call")]

    app = agent_with_tools(agent, [charge]).compile(store, node_timeouts={"tools": 0.2})
    config = {"thread_id": "t"}
    with pytest.raises(NodeTimeoutError):
        await app.ainvoke("pay", config)
    finished = [r.event async for r in store.read("t") if isinstance(r.event, ToolCallFinished)]
    assert [(f.call_id, f.status) for f in finished] == [("c1", "abandoned")]
    done = await app.ainvoke(None, config)
    assert done["status"] == "completed"
    assert runs == ["charge"], "an abandoned call must never run twice"
    state = await live_equals_replay(app, store, "t")
    (result,) = [b for m in state.context for b in m.content if isinstance(b, ToolResultBlock)]
    assert (result.call_id, result.status, result.is_error) == ("c1", "abandoned", True)


# ---- client tool calls ---------------------------------------------------------------------


def asking_agent(state: AgentState) -> list[Message]:
    last = state.context[-1]
    if last.role == "tool":
        return [said(f"you are in {last.text()}", "m-answer")]
    call = RemoteToolCallBlock(id="r1", name="get_location")
    return [Message(role="assistant", content=[TextBlock(text="where?"), call])]


def client_graph() -> StateGraph[AgentState]:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", asking_agent)
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent",
        lambda s: "agent" if s.context[-1].tool_calls() else END,
        {"agent": "agent", END: END},
    )
    return graph


async def test_a_client_tool_call_pauses_the_run_until_the_client_answers(
    store: SQLiteEventStore,
) -> None:
    app = client_graph().compile(store)
    config = {"thread_id": "t"}
    out = await app.ainvoke("where am I?", config)
    assert out["status"] == "interrupted_after"
    (pause,) = out["__interrupt__"]
    assert (pause["node"], pause["reason"]) == ("agent", "remote_tool_call")
    assert [c["id"] for c in pause["data"]["tool_calls"]] == ["r1"]
    with pytest.raises(GraphError, match=r"waits for the results of client tool call.*r1"):
        await app.ainvoke(None, config)
    answer = {"role": "tool", "tool_call_id": "r1", "content": "Oslo"}
    done = await app.ainvoke(answer, config)
    assert done["status"] == "completed"
    assert [(m.role, m.text()) for m in done["messages"]] == [
        ("tool", "Oslo"),
        ("assistant", "you are in Oslo"),
    ]
    await live_equals_replay(app, store, "t")


async def test_other_input_rejects_the_client_calls_and_starts_a_new_run(
    store: SQLiteEventStore,
) -> None:
    app = client_graph().compile(store)
    config = {"thread_id": "t"}
    await app.ainvoke("where am I?", config)
    out = await app.ainvoke("never mind", config, "partial")
    roles = [m.role for m in out["context"]]
    assert roles[:4] == ["user", "assistant", "tool", "user"]
    (rejected,) = [b for b in out["context"][2].content if isinstance(b, ToolResultBlock)]
    assert (rejected.call_id, rejected.status) == ("r1", "rejected")
    assert sum(r.kind == "run_started" for r in await app.ahistory(config)) == 2
    await live_equals_replay(app, store, "t")


# ---- the seed's state methods inside a node ------------------------------------------------


async def test_state_complete_inside_a_node_ends_the_run_after_its_step(
    store: SQLiteEventStore,
) -> None:
    def first(state: AgentState) -> list[Message]:
        state.complete()
        return [said("first", "m1")]

    app = line(("first", first), ("never", lambda state: [said("never", "m2")])).compile(store)
    out = await app.ainvoke("go", {"thread_id": "t"})
    assert out["status"] == "completed"
    assert [m.text() for m in out["messages"]] == ["go", "first"]
    await live_equals_replay(app, store, "t")


async def test_state_error_inside_a_node_fails_it_as_if_it_raised(store: SQLiteEventStore) -> None:
    tries: list[int] = []

    def flaky(state: AgentState) -> list[Message]:
        tries.append(1)
        if len(tries) == 1:
            state.error("upstream is down")
        return [said(f"try {len(tries)}", f"m{len(tries)}")]

    app = line(("flaky", flaky)).compile(store)
    config = {"thread_id": "t"}
    with pytest.raises(NodeError, match="upstream is down"):
        await app.ainvoke("go", config)
    state = await live_equals_replay(app, store, "t")
    assert state.execution_meta.status == ExecutionStatus.ERROR
    assert [m.text() for m in state.context] == ["go"], "the failed node's output is discarded"
    done = await app.ainvoke(None, config)
    assert [m.text() for m in done["messages"]] == ["try 2"]


@pytest.mark.parametrize(
    ("status", "paused_at", "when"),
    [
        (ExecutionStatus.INTERRUPTED_AFTER, "first", ExecutionStatus.INTERRUPTED_AFTER),
        (ExecutionStatus.INTERRUPTED_BEFORE, "second", ExecutionStatus.INTERRUPTED_BEFORE),
    ],
)
async def test_state_set_interrupt_inside_a_node_pauses_once_its_step_commits(
    store: SQLiteEventStore, status: ExecutionStatus, paused_at: str, when: ExecutionStatus
) -> None:
    def first(state: AgentState) -> list[Message]:
        state.set_interrupt(paused_at, "look at this", status, {"why": "check"})
        return [said("first", "m1")]

    app = line(("first", first), ("second", lambda state: [said("second", "m2")])).compile(store)
    config = {"thread_id": "t"}
    out = await app.ainvoke("go", config)
    meta = (await live_equals_replay(app, store, "t")).execution_meta
    assert out["status"] == when.value
    assert (meta.interrupted_node, meta.interrupt_reason) == (paused_at, "look at this")
    assert meta.interrupt_data == {"why": "check"}
    assert meta.current_node == "second"
    done = await app.ainvoke(None, config)
    assert [m.text() for m in done["messages"]] == ["second"]


@pytest.mark.parametrize(
    ("call", "advice"),
    [
        (lambda s: s.advance_step(), "the engine counts steps"),
        (lambda s: s.set_current_node("x"), r"return Command\(goto='x'\)"),
        (lambda s: s.clear_interrupt(), "resumed from outside"),
        (lambda s: s.execution_meta.advance_step(), "the engine counts steps"),
        (lambda s: s.set_interrupt("a", "r", ExecutionStatus.COMPLETED), "INTERRUPTED_BEFORE"),
    ],
)
async def test_state_methods_the_engine_owns_raise_naming_the_supported_way(
    store: SQLiteEventStore, call: Any, advice: str
) -> None:
    def node(state: AgentState) -> None:
        call(state)

    app = line(("node", node)).compile(store)
    with pytest.raises(NodeError, match=advice) as caught:
        await app.ainvoke("go", {"thread_id": "t"})
    assert isinstance(caught.value.__cause__, StateMethodError)


def test_state_methods_outside_a_node_still_change_the_state() -> None:
    state = AgentState()
    state.advance_step()
    state.set_current_node("x")
    state.complete()
    assert (state.execution_meta.step, state.execution_meta.current_node) == (1, "x")
    assert state.execution_meta.status == ExecutionStatus.COMPLETED


# ---- the result shapes ---------------------------------------------------------------------


def usage(prompt: int, completion: int, reasoning: int = 0) -> TokenUsages:
    return TokenUsages(
        prompt_tokens=prompt,
        completion_tokens=completion,
        reasoning_tokens=reasoning,
        total_tokens=999,  # ignored, as Agentflow ignores it: the total is input + output
    )


def metered(state: AgentState) -> list[Message]:
    return [
        Message(role="assistant", content=[TextBlock(text="a")], usages=usage(10, 3, 2)),
        Message(role="assistant", content=[TextBlock(text="b")], usages=usage(5, 1)),
    ]


async def test_each_response_granularity_has_agentflows_keys(store: SQLiteEventStore) -> None:
    app = line(("metered", metered)).compile(store)
    low = await app.ainvoke("one", {"thread_id": "t"})
    assert set(low) == {"messages", "token_usage", "status"}
    assert low["token_usage"] == {
        "total_input_tokens": 15,
        "total_output_tokens": 4,
        "total_reasoning_tokens": 2,
        "total_tokens": 19,
    }
    partial = await app.ainvoke("two", {"thread_id": "t"}, ResponseGranularity.PARTIAL)
    assert set(partial) == {"context", "summary", "messages", "token_usage", "status"}
    assert [m.text() for m in partial["messages"]] == ["two", "a", "b"]  # this call's own
    assert len(partial["context"]) == 6 and partial["summary"] is None
    full = await app.ainvoke("three", {"thread_id": "t"}, "full")
    assert set(full) == {"state", "messages", "token_usage", "status"}
    assert full["state"].context[-3:] == full["messages"]


async def test_a_call_without_usage_counts_zero_tokens(store: SQLiteEventStore) -> None:
    app = line(("plain", lambda state: [said("x", "m1")])).compile(store)
    out = await app.ainvoke("go", {"thread_id": "t"})
    assert set(out["token_usage"].values()) == {0}


async def test_an_unknown_granularity_is_refused_before_anything_runs(
    store: SQLiteEventStore,
) -> None:
    app = line(("plain", lambda state: [said("x", "m1")])).compile(store)
    with pytest.raises(ValueError, match="response_granularity must be one of"):
        await app.ainvoke("go", {"thread_id": "t"}, "medium")
    assert await store.last_seq("t") == 0
    with pytest.raises(ValueError, match="response_granularity"):
        app.invoke("go", {"thread_id": "t"}, "everything")
    app.close()


# ---- Message.text() ------------------------------------------------------------------------


def test_message_text_is_text_blocks_and_string_tool_outputs_only() -> None:
    message = Message(
        role="assistant",
        content=[ReasoningBlock(summary="THINK"), TextBlock(text="answer")],
    )
    assert message.text() == "answer"
    tool = Message(
        role="tool",
        content=[
            ToolResultBlock(call_id="a", output="ok"),
            ToolResultBlock(call_id="b", output={"n": 1}),
        ],
    )
    assert tool.text() == "ok"
