"""What a thread's head decides is kept per head (`actors/http/summaries.py`): the thread
without its values, whether it is deleted, and its last chain check. Each answer must be
what a fresh read would say at that head, and must follow the log as it grows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors.examples.support import support_graph
from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import SQLiteEventStore
from tests.helpers import edit_db

DAMAGED = "My order A-1042 arrived damaged."


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with SQLiteEventStore(tmp_path / "kept.db") as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("support", support_graph(store))
        runtime.register_entry_point(EntryPoint(id="support", graph_id="support"))
        async with runtime:
            transport = httpx.ASGITransport(app=create_app(runtime))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                yield c


async def run(http: httpx.AsyncClient, thread: str, body: dict[str, object]) -> None:
    done = await http.post(f"/log/threads/{thread}/runs/wait", json=body)
    assert done.status_code == 200, done.text


async def light(http: httpx.AsyncClient, thread: str) -> dict[str, object]:
    answer = await http.get(f"/log/threads/{thread}", params={"values": "false"})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_a_kept_summary_is_the_thread_without_its_values_and_follows_appends(
    http: httpx.AsyncClient,
) -> None:
    await run(http, "t", {"assistant_id": "support", "input": DAMAGED})  # pauses
    full = (await http.get("/log/threads/t")).json()
    assert await light(http, "t") == {**full, "values": None}
    assert await light(http, "t") == {**full, "values": None}  # kept: the same answer
    await run(http, "t", {"assistant_id": "support", "command": {"resume": None}})
    now = await light(http, "t")  # a new head: read again, not the kept one
    assert now["status"] == "completed" and now["step"] > full["step"]
    listed = (await http.post("/log/threads/search", json={"values": False})).json()
    assert listed == [now]
    found = await http.post("/log/threads/search", json={"values": False, "status": "completed"})
    assert [t["thread_id"] for t in found.json()] == ["t"]


async def test_a_deleted_threads_records_and_stream_answer_404_after_they_were_read(
    http: httpx.AsyncClient,
) -> None:
    await run(http, "gone", {"assistant_id": "support", "input": DAMAGED})
    assert (await http.get("/log/threads/gone/records")).status_code == 200  # kept
    assert (await http.delete("/log/threads/gone")).status_code == 200
    for path in ("/log/threads/gone/records", "/log/threads/gone?values=false"):
        answer = await http.get(path)
        assert answer.status_code == 404, path
        assert "deleted by 'local'" in answer.json()["error"]["message"]
    assert (await http.get("/log/threads/gone/stream")).status_code == 404
    assert (await http.post("/log/threads/search", json={"values": False})).json() == []


async def test_verify_reuses_a_check_only_of_the_same_head_and_within_max_age(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    await run(http, "v", {"assistant_id": "support", "input": DAMAGED})

    async def verify(**params: object) -> dict[str, object]:
        answer = await http.get("/log/threads/v/verify", params=params)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    first = await verify()
    assert first["ok"] is True
    assert (await verify(max_age=60))["checked_at"] == first["checked_at"]  # the same head
    fresh = await verify()  # no max_age: always recomputed
    assert fresh["checked_at"] != first["checked_at"]
    await run(http, "v", {"assistant_id": "support", "command": {"resume": None}})
    grown = await verify(max_age=60)  # a new head: the check carried on through what came
    assert grown["checked_at"] == fresh["checked_at"]  # when its oldest records were checked
    assert grown == await verify() | {"checked_at": fresh["checked_at"]}  # as a full check says
    assert grown["records_checked"] > first["records_checked"]  # type: ignore[operator]
    edit_db(tmp_path / "kept.db", "UPDATE events SET actor = 'x' WHERE thread_id = 'v' AND seq = 2")
    assert (await verify(max_age=60))["ok"] is True  # the kept check, of before the damage
    broken = await verify()
    assert (broken["ok"], broken["first_bad_seq"]) == (False, 2)
    assert (await verify(max_age=60))["first_bad_seq"] == 2  # the fresh check is kept now
    bad = await http.get("/log/threads/v/verify", params={"max_age": -1})
    assert bad.status_code == 422


async def test_a_check_carried_on_to_a_new_head_finds_a_damaged_new_record(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    await run(http, "w", {"assistant_id": "support", "input": DAMAGED})  # pauses
    kept = (await http.get("/log/threads/w/verify")).json()
    await run(http, "w", {"assistant_id": "support", "command": {"resume": None}})
    seq = kept["records_checked"] + 1  # the first record since the check
    edit_db(
        tmp_path / "kept.db", "UPDATE events SET actor = 'x' WHERE thread_id = 'w' AND seq = ?", seq
    )
    found = (await http.get("/log/threads/w/verify", params={"max_age": 60})).json()
    assert (found["ok"], found["first_bad_seq"]) == (False, seq)  # checked in full, and said
    assert found["checked_at"] > kept["checked_at"]


async def test_requests_arriving_while_a_thread_is_folded_wait_for_that_one_fold(
    tmp_path: Path,
) -> None:
    async with SQLiteEventStore(tmp_path / "once.db") as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("support", support_graph(store))
        runtime.register_entry_point(EntryPoint(id="support", graph_id="support"))
        async with runtime:
            app = create_app(runtime)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                await run(c, "t", {"assistant_id": "support", "input": DAMAGED})
                facade = app.state.facade
                read, folds = facade.state, []

                async def counted(*args: Any, **kwargs: Any) -> Any:
                    folds.append(args)
                    return await read(*args, **kwargs)

                facade.state = counted
                answers = await asyncio.gather(
                    c.get("/log/threads/t", params={"values": "false"}),
                    c.get("/log/threads/t/records"),
                    c.post("/log/threads/search", json={"values": False}),
                )
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert len(folds) == 1
