"""A caller's W3C trace context over HTTP: the `traceparent` header of a run request or a
webhook delivery is recorded on the trigger it causes and becomes the parent of the run's
`invoke_agent` span, live and after the fact; a malformed header is ignored, as W3C asks."""

from __future__ import annotations

from pathlib import Path

import httpx

from agentlog.actors.http import create_app
from agentlog.actors.otel import spans_of_thread
from agentlog.events import SQLiteEventStore
from agentlog.events.kinds import TriggerAccepted
from tests.test_cli_serve import delivery
from tests.workers.serve_app import build

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
HOOK = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def run_span_of(store: SQLiteEventStore, thread: str) -> tuple[str, int | None, bool]:
    spans = await spans_of_thread(store, thread)
    (run,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert {s.trace_id for s in spans} == {run.trace_id}
    return f"{run.trace_id:032x}", run.parent_id, run.remote_parent


async def test_a_traceparent_header_parents_the_run_it_starts(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "http.db") as store:
        runtime = build(store)
        async with runtime:
            transport = httpx.ASGITransport(app=create_app(runtime))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                done = await http.post(
                    "/threads/t/runs/wait",
                    json={"assistant_id": "chat", "input": "ship it"},
                    headers={"traceparent": CALLER},
                )
                assert done.json()["status"] == "completed", done.text
                plain = await http.post(
                    "/threads/u/runs/wait",
                    json={"assistant_id": "chat", "input": "ship it"},
                    headers={"traceparent": "00-not-a-trace-01"},
                )
                assert plain.status_code == 200, plain.text
                body, headers = delivery(1)
                hooked = await http.post(
                    "/hooks/orders", content=body, headers={**headers, "traceparent": HOOK}
                )
                assert hooked.status_code == 202, hooked.text
                await runtime.wait(hooked.json()["thread_id"])
        assert await run_span_of(store, "t") == (CALLER[3:35], int(CALLER[36:52], 16), True)
        assert await run_span_of(store, hooked.json()["thread_id"]) == (
            HOOK[3:35],
            int(HOOK[36:52], 16),
            True,
        )
        _, parent, remote = await run_span_of(store, "u")
        assert (parent, remote) == (None, False)  # the malformed header was ignored
        accepted = [
            r.event
            for thread in await store.threads()
            async for r in store.read(thread)
            if isinstance(r.event, TriggerAccepted)
        ]
        assert sorted(str(a.traceparent) for a in accepted) == sorted([CALLER, HOOK, "None"])
