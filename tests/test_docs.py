"""Every Python block of README.md and docs/**/*.md runs, and passes.

Each page is one test: its ```python blocks run in order in one namespace (a later block
uses what an earlier one defined, as a reader would), in a fresh temporary directory, with
top-level `await` and `async with` allowed (one event loop per page). Blocks are found by
Sybil's Markdown parser. A block that cannot run here is preceded by
`<!-- skip: next "the reason" -->`: the reason is required, and such blocks are reported
as skipped. Shell listings (``` or ```bash blocks) are not run.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import re
import unittest
from pathlib import Path
from typing import Any

import pytest
from sybil import Document, Example
from sybil.parsers.markdown import CodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


class PageEvaluator:
    """Runs a block in the page's namespace; a block with top-level await runs on the page's
    own event loop (so a store opened in one block serves the next)."""

    def __init__(self, runner: asyncio.Runner) -> None:
        self.runner = runner

    def __call__(self, example: Example) -> None:
        source = "\n" * (example.line + example.parsed.line_offset) + example.parsed
        code = compile(
            source,
            example.path,
            "exec",
            flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
            dont_inherit=True,
        )
        if code.co_flags & inspect.CO_COROUTINE:
            self.runner.run(eval(code, example.namespace))
        else:
            exec(code, example.namespace)


async def _close_stores(namespace: dict[str, Any]) -> None:
    """Close what the page left open (graphs first, then stores), as a program would."""
    from agentlog.actors import CompiledGraph
    from agentlog.events import EventStore

    values = [value for value in namespace.values() if not isinstance(value, type)]
    for value in values:
        if isinstance(value, CompiledGraph):
            await value.aclose()
    for value in values:
        if isinstance(value, EventStore):
            await value.close()


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_every_page_is_found() -> None:
    """The pages the site and the README are made of are the ones tested."""
    names = {_page_id(page) for page in PAGES}
    assert {"README.md", "docs/index.md", "docs/tutorial.md"} <= names, names


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    skipped: list[str] = []
    ran = 0
    with asyncio.Runner() as runner:
        document = Document.parse(
            str(page),
            CodeBlockParser(language="python", evaluator=PageEvaluator(runner)),
            SkipParser(),
        )
        try:
            for example in document:
                if isinstance(example.parsed, tuple):  # a skip directive: (action, reason)
                    action, reason = example.parsed
                    assert action != "next" or reason, (
                        f"{_page_id(page)} line {example.line}: a skipped block needs its "
                        'reason: <!-- skip: next "why it cannot run here" -->'
                    )
                try:
                    example.evaluate()
                except unittest.SkipTest as skip:
                    skipped.append(f"line {example.line}: {skip}")
                    continue
                except BaseException as error:
                    error.add_note(f"in the block at {_page_id(page)} line {example.line}")
                    raise
                if not isinstance(example.parsed, tuple):
                    ran += 1
        finally:
            runner.run(_close_stores(document.namespace))
    if skipped:
        print(f"{_page_id(page)}: {ran} blocks ran, skipped: {'; '.join(skipped)}")


NAMED_PATH = re.compile(
    r"`((?:actors|events|projections|tests|bench|tools)/[\w./-]*\.(?:py|md|json|txt))"
)


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_file_a_page_names_exists(page: Path) -> None:
    """A page that points at `actors/engine/steps.py` is pointing at a file that is there, so
    a move of the code shows up here rather than in a reader's confusion."""
    named = set(NAMED_PATH.findall(page.read_text()))
    assert not {path for path in named if not (ROOT / path).exists()}


NAMED_OBJECT = re.compile(r"`(agentlog(?:\.\w+)+)")


def _resolves(name: str) -> bool:
    """Whether a dotted name is an importable module or an attribute of one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_name_a_page_gives_exists(page: Path) -> None:
    """`agentlog.actors.engine.ending.closing_events` in a page is a name a reader can import."""
    named = set(NAMED_OBJECT.findall(page.read_text()))
    assert not {name for name in named if not _resolves(name)}


SKIP = re.compile(r"<!--\s*skip:\s*next\s+(.*?)\s*-->")
SKIPS_ALLOWED = 2
"""Blocks that may not run here (a real model's API, a remote database): very few."""


def test_few_blocks_are_skipped() -> None:
    """A block that cannot run says why, and such blocks stay the exception."""
    skips = [
        f"{_page_id(page)}: {reason}" for page in PAGES for reason in SKIP.findall(page.read_text())
    ]
    assert len(skips) <= SKIPS_ALLOWED, "\n".join(skips)
