"""The Agent Server API in process (httpx over ASGI): what the wire shows is what the log
holds. Store writes are records; a checkpoint id names one thread's history only; refused
fields write nothing; a cancel with rollback sets the thread back; `x-api-key` is a token;
agentlog's own shapes stay under /log."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors.http import TokenBook, create_app, hash_token
from agentlog.actors.http.agentserver.wire import jsonable
from agentlog.actors.runtime import AgentRuntime
from agentlog.actors.testing import until
from agentlog.events import SQLiteEventStore
from tests.agentserver.app import build

USER = {"messages": [{"role": "user", "content": "hello"}]}


NOW = [datetime(2027, 1, 1, 8, 59, 30, tzinfo=UTC).timestamp()]
"""The runtime's clock in these tests: a cron's slot comes when a test moves it."""


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, AgentRuntime]]:
    store = SQLiteEventStore(str(tmp_path / "log.db"))
    NOW[0] = datetime(2027, 1, 1, 8, 59, 30, tzinfo=UTC).timestamp()
    runtime = build(store, clock=lambda: NOW[0])
    entry = {"name": "ann", "sha256": hash_token("sk-ann"), "graphs": ["*"], "rights": ["admin"]}
    (tmp_path / "tokens.json").write_text(json.dumps({"tokens": [entry]}))
    tokens = TokenBook.load(tmp_path / "tokens.json")
    async with runtime:
        app = create_app(runtime, tokens=tokens)
        runtime.agentserver = app.state.agentserver  # type: ignore[attr-defined]
        transport = httpx.ASGITransport(app=app)
        headers = {"x-api-key": "sk-ann"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://localhost", headers=headers, timeout=60
        ) as http:
            yield http, runtime


async def test_x_api_key_is_a_token(served: tuple[httpx.AsyncClient, AgentRuntime]) -> None:
    http, _ = served
    assert (await http.post("/assistants/search", json={})).status_code == 200
    wrong = await http.post("/assistants/search", json={}, headers={"x-api-key": "nope"})
    assert wrong.status_code == 401
    bearer = await http.post(
        "/assistants/search", json={}, headers={"x-api-key": "", "authorization": "Bearer sk-ann"}
    )
    assert bearer.status_code == 200


async def test_store_writes_are_records_by_the_token(
    served: tuple[httpx.AsyncClient, AgentRuntime],
) -> None:
    http, runtime = served
    put = await http.put(
        "/store/items", json={"namespace": ["users", "ann"], "key": "prefs", "value": {"a": 1}}
    )
    assert put.status_code == 204, put.text
    got = (await http.get("/store/items", params={"namespace": "users.ann", "key": "prefs"})).json()
    assert got["value"] == {"a": 1} and got["namespace"] == ["users", "ann"]
    records = [r async for r in runtime.store.read("__store__")]
    assert [(r.kind, r.actor) for r in records] == [("store_item_put", "ann")]
    assert (await runtime.store.verify("__store__")).ok
    bad = await http.put("/store/items", json={"namespace": [], "key": "k", "value": {}})
    assert bad.status_code == 422
    assert len([r async for r in runtime.store.read("__store__")]) == 1


async def test_a_checkpoint_id_names_one_history(
    served: tuple[httpx.AsyncClient, AgentRuntime],
) -> None:
    http, _ = served
    a = (await http.post("/threads", json={})).json()["thread_id"]
    b = (await http.post("/threads", json={})).json()["thread_id"]
    for thread in (a, b):
        done = await http.post(
            f"/threads/{thread}/runs/wait", json={"assistant_id": "chat", "input": USER}
        )
        assert done.status_code == 200, done.text
    ident = (await http.get(f"/threads/{a}/state")).json()["checkpoint"]["checkpoint_id"]
    assert (await http.get(f"/threads/{a}/state/{ident}")).status_code == 200
    seq = ident.partition("-")[0]
    other = (await http.get(f"/threads/{b}/state")).json()["checkpoint"]["checkpoint_id"]
    if other.partition("-")[0] == seq:  # same seq, another chain: refused
        assert (await http.get(f"/threads/{b}/state/{ident}")).status_code == 404
    forged = f"{seq}-{'0' * 24}"
    assert (await http.get(f"/threads/{a}/state/{forged}")).status_code == 404
    assert (await http.get(f"/threads/{a}/state/nonsense")).status_code == 422


async def test_a_refused_field_writes_nothing(
    served: tuple[httpx.AsyncClient, AgentRuntime],
) -> None:
    http, runtime = served
    refused = await http.post(
        "/threads/fresh/runs/wait",
        json={
            "assistant_id": "chat",
            "input": USER,
            "interrupt_before": ["nowhere"],
            "if_not_exists": "create",
        },
    )
    assert refused.status_code == 422 and "'nowhere'" in refused.text and "reply" in refused.text
    assert await runtime.store.last_seq("fresh") == 0
    unknown = await http.post(
        "/threads/fresh/runs/wait", json={"assistant_id": "chat", "input": USER, "bogus": 1}
    )
    assert unknown.status_code == 422
    missing = await http.post(
        "/threads/fresh/runs/wait", json={"assistant_id": "chat", "input": USER}
    )
    assert missing.status_code == 404  # if_not_exists defaults to reject
    for message in ({"type": "tool", "content": "x"}, {"type": "ai", "content": 5}):
        bad = await http.post(
            "/runs/wait",
            json={"assistant_id": "chat", "input": {"messages": [message]}},
        )
        assert bad.status_code == 422, bad.text  # a client's mistake, named, never a 500
        assert bad.json()["error"]["code"] == "invalid_request"
        assert f"a {message['type']!r} message is not a LangChain" in bad.text


async def test_cancel_with_rollback_sets_the_thread_back(
    served: tuple[httpx.AsyncClient, AgentRuntime],
) -> None:
    http, runtime = served
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    paused = await http.post(
        f"/threads/{thread}/runs/wait", json={"assistant_id": "approval", "input": USER}
    )
    assert paused.json()["__interrupt__"][0]["value"] == {"question": "send it?"}
    assert (await http.get(f"/threads/{thread}")).json()["status"] == "interrupted"
    run = (await http.get(f"/threads/{thread}/runs")).json()[0]
    assert run["status"] == "interrupted"
    rolled = await http.post(
        f"/threads/{thread}/runs/{run['run_id']}/cancel", params={"action": "rollback"}
    )
    assert rolled.status_code == 202, rolled.text
    shown = (await http.get(f"/threads/{thread}")).json()
    assert shown["values"].get("messages", []) == []
    kinds = [r.kind async for r in runtime.store.read(thread)]
    assert "run_superseded" in kinds
    assert (await runtime.store.verify(thread)).ok


async def test_agentlog_shapes_stay_under_log(
    served: tuple[httpx.AsyncClient, AgentRuntime],
) -> None:
    http, _ = served
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    await http.post(f"/threads/{thread}/runs/wait", json={"assistant_id": "chat", "input": USER})
    wire = (await http.get(f"/threads/{thread}")).json()
    own = (await http.get(f"/log/threads/{thread}")).json()
    assert wire["status"] == "idle" and own["status"] == "completed"
    assert isinstance(wire["created_at"], str) and not isinstance(own["created_at"], str)
    records = (await http.get(f"/log/threads/{thread}/history")).json()
    assert records and "first_seq" in records[0]


def without_ids(value: Any) -> Any:
    """`value` with every message id and interrupt id left out (fresh per run)."""
    if isinstance(value, dict):
        return {k: without_ids(v) for k, v in value.items() if k != "id"}
    if isinstance(value, list | tuple):
        return [without_ids(v) for v in value]
    return value


async def test_a_server_stream_is_the_graphs_own_stream(
    served: tuple[httpx.AsyncClient, AgentRuntime],
) -> None:
    """The values and updates a server run streams are those `astream` yields for the same
    graph and input, in the same order, after `metadata` and before `end`."""
    http, runtime = served
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    body = {"assistant_id": "approval", "input": USER, "stream_mode": ["values", "updates"]}
    async with http.stream("POST", f"/threads/{thread}/runs/stream", json=body) as answer:
        text = "".join([chunk async for chunk in answer.aiter_text()])
    events = [
        (lines[-2].removeprefix("event: "), json.loads(lines[-1].removeprefix("data: ")))
        for lines in (block.splitlines() for block in text.split("\n\n") if block.strip())
    ]
    assert events[0][0] == "metadata" and events[-1] == ("end", None)
    front = runtime.graphs["approval"].app.front  # type: ignore[attr-defined]
    own = [
        (mode, jsonable(chunk))
        async for mode, chunk in front.astream(
            USER, {"configurable": {"thread_id": "in-process"}}, stream_mode=["values", "updates"]
        )
    ]
    assert without_ids(events[1:-1]) == without_ids(own)


async def test_a_cron_fires_each_utc_slot_once(
    served: tuple[httpx.AsyncClient, AgentRuntime],
) -> None:
    http, runtime = served
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    elsewhere = await http.post(
        f"/threads/{thread}/runs/crons",
        json={"assistant_id": "chat", "schedule": "0 9 * * *", "timezone": "Europe/Paris"},
    )
    assert elsewhere.status_code == 422 and "UTC" in elsewhere.text
    bad = await http.post(
        f"/threads/{thread}/runs/crons", json={"assistant_id": "chat", "schedule": "9 oclock"}
    )
    assert bad.status_code == 422
    said = bad.json()["error"]["message"]
    assert said.startswith("cron schedule: '9 oclock'") and "entry point" not in said, said
    made = await http.post(
        f"/threads/{thread}/runs/crons",
        json={"assistant_id": "chat", "schedule": "0 9 * * *", "input": USER},
    )
    assert made.status_code == 200, made.text
    cron = made.json()
    assert cron["next_run_date"] == "2027-01-01T09:00:00+00:00" and cron["timezone"] == "UTC"
    timer = f"cron:{cron['cron_id']}"  # the cron is a timer entry point of the runtime
    assert runtime.next_fire(timer) == NOW[0] + 30
    assert await runtime.listeners.fire_due() == 0  # 08:59:30: not yet
    NOW[0] += 60
    await runtime.listeners.fire_due()  # (or the runtime's timer loop fires it first)
    await runtime.listeners.fire_due()
    (run,) = (await http.get(f"/threads/{thread}/runs")).json()  # the slot fired once
    assert run["assistant_id"] == "chat"
    joined = await http.get(f"/threads/{thread}/runs/{run['run_id']}/join")
    assert joined.json()["messages"][-1]["content"] == "you said: hello"
    assert runtime.ledger.fired[timer] == NOW[0] - 30  # the slot is in the log
    assistants = (await http.post("/assistants/search", json={})).json()
    assert timer not in {a["assistant_id"] for a in assistants}
    gone = await http.delete(f"/runs/crons/{cron['cron_id']}")
    assert gone.status_code == 204
    assert timer not in runtime.entries  # a deleted cron fires no more
    NOW[0] += 24 * 3600
    assert await runtime.listeners.fire_due() == 0
    assert len((await http.get(f"/threads/{thread}/runs")).json()) == 1
    assert (await http.post("/runs/crons/search", json={})).json() == []
    records = [r async for r in runtime.store.read("__store__/crons")]
    assert [(r.kind, r.actor) for r in records] == [
        ("store_item_put", "ann"),
        ("store_item_deleted", "ann"),
    ]
    assert (await runtime.store.verify("__store__/crons")).ok


async def test_a_cron_of_no_thread_runs_on_a_thread_of_its_own_then_deletes_it(
    served: tuple[httpx.AsyncClient, AgentRuntime],
) -> None:
    http, runtime = served
    made = await http.post(
        "/runs/crons", json={"assistant_id": "chat", "schedule": "0 9 * * *", "input": USER}
    )
    assert made.json()["thread_id"] is None and made.json()["on_run_completed"] == "delete"
    NOW[0] += 60
    await runtime.listeners.fire_due()
    timer = f"cron:{made.json()['cron_id']}"
    (run,) = [t for t in runtime.ledger.triggers.values() if t.accepted.entry_point == timer]
    own = run.accepted.thread_id

    async def hidden() -> list[str] | None:
        if not await runtime.store.last_seq(own):
            return None
        kinds = [r.kind async for r in runtime.store.read(own)]
        return kinds if kinds and kinds[-1] == "thread_hidden" else None

    kinds = await until(hidden, what="the cron run's own thread deleted at its end")
    assert "run_completed" in kinds
    assert (await http.get(f"/threads/{own}")).status_code == 404


async def test_metadata_set_on_a_thread_is_recorded_and_found(
    served: tuple[httpx.AsyncClient, AgentRuntime],
) -> None:
    http, runtime = served
    thread = (await http.post("/threads", json={"metadata": {"user": "ann"}})).json()
    patched = await http.patch(
        f"/threads/{thread['thread_id']}", json={"metadata": {"topic": "refunds"}}
    )
    assert patched.json()["metadata"] == {"user": "ann", "topic": "refunds"}
    await http.patch(f"/threads/{thread['thread_id']}", json={"metadata": {"topic": "returns"}})
    found = await http.post("/threads/search", json={"metadata": {"topic": "returns"}})
    assert [t["thread_id"] for t in found.json()] == [thread["thread_id"]]
    records = [r async for r in runtime.store.read("__store__/threads")]
    assert [(r.kind, r.actor) for r in records] == [("store_item_put", "ann")] * 2
    assert (await http.patch("/threads/nobody", json={"metadata": {}})).status_code == 404


async def test_a_run_is_never_deleted_and_its_stream_can_be_joined_again(
    served: tuple[httpx.AsyncClient, AgentRuntime],
) -> None:
    http, _ = served
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    run = (
        await http.post(
            f"/threads/{thread}/runs",
            json={
                "assistant_id": "chat",
                "input": USER,
                "metadata": {"ticket": 7},
                "multitask_strategy": "enqueue",
            },
        )
    ).json()
    await http.get(f"/threads/{thread}/runs/{run['run_id']}/join")
    shown = (await http.get(f"/threads/{thread}/runs/{run['run_id']}")).json()
    assert shown["status"] == "success" and shown["metadata"] == {"ticket": 7}
    assert shown["kwargs"]["input"] == USER and shown["multitask_strategy"] == "enqueue"
    refused = await http.delete(f"/threads/{thread}/runs/{run['run_id']}")
    assert refused.status_code == 409 and "only grows" in refused.text
    for path in (f"/threads/{thread}/stream", f"/threads/{thread}/runs/{run['run_id']}/stream"):
        async with http.stream("GET", path, params={"stream_mode": "updates"}) as answer:
            text = "".join([chunk async for chunk in answer.aiter_text()])
        names = [
            line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")
        ]
        assert names == ["metadata", "updates", "end"], (path, names)
    late = await http.get(
        f"/threads/{thread}/runs/{run['run_id']}/stream", headers={"last-event-id": "x"}
    )
    assert late.status_code == 400
