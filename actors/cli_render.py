"""What the `agentlog` commands print: rich tables for people, plain dicts for `--json`.

Functions of what the library returns, and the progress bars; the commands in `actors.cli`
read the store. Text that comes from the log (messages, ids, values) is never read as rich
markup.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from events import EventRecord, VerifyReport
from projections import (
    AgentState,
    EventRow,
    Message,
    StateDiff,
    StopRequestStatus,
    summarize,
    to_builtins,
)
from projections.timetravel import interrupt_summary

TABLE_ROWS = 2000
"""Past this many rows a timeline prints as plain aligned lines rather than a rich table."""

BUILTIN_FIELDS = ("context", "execution_meta")
"""AgentState fields shown on their own; every other field is a custom field."""


def iso(at: float) -> str:
    """A record's time as ISO 8601 in UTC, to the millisecond."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _value(value: Any) -> str:
    """A field value in one line of JSON (falls back to str for what JSON cannot hold)."""
    return json.dumps(to_builtins(value), ensure_ascii=False, default=str)


def _table(title: str, *columns: str) -> Table:
    table = Table(title=Text(title), title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


# ---- progress --------------------------------------------------------------------------


Progressed = Callable[[int, int], None]
"""`update(done, total)` of a progress bar."""


@contextmanager
def progress(console: Console, description: str) -> Iterator[Progressed]:
    """A transient progress bar on `console` when it is a terminal; yields its `update`."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(
        *columns,
        console=console,
        transient=True,
        disable=not console.is_terminal,
        redirect_stdout=False,  # an export streams to stdout meanwhile
        redirect_stderr=False,
    ) as bar:
        task = bar.add_task(escape(description), total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


class CountingWriter:
    """Passes an export's lines on to `out`, reporting their count every so often."""

    def __init__(self, out: IO[str], total: int, update: Progressed) -> None:
        self.out, self.total, self.update, self.lines = out, total, update, 0

    def write(self, text: str) -> int:
        written = self.out.write(text)
        self.lines += text.count("\n")
        if self.lines % 256 == 0 or self.lines == self.total:
            self.update(self.lines, self.total)
        return written


# ---- threads ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreadInfo:
    """One line of `agentlog threads`; `error` says in a few words why its state is unknown."""

    thread_id: str
    records: int
    last_activity: float
    status: str | None = None
    stop: str | None = None
    step: int | None = None
    node: str | None = None
    error: str | None = None

    @classmethod
    def of(cls, thread_id: str, records: int, at: float, state: AgentState) -> ThreadInfo:
        meta = state.execution_meta
        stop = meta.stop_current_execution
        return cls(
            thread_id,
            records,
            at,
            status=meta.status.value,
            stop=None if stop == StopRequestStatus.NONE else stop.value,
            step=meta.step,
            node=meta.current_node,
        )


def threads_json(infos: Sequence[ThreadInfo]) -> list[dict[str, Any]]:
    return [
        {
            "thread_id": i.thread_id,
            "status": i.status,
            "stop": i.stop,
            "step": i.step,
            "node": i.node,
            "records": i.records,
            "last_activity": i.last_activity,
            "error": i.error,
        }
        for i in infos
    ]


def threads_table(infos: Sequence[ThreadInfo]) -> Table:
    count = "1 thread" if len(infos) == 1 else f"{len(infos)} threads"
    table = _table(count, "thread", "status", "step", "node")
    table.add_column("records", justify="right")
    table.add_column("last activity (UTC)")
    for i in infos:
        if i.error is not None:
            status = Text(f"? ({i.error})", style="yellow")
        else:
            status = Text(i.status or "")
            if i.stop:
                status.append(f" ({i.stop})")
        step = "" if i.step is None else str(i.step)
        table.add_row(
            Text(i.thread_id),
            status,
            step,
            Text(i.node or ""),
            str(i.records),
            iso(i.last_activity),
        )
    return table


# ---- history ---------------------------------------------------------------------------


def history_json(rows: Sequence[EventRow]) -> list[dict[str, Any]]:
    return [
        {
            "seq": r.seq,
            "at": r.at,
            "kind": r.kind,
            "actor": r.actor,
            "node": r.node,
            "summary": r.summary,
        }
        for r in rows
    ]


def history_table(thread_id: str, rows: Sequence[EventRow]) -> Table:
    table = _table(f"thread {thread_id}: {len(rows)} events", "seq", "time (UTC)", "kind")
    table.columns[0].justify = "right"
    for column in ("actor", "node", "summary"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(
            str(r.seq), iso(r.at), r.kind, Text(r.actor or ""), Text(r.node or ""), Text(r.summary)
        )
    return table


def history_lines(thread_id: str, rows: Sequence[EventRow], chunk: int = 2048) -> Iterator[str]:
    """The timeline as aligned plain lines, a chunk at a time: a rich table of a long log
    takes a second per few thousand rows, these take a few milliseconds."""
    seq_w = max(3, len(str(max((r.seq for r in rows), default=0))))
    kind_w = max([4, *(len(r.kind) for r in rows)])
    actor_w = min(20, max([5, *(len(r.actor or "") for r in rows)]))
    node_w = min(20, max([4, *(len(r.node or "") for r in rows)]))
    head = (
        f"{'seq':>{seq_w}}  {'time (UTC)':<24}  {'kind':<{kind_w}}  "
        f"{'actor':<{actor_w}}  {'node':<{node_w}}  summary"
    )
    lines = [f"thread {thread_id}: {len(rows)} events", head]
    for r in rows:
        summary = " ".join(r.summary.split())
        lines.append(
            f"{r.seq:>{seq_w}}  {iso(r.at):<24}  {r.kind:<{kind_w}}  "
            f"{r.actor or '':<{actor_w}}  {r.node or '':<{node_w}}  {summary}"
        )
        if len(lines) >= chunk:
            yield "\n".join(lines)
            lines = []
    if lines:
        yield "\n".join(lines)


# ---- show ------------------------------------------------------------------------------


def message_json(message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json")


def message_line(message: Message) -> Text:
    """A message in one line: its text and the tools it calls."""
    text = Text(message.text() or "")
    calls = ", ".join(f"{c.name}({_value(c.args)})" for c in message.tool_calls())
    if calls:
        text.append(f" -> {calls}" if text else f"-> {calls}", style="cyan")
    return text


def _interrupt(state: AgentState) -> dict[str, Any] | None:
    return interrupt_summary(state.execution_meta)


def custom_fields(state: AgentState) -> dict[str, Any]:
    """The fields besides the messages and the execution metadata, as JSON builtins."""
    data = state.model_dump(mode="json")
    return {name: data[name] for name in type(state).model_fields if name not in BUILTIN_FIELDS}


def state_json(thread_id: str, seq: int, state: AgentState) -> dict[str, Any]:
    meta = state.execution_meta
    stop = meta.stop_current_execution
    return {
        "thread_id": thread_id,
        "seq": seq,
        "step": meta.step,
        "status": meta.status.value,
        "stop": None if stop == StopRequestStatus.NONE else stop.value,
        "node": meta.current_node,
        "interrupt": _interrupt(state),
        "messages": [message_json(m) for m in state.context],
        "fields": custom_fields(state),
        "state": state.model_dump(mode="json"),
    }


def state_view(thread_id: str, seq: int, state: AgentState) -> RenderableType:
    meta = state.execution_meta
    head = Text(f"thread {thread_id} at seq {seq}: ", style="bold")
    head.append(f"status={meta.status.value} step={meta.step} node={meta.current_node}")
    if meta.stop_current_execution != StopRequestStatus.NONE:
        head.append(f" stop={meta.stop_current_execution.value}")
    parts: list[RenderableType] = [head]
    interrupt = _interrupt(state)
    if interrupt is not None:
        line = Text("interrupt: ", style="yellow")
        line.append(f"{interrupt['status']} at {interrupt['node']!r} ({interrupt['reason']})")
        if interrupt["data"]:
            line.append(f" data={_value(interrupt['data'])}")
        parts.append(line)
    fields = custom_fields(state)
    if fields:
        table = _table("fields", "field", "value")
        for name, value in fields.items():
            table.add_row(name, Text(_value(value)))
        parts.append(table)
    messages = _table(f"{len(state.context)} messages", "#", "role", "id", "text")
    for n, message in enumerate(state.context, 1):
        messages.add_row(str(n), message.role, Text(str(message.message_id)), message_line(message))
    parts.append(messages)
    return Group(*parts)


# ---- diff ------------------------------------------------------------------------------


def diff_json(thread_id: str, a: int, b: int, by: str, d: StateDiff) -> dict[str, Any]:
    return {
        "thread_id": thread_id,
        "by": by,
        "a": a,
        "b": b,
        "a_seq": d.a_seq,
        "b_seq": d.b_seq,
        "empty": d.empty,
        "step": list(d.step),
        "status": None if d.status is None else list(d.status),
        "interrupt": None if d.interrupt is None else to_builtins(list(d.interrupt)),
        "fields": {name: to_builtins(list(pair)) for name, pair in d.fields.items()},
        "messages_added": [message_json(m) for m in d.messages_added],
        "messages_removed": [message_json(m) for m in d.messages_removed],
        "messages_changed": [[message_json(o), message_json(n)] for o, n in d.messages_changed],
    }


def diff_view(thread_id: str, a: int, b: int, by: str, d: StateDiff) -> RenderableType:
    title = f"thread {thread_id}: {by} {a} (seq {d.a_seq}) -> {by} {b} (seq {d.b_seq})"
    if d.empty:
        return Text(f"{title}: no change")
    table = _table(title, "what", "before", "after")
    if d.step[0] != d.step[1]:
        table.add_row("step", str(d.step[0]), str(d.step[1]))
    if d.status is not None:
        table.add_row("status", *d.status)
    if d.interrupt is not None:
        table.add_row("interrupt", *(Text(_value(i)) for i in d.interrupt))
    for name, (old, new) in d.fields.items():
        table.add_row(Text(name), Text(_value(old)), Text(_value(new)))
    for m in d.messages_added:
        table.add_row(f"+ {m.role} message", "", message_line(m))
    for m in d.messages_removed:
        table.add_row(f"- {m.role} message", message_line(m), "")
    for old_m, new_m in d.messages_changed:
        table.add_row(f"~ {new_m.role} message", message_line(old_m), message_line(new_m))
    return table


# ---- verify ----------------------------------------------------------------------------


def head_of(report: VerifyReport) -> str | None:
    """The verified head as `thread@seq:hash`, to save for a later `verify --head`."""
    if not report.ok or not report.head_hash:
        return None
    return f"{report.thread_id}@{report.records_checked}:{report.head_hash}"


def verify_json(reports: Sequence[VerifyReport]) -> dict[str, Any]:
    return {
        "ok": all(r.ok for r in reports),
        "threads": [
            {
                "thread_id": r.thread_id,
                "ok": r.ok,
                "records_checked": r.records_checked,
                "first_bad_seq": r.first_bad_seq,
                "problem": r.problem,
                "head": head_of(r),
            }
            for r in reports
        ],
    }


def verify_table(reports: Sequence[VerifyReport]) -> Table:
    bad = sum(not r.ok for r in reports)
    verdict = "all ok" if not bad else f"{bad} failed"
    threads = "1 thread" if len(reports) == 1 else f"{len(reports)} threads"
    table = _table(f"hash chains of {threads}: {verdict}", "thread")
    table.add_column("records", justify="right")
    table.add_column("verdict")
    table.add_column("head / problem", overflow="fold")
    for r in reports:
        verdict_cell = Text("ok", style="green") if r.ok else Text("FAILED", style="bold red")
        detail = head_of(r) if r.ok else f"seq {r.first_bad_seq}: {r.problem}"
        table.add_row(Text(r.thread_id), str(r.records_checked), verdict_cell, Text(detail or ""))
    return table


# ---- demo ------------------------------------------------------------------------------


def demo_json(
    timeline: Sequence[EventRecord], state: AgentState, report: VerifyReport
) -> dict[str, Any]:
    return {
        "thread_id": timeline[0].thread_id,
        "events": [
            {"seq": r.seq, "kind": r.kind, "actor": r.actor, "hash": r.hash} for r in timeline
        ],
        "state": state.model_dump(mode="json"),
        "verified": report.ok,
    }


def demo_view(
    db: str, timeline: Sequence[EventRecord], state: AgentState, report: VerifyReport
) -> RenderableType:
    table = Table(title=f"thread {timeline[0].thread_id}: the log, read back from {db}")
    for column in ("seq", "kind", "actor", "summary", "hash"):
        table.add_column(column)
    for r in timeline:
        table.add_row(str(r.seq), r.kind, r.actor or "", Text(summarize(r)), r.hash[:12])
    meta = state.execution_meta
    replayed = (
        f"replayed state: status=[bold]{meta.status.value}[/bold] step={meta.step} "
        f"node={meta.current_node} messages={len(state.context)}"
    )
    verdict = "[green]ok[/green]" if report.ok else f"[red]{escape(report.problem or '')}[/red]"
    verified = f"hash chain of {report.records_checked} records verified: {verdict}"
    return Group(table, replayed, verified)
