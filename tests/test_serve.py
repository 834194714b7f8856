"""The runtime over HTTP: a real uvicorn server on an ephemeral loopback port, a real httpx
client, a real SQLite file: threads, state, history, runs, streams resumed with
Last-Event-ID, tokens and their rights, JSON errors with stable codes, bounded bodies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from agentlog.actors.http import TokenBook, create_app, hash_token
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.testing import until
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message
from tests.helpers import line


def reply(state: AgentState) -> list[Message]:
    return [Message.text_message(f"seen {len(state.context)}", role="assistant")]


def build(store: SQLiteEventStore) -> AgentRuntime:
    runtime = AgentRuntime(store)
    support = line(("draft", reply), ("send", reply))
    support.name = "support"
    runtime.add_graph("support", support.compile(store, interrupt_before=["send"]))
    other = line(("note", reply))
    other.name = "other"
    runtime.add_graph("other", other.compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    runtime.register_entry_point(EntryPoint(id="notes", graph_id="other"))
    return runtime


TOKENS = {
    "alice-secret": ("alice", ["support"], ["read", "run"]),
    "ops-secret": ("ops", ["*"], ["admin"]),
}


def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    entries = [
        {"name": name, "sha256": hash_token(secret), "graphs": graphs, "rights": rights}
        for secret, (name, graphs, rights) in TOKENS.items()
    ]
    path.write_text(json.dumps({"tokens": entries}))
    return path


class Server:
    """A real server for one test."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        )
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> str:
        self.task = asyncio.ensure_future(self.server.serve())
        task = self.task

        def up() -> bool:
            assert not task.done(), "the server did not start"
            return bool(self.server.started)

        await until(up)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        self.server.should_exit = True
        assert self.task is not None
        await self.task


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, SQLiteEventStore]]:
    async with SQLiteEventStore(tmp_path / "serve.db") as store:
        app = create_app(build(store), tokens=TokenBook.load(token_file(tmp_path)), max_body=4096)
        async with Server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield client, store


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


ALICE, OPS = auth("alice-secret"), auth("ops-secret")


async def test_a_run_through_the_api_pauses_is_answered_and_reads_back(served: Any) -> None:
    client, store = served
    assert (await client.get("/ok")).json() == {"ok": True}
    assert (await client.get("/ready")).status_code == 200
    thread = (
        await client.post("/log/threads", json={"graph_id": "support"}, headers=ALICE)
    ).json()["thread_id"]
    paused = await client.post(
        f"/log/threads/{thread}/runs/wait",
        json={"assistant_id": "chat", "input": "hi"},
        headers=ALICE,
    )
    assert paused.status_code == 200, paused.text
    body = paused.json()
    assert body["status"] == "interrupted_before" and body["next"] == ["send"]
    assert body["run"]["status"] == "interrupted" and body["run"]["created_by"] == "alice"
    done = await client.post(
        f"/log/threads/{thread}/runs/wait",
        json={"assistant_id": "chat", "command": {"resume": None}},
        headers=ALICE,
    )
    assert done.json()["status"] == "completed"
    state = (await client.get(f"/log/threads/{thread}/state", headers=ALICE)).json()
    texts = [m["content"][0]["text"] for m in state["values"]["context"]]
    assert texts == ["hi", "seen 1", "seen 2"]
    at_one = (await client.get(f"/log/threads/{thread}/state/1", headers=ALICE)).json()
    assert len(at_one["values"]["context"]) == 2
    history = (await client.get(f"/log/threads/{thread}/history", headers=ALICE)).json()
    assert [h["step"] for h in history] == [2, 1]
    runs = (await client.get(f"/log/threads/{thread}/runs", headers=ALICE)).json()
    assert [r["status"] for r in runs] == ["interrupted", "success"]
    found = (await client.post("/log/threads/search", json={"limit": 5}, headers=ALICE)).json()
    assert [t["thread_id"] for t in found] == [thread]
    records = [r async for r in store.read(thread)]
    assert {r.actor for r in records if r.kind in ("run_started", "resumed")} == {"alice"}


