"""Erasure end to end: a graph run tagged with a subject, read through every door (state,
history, fork, follow, export, CLI), erased with `agentlog erase`, then read again."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentlog.actors import END, StateGraph, ToolNode
from agentlog.events import SQLiteEventStore, export_jsonl, follow
from agentlog.events.keystore import subject_of_thread
from agentlog.events.sealing import MASTER_KEY_ENV
from agentlog.projections import AgentState, Message, ToolCallBlock

CITY = "Rabbit Hole Lane 7"
SECRET = "my name is Alice Liddell"
MASTER = base64.urlsafe_b64encode(bytes(range(1, 33))).decode()


@pytest.fixture(autouse=True)
def master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, MASTER)


def graph() -> StateGraph[AgentState]:
    def agent(state: AgentState) -> list[Message]:
        results = [m for m in state.context if m.role == "tool"]
        if results:
            return [Message.text_message(f"done: {results[-1].text()}", role="assistant")]
        call = ToolCallBlock(id="w1", name="where", args={"street": CITY})
        return [Message(role="assistant", content=[call])]

    def where(street: str) -> str:
        """Look a street up."""
        return f"found {street}"

    def route(state: AgentState) -> str:
        return "tools" if state.context[-1].tool_calls() else END

    g: StateGraph[AgentState] = StateGraph(name="where")
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([where]))
    g.set_entry_point("agent")
    g.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    g.add_edge("tools", "agent")
    return g


def cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", "from agentlog.actors.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env={**os.environ, MASTER_KEY_ENV: MASTER},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


async def _everything(store: SQLiteEventStore, app: object, db: str) -> dict[str, str]:
    """What each reader shows of both threads."""
    seen: dict[str, str] = {}
    for thread in ("t", "t-fork"):
        state = await app.aget_state({"thread_id": thread})  # type: ignore[attr-defined]
        seen[f"state {thread}"] = state.model_dump_json()
        out = io.StringIO()
        await export_jsonl(store, thread, out)
        seen[f"export {thread}"] = out.getvalue()
        seen[f"history {thread}"] = cli("history", thread, "--db", db, "--json")
        seen[f"show {thread}"] = cli("show", thread, "--db", db, "--full")
    last, followed = await store.last_position(), []
    async for record in follow(store, after=0):
        followed.append(repr(record.event))
        if record.position >= last:
            break
    seen["follow"] = "\n".join(followed)
    return seen


async def test_a_run_tagged_with_a_subject_is_forgotten_everywhere(tmp_path: Path) -> None:
    db = str(tmp_path / "log.db")
    async with SQLiteEventStore(db) as store:
        app = graph().compile(checkpointer=store)
        config = {"thread_id": "t", "subject": "alice"}
        await app.ainvoke({"messages": [Message.text_message(SECRET)]}, config)
        assert await subject_of_thread(store, "t") == "alice"
        await app.afork({"thread_id": "t"}, at_step=1, new_thread_id="t-fork")
        assert await subject_of_thread(store, "t-fork") == "alice"
        with open(db, "rb") as file:
            assert SECRET.encode() not in file.read()
        before = await _everything(store, app, db)
        shown = [name for name, text in before.items() if SECRET in text]
        assert shown == ["state t", "history t", "show t", "state t-fork", "show t-fork", "follow"]
        heads = [(await store.verify(t)).head_hash for t in ("t", "t-fork")]

    said = cli("erase", "alice", "--by", "dpo@example.com", "--reason", "Art. 17", "--db", db)
    assert "erased: subject alice" in said and "2 thread(s)" in said
    assert "already erased" in cli("erase", "alice", "--by", "x", "--reason", "y", "--db", db)

    async with SQLiteEventStore(db) as store:
        app = graph().compile(checkpointer=store)
        after = "\n".join((await _everything(store, app, db)).values())
        assert SECRET not in after and CITY not in after
        assert "erased on" in after and "dpo@example.com" in after
        assert [(await store.verify(t)).head_hash for t in ("t", "t-fork")] == heads
    assert "ok" in cli("verify", "--db", db).lower()
    with pytest.raises(json.JSONDecodeError):
        json.loads("")  # the CLI's outputs above were read as text, never trusted as JSON


async def test_the_http_api_shows_the_erasure_and_never_the_plaintext(tmp_path: Path) -> None:
    import httpx

    from agentlog.actors.engine.erasure import erase_subject
    from agentlog.actors.http import create_app
    from agentlog.actors.runtime import AgentRuntime, EntryPoint

    async with SQLiteEventStore(tmp_path / "serve.db") as store:
        app = graph().compile(checkpointer=store)
        config = {"thread_id": "t", "subject": "alice"}
        await app.ainvoke({"messages": [Message.text_message(SECRET)]}, config)
        runtime = AgentRuntime(store)
        runtime.add_graph("where", app)
        runtime.register_entry_point(EntryPoint(id="chat", graph_id="where"))
        async with runtime:
            transport = httpx.ASGITransport(app=create_app(runtime))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:

                async def answers() -> str:
                    got = [
                        await http.get("/threads/t"),
                        await http.get("/threads/t/state"),
                        await http.get("/threads/t/history"),
                        await http.post("/threads/search", json={}),
                    ]
                    assert all(r.status_code == 200 for r in got), [r.text for r in got]
                    return "\n".join(r.text for r in got)

                assert SECRET in await answers()
                await erase_subject(store, "alice", by="dpo", reason="Art. 17")
                after = await answers()
                assert SECRET not in after and CITY not in after
                assert "erased on" in after


async def test_no_cache_of_this_process_serves_the_plaintext_after_erasure(tmp_path: Path) -> None:
    from agentlog.actors.engine.erasure import erase_subject
    from agentlog.projections.views import state_at, take_snapshot

    async with SQLiteEventStore(tmp_path / "log.db") as store:
        app = graph().compile(checkpointer=store)
        await app.ainvoke({"messages": [Message.text_message(SECRET)]},
                          {"thread_id": "t", "subject": "alice"})  # fmt: skip
        await take_snapshot(store, "t")
        assert SECRET in (await state_at(store, "t")).model_dump_json()  # cached now
        await erase_subject(store, "alice", by="dpo", reason="Art. 17")
        await take_snapshot(store, "t")  # a new snapshot pointing at the same records
        shown = (await state_at(store, "t")).model_dump_json()
        assert SECRET not in shown and "erased on" in shown
