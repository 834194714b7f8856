"""The LangGraph front's `retry_policy=` (and its older `retry=`): LangGraph's `RetryPolicy`
read as agentlog's, every failed attempt and its retry in the log."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typing_extensions import TypedDict

from agentlog.actors.engine.retry import RETRIED_BY
from agentlog.actors.langgraph import default_retry_on as retried_by_default
from agentlog.events import MemoryEventStore, Resumed, RunFailed
from agentlog.langgraph import END, START, GraphError, RetryPolicy, StateGraph


class Tries(TypedDict):
    tries: int


def flaky(fails: int, error: type[Exception] = ConnectionError) -> Any:
    calls: list[int] = []

    def call(state: Tries) -> dict[str, Any]:
        calls.append(1)
        if len(calls) <= fails:
            raise error("down")
        return {"tries": len(calls)}

    return call


def compiled(node: Any, **options: Any) -> Any:
    builder = StateGraph(Tries)
    builder.add_node("call", node, **options)
    builder.add_edge(START, "call")
    builder.add_edge("call", END)
    return builder.compile(checkpointer=MemoryEventStore())


CFG = {"configurable": {"thread_id": "t"}}


@settings(max_examples=20, deadline=None)
@given(fails=st.integers(0, 4), attempts=st.integers(1, 4))
def test_langgraphs_policy_retries_the_node(fails: int, attempts: int) -> None:
    policy = RetryPolicy(initial_interval=0, jitter=False, max_attempts=attempts)
    graph = compiled(flaky(fails), retry_policy=policy)
    if fails < attempts:
        assert graph.invoke({"tries": 0}, CFG) == {"tries": fails + 1}
    else:
        with pytest.raises(Exception, match="ConnectionError"):
            graph.invoke({"tries": 0}, CFG)
    store = graph.graph_engine.store
    records = graph.graph_engine.call(_records(store))
    assert sum(isinstance(r.event, RunFailed) for r in records) == min(fails, attempts)
    retries = [r.event for r in records if isinstance(r.event, Resumed)]
    assert len(retries) == min(fails, attempts - 1)
    assert all(e.by == RETRIED_BY for e in retries)


async def _records(store: Any) -> list[Any]:
    return [r async for r in store.read("t")]


def test_the_older_retry_name_warns_and_works() -> None:
    policy = RetryPolicy(initial_interval=0, jitter=False)
    with pytest.warns(DeprecationWarning, match="retry_policy"):
        graph = compiled(flaky(2), retry=policy)
    assert graph.invoke({"tries": 0}, CFG) == {"tries": 3}


def test_by_default_a_program_error_is_not_retried() -> None:
    graph = compiled(flaky(1, ValueError), retry_policy=RetryPolicy(initial_interval=0))
    with pytest.raises(Exception, match="ValueError"):
        graph.invoke({"tries": 0}, CFG)
    assert retried_by_default(ConnectionError()) and retried_by_default(Exception())
    assert not retried_by_default(KeyError()) and not retried_by_default(OSError())

    class HTTPStatusError(Exception):
        def __init__(self, status: int) -> None:
            self.response = type("Response", (), {"status_code": status})()

    assert retried_by_default(HTTPStatusError(503))
    assert not retried_by_default(HTTPStatusError(404))


def test_a_list_of_classes_and_a_bad_policy() -> None:
    policy = RetryPolicy(initial_interval=0, jitter=False, retry_on=[KeyError])
    assert compiled(flaky(1, KeyError), retry_policy=policy).invoke({"tries": 0}, CFG) == {
        "tries": 2
    }
    with pytest.raises(GraphError, match="retry_policy is a RetryPolicy"):
        compiled(flaky(0), retry_policy="often")
    with pytest.raises(GraphError, match="cache_policy"):
        compiled(flaky(0), cache_policy=object())
