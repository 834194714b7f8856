"""Runs' outbound webhooks and `after_seconds` over real HTTP: a uvicorn server on loopback, a
receiver on loopback that checks each Standard Webhooks signature itself (HMAC-SHA256 from
the specification, not agentlog's signer), retries recorded in the log, refusals that write
nothing, a run put off until it is due (across a restart too) or cancelled before; and
`agentlog serve` killed with SIGKILL between a run's end and its webhook's delivery, then
restarted: exactly one delivery."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from agentlog.actors.http import create_app
from agentlog.actors.http.agentserver.outbound import SECRET_ENV, RunWebhooks
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.testing import until
from agentlog.events import SQLiteEventStore
from agentlog.events.kinds import WebhookSent
from agentlog.langgraph import StateGraph
from tests.agentserver.app import Chat, build
from tests.test_cli_serve import start
from tests.test_serve import Server

SECRET = "whsec_" + base64.b64encode(b"the receiver and the server share this").decode()
USER = {"messages": [{"role": "user", "content": "hello"}]}
APP = "tests.agentserver.app:build"


def verified(headers: httpx.Headers | Any, body: bytes, secret: str = SECRET) -> bool:
    """Standard Webhooks' check, from the specification: HMAC-SHA256 keyed by the secret's
    base64 part over `id.timestamp.body`, base64, any `v1,` signature of the header's
    space-separated list; a timestamp within five minutes."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    stamp = headers["webhook-timestamp"]
    signed = f"{headers['webhook-id']}.{stamp}.".encode() + body
    want = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    given = [s.split(",", 1)[1] for s in headers["webhook-signature"].split() if "," in s]
    fresh = abs(time.time() - int(stamp)) < 300
    return fresh and any(hmac.compare_digest(want, s) for s in given)


@dataclass
class Receiver:
    """A webhook receiver: answers each POST with the next of `answers` (200 once they run
    out); with `hold`, keeps the first request open until the test lets it go."""

    answers: list[int] = field(default_factory=list)
    hold: bool = False
    got: list[tuple[dict[str, str], bytes, int]] = field(default_factory=list)
    seen: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        request = Request(scope, receive)
        body = await request.body()
        self.seen += 1
        if self.hold and self.seen == 1:  # its sender is gone by the time it is let go
            await self.release.wait()
            await Response(status_code=503)(scope, receive, send)
            return
        status = self.answers.pop(0) if self.answers else 200
        self.got.append((dict(request.headers), body, status))
        await Response(status_code=status)(scope, receive, send)

    def delivered(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body, status in self.got if status == 200]


