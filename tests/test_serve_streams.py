"""The live streams on a real server: a resume point that is no position answers 400 before
the stream opens; a thread's stream and a run's read the thread by its index, never the rest
of the log; a run's stream carries its own records only (not the run it queued behind), and
every record names its run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.testing import until
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message
from tests.helpers import line
from tests.test_serve import Server

GATES: dict[str, asyncio.Event] = {}


async def gated(state: AgentState) -> list[Message]:
    """Waits for the gate its input names (none: goes on at once)."""
    text = state.context[-1].text()
    if text in GATES:
        await GATES[text].wait()
    return [Message.text_message(f"done {text}", role="assistant")]


def build(store: SQLiteEventStore) -> AgentRuntime:
    runtime = AgentRuntime(store)
    graph = line(("work", gated), ("more", gated))
    graph.name = "work"
    runtime.add_graph("work", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="go", graph_id="work"))
    return runtime


class Served:
    def __init__(self, store: SQLiteEventStore, runtime: AgentRuntime, client: Any) -> None:
        self.store, self.runtime, self.client = store, runtime, client


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with SQLiteEventStore(tmp_path / "streams.db") as store:
        runtime = build(store)
        async with (
            Server(create_app(runtime)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            yield Served(store, runtime, client)


async def events_of(
    client: Any, path: str, until: str = "run_completed", **kw: Any
) -> list[dict[str, Any]]:
    """A stream's records up to the first of kind `until`."""
    got: list[dict[str, Any]] = []
    async with client.stream("GET", path, **kw) as stream:
        if stream.status_code != 200:
            await stream.aread()
            raise AssertionError(f"{path}: {stream.status_code} {stream.text[:500]}")
        async for text in stream.aiter_lines():
            if text.startswith("data: "):
                got.append(json.loads(text[6:]))
                if got[-1]["kind"] == until:
                    break
    return got


async def test_a_resume_point_that_is_no_position_is_a_400(served: Served) -> None:
    client = served.client
    done = await client.post("/log/threads/t/runs/wait", json={"assistant_id": "go", "input": "a"})
    run = done.json()["run"]["run_id"]
    bad = [b"\xb2", b"9" * 5000, str(2**63).encode(), b"-1", b"1e3", b"0x10", "١٢".encode()]
    for path in ("/log/threads/t/stream", f"/log/threads/t/runs/{run}/stream"):
        for value in bad:
            response = await client.get(path, headers={"Last-Event-ID": value})
            assert response.status_code == 400, (path, value, response.text[:200])
            assert response.json()["error"]["code"] == "invalid_position"
    for value in bad:
        text = value.decode("latin-1")
        response = await client.get("/log/threads/t/stream", params={"after": text})
        assert response.status_code == 400, (value, response.text[:200])
        assert response.json()["error"]["code"] == "invalid_position"
    # a real position still resumes
    records = [r async for r in served.store.read("t")]
    rest = await events_of(client, "/log/threads/t/stream", params={"after": records[-2].position})
    assert [e["position"] for e in rest] == [records[-1].position]


async def test_a_queued_runs_stream_carries_its_own_records_each_naming_it(
    served: Served,
) -> None:
    client = served.client
    GATES["first"] = asyncio.Event()
    first = (
        await client.post("/log/threads/q/runs", json={"assistant_id": "go", "input": "first"})
    ).json()

    async def running() -> bool:
        run = await client.get(f"/log/threads/q/runs/{first['run_id']}")
        return bool(run.json()["status"] == "running")

    await until(running)
    second = (
        await client.post(
            "/log/threads/q/runs",
            json={"assistant_id": "go", "input": "second", "multitask_strategy": "enqueue"},
        )
    ).json()
    assert second["status"] == "pending"
    listening = asyncio.ensure_future(
        events_of(client, f"/log/threads/q/runs/{second['run_id']}/stream", "trigger_finished")
    )
    thread_stream = asyncio.ensure_future(events_of(client, "/log/threads/q/stream"))
    GATES["first"].set()
    got = await asyncio.wait_for(listening, 60)
    assert {e["run_id"] for e in got} == {second["run_id"]}
    texts = [
        e["event"]["message"]["content"][0]["text"] for e in got if e["kind"] == "message_appended"
    ]
    assert texts == ["second", "done second", "done done second"]  # none of the first run's
    assert got[0]["kind"] == "run_started" and got[-1]["kind"] == "trigger_finished"
    # the thread's stream names each record's run: the first's, then the second's
    whole = await asyncio.wait_for(thread_stream, 60)
    assert [e["run_id"] for e in whole][:1] == [first["run_id"]]
    assert {e["run_id"] for e in whole} == {first["run_id"]}  # it ends at the first's end
    rest = await events_of(client, "/log/threads/q/stream", params={"after": whole[-1]["position"]})
    assert {e["run_id"] for e in rest} == {second["run_id"]}


async def test_a_stream_reads_its_thread_by_index_not_the_log(served: Served) -> None:
    """Other threads' records are never read: `read_all` (the whole log) is not called for a
    thread's stream, nor for a run's beyond the one record that ends it."""
    client, store = served.client, served.store
    for i in range(5):
        await client.post(
            f"/log/threads/other-{i}/runs/wait", json={"assistant_id": "go", "input": "x"}
        )
    scanned: list[int] = []
    whole_log = store.read_all

    def counting(from_position: int = 0) -> Any:
        scanned.append(from_position)
        return whole_log(from_position)

    store.read_all = counting  # type: ignore[method-assign]
    try:
        run = (
            await client.post("/log/threads/mine/runs", json={"assistant_id": "go", "input": "y"})
        ).json()
        got = await events_of(
            client, f"/log/threads/mine/runs/{run['run_id']}/stream", "trigger_finished"
        )
        assert got[-1]["kind"] == "trigger_finished"
        assert (await events_of(client, "/log/threads/mine/stream"))[-1]["kind"] == "run_completed"
    finally:
        store.read_all = whole_log  # type: ignore[method-assign]
    assert scanned == []
