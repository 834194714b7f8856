"""The guards `make lint` runs: the import contracts and the 600-line budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import line_budget  # noqa: E402


def test_the_budget_names_a_new_long_module_and_a_grown_or_shrunk_listed_one() -> None:
    found = {"a.py": 601, "b.py": 700, "c.py": 650, "d.py": 10, "e.py": 800}
    listed = {"b.py": 700, "c.py": 640, "e.py": 900, "gone.py": 700}
    said = line_budget.problems(found, listed)
    assert said == [
        "a.py: 601 lines, over the 600-line budget: split it",
        "c.py: 650 lines, more than its listed 640: split it",
        "e.py: 800 lines, under its listed 900: lower the list "
        "(python tools/line_budget.py --update)",
        "gone.py: listed but gone: drop it (python tools/line_budget.py --update)",
    ]


def test_the_tree_keeps_its_budget() -> None:
    assert line_budget.problems(line_budget.sizes(), line_budget.allowed()) == []


def test_the_tree_keeps_its_import_contracts() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
