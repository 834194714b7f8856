"""What a step no longer pays for keeps its guarantees: a run of a new thread snapshots it
without reading the log back, and the fold's open calls, read only as far as the context
grew, say what a read of the whole context says (a run still cannot end with a call open)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import END, StateGraph
from agentlog.actors.engine import guard
from agentlog.events import (
    MessagesRemoved,
    MessagesReplaced,
    RunCompleted,
    RunStarted,
    SQLiteEventStore,
)
from agentlog.events.kinds import Event
from agentlog.projections import (
    AgentState,
    Fold,
    IllegalTransitionError,
    Message,
    ToolCallBlock,
    ToolResultBlock,
    message_appended,
    open_calls,
    to_builtins,
)
from agentlog.projections.fold import uncommitted_record
from agentlog.projections.snapshot_checks import verify_snapshots


def _fold_in(fold: Fold[AgentState], events: list[Event]) -> None:
    base = fold.seq
    fold.apply_decided([uncommitted_record(e, base + i + 1, "t") for i, e in enumerate(events)])


def _call(call_id: str) -> Message:
    return Message(role="assistant", content=[ToolCallBlock(id=call_id, name="f")])


def _result(call_id: str) -> Message:
    return Message.tool_message([ToolResultBlock(call_id=call_id, output="x")])


def test_the_folds_open_calls_follow_each_change_of_the_context() -> None:
    fold = Fold.new(AgentState)
    a, b, answer_a = _call("a"), _call("b"), _result("a")

    def agree() -> list[str]:
        got = [c.id for c in fold.open_calls()]
        assert got == [c.id for c in open_calls(fold.state.context)]
        return got

    _fold_in(fold, [RunStarted(), message_appended(a)])
    assert agree() == ["a"]
    _fold_in(fold, [message_appended(answer_a), message_appended(b)])
    assert agree() == ["b"]
    _fold_in(fold, [MessagesRemoved(message_ids=[b.message_id])])
    assert agree() == []
    _fold_in(
        fold, [MessagesReplaced(messages=[to_builtins(_call("c")), to_builtins(_result("c"))])]
    )
    assert agree() == []
    _fold_in(fold, [message_appended(_call("d"))])
    assert agree() == ["d"]
    with pytest.raises(IllegalTransitionError, match=r"tool call\(s\) f \(d\) have no result"):
        _fold_in(fold, [RunCompleted()])
    fold = Fold(fold.state, seq=fold.seq)  # a refused event leaves the fold to be dropped
    _fold_in(fold, [message_appended(_result("d")), RunCompleted()])
    assert agree() == []


async def test_a_new_threads_run_snapshots_it_without_reading_the_log_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a node slower than the stop poll's delay (a loaded machine) reads the log's tail for a
    # stop request, by design: this test is about the snapshots, so the poll is kept away
    monkeypatch.setattr(guard, "STOP_POLL_S", 3600.0)

    def agent(state: AgentState) -> list[Message]:
        return [Message.text_message(f"step {len(state.context)}", role="assistant")]

    def route(state: AgentState) -> str:
        return END if len(state.context) > 40 else "agent"

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_conditional_edges("agent", route, {"agent": "agent", END: END})
    graph.set_entry_point("agent")
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        reads: list[tuple[Any, ...]] = []
        original = store.read

        def spy(*args: Any, **kwargs: Any) -> Any:
            reads.append(args)
            return original(*args, **kwargs)

        store.read = spy  # type: ignore[method-assign]
        compiled = graph.compile(store, snapshot_every=25, recursion_limit=100)
        await compiled.ainvoke({"messages": [Message.text_message("go")]}, {"thread_id": "t"})
        assert reads == []
        store.read = original  # type: ignore[method-assign]
        assert len(await store.snapshot_seqs("t")) >= 4
        assert [f for f in await verify_snapshots(store, "t") if f.kind != "info"] == []
