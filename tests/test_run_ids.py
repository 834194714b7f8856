"""One run id: a run the runtime starts is named in the log by its trigger's id, the
`run_id` the HTTP API answers with, so every run id the log shows is a run over HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from agentlog.actors.engine.errors import GraphError
from agentlog.actors.http import create_app
from agentlog.events import SQLiteEventStore
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
                    "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
                )
                first = paused.json()["run"]["run_id"]
                logged = {r.run_id async for r in store.read("t")}
                assert logged == {first}
                one = await c.get(f"/log/threads/t/runs/{first}")
                assert one.status_code == 200 and one.json()["run_id"] == first
                # a resume is a run of its own over HTTP; its records go on with the run
                # it resumes (one run in the log, from run_started to its end), which is
                # an HTTP run too
                done = await c.post(
                    "/log/threads/t/runs/wait",
                    json={"assistant_id": "chat", "command": {"resume": None}},
                )
                assert done.json()["status"] == "completed"
                assert {r.run_id async for r in store.read("t")} == {first}
                # new input after the end starts a new run, named by its own trigger
                again = await c.post(
                    "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "more"}
                )
                second = again.json()["run"]["run_id"]
                assert second != first
                assert {r.run_id async for r in store.read("t")} == {first, second}
                for run_id in (first, second):
                    answer = await c.get(f"/log/threads/t/runs/{run_id}")
                    assert answer.status_code == 200, answer.text


async def test_a_config_run_id_names_the_run_ainvoke_starts(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "cfg.db") as store:
        app = line(("a", reply)).compile(store)
        await app.ainvoke("hi", {"thread_id": "t", "run_id": "order-42"})
        assert {r.run_id async for r in store.read("t")} == {"order-42"}
        with pytest.raises(GraphError, match="run_id"):
            await app.ainvoke("hi", {"thread_id": "u", "run_id": ""})
        assert await store.last_seq("u") == 0


async def _copy_renaming_runs(src: Path, dst: Path, names: dict[str, str]) -> None:
    """Write `src`'s log again into `dst` with each run id in `names` renamed, chain and all:
    a log as it was written before runs were named by their trigger."""
    async with SQLiteEventStore(src) as old, SQLiteEventStore(dst) as new:
        for thread in await old.threads():
            async for r in old.read(thread):
                run_id = names.get(r.run_id, r.run_id) if r.run_id is not None else None
                await new.append(
                    thread, [r.event], expected_seq=r.seq - 1, run_id=run_id, actor=r.actor
                )


async def test_a_run_id_the_log_wrote_the_old_way_is_a_run_over_http(tmp_path: Path) -> None:
    src, dst = tmp_path / "new.db", tmp_path / "old.db"
    async with SQLiteEventStore(src) as store:
        runtime = build(store)
        async with runtime:
            transport = httpx.ASGITransport(app=create_app(runtime))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                paused = await c.post(
                    "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
                )
                first = paused.json()["run"]["run_id"]
                await c.post(
                    "/log/threads/t/runs/wait",
                    json={"assistant_id": "chat", "command": {"resume": None}},
                )
                again = await c.post(
                    "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "more"}
                )
                second = again.json()["run"]["run_id"]
    await _copy_renaming_runs(src, dst, {first: "run-0a1b2c", second: "run-3d4e5f"})
    async with SQLiteEventStore(dst) as store:
        assert {r.run_id async for r in store.read("t")} == {"run-0a1b2c", "run-3d4e5f"}
        runtime = build(store)
        async with runtime:
            transport = httpx.ASGITransport(app=create_app(runtime))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                for old, trigger in (("run-0a1b2c", first), ("run-3d4e5f", second)):
                    one = await c.get(f"/log/threads/t/runs/{old}")
                    assert one.status_code == 200, one.text
                    assert one.json()["run_id"] == trigger
                    joined = await c.get(f"/log/threads/t/runs/{old}/join")
                    assert joined.status_code == 200, joined.text
                    async with c.stream("GET", f"/log/threads/t/runs/{old}/stream") as streamed:
                        assert streamed.status_code == 200
                        body = "".join([part async for part in streamed.aiter_text()])
                    assert trigger in body
                ended = await c.post("/log/threads/t/runs/run-0a1b2c/cancel")
                assert ended.status_code == 409, ended.text  # it ended: not a 404
                assert ended.json()["error"]["code"] == "conflict"
                paused_again = await c.post("/log/threads/t/runs/run-3d4e5f/cancel")
                assert paused_again.status_code == 200, paused_again.text
                assert paused_again.json()["run_id"] == second
                assert paused_again.json()["status"] == "cancelled"
                # a run id the thread never carried is still unknown
                missing = await c.get("/log/threads/t/runs/run-ffffff")
                assert missing.status_code == 404
                other = await c.get("/log/threads/u/runs/run-0a1b2c")
                assert other.status_code == 404


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
                    "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
                )
                first = paused.json()["run"]["run_id"]
                cancelled = await c.post(f"/log/threads/t/runs/{first}/cancel", json={})
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
