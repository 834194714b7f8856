"""`agentlog demo --model openai:MODEL`: the support agent against a real client, talking to
the tests' fake provider through OPENAI_BASE_URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlog.actors.examples.support import run_demo
from agentlog.actors.models import ModelSpecError
from agentlog.events import ModelCalled, SQLiteEventStore
from agentlog.projections import StreamChunk, ToolResultBlock
from tests.workers.fake_provider import FakeProvider, Reply


async def test_the_demo_runs_on_a_real_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeProvider() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        server.script(
            Reply(fixture="chat_tool_call"),
            Reply(fixture="chat_refund_call"),
            Reply(fixture="chat_text"),
        )
        shown: list[StreamChunk] = []
        asked: list[bool] = []

        def approve(state: object) -> bool:
            asked.append(True)
            return True

        async with SQLiteEventStore(tmp_path / "demo.db") as store:
            timeline, state, report = await run_demo(
                store, shown.append, approve, thread_id="d1", model="openai:gpt-test"
            )
    assert report.ok and asked == [True]
    assert state.execution_meta.status.value == "completed"
    assert state.context[-1].text() == "Your order A-1042 is eligible for a refund of 89.90."
    refunds = [
        b.output
        for m in state.context
        for b in m.content
        if isinstance(b, ToolResultBlock) and m.metadata.get("tool_name") == "issue_refund"
    ]
    assert refunds == [{"order_id": "A-1042", "refunded": 89.9, "reference": "RF-A-1042"}]
    calls = [r.event for r in timeline if isinstance(r.event, ModelCalled)]
    assert [(c.model, c.status) for c in calls] == [("gpt-test", "completed")] * 3
    tools = {t["function"]["name"] for t in server.requests[0].body["tools"]}
    assert tools == {"lookup_order", "issue_refund"}
    assert "customer-support agent" in server.requests[0].body["messages"][0]["content"]
    deltas = [c for c in shown if c.data and c.data.get("kind") == "text"]
    assert deltas  # the demo streams, so the answer arrives as deltas


async def test_a_model_that_is_not_provider_colon_name_is_refused(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "demo.db") as store:
        with pytest.raises(ModelSpecError, match="openai:MODEL or anthropic:MODEL"):
            await run_demo(store, lambda chunk: None, lambda state: True, model="gpt-4o")
