"""Resume, recovery and stream edge cases: each once a defect, each now pinned down."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

import pytest

from agentlog.actors import Command, GraphError, NodeError, ToolNode, interrupt
from agentlog.events import EventStore, MemoryEventStore, Resumed, ThreadNotFoundError
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    IllegalTransitionError,
    Message,
    ToolCallBlock,
    replay,
)

from .helpers import line

CFG = {"thread_id": "t1"}


def user(text: str) -> Message:
    return Message.text_message(text)


def asks(*calls: tuple[str, str, dict[str, Any]]) -> Message:
    blocks = [ToolCallBlock(id=c, name=n, args=a) for c, n, a in calls]
    return Message(role="assistant", content=blocks)  # type: ignore[arg-type]


async def kinds(store: EventStore) -> list[str]:
    return [r.kind async for r in store.read("t1")]


async def assert_replays(app: Any) -> None:
    records = [r async for r in app.store.read("t1")]
    assert replay(records, app.graph.state_cls) == await app.aget_state(CFG)


async def test_a_tool_interrupt_resumed_does_not_rerun_the_finished_call() -> None:
    calls: list[str] = []

    async def lookup(n: int) -> int:
        """Finishes at once."""
        calls.append("lookup")
        return n

    async def ask(n: int) -> str:
        """Needs a human."""
        calls.append("ask")
        return str(interrupt("ok?"))

    async def plan(state: AgentState) -> list[Message]:
        return [asks(("c1", "lookup", {"n": 1}), ("c2", "ask", {"n": 2}))]

    app = line(("plan", plan), ("tools", ToolNode([lookup, ask]))).compile()
    out = await app.ainvoke({"messages": [user("go")]}, CFG, include_state=True)
    assert out["state"].execution_meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    done = await app.ainvoke(Command(resume="yes"), CFG, include_state=True)
    assert calls == ["lookup", "ask", "ask"]
    outputs = [m.content[0].output for m in done["messages"] if m.role == "tool"]  # type: ignore[union-attr]
    assert outputs == [1, "yes"]
    assert (await kinds(app.store)).count("tool_call_started") == 2
    await assert_replays(app)


async def test_a_static_breakpoint_does_not_answer_the_nodes_own_interrupt() -> None:
    seen: list[Any] = []

    def gate(state: AgentState) -> list[Message]:
        seen.append(interrupt("refund?"))
        return [Message.text_message("refunded", role="assistant")]

    app = line(("gate", gate)).compile(interrupt_before=["gate"])
    await app.ainvoke({"messages": [user("go")]}, CFG)
    paused = await app.ainvoke(None, CFG, include_state=True)  # past the breakpoint
    meta = paused["state"].execution_meta
    assert (meta.status, meta.interrupt_reason) == (ExecutionStatus.INTERRUPTED_BEFORE, "refund?")
    assert seen == []
    await app.ainvoke(Command(resume="approved"), CFG)
    assert seen == ["approved"]


async def test_the_resume_value_survives_a_crash_after_it_was_recorded() -> None:
    store = MemoryEventStore()
    seen: list[Any] = []

    def gate(state: AgentState) -> list[Message]:
        seen.append(interrupt("approve?"))
        return []

    app = line(("gate", gate)).compile(checkpointer=store)
    await app.ainvoke({"messages": [user("go")]}, CFG)
    # The process died right after committing the resume, before the node ran again.
    await store.append(
        "t1", [Resumed(value="yes", by="user")], expected_seq=await store.last_seq("t1")
    )
    fresh = line(("gate", gate)).compile(checkpointer=store)  # a new process, the same log
    out = await fresh.ainvoke(None, CFG, include_state=True)
    assert seen == ["yes"]
    assert out["state"].execution_meta.status == ExecutionStatus.COMPLETED
    assert (await kinds(store)).count("interrupt_raised") == 1


async def test_commands_are_refused_where_they_mean_nothing() -> None:
    app = line(("a", lambda state: None)).compile()
    with pytest.raises(ThreadNotFoundError, match="'t1'"):
        await app.ainvoke(Command(resume="x"), CFG)
    with pytest.raises(GraphError, match="for nodes"):
        await app.ainvoke(Command(goto="a"), CFG)
    await app.ainvoke({"messages": [user("hi")]}, CFG)
    with pytest.raises(IllegalTransitionError, match="nothing to resume"):
        await app.ainvoke(Command(resume="x"), CFG)
    assert await kinds(app.store) == [
        "run_started", "message_appended", "node_entered", "step_advanced", "run_completed",
    ]  # fmt: skip


async def test_unstorable_interrupt_data_fails_the_run_cleanly() -> None:
    class Opaque:
        pass

    def ask(state: AgentState) -> None:
        interrupt("ok?", {"thing": Opaque()})  # type: ignore[dict-item]

    app = line(("ask", ask)).compile()
    with pytest.raises(NodeError, match="'ask'"):
        await app.ainvoke({"messages": [user("go")]}, CFG)
    state = await app.aget_state(CFG)
    assert state.execution_meta.status == ExecutionStatus.ERROR
    assert (await kinds(app.store))[-1] == "run_failed"


async def test_leaving_a_stream_early_ends_the_run_and_frees_the_thread() -> None:
    async def chatty(state: AgentState) -> list[Message]:
        return [Message.text_message(f"m{i}", role="assistant") for i in range(200)]

    app = line(("a", chatty), ("b", chatty)).compile()
    stream = app.astream({"messages": [user("go")]}, CFG)
    async for _ in stream:
        break
    await asyncio.wait_for(stream.aclose(), 5)
    # the thread is free again: a new invoke is not refused as busy
    await asyncio.wait_for(app.ainvoke(None, CFG), 5)
    await assert_replays(app)


def test_leaving_a_blocking_stream_early_is_clean() -> None:
    app = line(("a", lambda state: [Message.text_message("x", role="assistant")])).compile()
    for chunk in app.stream({"messages": [user("go")]}, CFG):
        assert chunk is not None
        break
    assert app.invoke(None, CFG, "partial")["context"][0].text() == "go"
    app.close()


class Notes(AgentState):
    notes: Annotated[list[str], lambda old, new: (old.extend(new), old)[1]] = []


async def test_a_reducer_that_extends_in_place_is_applied_once() -> None:
    app = line(("a", lambda state: {"notes": ["x"]}), state_cls=Notes).compile()
    out = await app.ainvoke({"messages": [user("go")]}, CFG, include_state=True)
    assert out["state"].notes == ["x"]
    await assert_replays(app)


@pytest.mark.parametrize(
    "edit",
    [
        lambda ctx: ctx.copy()[0].content[0].__setattr__("text", "EDITED"),
        lambda ctx: ctx.pop(0).content[0].__setattr__("text", "EDITED"),
        lambda ctx: ctx[0].content[0].__setattr__("text", "EDITED"),
        lambda ctx: next(iter(ctx)).content[0].__setattr__("text", "EDITED"),
    ],
    ids=["copy", "pop", "index", "iter"],
)
async def test_a_node_editing_messages_never_reaches_the_log_state(
    edit: Callable[[Any], None],
) -> None:
    def meddle(state: AgentState) -> None:
        edit(state.context)

    app = line(("a", meddle)).compile()
    out = await app.ainvoke({"messages": [user("go")]}, CFG, include_state=True)
    assert out["messages"][0].text() == "go"
    await assert_replays(app)


async def test_a_tool_result_that_cannot_be_stored_is_kept_as_text() -> None:
    async def big() -> int:
        """Returns an integer too large for the log."""
        return 2**70

    async def plan(state: AgentState) -> list[Message]:
        return [asks(("c1", "big", {}))]

    app = line(("plan", plan), ("tools", ToolNode([big]))).compile()
    out = await app.ainvoke({"messages": [user("go")]}, CFG)
    assert out["messages"][-1].content[0].output == repr(2**70)  # type: ignore[union-attr]


async def test_interrupt_pauses_even_inside_a_broad_except() -> None:
    """As in Agentflow, the pause is not an Exception: `except Exception:` lets it through."""
    seen: list[Any] = []

    def careful(state: AgentState) -> None:
        try:
            seen.append(interrupt("ok?"))
        except Exception:  # a node guarding its work must still pause
            seen.append("swallowed")

    app = line(("careful", careful)).compile()
    out = await app.ainvoke({"messages": [user("go")]}, CFG)
    assert out["status"] == "interrupted_before" and seen == []
    out = await app.ainvoke(Command(resume="yes"), CFG)
    assert out["status"] == "completed" and seen == ["yes"]
