"""The engine's side of cancel, of a stop between nodes and of a chosen entry node: a
cancelled run is over (new input starts anew, `ainvoke(None)` says so), calls left open get
a result, and the log records who and why."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentlog.actors import GraphError, NothingToResumeError, ThreadBusyError
from agentlog.events import MemoryEventStore
from agentlog.projections import AgentState, ExecutionStatus, Message, replay, unpaired_results
from tests.helpers import agent_with_tools, line


def answer(state: AgentState) -> list[Message]:
    return [Message.text_message(f"seen {len(state.context)}", role="assistant")]


async def records(store: MemoryEventStore, thread: str = "t") -> list[Any]:
    return [r async for r in store.read(thread)]


async def test_cancel_a_paused_run_answers_its_open_calls_and_ends_it() -> None:
    def agent(state: AgentState) -> list[Message]:
        from agentlog.actors.testing import ask_tool, reply

        return [reply("done")] if state.context[-1].role == "tool" else [ask_tool("refund")]

    def refund() -> str:
        """Refund."""
        return "refunded"

    store = MemoryEventStore()
    app = agent_with_tools(agent, [refund]).compile(store, interrupt_before=["tools"])
    paused = await app.ainvoke("refund me", {"thread_id": "t"})
    assert paused["status"] == "interrupted_before"
    assert await app.acancel({"thread_id": "t"}, by="alice", reason="duplicate")
    state = replay(await records(store))
    assert state.execution_meta.status == ExecutionStatus.CANCELLED
    assert state.context[-1].role == "tool" and "cancelled by 'alice'" in state.context[-1].text()
    assert not unpaired_results(state.context)
    cancelled = (await records(store))[-1]
    assert (cancelled.kind, cancelled.event.by, cancelled.event.reason) == (
        "run_cancelled", "alice", "duplicate",
    )  # fmt: skip
    assert not await app.acancel({"thread_id": "t"}, by="alice")  # nothing left to cancel
    with pytest.raises(NothingToResumeError, match="cancelled by alice: duplicate"):
        await app.ainvoke(None, {"thread_id": "t"})
    again = await app.ainvoke("a new question", {"thread_id": "t"})
    assert again["status"] == "interrupted_before"  # a new run, from the entry node


async def test_cancel_refuses_a_thread_a_run_still_holds() -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(state: AgentState) -> list[Message]:
        entered.set()
        await release.wait()
        return []

    store = MemoryEventStore()
    app = line(("slow", slow)).compile(store)
    run = asyncio.ensure_future(app.ainvoke("go", {"thread_id": "t"}))
    await entered.wait()  # the run holds the thread
    with pytest.raises(ThreadBusyError):
        await app.acancel({"thread_id": "t"}, by="bo")
    release.set()
    await run


class _StopSeen(MemoryEventStore):
    """Tells when a read of the log (the running node's stop watch) met a stop request."""

    def __init__(self) -> None:
        super().__init__()
        self.stop_seen = asyncio.Event()

    async def read(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        async for record in super().read(*args, **kwargs):
            if record.kind == "stop_requested":
                self.stop_seen.set()
            yield record


async def test_a_stop_between_nodes_lets_the_running_node_commit() -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(state: AgentState) -> list[Message]:
        entered.set()
        await release.wait()  # held until the stop watch has looked and seen the stop
        return [Message.text_message("slow finished", role="assistant")]

    store = _StopSeen()
    app = line(("slow", slow), ("next", answer)).compile(store)
    run = asyncio.ensure_future(app.ainvoke("go", {"thread_id": "t"}))
    await entered.wait()
    assert await app.astop({"thread_id": "t"}, between_nodes=True)
    await store.stop_seen.wait()  # the watch saw it and left the node running
    assert not run.done()
    release.set()
    result = await run
    state = replay(await records(store))
    assert [m.text() for m in state.context] == ["go", "slow finished"]
    assert result["status"] == "interrupted_after"
    done = await app.ainvoke(None, {"thread_id": "t"})
    assert done["status"] == "completed"


async def test_a_config_may_name_the_entry_node_of_a_new_run() -> None:
    store = MemoryEventStore()
    app = line(("first", answer), ("second", answer)).compile(store)
    result = await app.ainvoke("hi", {"thread_id": "t", "entry_node": "second"}, include_state=True)
    assert [m.text() for m in result["state"].context] == ["hi", "seen 1"]
    started = (await records(store))[0]
    assert started.event.entry_node == "second"
    with pytest.raises(GraphError, match="entry_node 'third' is not a node"):
        await app.ainvoke("hi", {"thread_id": "u", "entry_node": "third"})
    assert await store.threads() == ["t"]
