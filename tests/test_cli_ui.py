"""`agentlog ui --db FILE`: the viewer on an existing database, read-only, on loopback."""

from __future__ import annotations

import hashlib
import json
import select
import subprocess
import sys
from pathlib import Path

import httpx

from tests.helpers import ROOT

CLI = [sys.executable, "-c", "from agentlog.actors.cli import main; main()"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_ui_serves_a_database_read_only(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    made = subprocess.run(
        [*CLI, "demo", "--db", str(db), "--json"], cwd=ROOT, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr[-2000:]
    thread = json.loads(made.stdout)["thread_id"]
    before = digest(db)
    proc = subprocess.Popen(
        [*CLI, "ui", "--db", str(db), "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("{"), (line, proc.stderr)
        url = json.loads(line)["serving"]
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, timeout=30) as http:
            assert http.get("/ui").status_code == 200
            listed = http.post("/log/threads/search", json={}).json()
            assert [t["thread_id"] for t in listed] == [thread]
            assert listed[0]["status"] == "completed"
            assert http.get(f"/log/threads/{thread}/state/2").json()["step"] == 2
            assert http.get(f"/log/threads/{thread}/verify").json()["ok"] is True
            fork = http.post(f"/log/threads/{thread}/copy", json={"step": 2})
            assert fork.status_code == 403, fork.text
            run = http.post(
                f"/log/threads/{thread}/runs", json={"assistant_id": "x", "input": "hi"}
            )
            assert run.status_code in (403, 404), run.text
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert digest(db) == before  # not a byte written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.db"]  # no -wal, no -shm left


def test_ui_refuses_a_missing_database_and_creates_none(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    ran = subprocess.run(
        [*CLI, "ui", "--db", str(missing), "--port", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 1
    assert "no database at" in ran.stderr
    assert not missing.exists()
