"""One run id: a run the runtime starts is named in the log by its trigger's id, the
`run_id` the HTTP API answers with, so every run id the log shows is a run over HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from actors.errors import GraphError
from actors.serve import create_app
from events import SQLiteEventStore
from tests.helpers import line
from tests.test_serve import build, reply


async def test_the_log_names_a_run_by_the_id_http_answers_with(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "ids.db") as store:
        runtime = build(store)
        app = create_app(runtime)
        async with runtime:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                paused = await c.post(
                    "/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
                )
                first = paused.json()["run"]["run_id"]
                logged = {r.run_id async for r in store.read("t")}
                assert logged == {first}
                one = await c.get(f"/threads/t/runs/{first}")
                assert one.status_code == 200 and one.json()["run_id"] == first
                # a resume is a run of its own over HTTP; its records go on with the run
                # it resumes (one run in the log, from run_started to its end), which is
                # an HTTP run too
                done = await c.post(
                    "/threads/t/runs/wait",
                    json={"assistant_id": "chat", "command": {"resume": None}},
                )
                assert done.json()["status"] == "completed"
                assert {r.run_id async for r in store.read("t")} == {first}
                # new input after the end starts a new run, named by its own trigger
                again = await c.post(
                    "/threads/t/runs/wait", json={"assistant_id": "chat", "input": "more"}
                )
                second = again.json()["run"]["run_id"]
                assert second != first
                assert {r.run_id async for r in store.read("t")} == {first, second}
                for run_id in (first, second):
                    answer = await c.get(f"/threads/t/runs/{run_id}")
                    assert answer.status_code == 200, answer.text


async def test_a_config_run_id_names_the_run_ainvoke_starts(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "cfg.db") as store:
        app = line(("a", reply)).compile(store)
        await app.ainvoke("hi", {"thread_id": "t", "run_id": "order-42"})
        assert {r.run_id async for r in store.read("t")} == {"order-42"}
        with pytest.raises(GraphError, match="run_id"):
            await app.ainvoke("hi", {"thread_id": "u", "run_id": ""})
        assert await store.last_seq("u") == 0


async def test_a_cancel_over_http_and_by_the_runtime_names_the_run_it_ends(
    tmp_path: Path,
) -> None:
    """Every record of a run names it, its cancel's records too: over HTTP, through the
    runtime's `cancel`, the run's id is the one HTTP answered with."""
    async with SQLiteEventStore(tmp_path / "cancel.db") as store:
        runtime = build(store)
        app = create_app(runtime)
        async with runtime:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                paused = await c.post(
                    "/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
                )
                first = paused.json()["run"]["run_id"]
                cancelled = await c.post(f"/threads/t/runs/{first}/cancel", json={})
                assert cancelled.status_code == 200, cancelled.text
                records = [r async for r in store.read("t")]
                assert records[-1].kind == "run_cancelled"
                assert {r.run_id for r in records} == {first}
            again = await runtime.submit("chat", "more", thread_id="u")
            assert (await runtime.wait("u"))["status"] == "interrupted_before"
            await runtime.cancel("u", actor="alice", reason="duplicate")
            records = [r async for r in store.read("u")]
            assert records[-1].kind == "run_cancelled"
            assert {r.run_id for r in records} == {again.trigger_id}


async def test_acancel_names_the_run_it_ends(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "acancel.db") as store:
        app = line(("a", reply), ("b", reply)).compile(store, interrupt_before=["b"])
        await app.ainvoke("hi", {"thread_id": "t", "run_id": "order-42"})
        assert await app.acancel({"thread_id": "t"}, by="alice")
        records = [r async for r in store.read("t")]
        assert records[-1].kind == "run_cancelled"
        assert {r.run_id for r in records} == {"order-42"}
