"""A thread created (`POST /threads`) and never run has nothing to go on with: a run with no
input is refused before anything is written, by Python, the runtime and HTTP alike, rather
than starting the graph on an empty context (which failed in the first node, recorded)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from agentlog.actors import NothingToResumeError
from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import MemoryEventStore, SQLiteEventStore
from agentlog.events.kinds import ThreadCreated
from agentlog.projections import AgentState, Message
from tests.helpers import line


def reply(state: AgentState) -> list[Message]:
    return [Message.text_message(f"you said {state.context[-1].text()}", role="assistant")]


async def test_ainvoke_none_on_a_created_thread_is_refused() -> None:
    store = MemoryEventStore()
    app = line(("agent", reply)).compile(store)
    made = ThreadCreated(by="alice", metadata={})
    await app.awrite_claimed("t", lambda fold: [made], actor="alice", what="a creation")
    with pytest.raises(NothingToResumeError, match="send input to start its first run"):
        await app.ainvoke(None, {"thread_id": "t"})
    assert await store.last_seq("t") == 1
    done = await app.ainvoke("hi", {"thread_id": "t"})
    assert done["status"] == "completed"


async def test_a_run_without_input_on_a_created_thread_is_refused_over_http(
    tmp_path: Path,
) -> None:
    async with SQLiteEventStore(tmp_path / "serve.db") as store:
        runtime = AgentRuntime(store)
        graph = line(("agent", reply))
        graph.name = "support"
        runtime.add_graph("support", graph.compile(store))
        runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
        async with runtime:
            transport = httpx.ASGITransport(app=create_app(runtime))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                assert (await http.post("/log/threads", json={"thread_id": "t"})).status_code == 200
                for path in ("/log/threads/t/runs", "/log/threads/t/runs/wait"):
                    answer = await http.post(path, json={"assistant_id": "chat"})
                    assert answer.status_code == 409, answer.text
                    error = answer.json()["error"]
                    assert error["code"] == "nothing_to_resume"
                    assert "send input" in error["message"]
                assert (await http.get("/log/threads/t")).json()["status"] == "idle"
            runtime_records = await store.last_seq("__runtime__")
            with pytest.raises(NothingToResumeError, match="has not run yet"):
                await runtime.trigger("chat", None, thread_id="t")
            assert await store.last_seq("t") == 1
            assert await store.last_seq("__runtime__") == runtime_records
