"""Thread ids and the shape of a call: both config forms, missing and unknown threads.

Every call that works on a thread finds its id in `{"thread_id": ...}` or LangGraph's
`{"configurable": {"thread_id": ...}}`; without one it says how to pass it; an unknown
thread is an error for everything but new input, which starts it, and reading never
creates a thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from agentlog.actors import (
    END,
    CompiledGraph,
    GraphError,
    MissingThreadIdError,
    RecursionLimitError,
    StateGraph,
)
from agentlog.events import AgentlogError, EventStore, MemoryEventStore, ThreadNotFoundError
from agentlog.projections import AgentState, ExecutionStatus, Message


def echo_graph(store: EventStore, **compile_kwargs: Any) -> CompiledGraph[AgentState]:
    """One node answering "echo: <the last user text>"."""

    async def echo(state: AgentState) -> list[Message]:
        last = [m for m in state.context if m.role == "user"][-1]
        return [Message.text_message(f"echo: {last.text()}", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("echo", echo)
    graph.set_entry_point("echo")
    graph.add_edge("echo", END)
    return graph.compile(store, **compile_kwargs)


def loop_graph(store: EventStore) -> CompiledGraph[AgentState]:
    """A node that routes back to itself until the context holds 100 messages."""

    async def again(state: AgentState) -> list[Message]:
        return [Message.text_message("again", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("again", again)
    graph.set_entry_point("again")
    graph.add_conditional_edges(
        "again", lambda s: END if len(s.context) >= 100 else "again", {"again": "again", END: END}
    )
    return graph.compile(store)


def hello(text: str = "hello") -> dict[str, Any]:
    return {"messages": [Message.text_message(text)]}


# --- the two forms name one thread ---------------------------------------------------------


async def test_both_config_forms_name_the_same_thread() -> None:
    store = MemoryEventStore()
    app = echo_graph(store)
    await app.ainvoke(hello("one"), {"thread_id": "x"})
    result = await app.ainvoke(hello("two"), {"configurable": {"thread_id": "x"}}, "partial")
    assert [m.text() for m in result["context"]] == ["one", "echo: one", "two", "echo: two"]
    assert await store.threads() == ["x"]
    flat = await app.aget_state({"thread_id": "x"})
    nested = await app.aget_state({"configurable": {"thread_id": "x"}})
    assert flat == nested
    history = await app.aget_state_history({"configurable": {"thread_id": "x"}})
    assert len(history) == len(await app.aget_state_history({"thread_id": "x"})) == 2


# --- a missing thread id -----------------------------------------------------------------

NO_THREAD: list[Any] = [None, {}, {"configurable": {}}, {"configurable": {"user": "ann"}}]


async def _consume_astream(app: CompiledGraph[AgentState], config: Any) -> None:
    async for _ in app.astream(hello(), config):
        pass


CALLS: dict[str, Callable[[CompiledGraph[AgentState], Any], Awaitable[Any]]] = {
    "ainvoke": lambda app, config: app.ainvoke(hello(), config),
    "astream": _consume_astream,
    "aget_state": lambda app, config: app.aget_state(config),
    "aget_state_history": lambda app, config: app.aget_state_history(config),
    "aupdate_state": lambda app, config: app.aupdate_state(config, hello("edit")),
    "afork": lambda app, config: app.afork(config, at_step=1),
    "astop": lambda app, config: app.astop(config),
}


@pytest.mark.parametrize("config", NO_THREAD, ids=repr)
@pytest.mark.parametrize("call", list(CALLS))
async def test_a_call_without_a_thread_id_names_both_forms(call: str, config: Any) -> None:
    store = MemoryEventStore()
    app = echo_graph(store)
    await app.ainvoke(hello(), {"thread_id": "existing"})
    with pytest.raises(MissingThreadIdError) as caught:
        await CALLS[call](app, config)
    message = str(caught.value)
    assert "{'thread_id':" in message and "{'configurable': {'thread_id':" in message
    assert isinstance(caught.value, AgentlogError)
    assert await store.threads() == ["existing"]


# --- an unknown thread -------------------------------------------------------------------

UNKNOWN = {"thread_id": "nobody"}

READS: dict[str, Callable[[CompiledGraph[AgentState]], Awaitable[Any]]] = {
    "ainvoke(None)": lambda app: app.ainvoke(None, UNKNOWN),
    "aget_state": lambda app: app.aget_state(UNKNOWN),
    "aget_state_history": lambda app: app.aget_state_history(UNKNOWN),
    "ahistory": lambda app: app.ahistory(UNKNOWN),
    "astop": lambda app: app.astop(UNKNOWN),
    "aupdate_state": lambda app: app.aupdate_state(UNKNOWN, hello("edit")),
    "afork": lambda app: app.afork(UNKNOWN, at_step=1),
    "adiff": lambda app: app.adiff(UNKNOWN, 0, 1),
}


@pytest.mark.parametrize("call", list(READS))
async def test_an_unknown_thread_is_not_found_and_nothing_is_created(
    call: str, store: EventStore
) -> None:
    app = echo_graph(store)
    with pytest.raises(ThreadNotFoundError, match="'nobody'"):
        await READS[call](app)
    assert await store.threads() == []
    assert await store.last_seq("nobody") == 0
    assert await store.holder("nobody") is None


async def test_new_input_on_an_unknown_id_starts_the_thread(store: EventStore) -> None:
    app = echo_graph(store)
    result = await app.ainvoke(hello("first"), {"configurable": {"thread_id": "new-one"}})
    assert result["status"] == ExecutionStatus.COMPLETED.value
    assert await store.threads() == ["new-one"]
    kinds = [r.kind async for r in store.read("new-one")]
    assert (kinds[0], kinds[-1]) == ("run_started", "run_completed")


# --- recursion limit from the call's config ------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {"thread_id": "t", "recursion_limit": 3},
        {"configurable": {"thread_id": "t"}, "recursion_limit": 3},
    ],
    ids=["flat", "langgraph"],
)
async def test_the_calls_recursion_limit_is_honoured(config: Mapping[str, Any]) -> None:
    store = MemoryEventStore()
    app = loop_graph(store)
    with pytest.raises(RecursionLimitError, match="recursion limit of 3"):
        await app.ainvoke(hello(), config)
    kinds = [r.kind async for r in store.read("t")]
    assert kinds.count("node_entered") == 3
    assert kinds[-1] == "run_failed"


async def test_a_higher_recursion_limit_in_the_call_lets_the_run_finish() -> None:
    store = MemoryEventStore()
    app = loop_graph(store)
    result = await app.ainvoke(hello(), {"thread_id": "t", "recursion_limit": 200})
    assert result["status"] == ExecutionStatus.COMPLETED.value
    assert len(result["messages"]) == 100  # past compile()'s default of 25 steps


@pytest.mark.parametrize("bad", [0, -1, "5", True, 2.5, None])
async def test_a_bad_recursion_limit_is_refused_before_anything_is_written(bad: Any) -> None:
    store = MemoryEventStore()
    app = loop_graph(store)
    with pytest.raises(GraphError, match="recursion_limit"):
        await app.ainvoke(hello(), {"thread_id": "t", "recursion_limit": bad})
    assert await store.threads() == []
    assert await store.holder("t") is None


# --- input forms and the result's shape ---------------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        "hello",
        {"role": "user", "content": "hello"},
        {"messages": [{"role": "user", "content": "hello"}]},
    ],
    ids=["str", "openai-dict", "messages-of-dicts"],
)
async def test_plain_input_forms_are_a_user_message(given: Any) -> None:
    app = echo_graph(MemoryEventStore())
    result = await app.ainvoke(given, {"thread_id": "t"})
    assert [(m.role, m.text()) for m in result["messages"]] == [
        ("user", "hello"),
        ("assistant", "echo: hello"),
    ]
    assert result["status"] == "completed"
    assert "__interrupt__" not in result


async def test_a_paused_result_says_where_and_why() -> None:
    app = echo_graph(MemoryEventStore(), interrupt_before=["echo"])
    paused = await app.ainvoke("hi", {"thread_id": "t"})
    assert paused["status"] == ExecutionStatus.INTERRUPTED_BEFORE.value
    (pause,) = paused["__interrupt__"]
    assert (pause["node"], pause["reason"]) == ("echo", "interrupt_before")
    done = await app.ainvoke(None, {"thread_id": "t"}, "partial")
    assert done["status"] == "completed" and "__interrupt__" not in done
    assert [m.text() for m in done["context"]] == ["hi", "echo: hi"]


async def test_a_config_naming_two_threads_is_refused() -> None:
    app = echo_graph(MemoryEventStore())
    with pytest.raises(GraphError, match="two threads"):
        await app.ainvoke("hi", {"thread_id": "a", "configurable": {"thread_id": "b"}})
    assert await app.store.threads() == []
    await app.ainvoke("hi", {"thread_id": "a", "configurable": {"thread_id": "a"}})
    assert await app.store.threads() == ["a"]
