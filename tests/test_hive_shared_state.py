"""hive's shared state manager (issue 33, row 5): under `shared` isolation a node reads its
own writes in the same run (the next node too), a failed attempt's writes are never read,
and `runtime.state_manager.get_stats()` counts the keys and writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog import END, StateGraph
from agentlog.actors.engine.retry import RetryPolicy
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig, shared_state
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message


def said(text: str) -> list[Message]:
    return [Message.text_message(text, role="assistant")]


def process_webhook(state: AgentState) -> list[Message]:
    memory = shared_state()
    memory.increment("tickets")
    memory.append("seen", "t-1")
    memory.merge("customer", {"tier": "gold"})
    return said(f"{memory.get('tickets')} {memory.get('seen')} {memory.get('customer')}")


class Flaky:
    """Writes, then fails on its first attempt; the retry writes again."""

    def __init__(self) -> None:
        self.attempts = 0

    def __call__(self, state: AgentState) -> list[Message]:
        self.attempts += 1
        shared_state().append("seen", f"attempt {self.attempts}")
        if self.attempts == 1:
            raise ConnectionError("the ticket system hung up")
        return said("ok")


async def report(state: AgentState) -> list[Message]:
    memory = shared_state()
    now = await memory.aget("tickets")  # every commit folded in, its own write kept
    return said(f"{memory.get('tickets')} {memory.get('seen')} {now}")


def graph(store: Any, flaky: Flaky) -> Any:
    built = StateGraph(name="support")
    built.add_node("process-webhook", process_webhook)
    built.add_node("lookup", flaky, retry_policy=RetryPolicy(max_attempts=2, backoff_s=0))
    built.add_node("report", report)
    built.set_entry_point("process-webhook")
    built.add_edge("process-webhook", "lookup")
    built.add_edge("lookup", "report")
    built.add_edge("report", END)
    return built.compile(checkpointer=store)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with SQLiteEventStore(tmp_path / "shared.db") as s:
        yield s


async def test_a_run_reads_its_own_writes_and_the_manager_counts_them(store: Any) -> None:
    runtime = AgentRuntime(store, RuntimeConfig(global_keys=["customer"]))
    runtime.add_graph("support", graph(store, Flaky()))
    runtime.register_entry_point(EntryPoint(id="webhook", graph_id="support", isolation="shared"))
    async with runtime:
        result = await runtime.trigger_and_wait("webhook", "ticket 1", timeout=30)
        texts = [m.text() for m in result["messages"] if m.role == "assistant"]
        assert texts[0] == "1 ['t-1'] {'tier': 'gold'}"  # the node's own writes
        assert texts[2] == "1 ['t-1', 'attempt 2'] 1"  # not the failed attempt's
        result = await runtime.trigger_and_wait("webhook", "ticket 2", timeout=30)
        texts = [m.text() for m in result["messages"] if m.role == "assistant"]
        assert texts[0] == "2 ['t-1', 'attempt 2', 't-1'] {'tier': 'gold'}"
        await runtime.state_manager.catch_up()
        manager = runtime.state_manager.get_stats()
        assert manager["keys"] == 3 and manager["global_keys"] == 1
        assert manager["graph_keys"] == {"support": 2}
        assert manager["writes"] == 8  # 2 runs x (3 + 1): the failed attempt's never landed
        assert manager["isolation"] == {"webhook": "shared"}
        assert runtime.state_manager.get("tickets", "support") == 2
        assert await runtime.state_manager.values("support") == {
            "tickets": 2,
            "seen": ["t-1", "attempt 2", "t-1", "attempt 3"],
            "customer": {"tier": "gold"},
        }
