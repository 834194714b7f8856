"""Entry points that start by themselves (a webhook's signed deliveries, a timer) are not
started through `POST /threads/{id}/runs`, whatever the token's rights, unless a token names
them; and nothing is written when they are refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors.http import TokenBook, create_app, hash_token
from agentlog.actors.http.tokens import TokenFileError
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import SQLiteEventStore
from tests.test_serve import build


def with_self_starting(store: SQLiteEventStore) -> AgentRuntime:
    runtime = build(store)
    runtime.register_entry_point(
        EntryPoint(id="hook", graph_id="other", trigger="webhook", path="/hooks/x", secrets=["s"])
    )
    runtime.register_entry_point(
        EntryPoint(id="nightly", graph_id="other", trigger="timer", interval_s=86_400)
    )
    runtime.register_entry_point(  # its runs pause before "send", for a person to answer
        EntryPoint(id="desk", graph_id="support", trigger="webhook", path="/hooks/d", secrets=["s"])
    )
    return runtime


def tokens(tmp_path: Path, entries: list[dict[str, Any]]) -> TokenBook:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": entries}))
    return TokenBook.load(path)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, AgentRuntime]]:
    book = tokens(
        tmp_path,
        [
            {"name": "ops", "sha256": hash_token("ops"), "rights": ["admin"]},
            {
                "name": "cron",
                "sha256": hash_token("cron"),
                "rights": ["run"],
                "entry_points": ["nightly"],
            },
        ],
    )
    async with SQLiteEventStore(tmp_path / "grants.db") as store:
        runtime = with_self_starting(store)
        app = create_app(runtime, tokens=book)
        async with runtime:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                yield c, runtime


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def test_webhook_and_timer_entry_points_need_a_grant_by_name(client: Any) -> None:
    c, runtime = client
    head = await runtime.store.last_seq(runtime.config.runtime_thread)
    for entry in ("hook", "nightly"):
        refused = await c.post(
            "/log/threads/t/runs",
            json={"assistant_id": entry, "input": "hi"},
            headers=bearer("ops"),
        )
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "forbidden"
        assert f'"entry_points": ["{entry}"]' in refused.json()["error"]["message"]
    hook = await c.post(
        "/log/threads/t/runs", json={"assistant_id": "hook", "input": "hi"}, headers=bearer("cron")
    )
    assert hook.status_code == 403
    assert await runtime.store.last_seq(runtime.config.runtime_thread) == head
    assert await runtime.store.threads() == [runtime.config.runtime_thread]
    granted = await c.post(
        "/log/threads/t/runs/wait",
        json={"assistant_id": "nightly", "input": "hi"},
        headers=bearer("cron"),
    )
    assert granted.status_code == 200, granted.text
    assert granted.json()["run"]["created_by"] == "cron"
    api = await c.post(
        "/log/threads/u/runs/wait",
        json={"assistant_id": "notes", "input": "hi"},
        headers=bearer("ops"),
    )
    assert api.status_code == 200, api.text


async def test_a_paused_webhook_run_is_answered_without_a_grant(client: Any) -> None:
    """A signed delivery started the run; answering its pause starts nothing new."""
    c, runtime = client
    accepted = await runtime.submit("desk", "refund", thread_id="w", cause="webhook")
    await runtime.wait_for(accepted.trigger_id, timeout=60)  # paused before "send"
    answered = await c.post(
        "/log/threads/w/runs/wait",
        json={"assistant_id": "desk", "command": {"resume": None}},
        headers=bearer("ops"),
    )
    assert answered.status_code == 200, answered.text
    assert answered.json()["status"] == "completed"


async def test_a_tokenless_server_starts_no_webhook_entry_point(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "local.db") as store:
        runtime = with_self_starting(store)
        app = create_app(runtime)
        async with runtime:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                refused = await c.post(
                    "/log/threads/t/runs/wait", json={"assistant_id": "hook", "input": "forged"}
                )
                assert refused.status_code == 403, refused.text
                assert await store.last_seq("t") == 0


def test_the_token_file_checks_entry_points(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="entry_points must be a list"):
        tokens(tmp_path, [{"name": "a", "sha256": hash_token("a"), "rights": ["run"],
                           "entry_points": "nightly"}])  # fmt: skip
