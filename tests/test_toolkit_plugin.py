"""The pytest plugin, as a user's own test suite meets it: a real pytest run in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

USER_TESTS = """
import pytest
from actors.cli.demo import support_graph
from actors import Command


@pytest.fixture
def agentlog_graph():
    return support_graph


def test_sync_run_replays(agentlog_app, agentlog_assert_replays):
    agentlog_app.invoke("refund please", {"thread_id": "t"})
    agentlog_app.invoke(Command(resume="ok"), {"thread_id": "t"})
    state = agentlog_assert_replays(agentlog_app, "t")
    assert state.execution_meta.status.value == "completed"


async def test_async_run_replays(agentlog_app, agentlog_assert_replays):
    await agentlog_app.ainvoke("refund please", {"thread_id": "a"})
    state = await agentlog_assert_replays.async_(agentlog_app, "a")
    assert state.is_interrupted()
    assert agentlog_app.store.files()  # SQLite by default


class TestInMemory:
    @pytest.fixture
    def agentlog_store_kind(self):
        return "memory"

    def test_memory_store_on_request(self, agentlog_app):
        assert agentlog_app.store.files() == []

    def test_a_tampered_thread_fails_the_assertion(self, agentlog_app, agentlog_assert_replays):
        agentlog_app.invoke("refund please", {"thread_id": "x"})
        rows = agentlog_app.store._threads["x"]
        rows[1] = rows[1]._replace(payload=rows[1].payload.replace(b"refund", b"rEfund"))
        with pytest.raises(AssertionError, match="does not verify"):
            agentlog_assert_replays(agentlog_app, "x")
"""

NO_GRAPH = """
def test_needs_a_graph(agentlog_app):
    pass
"""


def run_pytest(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user.py").write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-o", "asyncio_mode=auto", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip


def test_the_fixtures_work_in_sync_and_async_tests(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, USER_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout


def test_a_missing_graph_fixture_says_what_to_define(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, NO_GRAPH)
    assert result.returncode != 0
    assert "define a fixture named agentlog_graph" in result.stdout + result.stderr
