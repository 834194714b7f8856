"""The long-term store in a graph: `compile(checkpointer=..., store=...)`, `get_store()` and
the `store` parameter in nodes, writes from a node in the log (once, even when a crash makes
the step run again), and the refusals of a persistence line that does not fit."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from agentlog.actors import (
    BaseStore,
    GraphError,
    InMemoryStore,
    LogStore,
    NodeContext,
    NotInNodeError,
    PersistenceError,
    StateGraph,
    get_store,
)
from agentlog.actors.engine.context import _current
from agentlog.actors.engine.longterm import LongTermStoreError
from agentlog.actors.engine.threads import STORE_THREAD
from agentlog.events import EventRecord, MemoryEventStore, SQLiteEventStore
from agentlog.projections import AgentState, Message

from .helpers import line

CFG = {"thread_id": "t"}


def said(text: str) -> Message:
    return Message.text_message(text, role="assistant")


async def store_records(store: LogStore) -> list[EventRecord]:
    return [r async for r in store.event_store.read(STORE_THREAD)]


async def test_a_def_node_reaches_the_compiled_store_with_get_store_and_writes_as_itself() -> None:
    log, memory = MemoryEventStore(), InMemoryStore()

    def remember(state: AgentState) -> list[Message]:
        store = get_store()
        store.put(("users", "42"), "food", {"likes": "pizza"})
        item = store.get(("users", "42"), "food")
        return [said(f"noted {item.value['likes'] if item else '?'}")]

    app = line(("remember", remember)).compile(checkpointer=log, store=memory)
    assert app.long_term_store is memory and app.checkpointer is log and app.store is log
    result = await app.ainvoke("hi", CFG)
    assert result["messages"][-1].text() == "noted pizza"
    (record,) = await store_records(memory)
    assert (record.actor, record.kind) == ("remember", "store_item_put")
    run_ids = {r.run_id async for r in log.read("t")}
    assert record.run_id in run_ids
    (step_seq,) = [r.seq async for r in log.read("t") if r.kind == "node_entered"]
    assert record.event.op_id == f"t:{step_seq}:1"  # type: ignore[attr-defined]
    assert (await memory.event_store.verify(STORE_THREAD)).ok
    assert (await log.verify("t")).ok


async def test_an_async_node_declares_a_store_parameter_and_searches_what_another_run_wrote() -> (
    None
):
    memory = InMemoryStore()
    await memory.aput(("users", "42"), "a", {"text": "likes pizza"})

    async def recall(state: AgentState, *, store: BaseStore) -> list[Message]:
        found = await store.asearch(("users", "42"), query="pizza")
        await store.aput(("users", "42"), "seen", {"count": len(found)})
        return [said(f"{len(found)} memory")]

    app = line(("recall", recall)).compile(store=memory)
    result = await app.ainvoke("hi", CFG)
    assert result["messages"][-1].text() == "1 memory"
    assert [r.actor for r in await store_records(memory)] == ["user", "recall"]


async def test_one_store_on_the_graphs_own_log_keeps_runs_and_memories_in_one_database(
    tmp_path: Any,
) -> None:
    async with SQLiteEventStore(tmp_path / "app.db") as log:
        memory = LogStore(log)

        def note(state: AgentState) -> list[Message]:
            get_store().put(("notes",), state.context[-1].text(), {"n": 1})
            return [said("ok")]

        app = line(("note", note)).compile(checkpointer=log, store=memory)
        await app.ainvoke("first", CFG)
        await app.ainvoke("second", CFG)
        assert sorted(await log.threads()) == [STORE_THREAD, "t"]
        assert [i.key for i in await LogStore(log).asearch(("notes",))] == ["first", "second"]
        for thread in (STORE_THREAD, "t"):
            assert (await log.verify(thread)).ok
        await app.aclose()
        await memory.aclose()


async def test_get_store_outside_a_node_or_without_a_store_is_refused_by_name() -> None:
    with pytest.raises(NotInNodeError):
        get_store()

    def asks(state: AgentState) -> list[Message]:
        get_store()
        return []

    app = line(("asks", asks)).compile()
    with pytest.raises(Exception, match="compiled without one") as raised:
        await app.ainvoke("hi", CFG)
    assert isinstance(raised.value.__cause__, LongTermStoreError)


def test_a_node_that_needs_a_store_parameter_needs_compile_store() -> None:
    def needs(state: AgentState, store: BaseStore) -> None:
        return None

    with pytest.raises(GraphError, match=r"compile\(store=InMemoryStore\(\)\)"):
        line(("needs", needs)).compile()
    assert line(("needs", needs)).compile(store=InMemoryStore()).long_term_store is not None


def test_a_registered_store_dependency_and_a_long_term_store_are_refused_together() -> None:
    graph = line(("a", lambda state: []))
    graph.register("store", object())
    graph.compile()  # alone, the dependency is the node's as before
    with pytest.raises(GraphError, match="rename the dependency"):
        graph.compile(store=InMemoryStore())


async def test_a_step_run_again_after_a_crash_does_not_repeat_its_writes() -> None:
    memory = InMemoryStore()

    def life() -> NodeContext:
        """A node's step as a crash leaves it: the same thread and node_entered seq."""

        async def commit(*args: Any, **kwargs: Any) -> list[EventRecord]:
            return []

        return NodeContext("t", "run-1", "agent", commit, step_seq=7, store=memory)

    async def step(writes: list[tuple[str, dict[str, Any]]]) -> None:
        token = _current.set(life())
        try:
            for key, value in writes:
                await memory.aput(("n",), key, value)
            await memory.adelete(("n",), "gone")
        finally:
            _current.reset(token)

    await step([("a", {"v": 1}), ("b", {"v": 2})])
    await step([("a", {"v": 1}), ("b", {"v": 2})])  # the crash's second life: nothing new
    assert len(await store_records(memory)) == 3
    await step([("a", {"v": 1}), ("b", {"v": 3})])  # a different second write is a new write
    records = await store_records(memory)
    assert [(r.kind, r.event.op_id) for r in records[3:]] == [("store_item_put", "t:7:2")]  # type: ignore[attr-defined]
    item = await memory.aget(("n",), "b")
    assert item is not None and item.value == {"v": 3}


