"""The `agentlog` command, run as a real subprocess on real database files."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from agentlog.events import SQLiteEventStore
from agentlog.projections import replay

ROOT = Path(__file__).resolve().parent.parent


def agentlog(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from agentlog.actors.cli import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )


def test_version_and_help() -> None:
    version = agentlog("--version")
    assert version.returncode == 0 and version.stdout.startswith("agentlog 0.")
    helptext = agentlog("--help")
    assert helptext.returncode == 0 and "demo" in helptext.stdout


def test_demo_streams_pauses_for_approval_and_replays(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    done = agentlog("demo", "--db", str(db))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("lookup_order") < out.index("paused before 'refund'") < out.index("approved")
    assert "RF-A-1042" in out and "status=completed" in out and "verified: ok" in out
    for kind in (
        "node_entered",
        "tool_call_finished",
        "interrupt_raised",
        "resumed",
        "run_completed",
    ):
        assert kind in out


def test_demo_json_matches_the_log(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    done = agentlog("demo", "--db", str(db), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verified"] is True
    kinds = [e["kind"] for e in report["events"]]
    assert kinds[0] == "run_started" and kinds[-1] == "run_completed"
    assert kinds.count("tool_call_started") == kinds.count("tool_call_finished") == 2
    assert kinds.index("interrupt_raised") < kinds.index("resumed")

    async def read() -> list[object]:
        async with SQLiteEventStore(db) as store:
            return [r async for r in store.read(report["thread_id"])]

    records = asyncio.run(read())
    assert [r.hash for r in records] == [e["hash"] for e in report["events"]]  # type: ignore[attr-defined]
    assert replay(records).model_dump(mode="json") == report["state"]  # type: ignore[arg-type]


def test_demo_appends_a_new_thread_each_run(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    first = json.loads(agentlog("demo", "--db", str(db), "--json").stdout)
    second = json.loads(agentlog("demo", "--db", str(db), "--json").stdout)
    assert first["thread_id"] != second["thread_id"]


def test_demo_on_a_file_that_is_not_a_database_fails_cleanly(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    failed = agentlog("demo", "--db", str(notes))
    assert failed.returncode == 1
    assert "not an agentlog database" in failed.stderr and "Traceback" not in failed.stderr
    assert notes.read_text() == "not a database\n"
