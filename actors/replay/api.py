"""The public calls of replay tests: sources (a log, exports), the report, `replay_test`."""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agentlog.actors.engine.threads import internal_threads
from agentlog.actors.replay.compare import Allowed
from agentlog.actors.replay.runner import ThreadResult, replay_records
from agentlog.events import EventRecord, EventStore, open_store
from agentlog.events.codec import Row, decode_row
from agentlog.events.errors import AgentlogError
from agentlog.events.names import inert
from agentlog.events.verify_export import verify


class ReplaySourceError(AgentlogError):
    """What a replay test was pointed at cannot be read: no such app, no log, a broken
    export. Raised before any thread is replayed."""


@dataclass
class ReplayReport:
    """Every thread's result; `ok` when none diverged."""

    threads: list[ThreadResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(t.status != "diverged" for t in self.threads)

    @property
    def steps(self) -> int:
        """The steps replayed and compared, over all threads."""
        return sum(t.steps for t in self.threads)

    def as_json(self) -> dict[str, Any]:
        """The report as plain JSON: totals and one entry per thread."""
        counts = {s: sum(t.status == s for t in self.threads) for s in ("same", "diverged")}
        skipped = sum(t.status == "skipped" for t in self.threads)
        return {
            "ok": self.ok,
            "threads": len(self.threads),
            **counts,
            "skipped": skipped,
            "steps": self.steps,
            "results": [asdict(t) for t in self.threads],
        }

    def render(self) -> str:
        """The report for a person: one line per thread, each divergence in full. Stored
        text (ids, node names, a fingerprint's parts, the diff) is shown inert, so a value in
        the log can neither forge a line of the report nor reach the terminal as an escape."""
        lines: list[str] = []
        for t in self.threads:
            if t.status == "same":
                lines.append(f"same      {t.thread_id!r} ({t.steps} steps)")
            elif t.status == "skipped":
                lines.append(f"skipped   {t.thread_id!r}: {inert(str(t.reason))}")
            elif t.divergence is not None:
                d = t.divergence
                lines.append(
                    f"DIVERGED  {t.thread_id!r} run {d.run} ({inert(str(d.run_id))}) "
                    f"step {d.step} node {d.node!r}: {inert(d.cause)}"
                )
                lines.append(f"  {inert(d.detail)}")
                lines += [f"  code changed: {inert(part)}" for part in d.changed]
                lines += [f"  {inert(line, body=True)}" for line in d.diff.split("\n")]
        data = self.as_json()
        lines.append(
            f"{data['threads']} threads: {data['same']} same, {data['diverged']} diverged, "
            f"{data['skipped']} skipped; {data['steps']} steps compared"
        )
        return "\n".join(lines)


def load_app(ref: str) -> Any:
    """The object `module:attribute` names (a graph, a compiled graph, or a function
    returning one), the module imported from the working directory as `python -m` would."""
    module_name, _, attribute = ref.partition(":")
    if not module_name or not attribute:
        raise ReplaySourceError(f"--app takes MODULE:ATTRIBUTE, got {ref!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ReplaySourceError(f"cannot import {module_name!r} ({exc})") from exc
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ReplaySourceError(f"{module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    return target


def read_export(path: str | os.PathLike[str]) -> list[EventRecord]:
    """The records of a JSONL export (`agentlog export`), its hash chain verified first."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ReplaySourceError(f"cannot read export {os.fspath(path)!r}: {exc}") from exc
    lines = text.splitlines()
    outcome = verify(lines, None)
    if not outcome.startswith("ok"):
        raise ReplaySourceError(f"export {os.fspath(path)!r} does not verify: {outcome}")
    records = []
    for line in lines:
        if not line.strip():
            continue
        data = json.loads(line)
        row = Row(
            data["thread_id"], data["seq"], data["run_id"], data["actor"], data["at"],
            data["kind"], data["version"], base64.b64decode(data["payload_b64"]),
            bytes.fromhex(data["hash"]), data["position"],
        )  # fmt: skip
        records.append(decode_row(row))
    return records


def _export_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            files += sorted(path.glob("*.jsonl"))
        elif path.exists():
            files.append(path)
        else:
            raise ReplaySourceError(f"no export at {os.fspath(path)!r}")
    return files


def _since(value: str | float | None) -> float | None:
    if value is None or isinstance(value, int | float):
        return value
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise ReplaySourceError(
            f"--since takes an ISO date or time (2026-01-31, 2026-01-31T12:00) or epoch "
            f"seconds, got {value!r}"
        ) from None


async def _from_store(
    store: EventStore, threads: Sequence[str], since: float | None, limit: int | None
) -> AsyncIterator[list[EventRecord]]:
    listed = threads or await store.threads()
    own = await internal_threads(store, listed)
    taken = 0
    for thread_id in listed:
        if thread_id in own or (limit is not None and taken >= limit):
            continue
        records = [r async for r in store.read(thread_id)]
        if not records or (since is not None and records[-1].at < since):
            continue
        taken += 1
        yield records


async def replay_test(
    app: Any,
    *,
    db: str | None = None,
    store: EventStore | None = None,
    exports: Sequence[str | os.PathLike[str]] = (),
    threads: Sequence[str] = (),
    since: str | float | None = None,
    limit: int | None = None,
    allowed: Allowed | None = None,
    from_step: int | None = None,
) -> ReplayReport:
    """Replay the recorded threads of a log (`db`: a path or URL; or an open `store`) or of
    JSONL exports (`exports`: files or folders of them) under the graph `app` (an object,
    or `module:attribute`); `threads` picks some, `since` those active since then, `limit`
    at most so many; `from_step` starts each thread from the log's state after that step.
    `ReplaySourceError` when the app or the source cannot be read."""
    target = load_app(app) if isinstance(app, str) else app
    if sum(x is not None and x != () for x in (db, store, tuple(exports) or None)) != 1:
        raise ReplaySourceError("give one source: db=, store= or exports=")
    report = ReplayReport()
    cutoff = _since(since)

    async def replay(records: list[EventRecord]) -> ThreadResult:
        return await replay_records(target, records, allowed, from_step=from_step)

    if exports:
        for path in _export_files(exports)[: limit if limit is not None else None]:
            records = read_export(path)
            if records and (not threads or records[0].thread_id in threads):
                report.threads.append(
                    await replay_records(target, records, allowed, from_step=from_step)
                )
        return report
    opened = store if store is not None else open_store(str(db), readonly=True, create=False)
    try:
        if store is None:
            await opened.__aenter__()
        async for records in _from_store(opened, threads, cutoff, limit):
            report.threads.append(
                await replay_records(target, records, allowed, from_step=from_step)
            )
    finally:
        if store is None:
            await opened.__aexit__(None, None, None)
    return report


def replay_test_sync(app: Any, **kwargs: Any) -> ReplayReport:
    """`replay_test` for code without an event loop (a CI script, a pytest test)."""
    return asyncio.run(replay_test(app, **kwargs))
