"""Argument descriptions read from a tool function's docstring."""

from __future__ import annotations

import re

_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def args_section(doc: str) -> dict[str, str]:
    """Per-parameter descriptions from a Google-style `Args:` section."""
    found: dict[str, str] = {}
    lines = doc.splitlines()
    start = next((i for i, s in enumerate(lines) if s.strip() in ("Args:", "Arguments:")), -1)
    if start < 0:
        return found
    header_indent = len(lines[start]) - len(lines[start].lstrip())
    entry_indent: int | None = None
    current: str | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= header_indent:
            break
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE.match(line.strip())
        if indent == entry_indent and match:
            current = match.group(1)
            found[current] = match.group(2).strip()
        elif current is not None:
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found