async def test_tokens_and_rights(served: Any) -> None:
    client, store = served
    assert (await client.post("/log/threads/search", json={})).json()["error"][
        "code"
    ] == "unauthorized"
    bad = await client.post("/log/threads/search", json={}, headers=auth("nope"))
    assert bad.status_code == 401
    other = await client.post(
        "/log/threads/t1/runs", json={"assistant_id": "notes", "input": "x"}, headers=ALICE
    )
    assert other.status_code == 403 and other.json()["error"]["code"] == "forbidden"
    run = await client.post(
        "/log/threads/t1/runs", json={"assistant_id": "chat", "input": "x"}, headers=ALICE
    )
    assert run.status_code == 202
    await client.get(f"/log/threads/t1/runs/{run.json()['run_id']}/join", headers=ALICE)
    refused = await client.delete("/log/threads/t1", headers=ALICE)
    assert refused.status_code == 403
    deleted = await client.delete("/log/threads/t1?reason=test", headers=OPS)
    assert deleted.json() == {"thread_id": "t1", "hidden": True, "erased": False}
    assert (await client.post("/log/threads/search", json={}, headers=OPS)).json() == []
    assert (await store.verify("t1")).ok
    hidden = [r async for r in store.read("t1")][-1]
    assert (hidden.kind, hidden.actor) == ("thread_hidden", "ops")


async def test_errors_are_json_with_stable_codes_and_write_nothing(served: Any) -> None:
    client, store = served
    runs, search = "/log/threads/t/runs", "/log/threads/search"
    as_json = {**ALICE, "content-type": "application/json"}
    cases = [
        (client.get("/log/threads/ghost", headers=ALICE), 404, "not_found"),
        (client.post(runs, json={"assistant_id": "nope"}, headers=ALICE), 404, "unknown_assistant"),
        (client.post(runs, json={"assistant_id": "chat", "input": 42}, headers=ALICE), 422,
         "invalid_request"),
        (client.post(runs, json={"nonsense": 1}, headers=ALICE), 422, "invalid_request"),
        (client.post(search, content=b"{not json", headers=as_json), 422, "invalid_request"),
        (client.post(search, content=b"x" * 5000, headers=ALICE), 413, "body_too_large"),
        (client.get("/log/threads/__runtime__/state", headers=OPS), 404, "not_found"),
        (client.get("/log/threads/t/stream", headers={**ALICE, "Last-Event-ID": "abc"}), 404,
         "not_found"),
    ]  # fmt: skip
    for request, status, code in cases:
        response = await request
        assert response.status_code == status, response.text
        assert response.json()["error"]["code"] == code
        assert "Traceback" not in response.text
    assert await store.threads() == []


async def test_a_chunked_body_over_the_limit_is_refused(served: Any) -> None:
    client, _ = served

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b"x" * 1000

    response = await client.post("/log/threads/search", content=chunks(), headers=ALICE)
    assert response.status_code == 413


async def test_a_stream_resumes_with_last_event_id_without_gap_or_duplicate(served: Any) -> None:
    client, store = served
    await client.post(
        "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "one"}, headers=ALICE
    )
    seen: list[int] = []
    async with client.stream("GET", "/log/threads/t/stream?after=0", headers=ALICE) as stream:
        async for text in stream.aiter_lines():
            if text.startswith("id: "):
                seen.append(int(text[4:]))
            if len(seen) == 3:
                break  # the client drops the connection mid-stream
    await client.post(
        "/log/threads/t/runs/wait",
        json={"assistant_id": "chat", "command": {"resume": None}},
        headers=ALICE,
    )
    headers = {**ALICE, "Last-Event-ID": str(seen[-1])}
    async with client.stream("GET", "/log/threads/t/stream", headers=headers) as stream:
        events: list[dict[str, Any]] = []
        async for text in stream.aiter_lines():
            if text.startswith("id: "):
                seen.append(int(text[4:]))
            elif text.startswith("data: "):
                events.append(json.loads(text[6:]))
                if events[-1]["kind"] == "run_completed":
                    break
    expected = [r.position async for r in store.read("t")]
    assert seen == expected  # every record once, in order, across the reconnect


async def test_a_run_stream_ends_with_its_outcome(served: Any) -> None:
    client, _ = served
    run = (
        await client.post(
            "/log/threads/r/runs", json={"assistant_id": "chat", "input": "x"}, headers=ALICE
        )
    ).json()
    kinds: list[str] = []
    async with client.stream(
        "GET", f"/log/threads/r/runs/{run['run_id']}/stream", headers=ALICE
    ) as stream:
        async for text in stream.aiter_lines():
            if text.startswith("event: "):
                kinds.append(text[7:])
    assert kinds[0] == "run_started" and kinds[-1] == "trigger_finished"
    assert "interrupt_raised" in kinds


