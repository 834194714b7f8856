"""LangGraph's own programs run on agentlog with only their import lines changed.

Each program in tests/langgraph_programs/ is written for LangGraph. It runs twice in this
test: as written, in LangGraph's pinned virtual environment (bench/venvs.py makes it;
`make test` does so first), and ported (each `from langgraph... import X` line turned into
`from agentlog.langgraph import X`, nothing else) in agentlog's. Both must print the same.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "langgraph_programs"
PEER = ROOT / ".bench-venvs" / "langgraph" / "bin" / "python"
IMPORT = re.compile(r"^from langgraph(\.[\w.]+)? import (.+)$", re.M)
NAMES = sorted(p.stem for p in PROGRAMS.glob("*.py") if p.stem != "scripted")


def port(source: str) -> str:
    """The program with each LangGraph import line taken from `agentlog.langgraph`."""
    return IMPORT.sub(r"from agentlog.langgraph import \2", source)


def run(python: Path | str, program: Path) -> str:
    ran = subprocess.run(
        [str(python), program.name],
        cwd=program.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert ran.returncode == 0, f"{program} failed:\n{ran.stdout[-2000:]}\n{ran.stderr[-4000:]}"
    return ran.stdout


@pytest.fixture(scope="module")
def peer() -> Path:
    if not PEER.exists():
        if os.environ.get("AGENTLOG_PEERS") == "required":
            pytest.fail(
                f"LangGraph's venv is missing: run `{sys.executable} bench/venvs.py langgraph`"
            )
        pytest.skip("LangGraph's venv is missing: `make test` makes it (bench/venvs.py langgraph)")
    return PEER


def test_the_port_changes_only_import_lines() -> None:
    for name in NAMES:
        source = (PROGRAMS / f"{name}.py").read_text()
        changed = [
            line
            for line in difflib.ndiff(source.splitlines(), port(source).splitlines())
            if line.startswith(("- ", "+ "))
        ]
        assert changed, f"{name} imports nothing from langgraph"
        assert all(" import " in line and "from " in line for line in changed), changed


@pytest.mark.parametrize("name", NAMES)
def test_a_langgraph_program_prints_the_same_on_agentlog(
    name: str, peer: Path, tmp_path: Path
) -> None:
    original = PROGRAMS / f"{name}.py"
    expected = run(peer, original)
    shutil.copy(PROGRAMS / "scripted.py", tmp_path / "scripted.py")
    ported = tmp_path / original.name
    ported.write_text(port(original.read_text()))
    assert run(sys.executable, ported) == expected
