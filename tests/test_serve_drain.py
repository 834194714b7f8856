"""`agentlog serve` as an operator meets it: SIGTERM with an event stream open ends the
stream at once and exits cleanly (no waiting out the drain, no traceback); a second server
on the same file is refused in one line; a malformed token file says what it must hold."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import httpx

from agentlog.actors.cli.serve import DRAIN_S
from tests.helpers import agentlog
from tests.test_cli_serve import APP, start


def test_sigterm_with_an_open_stream_ends_it_at_once(tmp_path: Path) -> None:
    proc, url = start(tmp_path / "drain.db")
    first = threading.Event()
    ended: list[str] = []

    def follow() -> None:
        try:
            with httpx.stream("GET", f"{url}/threads/t/stream", timeout=120) as response:
                for line in response.iter_lines():
                    if line.startswith("id:"):
                        first.set()
            ended.append("eof")
        except httpx.HTTPError as exc:
            ended.append(type(exc).__name__)

    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            done = client.post(
                "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
            )
            assert done.status_code == 200, done.text
        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        assert first.wait(60), "the stream sent nothing"
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    reader.join(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert ended == ["eof"]  # the server ended the stream; the client saw a clean end
    assert "Traceback" not in err and "CancelledError" not in err, err[-2000:]
    assert took < DRAIN_S, f"the drain waited for the stream: {took:.1f}s"


def test_a_second_server_on_one_file_is_refused_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "one.db"
    proc, _ = start(db)
    try:
        second = agentlog("serve", "--db", db, "--app", APP, "--port", "0")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    assert second.returncode == 1, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert "another runtime runs on this store" in lines[0]
    assert second.stdout == ""  # it never said it was serving


def test_a_token_file_without_tokens_says_what_it_must_hold(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": []}))
    result = agentlog(
        "serve", "--db", tmp_path / "t.db", "--app", APP, "--port", "0", "--tokens", tokens
    )
    assert result.returncode == 1
    said = result.stderr.strip()
    assert len(said.splitlines()) == 1
    assert '"sha256"' in said and '"rights"' in said and said.endswith("]}")