# ---- the persistence line -----------------------------------------------------------------


def test_checkpointer_names_the_log_and_store_the_long_term_store() -> None:
    log, memory = MemoryEventStore(), InMemoryStore()
    graph = line(("a", lambda state: []))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        app = graph.compile(checkpointer=log, store=memory)
        positional = graph.compile(log, store=memory)
        bare = graph.compile()
    assert (app.checkpointer, app.long_term_store) == (log, memory)
    assert (positional.checkpointer, positional.long_term_store) == (log, memory)
    assert isinstance(bare.checkpointer, MemoryEventStore) and bare.long_term_store is None


def test_an_event_store_given_as_store_still_names_the_log_with_a_deprecation_warning() -> None:
    log = MemoryEventStore()
    with pytest.warns(DeprecationWarning, match=r"checkpointer=") as caught:
        app = line(("a", lambda state: [])).compile(store=log)
    assert caught[0].filename == __file__  # the warning points at the caller's line
    assert app.checkpointer is log and app.store is log and app.long_term_store is None


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"store": object()}, r"store= takes a long-term store .*checkpointer="),
        ({"store": {"a": 1}}, r"store= takes a long-term store .*checkpointer="),
        ({"checkpointer": "memory"}, r"checkpointer= takes an event store .*store="),
        ({"checkpointer": InMemoryStore()}, r"checkpointer= is the event log.*store="),
        (
            {"checkpointer": MemoryEventStore(), "store": MemoryEventStore()},
            r"both as checkpointer= and as store=",
        ),
    ],
)
def test_what_is_neither_log_nor_long_term_store_is_refused_at_compile_time(
    kwargs: dict[str, Any], named: str
) -> None:
    graph: StateGraph[AgentState] = line(("a", lambda state: []))
    with pytest.raises(PersistenceError, match=named) as raised:
        graph.compile(**kwargs)
    assert isinstance(raised.value, GraphError) and isinstance(raised.value, TypeError)


async def test_a_tool_run_by_a_tool_node_reaches_the_store_and_writes_as_the_tool_node() -> None:
    from agentlog.projections import TextBlock, ToolCallBlock

    from .helpers import agent_with_tools

    def save_note(text: str) -> str:
        """Save a note for later."""
        get_store().put(("notes",), "last", {"text": text})
        return "saved"

    def agent(state: AgentState) -> list[Message]:
        if state.context[-1].role == "tool":
            return [said("done")]
        call = ToolCallBlock(id="c1", name="save_note", args={"text": "buy milk"})
        return [Message(role="assistant", content=[TextBlock(text="saving"), call])]

    memory = InMemoryStore()
    app = agent_with_tools(agent, [save_note]).compile(store=memory)
    result = await app.ainvoke("note it", CFG)
    assert result["messages"][-1].text() == "done"
    item = await memory.aget(("notes",), "last")
    assert item is not None and item.value == {"text": "buy milk"}
    assert [r.actor for r in await store_records(memory)] == ["tools"]
    await memory.aclose()


@pytest.mark.slow
async def test_a_process_killed_after_a_nodes_store_writes_does_not_repeat_them_on_resume(
    tmp_path: Any,
) -> None:
    import asyncio
    import signal

    from tests.workers.store_crash import build

    from .helpers import spawn_worker, wait_ready

    db = tmp_path / "crash.db"
    proc = spawn_worker("store_crash", db, "t")
    try:
        await asyncio.to_thread(wait_ready, proc)  # the node's writes have committed
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    async with SQLiteEventStore(db) as log:
        assert [r.kind async for r in log.read("t")][-1] == "node_entered"  # no step commit
        app = build(log, hold=False, more=True)
        result = await app.ainvoke(None, CFG)
        writes = [r async for r in log.read(STORE_THREAD)]
        assert result["status"] == "completed"
        assert [(r.kind, r.event.key) for r in writes] == [  # type: ignore[attr-defined]
            ("store_item_put", "a"),
            ("store_item_deleted", "gone"),
            ("store_item_put", "b"),
            ("store_item_put", "c"),  # the second life's own write
        ]
        assert len({r.event.op_id.rsplit(":", 1)[0] for r in writes}) == 1  # type: ignore[attr-defined]
        memory = app.long_term_store
        assert memory is not None
        assert [i.key for i in await memory.asearch(("notes",))] == ["a", "b", "c"]
        assert (await log.verify(STORE_THREAD)).ok and (await log.verify("t")).ok
        await app.aclose()
        await memory.aclose()  # type: ignore[attr-defined]
