"""Idempotency keys are their caller's own and name one request: the same request again (its
thread, its input) gets the first run; the key with another thread or other input is refused
(`IdempotencyKeyMismatchError`, HTTP 409 `idempotency_key_mismatch`) writing nothing; another
caller's same key is another key. Over HTTP, a token with `run` but not `read` never gets a
thread's state back, nor another client's run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from agentlog.actors.http import Principal, TokenBook, create_app, hash_token
from agentlog.actors.runtime import AgentRuntime, IdempotencyKeyMismatchError
from agentlog.events import SQLiteEventStore
from agentlog.events.follow import last_position
from agentlog.projections import Message
from tests.test_serve import build


async def test_a_key_names_one_request_of_one_caller(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "keys.db") as store:
        async with build(store) as runtime:
            first = await runtime.submit(
                "chat", Message.text_message("hi"), thread_id="a", idempotency_key="k"
            )
            await runtime.wait("a", timeout=30)
            again = await runtime.submit(
                "chat", Message.text_message("hi"), thread_id="a", idempotency_key="k"
            )
            assert again.trigger_id == first.trigger_id  # a message built anew is the same
            before = await last_position(store)
            for thread, text in (("b", "hi"), ("a", "other"), (None, "hi")):
                with pytest.raises(IdempotencyKeyMismatchError, match="'k'"):
                    await runtime.submit("chat", text, thread_id=thread, idempotency_key="k")
            assert await last_position(store) == before
            theirs = await runtime.submit(
                "chat", "hi", thread_id="b", idempotency_key="k", actor="someone-else"
            )
            assert theirs.trigger_id != first.trigger_id and theirs.thread_id == "b"
            await runtime.wait("b", timeout=30)
            # a ledger that keeps no input for ended runs still tells a retry from another
            done = runtime.ledger.triggers[first.trigger_id]
            done.accepted = msgspec.structs.replace(done.accepted, input=None)
            retried = await runtime.submit("chat", Message.text_message("hi"), thread_id="a",
                                           idempotency_key="k")  # fmt: skip
            assert retried.trigger_id == first.trigger_id
            with pytest.raises(IdempotencyKeyMismatchError, match="other input"):
                await runtime.submit("chat", "bye", thread_id="a", idempotency_key="k")
        async with build(store) as runtime:  # the same after a restart, from the log
            after = await runtime.submit(
                "chat", Message.text_message("hi"), thread_id="a", idempotency_key="k"
            )
            assert after.trigger_id == first.trigger_id
            with pytest.raises(IdempotencyKeyMismatchError):
                await runtime.submit("chat", "hi", thread_id="c", idempotency_key="k")


ALICE, BOB = "alice-secret", "bob-secret"


def book() -> TokenBook:
    return TokenBook(
        {
            hash_token(ALICE): Principal(
                "alice", frozenset({"support"}), frozenset({"read", "run"})
            ),
            hash_token(BOB): Principal("bob", frozenset({"support"}), frozenset({"run"})),
        }
    )


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, AgentRuntime]]:
    async with SQLiteEventStore(tmp_path / "http.db") as store:
        runtime = build(store)
        async with runtime:
            transport = httpx.ASGITransport(app=create_app(runtime, tokens=book()))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                yield c, runtime


async def test_the_run_right_gets_neither_state_nor_another_clients_run(client: Any) -> None:
    http, _ = client
    secret = {"assistant_id": "chat", "input": "my card is 4111 1111 1111 1111"}
    mine = await http.post(
        "/log/threads/alice-t/runs/wait",
        json={**secret, "idempotency_key": "k"},
        headers=auth(ALICE),
    )
    assert mine.status_code == 200 and "4111" in mine.text  # alice may read her thread
    # bob reuses alice's key on his own thread: his own run, nothing of hers
    ask = {"assistant_id": "chat", "input": "hello", "idempotency_key": "k"}
    his = await http.post("/log/threads/bob-t/runs/wait", json=ask, headers=auth(BOB))
    assert his.status_code == 200, his.text
    body = his.json()
    assert (
        body["run"]["thread_id"] == "bob-t"
        and body["run"]["run_id"] != mine.json()["run"]["run_id"]
    )
    assert "4111" not in his.text and "alice" not in his.text
    assert "values" not in body  # the run right alone: the run, not the state
    assert set(body) == {"run", "thread_id"}
    started = await http.post("/log/threads/bob-u/runs", json=ask, headers=auth(BOB))
    assert started.status_code == 409, started.text  # his key, another thread
    assert started.json()["error"]["code"] == "idempotency_key_mismatch"
    stateless = await http.post(
        "/log/runs/wait", json={"assistant_id": "chat", "input": "x"}, headers=auth(BOB)
    )
    assert stateless.status_code == 200 and "values" not in stateless.json()


async def test_a_retried_request_gets_its_run_and_another_request_a_409(client: Any) -> None:
    http, runtime = client
    ask = {"assistant_id": "chat", "input": "hi", "idempotency_key": "retry-1"}
    first = await http.post("/log/runs/wait", json=ask, headers=auth(ALICE))
    again = await http.post("/log/runs/wait", json=ask, headers=auth(ALICE))
    assert first.status_code == again.status_code == 200, again.text
    assert first.json()["run"]["run_id"] == again.json()["run"]["run_id"]
    thread = first.json()["run"]["thread_id"]
    same = await http.post(f"/log/threads/{thread}/runs", json=ask, headers=auth(ALICE))
    assert same.status_code == 202 and same.json()["run_id"] == first.json()["run"]["run_id"]
    before = await last_position(runtime.store)
    for path, body in (
        ("/log/runs/wait", {**ask, "input": "something else"}),
        (f"/log/threads/{thread}/runs", {**ask, "input": "something else"}),
        ("/log/threads/elsewhere/runs", ask),
    ):
        refused = await http.post(path, json=body, headers=auth(ALICE))
        assert refused.status_code == 409, (path, refused.text)
        assert refused.json()["error"]["code"] == "idempotency_key_mismatch"
    assert await last_position(runtime.store) == before
