"""What a request must be before the API acts on it (`agentlog.actors.http.guard`), through the ASGI
app with httpx: the Host allow-list (DNS rebinding), no change from another origin's page,
JSON bodies only, a nesting limit checked before anything is written; and a stored value too
deep to show degrades its own thread's read, never a search for everyone."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime
from agentlog.events import SQLiteEventStore
from agentlog.events.follow import last_position
from agentlog.projections import Message
from tests.test_serve import build

LOCAL = "http://127.0.0.1:8123"


def nested(depth: int) -> Any:
    """A JSON value whose objects nest `depth` deep."""
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


class Api:
    def __init__(
        self, store: SQLiteEventStore, runtime: AgentRuntime, client: httpx.AsyncClient
    ) -> None:
        self.store, self.runtime, self.client = store, runtime, client

    async def written(self) -> int:
        return await last_position(self.store)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with SQLiteEventStore(tmp_path / "guard.db") as store:
        runtime = build(store)
        app = create_app(
            runtime,
            allowed_hosts=["agents.example"],
            allowed_origins=["https://console.example"],
        )
        async with runtime:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as client:
                yield Api(store, runtime, client)


async def test_a_body_nested_deeper_than_the_limit_is_refused_before_anything_is_written(
    api: Api,
) -> None:
    before = await api.written()
    message = {"role": "user", "content": [{"type": "text", "text": "x"}]}
    for body in (
        {"graph_id": "support", "thread_id": "deep", "metadata": nested(250)},
        {"assistant_id": "chat", "input": {"messages": [{**message, "metadata": nested(250)}]}},
        {"assistant_id": "chat", "input": {"messages": [{**message, "metadata": nested(64)}]}},
    ):
        path = "/log/threads" if "graph_id" in body else "/log/threads/deep/runs/wait"
        response = await api.client.post(path, json=body)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "too_deep"
        assert "64" in response.json()["error"]["message"]
    hostile = b'{"metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = await api.client.post(
        "/log/threads", content=hostile, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "too_deep"
    assert await api.written() == before
    fits = {"graph_id": "support", "thread_id": "fits", "metadata": nested(63)}
    assert (await api.client.post("/log/threads", json=fits)).status_code == 200


async def test_a_stored_value_too_deep_to_show_degrades_its_thread_only(api: Api) -> None:
    """Written through Python (which has no body limit), or before the limit existed."""
    ok = await api.client.post(
        "/log/threads/fine/runs/wait", json={"assistant_id": "chat", "input": "hello"}
    )
    assert ok.status_code == 200
    deep = Message.text_message("x", role="user")
    deep.metadata = {"deep": nested(300)}
    await api.runtime.trigger_and_wait("chat", {"messages": [deep]}, thread_id="bad", timeout=30)
    found = await api.client.post("/log/threads/search", json={"limit": 10})
    assert found.status_code == 200, found.text
    rows = {row["thread_id"]: row for row in found.json()}
    assert set(rows) == {"fine", "bad"}
    assert rows["fine"]["values"]["context"][0]["content"][0]["text"] == "hello"
    assert rows["bad"]["values"] is None and "cannot be shown" in rows["bad"]["values_error"]
    for path in ("/log/threads/bad", "/log/threads/bad/state"):
        one = await api.client.get(path)
        assert one.status_code == 200, one.text
        assert one.json()["values"] is None and one.json()["values_error"]
    steps = await api.client.get("/log/threads/bad/history")
    assert steps.status_code == 200, steps.text
    assert [s["messages"] is None for s in steps.json()] == [True]
    assert "cannot be shown" in steps.json()[0]["messages_error"]
    assert (await api.client.get("/log/threads/fine")).json()["values"]["context"]


async def test_only_allowed_hosts_are_answered(api: Api) -> None:
    await api.client.post("/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"})
    for host in ("evil.example", "evil.example:8123", "127.0.0.1.evil.example", "attacker"):
        response = await api.client.get("/log/threads/t", headers={"Host": host})
        assert response.status_code == 400, host
        assert response.json()["error"]["code"] == "host_not_allowed"
    for host in ("127.0.0.1:8123", "localhost", "LOCALHOST:1", "[::1]:8123", "agents.example"):
        response = await api.client.get("/log/threads/t", headers={"Host": host})
        assert response.status_code == 200, host


async def test_a_default_app_answers_loopback_names_only(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "default.db") as store:
        app = create_app(build(store))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as client:
            assert (await client.get("/ok")).status_code == 200
            for host in ("agents.example", "evil.example"):
                assert (await client.get("/ok", headers={"Host": host})).status_code == 400


async def test_a_page_of_another_origin_changes_nothing(api: Api) -> None:
    client = api.client
    paused = await client.post(
        "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
    )
    run_id = paused.json()["run"]["run_id"]
    before = await api.written()
    cross = [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:9999"},  # another local page is another origin
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": "http://evil.example", "Sec-Fetch-Site": "same-origin"},
    ]
    for headers in cross:
        for path, content, kind in (
            (f"/log/threads/t/runs/{run_id}/cancel", b"", None),
            ("/log/threads/t/copy", b"", None),
            ("/log/threads/t/copy", b"{}", "text/plain"),
            ("/log/threads/t/runs", b'{"assistant_id": "chat", "input": "x"}', "text/plain"),
        ):
            sent = {**headers, **({"content-type": kind} if kind else {})}
            response = await client.post(path, content=content, headers=sent)
            assert response.status_code == 403, (path, headers, response.text)
            assert response.json()["error"]["code"] == "cross_origin"
        gone = await client.delete("/log/threads/t", headers=headers)
        assert gone.status_code == 403
    assert await api.written() == before
    # its own origin, an allowed one, and a client with no Origin (LangGraph's SDK) go on
    own = await client.post("/log/threads/t/copy", headers={"Origin": LOCAL})
    assert own.status_code == 200, own.text
    allowed = {"Origin": "https://console.example", "Sec-Fetch-Site": "cross-site"}
    assert (await client.post("/log/threads/t/copy", headers=allowed)).status_code == 200
    sdk = await client.post(f"/log/threads/t/runs/{run_id}/cancel", content=b"")
    assert sdk.status_code == 200, sdk.text
    # reads stay open to any origin on an allowed Host (the browser keeps the answer)
    assert (await client.get("/log/threads/t", headers={"Origin": "http://x.example"})).is_success


async def test_a_body_that_is_not_json_is_refused_with_415(api: Api) -> None:
    before = await api.written()
    for kind in (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        headers = {"content-type": kind} if kind else {}
        response = await api.client.post(
            "/log/threads/t/runs",
            content=json.dumps({"assistant_id": "chat", "input": "x"}).encode(),
            headers=headers,
        )
        assert response.status_code == 415, (kind, response.text)
        assert response.json()["error"]["code"] == "unsupported_media_type"
    assert await api.written() == before
    ok = await api.client.post(
        "/log/threads/t/runs",
        content=b'{"assistant_id": "chat", "input": "x"}',
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert ok.status_code == 202


@pytest.mark.parametrize("depth", [130, 200, *range(246, 258), 300])
async def test_thread_metadata_of_any_depth_degrades_its_thread_only(api: Api, depth: int) -> None:
    """Thread metadata nested near the serialiser's limit (250 deep, as a report wrote it
    before the limit, or through Python): the thread's reads and a search still answer,
    at every depth, not only where dumping the state alone fails."""
    from agentlog.events.kinds import ThreadCreated

    made = ThreadCreated(by="alice", graph_id="support", metadata={"deep": nested(depth)})
    app = api.runtime.graphs["support"].app
    await app.awrite_claimed("bad", lambda fold: [made], actor="alice", what="a creation")
    for path in ("/log/threads/bad", "/log/threads/bad/state"):
        one = await api.client.get(path)
        assert one.status_code == 200, (path, one.text[:200])
    found = await api.client.post("/log/threads/search", json={"limit": 10})
    assert found.status_code == 200, found.text[:200]
    assert [row["thread_id"] for row in found.json()] == ["bad"]
    ran = await api.client.post(
        "/log/threads/bad/runs/wait", json={"assistant_id": "chat", "input": "hello"}
    )
    assert ran.status_code == 200, ran.text[:200]