async def test_cancel_and_fork_through_the_api(served: Any) -> None:
    client, _ = served
    paused = await client.post(
        "/log/threads/c/runs/wait", json={"assistant_id": "chat", "input": "x"}, headers=ALICE
    )
    run_id = paused.json()["run"]["run_id"]
    cancelled = await client.post(
        f"/log/threads/c/runs/{run_id}/cancel", json={"reason": "dup"}, headers=ALICE
    )
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    state = (await client.get("/log/threads/c/state", headers=ALICE)).json()
    assert state["status"] == "cancelled"
    forbidden = await client.post("/log/threads/c/copy", json={"step": 1}, headers=ALICE)
    assert forbidden.status_code == 403  # alice may read and run, not edit
    fork = await client.post(
        "/log/threads/c/copy", json={"step": 1, "thread_id": "c2"}, headers=OPS
    )
    assert fork.json()["thread_id"] == "c2"
    assert (
        len((await client.get("/log/threads/c2/state", headers=OPS)).json()["values"]["context"])
        == 2
    )


async def test_the_openapi_document_lists_the_endpoints(served: Any) -> None:
    client, _ = served
    spec = (await client.get("/openapi.json")).json()
    for path in (
        "/log/threads",
        "/log/threads/search",
        "/log/threads/{thread_id}/state",
        "/log/threads/{thread_id}/runs/wait",
        "/log/threads/{thread_id}/stream",
    ):
        assert path in spec["paths"]


async def test_a_signed_webhook_delivery_runs_once_through_the_server(tmp_path: Path) -> None:
    import time

    from agentlog.actors.http.webhooks import sign_standard

    async with SQLiteEventStore(tmp_path / "hooks.db") as store:
        runtime = build(store)
        runtime.register_entry_point(
            EntryPoint(
                id="zendesk", graph_id="other", trigger="webhook", path="/hooks/zendesk",
                secrets=["old-secret", "new-secret"],
            )
        )  # fmt: skip
        app = create_app(runtime, tokens=TokenBook.load(token_file(tmp_path)))
        async with Server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            body = json.dumps({"ticket": 17}).encode()
            now = int(time.time())
            headers = {
                "content-type": "application/json",
                "webhook-id": "msg-1",
                "webhook-timestamp": str(now),
                "webhook-signature": sign_standard("new-secret", "msg-1", now, body),
            }
            first = await client.post("/hooks/zendesk", content=body, headers=headers)
            again = await client.post("/hooks/zendesk", content=body, headers=headers)
            tampered = await client.post("/hooks/zendesk", content=body + b" ", headers=headers)
            unsigned = await client.post("/hooks/zendesk", content=body)
            assert (first.status_code, first.json()["duplicate"]) == (202, False)
            assert (again.status_code, again.json()["duplicate"]) == (202, True)
            assert tampered.status_code == 401 and unsigned.status_code == 401
            thread = first.json()["thread_id"]
            await runtime.wait(thread, timeout=30)
    async with SQLiteEventStore(tmp_path / "hooks.db") as store:
        accepted = [
            r.event async for r in store.read("__runtime__") if r.kind == "trigger_accepted"
        ]
        assert [(a.cause, a.idempotency_key) for a in accepted] == [("webhook", "msg-1")]
        first_message = [r async for r in store.read(thread)][1].event.message
        assert first_message["metadata"]["webhook"]["body"] == {"ticket": 17}


async def test_runs_answer_their_own_ids_and_join_waits_for_its_own_run(served: Any) -> None:
    client, _ = served
    posted = await asyncio.gather(
        *(
            client.post(
                "/log/threads/j/runs", json={"assistant_id": "chat", "input": f"{n}"}, headers=ALICE
            )
            for n in range(4)
        )
    )
    ids = [p.json()["run_id"] for p in posted]
    assert len(set(ids)) == 4
    first = await client.get(f"/log/threads/j/runs/{ids[0]}/join", headers=ALICE)
    assert first.json()["run"]["run_id"] == ids[0]


async def test_a_token_cannot_reach_another_graphs_thread_through_a_run(
    served: Any, tmp_path: Path
) -> None:
    client, store = served
    await client.post(
        "/log/threads/s/runs/wait", json={"assistant_id": "notes", "input": "secret"}, headers=OPS
    )
    refused = await client.post(
        "/log/threads/s/runs", json={"assistant_id": "chat", "input": "x"}, headers=ALICE
    )
    assert refused.status_code == 422 and "runs graph 'other'" in refused.json()["error"]["message"]
    assert (await client.get("/log/threads/s/state", headers=ALICE)).status_code == 403
    assert [r.kind async for r in store.read("s")].count("run_started") == 1


def test_a_refused_double_text_is_a_409_thread_busy() -> None:
    from agentlog.actors.http.errors import classify
    from agentlog.actors.runtime import ThreadBusyRunError

    assert classify(ThreadBusyRunError("busy"))[:2] == (409, "thread_busy")


