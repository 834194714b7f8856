"""A process SIGKILLed in the middle of a streamed model answer: the resumed run calls the
model again and the log holds one complete message (deltas are never events)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from agentlog.events import ModelCalled, SQLiteEventStore
from tests.workers.fake_provider import FakeProvider, Reply
from tests.workers.model_crash import build

from .helpers import spawn_worker, wait_ready

THREAD = "model-crash"
pytestmark = pytest.mark.slow


async def test_a_kill_mid_stream_leaves_no_partial_message(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    async with FakeProvider() as server:
        server.script(Reply(cut_after=5, hold=True))  # five deltas, then the stream stalls
        proc = spawn_worker("model_crash", db, server.port, THREAD)
        try:
            await asyncio.to_thread(wait_ready, proc)
            await asyncio.wait_for(server.held.wait(), 30)
            proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == -signal.SIGKILL
        async with SQLiteEventStore(db) as store:
            before = [r.kind async for r in store.read(THREAD)]
            assert "model_called" not in before and before[-1] == "node_entered"
            out = await build(store, server.port).ainvoke(None, {"thread_id": THREAD})
            records = [r async for r in store.read(THREAD)]
            report = await store.verify(THREAD)
    said = "Your order A-1042 is eligible for a refund of 89.90."
    assert out["status"] == "completed" and out["messages"][-1].text() == said
    answers = [
        r.event.message
        for r in records
        if r.kind == "message_appended" and r.event.message["role"] == "assistant"
    ]
    assert [a["content"][-1]["text"] for a in answers] == [said]
    calls = [r.event for r in records if isinstance(r.event, ModelCalled)]
    assert [(c.status, c.streamed) for c in calls] == [("completed", True)]
    assert len(server.requests) == 2  # the killed call, and the one the resumed run made
    assert server.requests[0].body["messages"] == server.requests[1].body["messages"]
    assert report.ok
