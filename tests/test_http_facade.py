"""The HTTP layer is a thin shell over the runtime facade: no module of `actors/http` uses a
private name (`_x`) of another module or reaches into the runtime's internals (its ledger,
dispatcher, listeners, journal, graphs' compiled apps, store, config), and each stays under
the 600-line budget."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import agentlog.actors.http as http

HTTP = Path(http.__file__).resolve().parent
MODULES = sorted(HTTP.rglob("*.py"))
INTERNALS = {"ledger", "dispatcher", "listeners", "journal", "graphs", "store", "config"}
"""Attributes of the runtime a route would read to bypass the facade."""
INTERNAL_MODULES = (
    "agentlog.actors.runtime.ledger",
    "agentlog.actors.runtime.dispatch",
    "agentlog.actors.runtime.listeners",
    "agentlog.actors.runtime.journal",
    "agentlog.actors.engine.journal",
    "agentlog.actors.engine.threads",
    "agentlog.events.follow",
    "agentlog.events.codec",
)


def name(path: Path) -> str:
    return str(path.relative_to(HTTP.parent))


def test_there_are_modules_to_check() -> None:
    assert {"app.py", "shapes.py"} <= {p.name for p in MODULES}
    assert any(p.parent.name == "routes" for p in MODULES)


@pytest.mark.parametrize("path", MODULES, ids=name)
def test_no_private_name_of_another_module_and_no_runtime_internal(path: Path) -> None:
    tree = ast.parse(path.read_text())
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(INTERNAL_MODULES):
                found.append(f"line {node.lineno}: imports {node.module}")
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"line {node.lineno}: imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            if private and owner not in ("self", "cls"):
                found.append(f"line {node.lineno}: .{node.attr}")
            if node.attr in INTERNALS and owner in ("runtime", "rt"):
                found.append(f"line {node.lineno}: {owner}.{node.attr}")
    assert not found, f"{name(path)} reaches past the runtime facade: {found}"


@pytest.mark.parametrize("path", MODULES, ids=name)
def test_each_module_is_under_600_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) < 600
