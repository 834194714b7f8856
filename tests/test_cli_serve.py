"""`agentlog serve` as a user runs it: a real process on an ephemeral port, a real client;
a clean drain on SIGTERM; refusals before anything is written; and a server killed with
SIGKILL while webhook deliveries and runs are in flight, then restarted: every accepted
delivery runs exactly once, none is lost, every thread verifies."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors.http.webhooks import sign_standard
from agentlog.actors.testing import until, wait_for_line
from agentlog.events import SQLiteEventStore
from tests.helpers import ROOT, agentlog
from tests.workers.serve_app import SECRET

APP = "tests.workers.serve_app:build"


def start(
    db: Path, *extra: str, effects: Path | None = None, app: str = APP, **test_env: Path
) -> tuple[subprocess.Popen[str], str]:
    """Start `agentlog serve` on the worker app; `test_env` sets AGENTLOG_TEST_<NAME> files."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if effects is not None:
        env["AGENTLOG_TEST_EFFECTS"] = str(effects)
    env.update({f"AGENTLOG_TEST_{name.upper()}": str(path) for name, path in test_env.items()})
    proc = subprocess.Popen(
        [sys.executable, "-c", "from agentlog.actors.cli import main; main()", "serve",
         "--db", str(db), "--app", app, "--port", "0", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("{"):
        proc.kill()
        raise AssertionError(f"the server did not start: {line!r} {proc.communicate()[1][-2000:]}")
    return proc, json.loads(line)["serving"]


def delivery(n: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"order": n}).encode()
    now = int(time.time())
    return body, {
        "content-type": "application/json",
        "webhook-id": f"delivery-{n}",
        "webhook-timestamp": str(now),
        "webhook-signature": sign_standard(SECRET, f"delivery-{n}", now, body),
    }


def test_serve_answers_then_drains_on_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "serve.db"
    proc, url = start(db)
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/ok").json() == {"ok": True}
            done = client.post(
                "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
            )
            assert done.json()["status"] == "completed"
            client.post("/log/threads/u/runs", json={"assistant_id": "chat", "input": "late"})
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]

    async def check() -> None:
        async with SQLiteEventStore(db) as store:
            for thread in ("t", "u"):
                assert (await store.verify(thread)).ok
            kinds = [r.kind async for r in store.read("u")]
            assert kinds[-1] in ("run_completed", "stopped"), kinds  # finished, or paused cleanly

    asyncio.run(check())