async def sent_records(store: SQLiteEventStore) -> list[WebhookSent]:
    return [r.event async for r in store.read("__runtime__") if isinstance(r.event, WebhookSent)]


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    hook = Receiver(answers=[500])
    async with Server(hook) as url:
        yield hook, url + "/hook"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, AgentRuntime]]:
    store = SQLiteEventStore(str(tmp_path / "log.db"))
    runtime = build(store)
    hooks = RunWebhooks(secret=SECRET, private=True, first_delay_s=0.05)
    async with store, runtime:
        app = create_app(runtime, run_webhooks=hooks)
        async with Server(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
            yield http, runtime


async def test_each_run_endpoint_posts_its_signed_result_once_retrying_a_failure(
    served: tuple[httpx.AsyncClient, AgentRuntime], receiver: tuple[Receiver, str]
) -> None:
    http, runtime = served
    hook, url = receiver
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    body = {"assistant_id": "chat", "input": USER, "webhook": url}
    made = await http.post(f"/threads/{thread}/runs", json=body)
    assert made.status_code == 200, made.text
    first = made.json()["run_id"]
    await until(lambda: len(hook.delivered()) == 1, what="the first run's webhook")
    waited = await http.post("/runs/wait", json=body)
    assert waited.status_code == 200, waited.text
    async with http.stream("POST", f"/threads/{thread}/runs/stream", json=body) as streamed:
        assert streamed.status_code == 200
        _ = [line async for line in streamed.aiter_lines()]
    stateless = await http.post("/runs", json={**body, "on_completion": "keep"})
    assert stateless.status_code == 200, stateless.text
    await until(lambda: len(hook.delivered()) == 4, what="every run's webhook")

    assert [status for _, _, status in hook.got] == [500, 200, 200, 200, 200]
    for headers, raw, _ in hook.got:
        assert verified(headers, raw), headers
        assert headers["webhook-id"] == json.loads(raw)["run_id"]
    assert hook.got[0][0]["webhook-id"] == hook.got[1][0]["webhook-id"] == first
    result = hook.delivered()[0]
    assert result["run_id"] == first and result["thread_id"] == thread
    assert result["status"] == "success" and result["assistant_id"] == "chat"
    assert result["values"]["messages"][-1]["content"] == "you said: hello"
    assert {"run_started_at", "run_ended_at", "webhook_sent_at", "metadata"} <= set(result)
    assert "error" not in result

    async def recorded() -> list[WebhookSent] | None:
        records = await sent_records(runtime.store)
        return records if sum(r.outcome == "delivered" for r in records) == 4 else None

    records = await until(recorded, what="every delivery recorded")
    mine = [(r.attempt, r.outcome, r.status) for r in records if r.run_id == first]
    assert mine == [(1, "failed", 500), (2, "delivered", 200)]
    assert runtime.ledger.outbox == {}
    assert (await runtime.store.verify("__runtime__")).ok


async def test_a_failed_run_posts_its_error_and_unsigned_without_a_secret(
    tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    hook, url = receiver
    hook.answers.clear()
    async with SQLiteEventStore(str(tmp_path / "log.db")) as store:
        runtime = build(store)
        failing = StateGraph(Chat)
        failing.add_node("boom", boom)
        failing.set_entry_point("boom")
        runtime.add_graph("boom", failing.compile(store).graph_engine)
        runtime.register_entry_point(EntryPoint(id="boom", graph_id="boom"))
        async with runtime:
            app = create_app(runtime, run_webhooks=RunWebhooks(private=True))
            async with Server(app) as base, httpx.AsyncClient(base_url=base) as http:
                bad = {"assistant_id": "boom", "input": USER, "webhook": url}
                made = await http.post("/runs", json=bad)
                assert made.status_code == 200, made.text
                await until(lambda: hook.got, what="the failed run's webhook")
    headers, raw, _ = hook.got[0]
    assert "webhook-signature" not in headers and headers["webhook-id"]
    result = json.loads(raw)
    assert result["status"] == "error" and result["values"] is None
    assert "the model is down" in result["error"]


def boom(state: Chat) -> dict[str, Any]:
    raise RuntimeError("the model is down")


async def test_a_webhook_the_server_may_not_call_is_refused_writing_nothing(
    tmp_path: Path,
) -> None:
    async with SQLiteEventStore(str(tmp_path / "log.db")) as store:
        runtime = build(store)
        async with runtime:
            app = create_app(runtime, run_webhooks=RunWebhooks(secret=SECRET))  # not loopback
            async with Server(app) as base, httpx.AsyncClient(base_url=base) as http:
                head = await runtime.store.last_seq("__runtime__")
                for target in (
                    "ftp://example.com/hook",
                    "not a url",
                    "http://127.0.0.1:9/hook",
                    "http://localhost/hook",
                    "http://10.1.2.3/hook",
                    "http://[::1]/hook",
                    "http://169.254.169.254/latest",
                    "http://user:pw@example.com/hook",
                ):
                    body = {"assistant_id": "chat", "input": USER, "webhook": target}
                    for path in ("/runs", "/runs/wait", "/runs/stream"):
                        refused = await http.post(path, json=body)
                        assert refused.status_code == 422, (target, refused.text)
                        assert refused.json()["error"]["code"] == "invalid_webhook"
                assert await runtime.store.last_seq("__runtime__") == head


async def test_a_run_after_seconds_waits_until_due_across_a_restart_or_is_cancelled(
    tmp_path: Path,
) -> None:
    now = [time.time()]
    path = str(tmp_path / "log.db")
    async with SQLiteEventStore(path) as store:
        runtime = build(store, clock=lambda: now[0])
        async with runtime:
            app = create_app(runtime)
            async with Server(app) as base, httpx.AsyncClient(base_url=base) as http:
                bad = await http.post(
                    "/runs", json={"assistant_id": "chat", "input": USER, "after_seconds": -1}
                )
                assert bad.status_code == 422
                later = {"assistant_id": "chat", "input": USER, "after_seconds": 600}
                thread = (await http.post("/threads", json={})).json()["thread_id"]
                kept = (await http.post(f"/threads/{thread}/runs", json=later)).json()
                other = (await http.post("/threads", json={})).json()["thread_id"]
                dropped = (await http.post(f"/threads/{other}/runs", json=later)).json()
                assert kept["status"] == dropped["status"] == "pending"
                cancel = f"/threads/{other}/runs/{dropped['run_id']}/cancel"
                assert (await http.post(cancel)).status_code == 202
                runtime.dispatcher.poke()
                run = f"/threads/{thread}/runs/{kept['run_id']}"
                assert (await http.get(run)).json()["status"] == "pending"
                now_busy = {"assistant_id": "chat", "input": USER, "multitask_strategy": "reject"}
                assert (
                    await http.post(f"/threads/{thread}/runs", json=now_busy)
                ).status_code == 409
    now[0] += 601  # due while no server ran: the restarted one runs it
    async with SQLiteEventStore(path) as store:
        runtime = build(store, clock=lambda: now[0])
        async with runtime:
            app = create_app(runtime)
            async with Server(app) as base, httpx.AsyncClient(base_url=base) as http:
                joined = await http.get(f"{run}/join")
                assert joined.json()["messages"][-1]["content"] == "you said: hello"
                gone = (await http.get(f"/threads/{other}/runs/{dropped['run_id']}")).json()
                assert gone["status"] == "interrupted"
                assert runtime.ledger.triggers[dropped["run_id"]].attempt == 0  # never ran


def test_a_server_killed_between_a_runs_end_and_its_webhook_delivers_it_once_on_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    asyncio.run(_killed_between_end_and_delivery(tmp_path))


async def _killed_between_end_and_delivery(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    hook = Receiver(hold=True)
    async with Server(hook) as base:
        url = base + "/hook"
        proc, served = start(db, app=APP)
        try:
            async with httpx.AsyncClient(base_url=served, timeout=60) as http:
                body = {"assistant_id": "chat", "input": USER, "webhook": url}
                run = (await http.post("/runs", json=body)).json()["run_id"]
                await until(lambda: hook.seen == 1, what="the webhook's first attempt")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=60)
        assert hook.got == []  # the run ended; its webhook was not delivered
        hook.release.set()
        proc, served = start(db, app=APP)
        try:
            await until(lambda: hook.delivered(), what="the webhook sent on restart")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
        proc, served = start(db, app=APP)  # delivered: a restart never sends it again
        try:
            async with httpx.AsyncClient(base_url=served, timeout=60) as http:
                body = {"assistant_id": "chat", "input": USER, "webhook": url}
                later = (await http.post("/runs", json=body)).json()["run_id"]
                await until(lambda: len(hook.delivered()) == 2, what="a later run's webhook")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    ids = [json.loads(raw)["run_id"] for _, raw, _ in hook.got]
    assert ids == [run, later]
    assert all(verified(headers, raw) for headers, raw, _ in hook.got)
    async with SQLiteEventStore(str(db)) as store:
        records = await sent_records(store)
    assert [(r.run_id, r.outcome) for r in records] == [(run, "delivered"), (later, "delivered")]


async def test_a_cron_is_a_runtime_timer_that_survives_a_restart_and_sends_its_webhook(
    tmp_path: Path, receiver: tuple[Receiver, str]
) -> None:
    hook, url = receiver
    hook.answers.clear()
    now = [datetime(2027, 1, 1, 8, 59, 30, tzinfo=UTC).timestamp()]
    path = str(tmp_path / "log.db")
    hooks = RunWebhooks(secret=SECRET, private=True)

    async def runs_of(runtime: AgentRuntime, timer: str) -> list[str]:
        await runtime.listeners.fire_due()  # (or the runtime's timer loop fired it first)
        found = runtime.ledger.triggers.values()
        return [t.id for t in found if t.accepted.entry_point == timer]

    async with SQLiteEventStore(path) as store:
        runtime = build(store, clock=lambda: now[0])
        async with runtime:
            app = create_app(runtime, run_webhooks=hooks)
            async with Server(app) as base, httpx.AsyncClient(base_url=base) as http:
                thread = (await http.post("/threads", json={})).json()["thread_id"]
                daily = {"assistant_id": "chat", "schedule": "0 9 * * *", "input": USER}
                kept = await http.post(
                    f"/threads/{thread}/runs/crons", json={**daily, "webhook": url}
                )
                assert kept.status_code == 200, kept.text
                dropped = (await http.post("/runs/crons", json=daily)).json()
                refused = await http.post("/runs/crons", json={**daily, "webhook": "file:///x"})
                assert refused.status_code == 422
                timer, other = f"cron:{kept.json()['cron_id']}", f"cron:{dropped['cron_id']}"
                now[0] += 60
                assert len(await runs_of(runtime, timer)) == len(await runs_of(runtime, other)) == 1
                await until(lambda: len(hook.delivered()) == 1, what="the cron run's webhook")
                gone = await http.delete(f"/runs/crons/{dropped['cron_id']}")
                assert gone.status_code == 204
                cron_url = f"/runs/crons/{kept.json()['cron_id']}"
                off = await http.patch(cron_url, json={"enabled": False})
                assert off.json()["enabled"] is False and timer not in runtime.entries
                bad = await http.patch(cron_url, json={"webhook": "http://user:pw@x.org/"})
                assert bad.status_code == 422
                on = await http.patch(cron_url, json={"enabled": True, "webhook": url + "?2"})
                assert on.status_code == 200 and timer in runtime.entries
    now[0] += 24 * 3600  # the next day's slot comes while no server runs
    async with SQLiteEventStore(path) as store:
        runtime = build(store, clock=lambda: now[0])
        async with runtime:
            app = create_app(runtime, run_webhooks=hooks)
            async with Server(app) as base, httpx.AsyncClient(base_url=base) as http:
                assert timer in runtime.entries and other not in runtime.entries
                assert len(await runs_of(runtime, timer)) == 2  # the missed slot, once
                assert len(await runs_of(runtime, timer)) == 2
                runs = (await http.get(f"/threads/{thread}/runs")).json()
                assert [r["assistant_id"] for r in runs] == ["chat", "chat"]
                await until(lambda: len(hook.delivered()) == 2, what="the second run's webhook")
    assert all(verified(headers, raw) for headers, raw, _ in hook.got)
    assert [r["thread_id"] for r in hook.delivered()] == [thread, thread]


def test_a_timer_takes_its_own_time_zone_and_thread() -> None:
    from agentlog.actors.runtime.spec import RegistrationError
    from agentlog.actors.runtime.timers import Schedule

    paris = EntryPoint(id="t", graph_id="g", trigger="timer", cron="0 9 * * *",
                       timezone="Europe/Paris", thread_id="standup")  # fmt: skip
    paris.check()
    noon_utc = datetime(2027, 1, 1, 12, tzinfo=UTC).timestamp()
    assert Schedule.of(paris, noon_utc).slot_at_or_before(noon_utc) == (
        datetime(2027, 1, 1, 8, tzinfo=UTC).timestamp()  # 09:00 in Paris
    )
    with pytest.raises(RegistrationError, match="IANA"):
        EntryPoint(id="t", graph_id="g", trigger="timer", cron="0 9 * * *",
                   timezone="Mars/Base").check()  # fmt: skip
    with pytest.raises(RegistrationError, match="thread_id"):
        EntryPoint(id="a", graph_id="g", thread_id="standup").check()


async def test_a_cron_past_its_end_time_fires_no_more(tmp_path: Path) -> None:
    now = [datetime(2027, 1, 1, 8, 59, 30, tzinfo=UTC).timestamp()]
    async with SQLiteEventStore(str(tmp_path / "log.db")) as store:
        runtime = build(store, clock=lambda: now[0])
        async with runtime:
            app = create_app(runtime)
            async with Server(app) as base, httpx.AsyncClient(base_url=base) as http:
                made = await http.post(
                    "/runs/crons",
                    json={"assistant_id": "chat", "schedule": "0 9 * * *", "input": USER,
                          "end_time": "2027-01-01T12:00:00+00:00"},
                )  # fmt: skip
                timer = f"cron:{made.json()['cron_id']}"
                now[0] += 60
                await runtime.listeners.fire_due()
                await until(lambda: timer not in runtime.entries, what="the ended cron's timer")
                now[0] += 24 * 3600
                await runtime.listeners.fire_due()
                runs = [
                    t for t in runtime.ledger.triggers.values() if t.accepted.entry_point == timer
                ]
                assert len(runs) == 1


def test_the_ledger_snapshot_keeps_the_webhooks_owed() -> None:
    from agentlog.actors.runtime.ledger import Ledger

    ledger = Ledger(outbox={"run-1": "https://example.com/hook"})
    again = Ledger.from_snapshot(ledger.to_snapshot(), keep=10)
    assert again.outbox == {"run-1": "https://example.com/hook"}
