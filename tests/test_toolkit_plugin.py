"""The pytest plugin, as a user's own test suite meets it: a real pytest run in a subprocess."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import QUIET_PYTEST, ROOT

USER_TESTS = """
import pytest
from agentlog.actors.examples.support import support_graph


@pytest.fixture
def agentlog_graph():
    return support_graph


def test_sync_run_replays(agentlog_app, agentlog_assert_replays):
    agentlog_app.invoke("refund please", {"thread_id": "t"})
    agentlog_app.invoke(None, {"thread_id": "t"})  # approved
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
        [sys.executable, "-m", "pytest", "-q", *QUIET_PYTEST, "-p", "no:xdist",
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


def test_the_plugin_is_an_entry_point_that_imports_nothing_of_agentlog() -> None:
    """pytest loads the plugin in every session of an environment with agentlog installed:
    it must not load the engine, the state models or pydantic until a fixture is used."""
    from importlib.metadata import entry_points

    assert [e.value for e in entry_points(group="pytest11") if e.name == "agentlog"] == [
        "agentlog.actors.testing.plugin"
    ]
    code = (
        "import sys\n"
        "import agentlog.actors.testing.plugin\n"
        "ours = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('agentlog', 'pydantic', 'hypothesis'))\n"
        "assert ours == ['agentlog', 'agentlog.actors', 'agentlog.actors.testing', "
        "'agentlog.actors.testing.plugin', 'agentlog.lazy'], ours\n"
        "import agentlog.actors.testing\n"
        "assert agentlog.actors.testing.ScriptedModel.__name__ == 'ScriptedModel'\n"
        "assert 'hypothesis' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    """docs/testing.md, followed literally in a fresh directory: the demo agent passes, the
    broken variant fails with its invariant, the plugin's tests pass, and the test the
    failure prints, pasted into a file, fails the same way."""
    doc = (ROOT / "docs" / "testing.md").read_text()
    written = []
    for block in re.findall(r"```python\n(.*?)```", doc, re.S):
        first = block.splitlines()[0]
        if first.startswith("# tests/"):
            path = tmp_path / first[2:].strip()
            path.parent.mkdir(exist_ok=True)
            path.write_text(block)
            written.append(path.name)
    assert written == [
        "test_support_properties.py",
        "test_refund_properties.py",
        "test_support_flow.py",
    ]
    command = [sys.executable, "-m", "pytest", "-q", *QUIET_PYTEST, "-p", "no:xdist",
               "--hypothesis-seed=0"]  # fmt: skip
    ran = subprocess.run(
        [*command, "tests"], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    out = ran.stdout
    assert ran.returncode == 1, out + ran.stderr
    assert "1 failed, 3 passed" in out, out
    assert "broken: the user's invariant refund_within_total" in out
    printed = out.split("As a test that fails the same way (paste it into a test file):\n")[1]
    lines = []
    for line in printed.splitlines()[1:]:
        text = line.removeprefix("E")
        if text.strip().startswith("Failing test case"):
            break
        lines.append(text)
    # pytest indents the message by how deeply the failure is nested (a hypothesis report
    # of a flaky or multiple failure adds a level): take the block's own indentation off
    pasted_text = textwrap.dedent("\n".join(lines))
    (tmp_path / "tests" / "test_pasted.py").write_text(pasted_text.strip("\n") + "\n")
    pasted = subprocess.run(
        [*command, "tests/test_pasted.py"], capture_output=True, text=True, timeout=120,
        cwd=tmp_path,
    )  # fmt: skip
    assert pasted.returncode == 1, pasted_text + pasted.stdout + pasted.stderr
    assert "assert refund_within_total(state) is not False" in pasted.stdout