def test_serve_refuses_a_public_address_without_tokens(tmp_path: Path) -> None:
    db = tmp_path / "public.db"
    result = agentlog("serve", "--db", db, "--app", APP, "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert "without tokens" in result.stderr
    assert not db.exists()


def test_hash_token_prints_what_a_token_file_stores() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentlog.actors.cli", "serve", "--hash-token"],
        input="my-secret\n", capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    import hashlib

    assert result.stdout.strip() == hashlib.sha256(b"my-secret").hexdigest()


@pytest.mark.slow
def test_a_killed_server_runs_every_accepted_delivery_exactly_once(tmp_path: Path) -> None:
    db, effects = tmp_path / "killed.db", tmp_path / "effects.log"
    started, hold = tmp_path / "started.log", tmp_path / "release"
    accepted: set[str] = set()
    proc, url = start(db, effects=effects, started=started, hold=hold)  # every `ship` is held

    async def send_all(url: str, record: bool) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:

            async def one(n: int) -> None:
                body, headers = delivery(n)
                try:
                    response = await client.post("/hooks/orders", content=body, headers=headers)
                except httpx.HTTPError:
                    return  # the server died mid-request: not acknowledged
                if response.status_code == 202 and record:
                    accepted.add(f"delivery-{n}")

            await asyncio.gather(*(one(n) for n in range(40)))

    async def first_round() -> None:
        sender = asyncio.ensure_future(send_all(url, record=True))
        await wait_for_line(started, "started")  # a run is in flight, held inside its tool call
        await until(lambda: accepted, what="an acknowledged delivery")
        os.kill(proc.pid, signal.SIGKILL)
        await sender

    asyncio.run(first_round())
    proc.wait(timeout=30)
    assert accepted, "no delivery was acknowledged before the kill"
    hold.touch()  # the restarted server's calls run through
    proc, url = start(db, effects=effects, hold=hold)
    try:
        asyncio.run(send_all(url, record=False))  # the senders retry everything

        async def wait_all() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                found: list[Any] = (
                    await client.post("/log/threads/search", json={"limit": 100})
                ).json()
                for thread in found:
                    runs = (await client.get(f"/log/threads/{thread['thread_id']}/runs")).json()
                    for run in runs:
                        await client.get(
                            f"/log/threads/{thread['thread_id']}/runs/{run['run_id']}/join"
                        )

        asyncio.run(wait_all())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)

    async def check() -> None:
        async with SQLiteEventStore(db) as store:
            triggers = [
                r.event async for r in store.read("__runtime__") if r.kind == "trigger_accepted"
            ]
            keys = Counter(t.idempotency_key for t in triggers)
            assert all(count == 1 for count in keys.values()), keys
            assert accepted <= set(keys), "an acknowledged delivery was lost"
            finished = Counter(
                [
                    r.event.trigger_id
                    async for r in store.read("__runtime__")
                    if r.kind == "trigger_finished" and r.event.outcome == "completed"
                ]
            )
            dispatches = Counter(
                [
                    r.event.trigger_id
                    async for r in store.read("__runtime__")
                    if r.kind == "trigger_dispatched"
                ]
            )
            assert max(dispatches.values()) > 1, "the kill found no run in flight"
            for trigger in triggers:
                assert finished[trigger.trigger_id] == 1, trigger.idempotency_key
                assert (await store.verify(trigger.thread_id)).ok
                kinds = [r.kind async for r in store.read(trigger.thread_id)]
                assert kinds.count("run_completed") == 1

    asyncio.run(check())


UNSIGNED_APP = """
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from tests.helpers import line


def reply(state):
    return {}


def build(store):
    runtime = AgentRuntime(store)
    runtime.add_graph("g", line(("reply", reply)).compile(store))
    runtime.register_entry_point(
        EntryPoint(id="local", graph_id="g", trigger="webhook", path="/hooks/local", unsigned=True)
    )
    return runtime
"""


def test_serve_refuses_an_unsigned_webhook_route_on_a_public_address(tmp_path: Path) -> None:
    (tmp_path / "unsigned_app.py").write_text(UNSIGNED_APP)
    tokens = tmp_path / "tokens.json"
    entry = {"name": "ops", "sha256": "0" * 64, "graphs": ["*"], "rights": ["admin"]}
    tokens.write_text(json.dumps({"tokens": [entry]}))
    db = tmp_path / "public.db"
    result = agentlog(
        "serve", "--db", db, "--app", "unsigned_app:build", "--host", "0.0.0.0", "--port", "0",
        "--tokens", tokens, PYTHONPATH=f"{ROOT}:{tmp_path}",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "unsigned webhook route(s) local" in result.stderr
    assert "--host" in result.stderr and "Traceback" not in result.stderr

    async def nothing_written() -> None:
        async with SQLiteEventStore(db) as store:
            assert await store.threads() == []

    asyncio.run(nothing_written())


def test_serve_refuses_bad_options_and_a_taken_port_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "opts.db"
    for option, value in (("--port", "70000"), ("--max-body", "0")):
        result = agentlog("serve", "--db", db, "--app", APP, option, value)
        assert result.returncode == 2, result.stderr
        assert option in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = agentlog("serve", "--db", db, "--app", APP, "--port", str(port))
    assert result.returncode == 1, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not db.exists()


def test_serve_help_names_the_token_environment_variable() -> None:
    result = agentlog("serve", "--help", columns=200)
    assert result.returncode == 0
    assert "AGENTLOG_TOKENS_FILE" in result.stdout and "--tokens" in result.stdout
