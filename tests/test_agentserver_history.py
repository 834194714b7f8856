"""What the wire shows is what the log holds, for any sequence of runs, pauses, resumes,
edits and rollbacks on a thread: the thread's status is the fold's by the one table, every
checkpoint of its history names a record of its chain (seq and hash), and the state read at
each checkpoint is the history's entry for it."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.actors.http import create_app
from agentlog.actors.http.agentserver import wire
from agentlog.actors.runtime.facade import RuntimeFacade
from agentlog.events import SQLiteEventStore
from tests.agentserver.app import build

USER = {"messages": [{"role": "user", "content": "hello"}]}
STEPS = st.lists(
    st.sampled_from(["chat", "approval", "resume", "edit", "rollback"]), min_size=1, max_size=5
)


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(STEPS)
def test_the_wire_shows_what_the_log_holds(steps: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(check(Path(folder), steps))


async def act(http: httpx.AsyncClient, thread: str, step: str) -> None:
    runs = f"/threads/{thread}/runs"
    if step in ("chat", "approval"):
        await http.post(f"{runs}/wait", json={"assistant_id": step, "input": USER})
    elif step == "resume":
        await http.post(
            f"{runs}/wait", json={"assistant_id": "approval", "command": {"resume": "ok"}}
        )
    elif step == "edit":
        body = {"values": {"messages": [{"role": "user", "content": "edited"}]}}
        await http.post(f"/threads/{thread}/state", json=body)
    else:
        latest = (await http.get(runs)).json()
        if latest:
            await http.post(f"{runs}/{latest[0]['run_id']}/cancel", params={"action": "rollback"})


async def check(folder: Path, steps: list[str]) -> None:
    async with SQLiteEventStore(folder / "log.db") as store:
        runtime = build(store)
        async with runtime:
            transport = httpx.ASGITransport(app=create_app(runtime))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", timeout=60
            ) as http:
                thread = (await http.post("/threads", json={})).json()["thread_id"]
                for step in steps:
                    await act(http, thread, step)  # refusals (409, 422) are answers too
                    await holds(http, runtime, thread)


async def holds(http: httpx.AsyncClient, runtime: Any, thread: str) -> None:
    shown = (await http.get(f"/threads/{thread}")).json()
    facade = RuntimeFacade(runtime)
    folded = await facade.state(thread, await facade.graph_of(thread))
    status = folded.execution_meta.status
    assert shown["status"] == wire.thread_status(status, busy=False), (shown, status)
    records = {r.seq: r for r in [r async for r in runtime.store.read(thread)]}
    history = (await http.post(f"/threads/{thread}/history", json={"limit": 1000})).json()
    for entry in history:
        seq, digest = wire.parse_checkpoint_id(entry["checkpoint"]["checkpoint_id"])
        assert records[seq].hash.startswith(digest)
        at = await http.get(f"/threads/{thread}/state/{entry['checkpoint']['checkpoint_id']}")
        assert at.json()["values"] == entry["values"]
    if history:
        head = (await http.get(f"/threads/{thread}/state")).json()
        assert head["checkpoint"] == history[0]["checkpoint"]
        assert head["values"] == shown["values"]
