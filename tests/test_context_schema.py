"""A graph's context schema: a call's `context=` is checked against it before anything is
written, reaches the nodes that take a `runtime`, and is never recorded in the log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typing_extensions import TypedDict

from agentlog.actors import END, GraphError, StateGraph
from agentlog.actors.engine.options import InvalidContextError, Runtime
from agentlog.events import MemoryEventStore
from agentlog.projections import AgentState, replay
from tests.helpers import thread_log

CFG = {"thread_id": "t1"}


@dataclass
class Caller:
    user_id: str
    limit: int = 3


class Seen(AgentState):
    seen: list[str] = []


def graph_of(schema: Any = Caller) -> Any:
    async def greet(state: Seen, runtime: Runtime[Caller]) -> dict[str, Any]:
        ctx: Any = runtime.context
        if isinstance(ctx, dict):  # a TypedDict schema's context is a dict
            ctx = Caller(**ctx)
        return {"seen": [*state.seen, f"{ctx.user_id}:{ctx.limit}" if ctx else "nobody"]}

    graph = StateGraph(Seen, context_schema=schema)
    graph.add_node("greet", greet)
    graph.set_entry_point("greet")
    graph.add_edge("greet", END)
    return graph.compile(checkpointer=MemoryEventStore())


async def records(app: Any) -> list[Any]:
    return await thread_log(app.store, "t1")


async def test_a_node_reads_the_calls_context() -> None:
    app = graph_of()
    await app.ainvoke("hi", CFG, context=Caller("ada", 5))
    await app.ainvoke("again", CFG, context={"user_id": "bob"})  # a dict of its fields
    await app.ainvoke("no context", CFG)
    assert (await app.aget_state(CFG)).seen == ["ada:5", "bob:3", "nobody"]


async def test_a_context_that_does_not_fit_is_refused_before_anything_is_written() -> None:
    app = graph_of()
    with pytest.raises(InvalidContextError, match="user_id") as caught:
        await app.ainvoke("hi", CFG, context={"limit": "many"})
    assert isinstance(caught.value, GraphError)
    assert "Caller" in str(caught.value)
    assert await records(app) == []
    with pytest.raises(InvalidContextError):
        [part async for part in app.astream("hi", CFG, context={"limit": 1})]
    assert await records(app) == []


async def test_the_context_is_never_recorded_and_replay_is_the_live_state() -> None:
    app = graph_of()
    secret = "token-that-must-not-be-logged"
    await app.ainvoke("hi", CFG, context=Caller(secret, 1))
    logged = await records(app)
    assert not any(secret in repr(r.event) for r in logged if "seen" not in repr(r.event))
    assert replay(logged, Seen) == await app.aget_state(CFG)


def test_a_typed_dict_schema_and_a_bad_schema() -> None:
    class Ctx(TypedDict):
        user_id: str
        limit: int

    app = graph_of(Ctx)
    app.invoke("hi", CFG, context={"user_id": "cy", "limit": 2})
    with pytest.raises(InvalidContextError, match="limit"):
        app.invoke("hi", CFG, context={"user_id": "cy"})
    with pytest.raises(GraphError, match="context_schema is a class"):
        StateGraph(Seen, context_schema="Caller")


@settings(max_examples=20, deadline=None)
@given(limit=st.one_of(st.integers(-5, 5), st.text(max_size=3), st.none()))
def test_any_context_is_either_refused_with_nothing_written_or_read_as_checked(
    limit: Any,
) -> None:
    import asyncio

    async def scenario() -> None:
        app = graph_of()
        try:
            await app.ainvoke("hi", CFG, context={"user_id": "u", "limit": limit})
        except InvalidContextError:
            assert await records(app) == []
            return
        assert (await app.aget_state(CFG)).seen == [f"u:{int(limit)}"]

    asyncio.run(scenario())


def test_the_langgraph_front_checks_and_hands_its_context_schema() -> None:
    from agentlog.langgraph import END as LG_END
    from agentlog.langgraph import START
    from agentlog.langgraph import Runtime as LGRuntime
    from agentlog.langgraph import StateGraph as LGStateGraph

    class Steps(TypedDict):
        steps: list[str]

    def greet(state: Steps, runtime: LGRuntime[Caller]) -> dict[str, Any]:
        return {"steps": [runtime.context.user_id]}

    builder = LGStateGraph(Steps, context_schema=Caller)
    builder.add_node("greet", greet)
    builder.add_edge(START, "greet")
    builder.add_edge("greet", LG_END)
    graph = builder.compile()
    assert graph.invoke({"steps": []}, context={"user_id": "ada"}) == {"steps": ["ada"]}
    with pytest.raises(InvalidContextError, match="user_id"):
        graph.invoke({"steps": []}, context={"limit": 2})
    assert LGRuntime is Runtime