async def test_double_texting_over_http_reject_is_409_and_rollback_supersedes(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()

    async def slow(state: AgentState) -> list[Message]:
        if state.context[-1].text() == "first":
            await gate.wait()
        return [Message.text_message(f"answered {state.context[-1].text()}", role="assistant")]

    async with SQLiteEventStore(tmp_path / "texting.db") as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("g", line(("work", slow)).compile(store))
        runtime.register_entry_point(EntryPoint(id="chat", graph_id="g"))
        app = create_app(runtime)
        async with Server(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
            thread = (await client.post("/log/threads", json={})).json()["thread_id"]
            first = await client.post(
                f"/log/threads/{thread}/runs", json={"assistant_id": "chat", "input": "first"}
            )
            assert first.status_code in (200, 201, 202), first.text

            async def begun() -> bool:
                return await store.last_seq(thread) >= 2

            await until(begun)
            refused = await client.post(
                f"/log/threads/{thread}/runs",
                json={"assistant_id": "chat", "input": "x", "multitask_strategy": "reject"},
            )
            assert refused.status_code == 409
            assert refused.json()["error"]["code"] == "thread_busy"
            second = await client.post(
                f"/log/threads/{thread}/runs/wait",
                json={"assistant_id": "chat", "input": "second", "multitask_strategy": "rollback"},
            )
            assert second.status_code == 200, second.text
            state = (await client.get(f"/log/threads/{thread}/state")).json()
            texts = [m["content"][0]["text"] for m in state["values"]["context"]]
            assert texts == ["second", "answered second"]
            kinds = [r.kind async for r in store.read(thread)]
            assert "run_superseded" in kinds and "x" not in str(texts)


async def test_a_run_body_carries_a_correlation_id_into_the_log(served: Any) -> None:
    """hive's `trigger(..., correlation_id=...)` over HTTP: the run body's correlation_id
    is recorded with the trigger and shown with the run; an empty one is refused."""
    client, store = served
    thread = (
        await client.post("/log/threads", json={"graph_id": "support"}, headers=ALICE)
    ).json()["thread_id"]
    made = await client.post(
        f"/log/threads/{thread}/runs",
        json={"assistant_id": "chat", "input": "hi", "correlation_id": "order-17"},
        headers=ALICE,
    )
    assert made.status_code == 202, made.text
    assert made.json()["correlation_id"] == "order-17"
    runs = (await client.get(f"/log/threads/{thread}/runs", headers=ALICE)).json()
    assert [r["correlation_id"] for r in runs] == ["order-17"]
    accepted = [r.event async for r in store.read("__runtime__") if r.kind == "trigger_accepted"]
    assert accepted[-1].correlation_id == "order-17"
    empty = await client.post(
        f"/log/threads/{thread}/runs",
        json={"assistant_id": "chat", "input": "hi", "correlation_id": ""},
        headers=ALICE,
    )
    assert empty.status_code == 422 and "correlation_id" in empty.json()["error"]["message"]


async def test_unknown_paths_and_methods_answer_json_errors(served: Any) -> None:
    client, store = served
    nowhere = await client.get("/nowhere", headers=ALICE)
    assert nowhere.status_code == 404
    assert nowhere.json()["error"]["code"] == "not_found"
    assert "/openapi.json" in nowhere.json()["error"]["message"]
    wrong = await client.delete("/ok", headers=ALICE)
    assert wrong.status_code == 405
    assert wrong.json()["error"]["code"] == "method_not_allowed"
    assert "takes GET" in wrong.json()["error"]["message"] and wrong.headers["allow"] == "GET"
    assert await store.threads() == []


async def test_a_body_that_is_not_a_json_object_says_so(served: Any) -> None:
    client, _ = served
    as_json = {**ALICE, "content-type": "application/json"}
    broken = await client.post("/log/threads/t/runs", content=b'{"assistant_id": ', headers=as_json)
    assert broken.status_code == 422
    assert broken.json()["error"]["message"].startswith("the body is not valid JSON")
    response = await client.post("/log/threads/search", content=b"[1, 2]", headers=as_json)
    assert response.status_code == 422
    assert "must be a JSON object" in response.json()["error"]["message"]
    plain = {**ALICE, "content-type": "text/plain"}
    response = await client.post("/log/threads/search", content=b"{}", headers=plain)
    assert response.status_code == 415  # a body must say it is JSON (see test_serve_guard.py)
    assert response.json()["error"]["code"] == "unsupported_media_type"


async def test_a_missing_token_is_told_the_scheme(served: Any) -> None:
    client, _ = served
    response = await client.get("/log/threads/t/state")
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"


async def test_a_step_that_does_not_exist_is_404(served: Any) -> None:
    client, store = served
    await client.post(
        "/log/threads/p/runs/wait", json={"assistant_id": "chat", "input": "x"}, headers=ALICE
    )
    before = await store.last_seq("p")
    for call in (
        client.get("/log/threads/p/state/99", headers=ALICE),
        client.get("/log/threads/p/state?step=99", headers=ALICE),
        client.post("/log/threads/p/copy", json={"step": 99}, headers=OPS),
    ):
        response = await call
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"
        assert "step 99 does not exist" in response.json()["error"]["message"]
    assert await store.last_seq("p") == before
    assert [t for t in await store.threads() if t != "__runtime__"] == ["p"]


async def test_a_fork_is_recorded_as_its_tokens_and_copies_the_thread_as_it_is(
    served: Any,
) -> None:
    client, store = served
    await client.post(
        "/log/threads/f/runs/wait", json={"assistant_id": "chat", "input": "x"}, headers=ALICE
    )
    copied = await client.post("/log/threads/f/copy", headers=OPS)  # LangGraph's copy: no body
    assert copied.status_code == 200, copied.text
    new = copied.json()["thread_id"]
    assert copied.json()["forked_from"] == {"thread_id": "f", "step": 1}
    forked = [r async for r in store.read(new)]
    assert [(r.kind, r.actor) for r in forked] == [("forked", "ops")]
    source = (await client.get("/log/threads/f/state", headers=OPS)).json()["values"]["context"]
    copy = (await client.get(f"/log/threads/{new}/state", headers=OPS)).json()["values"]["context"]
    assert copy == source


async def test_a_deleted_thread_reads_404_and_takes_no_new_run(served: Any) -> None:
    client, store = served
    await client.post(
        "/log/threads/d/runs/wait", json={"assistant_id": "chat", "input": "x"}, headers=ALICE
    )
    run_id = (await client.get("/log/threads/d/runs", headers=ALICE)).json()[0]["run_id"]
    assert (await client.delete("/log/threads/d", headers=OPS)).status_code == 200
    written = await store.last_seq("d")
    for call in (
        client.get("/log/threads/d", headers=OPS),
        client.get("/log/threads/d/state", headers=OPS),
        client.get("/log/threads/d/state/1", headers=OPS),
        client.get("/log/threads/d/history", headers=OPS),
        client.get("/log/threads/d/runs", headers=OPS),
        client.get(f"/log/threads/d/runs/{run_id}", headers=OPS),
        client.post("/log/threads/d/copy", json={}, headers=OPS),
        client.post(
            "/log/threads/d/runs", json={"assistant_id": "chat", "input": "y"}, headers=OPS
        ),
        client.post(
            "/log/threads/d/runs/wait",
            json={"assistant_id": "chat", "command": {"resume": 1}},
            headers=OPS,
        ),
    ):
        response = await call
        assert response.status_code == 404, response.text
        message = response.json()["error"]["message"]
        assert "deleted by 'ops'" in message and "still verifies" in message
    for stream in ("/log/threads/d/stream", f"/log/threads/d/runs/{run_id}/stream"):
        async with client.stream("GET", stream, headers=OPS) as response:
            assert response.status_code == 404  # an open stream would be a 200
    assert await store.last_seq("d") == written
    assert (await client.delete("/log/threads/d", headers=OPS)).status_code == 200  # idempotent
    assert await store.last_seq("d") == written and (await store.verify("d")).ok


async def test_creating_a_thread_that_exists(served: Any) -> None:
    client, _ = served
    await client.post(
        "/log/threads/e/runs/wait", json={"assistant_id": "chat", "input": "x"}, headers=ALICE
    )
    again = await client.post("/log/threads", json={"thread_id": "e"}, headers=ALICE)
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    kept = await client.post(
        "/log/threads", json={"thread_id": "e", "if_exists": "do_nothing"}, headers=ALICE
    )
    assert kept.status_code == 200 and kept.json()["thread_id"] == "e"
    assert kept.json()["status"] == "interrupted_before"
    fresh = await client.post("/log/threads", json={"graph_id": "support"}, headers=ALICE)
    assert fresh.status_code == 200 and fresh.json()["thread_id"] != "e"
    too_long = await client.post(
        f"/log/threads/{'x' * 201}/runs", json={"assistant_id": "chat", "input": "x"}, headers=ALICE
    )
    assert too_long.status_code == 422 and "1 to 200" in too_long.json()["error"]["message"]


async def test_threads_runs_and_history_carry_langgraph_fields_and_pages(served: Any) -> None:
    client, _ = served
    for text in ("one", None):
        body: dict[str, Any] = {"assistant_id": "chat"}
        body.update({"input": text} if text else {"command": {"resume": None}})
        await client.post("/log/threads/h/runs/wait", json=body, headers=ALICE)
    thread = (await client.get("/log/threads/h", headers=ALICE)).json()
    assert thread["created_at"] <= thread["updated_at"]
    assert [m["content"][0]["text"] for m in thread["values"]["context"]] == [
        "one",
        "seen 1",
        "seen 2",
    ]
    runs = (await client.get("/log/threads/h/runs", headers=ALICE)).json()
    first, second = runs
    assert first["created_at"] < first["updated_at"] <= second["created_at"]
    assert second["created_at"] < second["updated_at"]  # ended after it was accepted
    assert second["updated_at"] >= thread["updated_at"]  # its end is recorded after its run
    page = (await client.get("/log/threads/h/runs?limit=1&offset=1", headers=ALICE)).json()
    assert [r["run_id"] for r in page] == [runs[1]["run_id"]]
    succeeded = (await client.get("/log/threads/h/runs?status=success", headers=ALICE)).json()
    assert [r["run_id"] for r in succeeded] == [runs[1]["run_id"]]
    posted = await client.post("/log/threads/h/history", json={"limit": 1}, headers=ALICE)
    assert [h["step"] for h in posted.json()] == [2]
    before = await client.get("/log/threads/h/history?before=2", headers=ALICE)
    assert [h["step"] for h in before.json()] == [1]
    bad = await client.post("/log/threads/search", json={"status": "busy"}, headers=ALICE)
    assert bad.status_code == 422 and "interrupted_before" in bad.json()["error"]["message"]


async def test_cancelling_an_ended_or_a_queued_run_is_a_409_that_ends_nothing(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()

    async def held(state: AgentState) -> list[Message]:
        await gate.wait()
        return [Message.text_message("done", role="assistant")]

    def boom(state: AgentState) -> list[Message]:
        raise ValueError("the tool said no")

    async with SQLiteEventStore(tmp_path / "cancel.db") as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("g", line(("work", held)).compile(store))
        runtime.add_graph("b", line(("boom", boom)).compile(store))
        runtime.register_entry_point(EntryPoint(id="chat", graph_id="g"))
        runtime.register_entry_point(EntryPoint(id="boom", graph_id="b"))
        async with (
            Server(create_app(runtime)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            try:
                first = (
                    await client.post(
                        "/log/threads/q/runs", json={"assistant_id": "chat", "input": "1"}
                    )
                ).json()
                second = (
                    await client.post(
                        "/log/threads/q/runs", json={"assistant_id": "chat", "input": "2"}
                    )
                ).json()
                await until(lambda: first["run_id"] in runtime.dispatcher.running_ids())
                queued = await client.post(f"/log/threads/q/runs/{second['run_id']}/cancel")
                assert queued.status_code == 409, queued.text
                assert queued.json()["error"]["code"] == "run_queued"
                assert first["run_id"] in queued.json()["error"]["message"]
                assert first["run_id"] in runtime.dispatcher.running_ids()  # nothing was ended
                gate.set()
                await client.get(f"/log/threads/q/runs/{second['run_id']}/join?timeout=20")
                ended = await client.post(f"/log/threads/q/runs/{second['run_id']}/cancel")
                assert ended.status_code == 409 and ended.json()["error"]["code"] == "conflict"
                assert "has ended (completed)" in ended.json()["error"]["message"]
            finally:
                gate.set()  # a refusal that failed to refuse must not hang the server
            failed = await client.post(
                "/log/threads/b/runs/wait", json={"assistant_id": "boom", "input": "x"}
            )
            assert failed.status_code == 409 and failed.json()["error"]["code"] == "run_failed"
            assert "the tool said no" in failed.json()["error"]["message"]


# ---- creating a thread: a thread_created record -----------------------------------------


async def test_a_created_thread_reads_back_is_searched_by_metadata_and_takes_runs(
    served: Any,
) -> None:
    client, store = served
    metadata = {"customer": "acme", "tier": 2, "tags": ["a", "b"]}
    made = await client.post(
        "/log/threads", json={"graph_id": "support", "metadata": metadata}, headers=ALICE
    )
    assert made.status_code == 200, made.text
    created = made.json()
    thread = created["thread_id"]
    assert created["metadata"] == metadata and created["graph_id"] == "support"
    assert created["status"] == "idle" and created["step"] == 0  # created, never run
    (record,) = [r async for r in store.read(thread)]
    assert (record.kind, record.actor, record.event.by) == ("thread_created", "alice", "alice")
    assert record.event.graph_id == "support" and record.event.metadata == metadata

    read = await client.get(f"/log/threads/{thread}", headers=ALICE)
    assert read.status_code == 200, read.text
    assert read.json()["metadata"] == metadata
    assert read.json()["created_at"] == created["created_at"] == record.at
    assert (await client.get(f"/log/threads/{thread}/state", headers=ALICE)).status_code == 200
    assert (await client.get(f"/log/threads/{thread}/history", headers=ALICE)).json() == []
    assert (await client.get(f"/log/threads/{thread}/runs", headers=ALICE)).json() == []

    other = await client.post(
        "/log/threads",
        json={"graph_id": "support", "metadata": {"customer": "zeta"}},
        headers=ALICE,
    )
    second = other.json()["thread_id"]

    async def search(**body: Any) -> list[str]:
        found = await client.post("/log/threads/search", json=body, headers=ALICE)
        assert found.status_code == 200, found.text
        return [t["thread_id"] for t in found.json()]

    assert await search() == [second, thread]
    assert await search(metadata={"customer": "acme"}) == [thread]
    assert await search(metadata={"customer": "acme", "tier": 2}) == [thread]
    assert await search(metadata={"tags": ["a", "b"]}) == [thread]
    assert await search(metadata={"customer": "acme", "tier": "2"}) == []
    assert await search(metadata={"tier": True}) == []
    assert await search(metadata={"nope": None}) == []
    assert await search(metadata={"customer": "zeta"}, graph_id="support") == [second]
    assert await search(status="idle") == [second, thread]

    paused = await client.post(
        f"/log/threads/{thread}/runs/wait",
        json={"assistant_id": "chat", "input": "hi"},
        headers=ALICE,
    )
    assert paused.status_code == 200, paused.text
    assert paused.json()["status"] == "interrupted_before"
    done = await client.post(
        f"/log/threads/{thread}/runs/wait",
        json={"assistant_id": "chat", "command": {"resume": None}},
        headers=ALICE,
    )
    assert done.json()["status"] == "completed", done.text
    records = [r async for r in store.read(thread)]
    assert [r.kind for r in records[:3]] == ["thread_created", "run_started", "message_appended"]
    assert records[0].actor == "alice"
    texts = [m["content"][0]["text"] for m in done.json()["values"]["context"]]
    assert texts == ["hi", "seen 1", "seen 2"]
    after = (await client.get(f"/log/threads/{thread}", headers=ALICE)).json()
    assert after["metadata"] == metadata and after["status"] == "completed"
    assert after["created_at"] == record.at < after["updated_at"]
    history = (await client.get(f"/log/threads/{thread}/history", headers=ALICE)).json()
    assert [h["step"] for h in history] == [2, 1]
    assert await search(metadata={"customer": "acme"}, status="completed") == [thread]


async def test_a_thread_takes_its_graph_from_metadata_or_the_only_graph(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "one.db") as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("g", line(("work", reply)).compile(store))
        runtime.register_entry_point(EntryPoint(id="chat", graph_id="g"))
        async with (
            Server(create_app(runtime)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            made = await client.post("/log/threads")  # no body: the server's only graph
            assert made.status_code == 200, made.text
            thread = made.json()["thread_id"]
            assert made.json()["graph_id"] == "g"
            (record,) = [r async for r in store.read(thread)]
            assert (record.kind, record.actor, record.event.graph_id) == (
                "thread_created",
                "local",
                "g",
            )
            assert await runtime.trigger("chat", "hello", thread_id=thread) == thread
            result = await runtime.wait(thread, timeout=30)
            assert [m.text() for m in result["state"].context] == ["hello", "seen 1"]
            kinds = [r.kind async for r in store.read(thread)]
            assert kinds[:2] == ["thread_created", "run_started"] and kinds[-1] == "run_completed"
    tokens = TokenBook.load(token_file(tmp_path))
    async with (
        SQLiteEventStore(tmp_path / "two.db") as two,
        Server(create_app(build(two), tokens=tokens)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        made = await client.post(
            "/log/threads", json={"metadata": {"graph_id": "other", "x": 1}}, headers=OPS
        )
        assert made.status_code == 200, made.text
        assert made.json()["graph_id"] == "other"
        wrong = await client.post(
            f"/log/threads/{made.json()['thread_id']}/runs",
            json={"assistant_id": "chat", "input": "x"},
            headers=OPS,
        )
        assert wrong.status_code == 422 and "runs graph 'other'" in wrong.text


async def test_creating_a_thread_needs_a_graph_and_the_run_right_on_it(served: Any) -> None:
    client, store = served
    unnamed = await client.post("/log/threads", json={"metadata": {"a": 1}}, headers=OPS)
    assert unnamed.status_code == 422, unnamed.text
    message = unnamed.json()["error"]["message"]
    assert "graph_id" in message and "'other', 'support'" in message
    mine = (await client.post("/log/threads", headers=ALICE)).json()["error"]["message"]
    assert "graph_id" in mine and "'support'" in mine and "'other'" not in mine
    refused = await client.post(
        "/log/threads", json={"thread_id": "x", "graph_id": "other"}, headers=ALICE
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    by_metadata = await client.post(
        "/log/threads", json={"thread_id": "x", "metadata": {"graph_id": "other"}}, headers=ALICE
    )
    assert by_metadata.status_code == 403
    unknown = await client.post("/log/threads", json={"graph_id": "nope"}, headers=ALICE)
    assert unknown.status_code == 404 and "'support'" in unknown.json()["error"]["message"]
    assert await store.last_seq("x") == 0 and await store.threads() == []

    made = await client.post(
        "/log/threads", json={"thread_id": "c", "graph_id": "support", "metadata": {"v": 1}},
        headers=ALICE,
    )  # fmt: skip
    assert made.status_code == 200
    again = await client.post(
        "/log/threads", json={"thread_id": "c", "graph_id": "support"}, headers=ALICE
    )
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    kept = await client.post(
        "/log/threads", json={"thread_id": "c", "if_exists": "do_nothing"}, headers=ALICE
    )
    assert kept.status_code == 200 and kept.json()["metadata"] == {"v": 1}
    assert await store.last_seq("c") == 1


async def test_a_created_thread_is_known_from_the_log_after_a_restart(tmp_path: Path) -> None:
    db, tokens = tmp_path / "restart.db", TokenBook.load(token_file(tmp_path))
    async with (
        SQLiteEventStore(db) as store,
        Server(create_app(build(store), tokens=tokens)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        body = {"thread_id": "kept", "graph_id": "support", "metadata": {"k": "v"}}
        assert (await client.post("/log/threads", json=body, headers=ALICE)).status_code == 200
    async with (
        SQLiteEventStore(db) as store,
        Server(create_app(build(store), tokens=tokens)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        read = await client.get("/log/threads/kept", headers=ALICE)
        assert read.status_code == 200 and read.json()["metadata"] == {"k": "v"}
        found = await client.post(
            "/log/threads/search", json={"metadata": {"k": "v"}}, headers=ALICE
        )
        assert [t["thread_id"] for t in found.json()] == ["kept"]
        denied = await client.post(
            "/log/threads/kept/runs", json={"assistant_id": "notes", "input": "x"}, headers=OPS
        )
        assert denied.status_code == 422  # it runs support, not other


async def test_an_unknown_assistant_names_the_ones_the_token_may_run(served: Any) -> None:
    """A typo in assistant_id is told which ids work, never the ones of graphs it may not run."""
    client, store = served
    answer = await client.post(
        "/log/threads/t/runs", json={"assistant_id": "chatt", "input": "x"}, headers=ALICE
    )
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["code"] == "unknown_assistant"
    assert "one of chat" in error["message"] and "notes" not in error["message"]
    ops = await client.post("/log/threads/t/runs", json={"assistant_id": "chatt"}, headers=OPS)
    assert "one of chat, notes" in ops.json()["error"]["message"]
    assert await store.threads() == []


async def test_an_unknown_input_field_names_the_fields_input_may_set(served: Any) -> None:
    """A misspelt field is refused before it is written, listing `messages` among the fields."""
    client, store = served
    answer = await client.post(
        "/log/threads/t/runs",
        json={"assistant_id": "chat", "input": {"mesages": [{"role": "user", "content": "x"}]}},
        headers=ALICE,
    )
    assert answer.status_code == 422, answer.text
    message = answer.json()["error"]["message"]
    assert "no field 'mesages'" in message and "messages" in message.split("(fields:")[1]
    assert await store.threads() == []


async def test_the_reserved_thread_ids_are_named_as_the_check_reads_them(served: Any) -> None:
    """`__runtime__` and `__runtime__/...` are reserved; the refusal says so, and an id that
    merely begins with the letters is a user's thread like any other."""
    client, _store = served
    refused = await client.post("/log/threads", json={"thread_id": "__runtime__/w1"}, headers=OPS)
    assert refused.status_code == 422
    message = refused.json()["error"]["message"]
    assert "'__runtime__' and ids beginning '__runtime__/' or '__shared__/'" in message
    made = await client.post(
        "/log/threads", json={"thread_id": "__runtime__x", "graph_id": "support"}, headers=OPS
    )
    assert made.status_code == 200, made.text
