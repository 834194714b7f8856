"""Logging that tells the story: an info line per run started, resumed, paused or ended and
a debug line per other committed record, under `agentlog.runs` with structured fields; and
`agentlog serve --log-level info --log-json`, whose stderr holds one JSON object per line:
the runs' lines and an access line per request, with one handler however often it is set
up."""

from __future__ import annotations

import io
import json
import logging
import signal
from pathlib import Path

import httpx
import pytest

from agentlog.actors import Command
from agentlog.actors.cli.logs import setup_logging
from agentlog.events import MemoryEventStore
from tests.test_cli_serve import start
from tests.test_otel_spans import failing_graph


async def test_a_line_per_run_start_and_end_and_a_debug_line_per_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentlog.runs")
    async with MemoryEventStore() as store:
        app = failing_graph(store)
        await app.ainvoke("where is Z-9?", {"thread_id": "t"})
        await app.ainvoke(Command(resume="yes"), {"thread_id": "t"})
        records = [r async for r in store.read("t")]
    ours = [r for r in caplog.records if r.name == "agentlog.runs"]
    infos = [(r.kind, r.seq) for r in ours if r.levelno == logging.INFO]  # type: ignore[attr-defined]
    assert [kind for kind, _ in infos] == [
        "run_started",
        "interrupt_raised",
        "resumed",
        "run_completed",
    ]
    debug = [r for r in ours if r.levelno == logging.DEBUG]
    assert len(debug) + len(infos) == len(records)  # every committed record, once
    assert {r.seq for r in ours} == {r.seq for r in records}  # type: ignore[attr-defined]
    entered = [r for r in debug if r.kind == "node_entered"]  # type: ignore[attr-defined]
    assert [r.node for r in entered] == ["agent", "tools", "agent", "approve", "approve"]  # type: ignore[attr-defined]
    assert all(r.thread_id == "t" and r.run_id for r in ours)  # type: ignore[attr-defined]


def test_setting_up_twice_leaves_one_handler_and_json_lines_carry_the_fields() -> None:
    first, second = io.StringIO(), io.StringIO()
    try:
        setup_logging("info", True, first)
        setup_logging("info", True, second)
        logging.getLogger("agentlog.runs").info(
            "run %s", "r1", extra={"thread_id": "t\nforged", "seq": 3}
        )
    finally:
        for name in ("agentlog", "uvicorn"):
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.propagate, logger.level = True, logging.NOTSET
    assert first.getvalue() == ""
    (line,) = second.getvalue().splitlines()  # a newline in a field stays inside its JSON
    data = json.loads(line)
    assert (data["message"], data["thread_id"], data["seq"]) == ("run r1", "t\nforged", 3)
    assert (data["level"], data["logger"]) == ("info", "agentlog.runs")


def test_serve_logs_runs_and_requests_as_json_lines(tmp_path: Path) -> None:
    proc, url = start(tmp_path / "serve.db", "--log-level", "info", "--log-json")
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            done = client.post("/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"})
            assert done.json()["status"] == "completed"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert len(lines) == len(err.splitlines()), err[-2000:]  # nothing but JSON lines
    runs = [line for line in lines if line["logger"] == "agentlog.runs"]
    assert [line["kind"] for line in runs] == ["run_started", "run_completed"]
    assert all(line["thread_id"] == "t" for line in runs)
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert any("POST /threads/t/runs/wait" in line["message"] for line in access), access
