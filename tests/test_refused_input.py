"""Input no run can take is refused before anything is written, never accepted to fail on
every attempt of its entry point's retry policy: over HTTP and through the Python API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors.engine.errors import NothingToResumeError
from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RetryPolicy
from agentlog.actors.runtime.spec import RegistrationError
from agentlog.events import SQLiteEventStore
from agentlog.projections import InvalidStateUpdateError
from tests.test_serve import build

RETRY = RetryPolicy(max_attempts=3, backoff_s=0)


def retried(store: SQLiteEventStore) -> AgentRuntime:
    runtime = build(store)
    runtime.unregister_entry_point("chat")
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support", retry=RETRY))
    return runtime


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, AgentRuntime]]:
    async with SQLiteEventStore(tmp_path / "refused.db") as store:
        runtime = retried(store)
        app = create_app(runtime)
        async with runtime:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                yield c, runtime


async def written(runtime: AgentRuntime) -> tuple[int, list[str]]:
    """The runtime thread's head and the threads in the log: what a refusal must not move."""
    return (
        await runtime.store.last_seq(runtime.config.runtime_thread),
        await runtime.store.threads(),
    )


async def test_http_refuses_a_blank_thread_id_and_an_unknown_field_writing_nothing(
    api: Any,
) -> None:
    client, runtime = api
    before = await written(runtime)
    blank = await client.post("/log/threads/%20/runs", json={"assistant_id": "chat", "input": "hi"})
    assert blank.status_code == 422, blank.text
    assert blank.json()["error"]["code"] == "invalid_request"
    assert "non-blank" in blank.json()["error"]["message"]
    unknown = await client.post(
        "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": {"nope": 1}}
    )
    assert unknown.status_code == 422, unknown.text
    assert unknown.json()["error"]["code"] == "invalid_state_update"
    assert "'nope'" in unknown.json()["error"]["message"]
    wrong_type = await client.post(
        "/log/threads/t/runs", json={"assistant_id": "chat", "input": {"context_summary": 3}}
    )
    assert wrong_type.status_code == 422, wrong_type.text
    assert await written(runtime) == before


async def test_http_refuses_to_go_on_with_a_cancelled_run(api: Any) -> None:
    client, runtime = api
    paused = await client.post(
        "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
    )
    run_id = paused.json()["run"]["run_id"]
    assert (await client.post(f"/log/threads/t/runs/{run_id}/cancel")).status_code == 200
    before = await written(runtime)
    again = await client.post("/log/threads/t/runs/wait", json={"assistant_id": "chat"})
    assert again.status_code == 409, again.text
    assert again.json()["error"]["code"] == "nothing_to_resume"
    assert "send new input" in again.json()["error"]["message"]
    assert await written(runtime) == before
    fresh = await client.post(
        "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "new"}
    )
    assert fresh.status_code == 200 and fresh.json()["status"] == "interrupted_before"


async def test_python_api_refuses_the_same_inputs(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "py.db") as store, retried(store) as runtime:
        before = await written(runtime)
        with pytest.raises(RegistrationError, match="non-blank"):
            await runtime.submit("chat", "hi", thread_id="  ")
        with pytest.raises(InvalidStateUpdateError, match="'nope'"):
            await runtime.submit("chat", {"nope": 1}, thread_id="t")
        assert await written(runtime) == before
        await runtime.trigger_and_wait("chat", "hi", thread_id="t", timeout=60)
        await runtime.cancel("t")
        before = await written(runtime)
        with pytest.raises(NothingToResumeError, match="cancelled"):
            await runtime.submit("chat", None, thread_id="t")
        assert await written(runtime) == before


async def test_an_input_error_found_by_the_run_is_final_not_retried(tmp_path: Path) -> None:
    """What only the thread can refuse (a tool result answering no call in it) fails once:
    another attempt would fail the same way."""
    async with SQLiteEventStore(tmp_path / "final.db") as store, retried(store) as runtime:
        answer = {"role": "tool", "tool_call_id": "never-made", "content": "r"}
        accepted = await runtime.submit("chat", answer, thread_id="t")
        with pytest.raises(InvalidStateUpdateError, match="never made"):
            await runtime.wait_for(accepted.trigger_id, timeout=60)
        ended = runtime.ledger.triggers[accepted.trigger_id]
        assert ended.outcome == "failed" and ended.retry_at is None
        assert ended.attempt == 1


@pytest.mark.parametrize("name", ["__runtime__", "__runtime__/lease/t", "__shared__/support/k"])
async def test_the_runtimes_own_thread_names_cannot_be_created(api: Any, name: str) -> None:
    client, runtime = api
    await client.post("/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"})
    before = await written(runtime)
    created = await client.post("/log/threads", json={"thread_id": name, "graph_id": "support"})
    assert created.status_code == 422, created.text
    assert "reserved" in created.json()["error"]["message"]
    copied = await client.post("/log/threads/t/copy", json={"thread_id": name})
    assert copied.status_code == 422, copied.text
    with pytest.raises(RegistrationError, match="reserved"):
        await runtime.submit("chat", "hi", thread_id=name)
    assert await written(runtime) == before
