"""What the `agentlog` commands print: rich tables for people, plain dicts for `--json`.

Functions of what the library returns, and the progress bars; the commands in `agentlog.actors.cli`
read the store. Text from the log comes from models, tools and users, so it is inert when
shown: every string passes through `inert` (control characters, bidi overrides and other
invisible format characters become visible escapes such as `\\x1b` and `\\u202e`) and goes
into rich as `Text`, never as markup. `--json` output is exact (JSON escapes).

People get a bounded view by default: long texts are cut with a marker saying how much was
cut, and a long thread shows its last messages with a line saying how many were left out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.text import Text

from agentlog.events.kinds import ModelCalled, StepAdvanced
from agentlog.events.names import inert as inert

if TYPE_CHECKING:
    from rich.table import Table

    from agentlog.events import EventRecord, VerifyReport
    from agentlog.projections import AgentState, EventRow, ExecutionState, Message, StateDiff
    from agentlog.projections.generic import OpenState
    from agentlog.projections.invariants import ThreadFindings

# `projections` (the state models, built with pydantic at import), rich's tables and its
# progress bars are imported by the functions that use them: `agentlog --help` needs none of
# them and `agentlog threads` no models, so both start faster without.

TABLE_ROWS = 2000
"""Past this many rows a timeline prints as plain aligned lines rather than a rich table."""

TEXT_LIMIT = 2000
"""Characters of one text (a message, a field value) shown before it is cut."""

LAST_MESSAGES = 20
"""Messages of a thread (and of each kind of change in a diff) shown by default."""

FULL_FLAG = "--full"
"""The flag that shows everything: every message, every text whole."""


# ---- making stored text inert (`inert`, from `agentlog.events.names`) ----------------------


def cell(text: object, *, body: bool = False, style: str = "") -> Text:
    """Stored text as an inert rich `Text` (never read as markup)."""
    return Text(inert(str(text), body=body), style=style)


def clip(text: str, limit: int | None) -> tuple[str, int]:
    """`text` cut to `limit` characters (None: whole), and how many were cut."""
    if limit is None or len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def cut_marker(cut: int) -> str:
    """The marker that ends a cut text."""
    return f" … [{cut:,} more characters; {FULL_FLAG} shows all]"


def bounded(text: str, limit: int | None, *, body: bool = True, style: str = "") -> Text:
    """Stored text, inert, cut to `limit` characters with a marker saying how many were cut."""
    shown, cut = clip(text, limit)
    out = cell(shown, body=body, style=style)
    if cut:
        out.append(cut_marker(cut), style="dim")
    return out


def iso(at: float) -> str:
    """A record's time as ISO 8601 in UTC, to the millisecond."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _value(value: Any) -> str:
    """A field value in one line of JSON (falls back to str for what JSON cannot hold)."""
    from agentlog.projections import to_builtins

    return json.dumps(to_builtins(value), ensure_ascii=False, default=str)


def _table(title: str | Text, *columns: str) -> Table:
    """A table; a str title is ours (no stored text), stored text comes as a `Text`."""
    from rich.table import Table

    table = Table(title=Text(title) if isinstance(title, str) else title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _title(*parts: str | tuple[str]) -> Text:
    """A line of our words (str) and stored one-line values (a 1-tuple), made inert."""
    text = Text()
    for part in parts:
        text.append(part if isinstance(part, str) else inert(part[0]))
    return text


# ---- progress --------------------------------------------------------------------------


Progressed = Callable[[int, int], None]
"""`update(done, total)` of a progress bar."""


def _no_progress(done: int, total: int) -> None:
    """The `update` of a progress bar that is not drawn (the output is not a terminal)."""


@contextmanager
def progress(console: Console, description: str) -> Iterator[Progressed]:
    """A transient progress bar on `console` when it is a terminal; yields its `update`."""
    if not console.is_terminal:
        yield _no_progress
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

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
        redirect_stdout=False,  # an export streams to stdout meanwhile
        redirect_stderr=False,
    ) as bar:
        task = bar.add_task(escape(description), total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


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
            status = cell(f"? ({i.error})", style="yellow")
        else:
            status = cell(i.status or "")
            if i.stop:
                status.append(f" ({inert(i.stop)})")
        step = "" if i.step is None else str(i.step)
        table.add_row(
            cell(i.thread_id),
            status,
            Text(step),
            cell(i.node or ""),
            Text(str(i.records)),
            Text(iso(i.last_activity)),
        )
    return table


# ---- history ---------------------------------------------------------------------------


def duration(ms: float | None) -> str:
    """A recorded duration for people: milliseconds below ten seconds, else seconds; blank
    when the record carries none."""
    if ms is None:
        return ""
    return f"{ms:.1f} ms" if ms < 10_000 else f"{ms / 1000:.2f} s"


def history_json(
    rows: Sequence[EventRow], usage: UsageReport | None = None
) -> list[dict[str, Any]]:
    """The timeline for machines; with `usage`, a model call's row also has its `tokens`
    (and its latency as `duration_ms`)."""
    out = []
    for r in rows:
        took, summary, status = _row_parts(r, usage)
        row = {
            "seq": r.seq,
            "at": r.at,
            "kind": r.kind,
            "actor": r.actor,
            "node": r.node,
            "summary": summary,
            "duration_ms": took,
            "status": status,
            "tool": r.tool,
            "fork_point": r.fork_point,
        }
        call = usage.call_at(r.seq) if usage is not None and r.kind == ModelCalled.KIND else None
        if call is not None:
            row["tokens"] = {"step": call.step, "model": call.model, **call.usage.json()}
        out.append(row)
    return out


def _row_parts(r: EventRow, usage: UsageReport | None) -> tuple[float | None, str, str | None]:
    """A row's duration, summary and status; a model call's from its usage when known."""
    call = usage.call_at(r.seq) if usage is not None and r.kind == ModelCalled.KIND else None
    if call is None:
        return r.duration_ms, r.summary, r.status
    return call.usage.latency_ms, call_brief(call), call.status


def history_table(
    thread_id: str, rows: Sequence[EventRow], usage: UsageReport | None = None
) -> Table:
    table = _table(_title("thread ", (thread_id,), f": {len(rows)} events"), "seq", "time (UTC)")
    table.columns[0].justify = "right"
    table.add_column("duration", justify="right", no_wrap=True)
    for column in ("kind", "actor", "node", "summary"):
        table.add_column(column, overflow="fold")
    for r in rows:
        took, summary, _ = _row_parts(r, usage)
        table.add_row(
            Text(str(r.seq)),
            Text(iso(r.at)),
            Text(duration(took)),
            cell(r.kind),
            cell(r.actor or ""),
            cell(r.node or ""),
            cell(summary),
        )
    return table


def slowest_json(rows: Sequence[EventRow]) -> list[dict[str, Any]]:
    """The slowest steps and tool calls (see `agentlog.projections.timetravel.slowest`), for
    machines."""
    return [
        {
            "seq": r.seq,
            "kind": r.kind,
            "node": r.node,
            "tool": r.tool,
            "duration_ms": r.duration_ms,
            "status": r.status,
        }
        for r in rows
    ]


def slowest_table(thread_id: str, rows: Sequence[EventRow]) -> Table:
    """The slowest steps and tool calls of a thread, slowest first."""
    title = _title("thread ", (thread_id,), f": the {len(rows)} slowest steps and tool calls")
    table = _table(title, "duration", "kind", "node", "tool", "seq")
    table.columns[0].justify = "right"
    table.columns[4].justify = "right"
    for r in rows:
        table.add_row(
            Text(duration(r.duration_ms)),
            cell(r.kind),
            cell(r.node or ""),
            cell(r.tool or ""),
            Text(str(r.seq)),
        )
    return table


def history_lines(
    thread_id: str, rows: Sequence[EventRow], chunk: int = 2048, usage: UsageReport | None = None
) -> Iterator[str]:
    """The timeline as aligned plain lines, a chunk at a time: a rich table of a long log
    takes a second per few thousand rows, these take a few milliseconds."""
    seq_w = max(3, len(str(max((r.seq for r in rows), default=0))))
    kind_w = max([4, *(len(r.kind) for r in rows)])
    actor_w = min(20, max([5, *(len(r.actor or "") for r in rows)]))
    node_w = min(20, max([4, *(len(r.node or "") for r in rows)]))
    took_w = max([8, *(len(duration(_row_parts(r, usage)[0])) for r in rows)])
    head = (
        f"{'seq':>{seq_w}}  {'time (UTC)':<24}  {'duration':>{took_w}}  {'kind':<{kind_w}}  "
        f"{'actor':<{actor_w}}  {'node':<{node_w}}  summary"
    )
    lines = [f"thread {inert(thread_id)}: {len(rows)} events", head]
    for r in rows:
        took, said, _ = _row_parts(r, usage)
        summary = inert(" ".join(said.split(" ")))
        lines.append(
            f"{r.seq:>{seq_w}}  {iso(r.at):<24}  {duration(took):>{took_w}}  "
            f"{inert(r.kind):<{kind_w}}  {inert(r.actor or ''):<{actor_w}}  "
            f"{inert(r.node or ''):<{node_w}}  {summary}"
        )
        if len(lines) >= chunk:
            yield "\n".join(lines)
            lines = []
    if lines:
        yield "\n".join(lines)


# ---- tokens and latency ----------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """What model calls cost: how many, their tokens (input, output, total, reasoning) and
    their summed latency; `failed` counts the attempts that failed."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int = 0
    latency_ms: float = 0.0
    failed: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.total_tokens + other.total_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.latency_ms + other.latency_ms,
            self.failed + other.failed,
        )

    def json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "failed": self.failed,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "latency_ms": round(self.latency_ms, 3),
        }

    def brief(self) -> str:
        """One line for people: tokens in and out, total, latency."""
        calls = f"{self.calls} model call{'s' if self.calls != 1 else ''}"
        failed = f" ({self.failed} failed)" if self.failed else ""
        return (
            f"{calls}{failed}: {self.input_tokens:,} in + {self.output_tokens:,} out = "
            f"{self.total_tokens:,} tokens, {duration(self.latency_ms)}"
        )


@dataclass(frozen=True)
class ModelCall:
    """One `model_called` record, placed: its run, the step it belongs to, its usage."""

    seq: int
    run_id: str | None
    step: int
    node: str
    provider: str
    model: str
    status: str
    attempt: int
    finish_reason: str | None
    usage: Usage
    error: str | None = None
    """A failed attempt's error type."""


@dataclass(frozen=True)
class UsageReport:
    """A thread's model calls, and their totals per step, per run and overall."""

    calls: list[ModelCall]
    steps: list[tuple[str | None, int, str, Usage]]
    """(run id, step, node, totals), in the order the steps began."""
    runs: list[tuple[str | None, Usage]]
    total: Usage

    def call_at(self, seq: int) -> ModelCall | None:
        return next((c for c in self.calls if c.seq == seq), None)

    def step(self, step: int) -> Usage:
        """The totals of a step (all its runs' attempts at it)."""
        return sum((u for _, n, _, u in self.steps if n == step), Usage())


def token_usage(usage: dict[str, Any] | None) -> tuple[int, int, int, int]:
    """(input, output, total, reasoning) tokens of a recorded usage, in OpenAI's names
    (prompt/completion) or Anthropic's (input/output); a count not given is 0. The one
    reading is `agentlog.projections.usage.tokens_of`."""
    from agentlog.projections.usage import tokens_of

    return tokens_of(usage).astuple()


def usage_report(records: Sequence[EventRecord]) -> UsageReport:
    """The model calls among a thread's `records` (in seq order, from its first), each placed
    in the step it belongs to: the one being run when it was recorded (a step's calls ride
    in its commit; a failed attempt's in the failure's, and count towards the same step)."""
    from agentlog.events import Forked, ModelCalled, StepAdvanced

    calls: list[ModelCall] = []
    done = 0
    for record in records:
        event = record.event
        if isinstance(event, StepAdvanced):
            done = event.step
        elif isinstance(event, Forked):
            meta = event.state.get("execution_meta")
            step = meta.get("step") if isinstance(meta, dict) else 0
            done = step if isinstance(step, int) else 0
        elif isinstance(event, ModelCalled):
            took_in, took_out, total, reasoning = token_usage(event.usage)
            if event.params.get("answered_from_log"):  # no tokens were spent on it
                took_in = took_out = total = reasoning = 0
            failed = event.status != "completed"
            usage = Usage(1, took_in, took_out, total, reasoning, event.latency_ms, int(failed))
            calls.append(
                ModelCall(
                    record.seq,
                    record.run_id,
                    done + 1,
                    event.node,
                    event.provider,
                    event.model,
                    event.status,
                    event.attempt,
                    event.finish_reason,
                    usage,
                    event.error_type,
                )
            )
    steps: dict[tuple[str | None, int, str], Usage] = {}
    runs: dict[str | None, Usage] = {}
    for call in calls:
        key = (call.run_id, call.step, call.node)
        steps[key] = steps.get(key, Usage()) + call.usage
        runs[call.run_id] = runs.get(call.run_id, Usage()) + call.usage
    overall = sum((c.usage for c in calls), Usage())
    return UsageReport(calls, [(*k, u) for k, u in steps.items()], list(runs.items()), overall)


def usage_json(report: UsageReport) -> dict[str, Any]:
    """Tokens and latency per model call, per step, per run and in all, for machines."""
    return {
        "calls": [
            {
                "seq": c.seq,
                "run_id": c.run_id,
                "step": c.step,
                "node": c.node,
                "provider": c.provider,
                "model": c.model,
                "status": c.status,
                "attempt": c.attempt,
                "finish_reason": c.finish_reason,
                **c.usage.json(),
            }
            for c in report.calls
        ],
        "steps": [
            {"run_id": run, "step": step, "node": node, **u.json()}
            for run, step, node, u in report.steps
        ],
        "runs": [{"run_id": run, **u.json()} for run, u in report.runs],
        "total": report.total.json(),
    }


def call_brief(call: ModelCall) -> str:
    """A model call in one line: model, tokens, why it stopped (stored text: show it inert)."""
    u = call.usage
    said = f"{call.provider}:{call.model}"
    if call.status != "completed":
        said += f" {call.status} (attempt {call.attempt})"
        said += f": {call.error}" if call.error else ""
        return said + (f", {u.total_tokens:,} tokens" if u.total_tokens else "")
    said += f" {u.input_tokens:,} in + {u.output_tokens:,} out = {u.total_tokens:,} tokens"
    return said + (f", {call.finish_reason}" if call.finish_reason else "")


def usage_view(report: UsageReport) -> RenderableType:
    """Tokens and latency per step and per run, and the thread's total."""
    if not report.calls:
        return Text("no model calls recorded", style="dim")
    steps = _table(Text("tokens and latency per step"), "step", "node", "run")
    runs = _table(Text("per run"), "run")
    for table in (steps, runs):
        for column in ("calls", "in", "out", "total", "latency"):
            table.add_column(column, justify="right", no_wrap=True)
    for run, step, node, u in report.steps:
        steps.add_row(Text(str(step)), cell(node), cell(run or ""), *_usage_cells(u))
    for run, u in report.runs:
        runs.add_row(cell(run or ""), *_usage_cells(u))
    return Group(steps, runs, Text(f"total: {report.total.brief()}", style="bold"))


def _usage_cells(u: Usage) -> list[Text]:
    calls = f"{u.calls}" + (f" ({u.failed} failed)" if u.failed else "")
    return [
        Text(calls),
        Text(f"{u.input_tokens:,}"),
        Text(f"{u.output_tokens:,}"),
        Text(f"{u.total_tokens:,}"),
        Text(duration(u.latency_ms)),
    ]


# ---- show ------------------------------------------------------------------------------


def message_json(message: Message) -> dict[str, Any]:
    from agentlog.projections import present

    return present.message(message)


def message_line(message: Message, limit: int | None = TEXT_LIMIT) -> Text:
    """A message as people see it (`message_text`: text, reasoning, errors, tool outputs),
    cut at `limit` characters, and the tools it calls."""
    from agentlog.projections.timetravel import message_text
    from agentlog.projections.transcript import calls_of

    text = bounded(message_text(message), limit)
    calls = ", ".join(f"{c.name}({_value(c.args)})" for c in calls_of(message))
    if calls:
        calls, cut = clip(calls, limit)
        text.append(" -> " if text else "-> ", style="cyan")
        text.append(inert(calls, body=True), style="cyan")
        if cut:
            text.append(cut_marker(cut), style="dim")
    return text


def _interrupt(state: AgentState) -> dict[str, Any] | None:
    from agentlog.projections.timetravel import interrupt_summary

    return interrupt_summary(state.execution_meta)


def stop_summary(meta: ExecutionState) -> str | None:
    """How a stop left the run, or None when it is not stopped: after the node it followed,
    or before the node it cancelled (which runs again on resume). Stored text: show inert."""
    from agentlog.projections import ExecutionStatus, StopRequestStatus

    if meta.stop_current_execution != StopRequestStatus.STOPPED or not meta.is_interrupted():
        return None
    node = meta.interrupted_node or "?"
    if meta.status == ExecutionStatus.INTERRUPTED_AFTER:
        return f"stopped after node {node}"
    return f"stopped before node {node} (cancelled; it runs again on resume)"


def custom_fields(state: AgentState) -> dict[str, Any]:
    """The fields besides the messages and the execution metadata, as JSON builtins."""
    from agentlog.projections import present

    return present.fields(state)


def _point_notes(point: OpenState | None) -> dict[str, Any]:
    if point is None:
        return {}
    return {"notes": dict(point.notes), "unset": list(point.unset)}


def state_json(
    thread_id: str,
    seq: int,
    state: AgentState,
    point: OpenState | None = None,
    usage: UsageReport | None = None,
) -> dict[str, Any]:
    """The state at a point for machines (`agentlog.projections.present.state`); with `usage`
    (the thread's model calls up to the point), `tokens` per call, step, run and in all."""
    from agentlog.projections import present

    unset = point.unset if point is not None else ()
    return {
        **present.state(thread_id, seq, state, unset),
        **_point_notes(point),
        **({} if usage is None else {"tokens": usage_json(usage)}),
    }


@dataclass(frozen=True)
class Bounds:
    """How much of a state or diff to show: the last `messages`, texts cut at `text`."""

    messages: int | None = LAST_MESSAGES
    text: int | None = TEXT_LIMIT

    @classmethod
    def full(cls) -> Bounds:
        return cls(None, None)


def _left_out(count: int, what: str) -> Text:
    return Text(
        f"… {count:,} earlier {what} not shown; {FULL_FLAG} shows all (or --last N)",
        style="dim",
    )


def state_view(
    thread_id: str,
    seq: int,
    state: AgentState,
    bounds: Bounds = Bounds(),
    point: OpenState | None = None,
    usage: UsageReport | None = None,
) -> RenderableType:
    """The state at a point for people; with `usage`, a line of the tokens and latency of the
    last run's model calls and of the thread's."""
    from agentlog.projections import StopRequestStatus

    meta = state.execution_meta
    head = _title("thread ", (thread_id,), f" at seq {seq}: ")
    head.stylize("bold")
    head.append(f"status={meta.status.value} step={meta.step} node={inert(meta.current_node)}")
    if meta.stop_current_execution != StopRequestStatus.NONE:
        head.append(f" stop={meta.stop_current_execution.value}")
    parts: list[RenderableType] = [head]
    created = meta.internal_data.get("created")
    if isinstance(created, dict):  # a thread_created record: who, and the caller's metadata
        line = Text("created by ", style="bold")
        line.append(inert(str(created.get("by"))))
        if created.get("metadata"):
            line.append(" metadata=")
            line.append_text(bounded(_value(created["metadata"]), bounds.text, body=False))
        parts.append(line)
    stopped = stop_summary(meta)
    if stopped is not None:
        parts.append(Text(inert(stopped), style="yellow"))
    if usage is not None and usage.calls:
        run, last = usage.runs[-1]
        line = Text("tokens: ", style="bold")
        line.append(f"run {inert(run or '?')}: {last.brief()}")
        if len(usage.runs) > 1:
            line.append(f"; thread: {usage.total.brief()}")
        parts.append(line)
    interrupt = _interrupt(state)
    if interrupt is not None:
        line = Text("interrupt: ", style="yellow")
        line.append(
            f"{interrupt['status']} at {inert(repr(interrupt['node']))} "
            f"({inert(str(interrupt['reason']))})"
        )
        if interrupt["data"]:
            line.append(" data=")
            line.append_text(bounded(_value(interrupt["data"]), bounds.text, body=False))
        parts.append(line)
    fields = custom_fields(state)
    unset = point.unset if point is not None else []
    notes = point.notes if point is not None else {}
    if fields or unset:
        table = _table("fields", "field", "value")
        for name, value in fields.items():
            if name in unset:
                continue
            shown = bounded(_value(value), bounds.text)
            if name in notes:
                shown.append(" (see note)", style="yellow")
            table.add_row(cell(name), shown)
        for name in unset:
            table.add_row(cell(name), Text("(not set in the log: the class default)", style="dim"))
        parts.append(table)
    for name, note in notes.items():
        line = Text("note: ", style="yellow")
        line.append(f"field {inert(name)}: {inert(note)}")
        parts.append(line)
    total = len(state.context)
    shown_from = 0 if bounds.messages is None else max(0, total - bounds.messages)
    title = (
        f"{total} messages"
        if not shown_from
        else f"{total} messages (the last {total - shown_from})"
    )
    messages = _table(title, "#", "role", "id", "text")
    for n in range(shown_from, total):
        message = state.context[n]
        messages.add_row(
            Text(str(n + 1)),
            cell(message.role),
            cell(message.message_id),
            message_line(message, bounds.text),
        )
    if shown_from:
        parts.append(_left_out(shown_from, "messages"))
    parts.append(messages)
    return Group(*parts)


STEP_RECORDS = 50
"""Records of one step `show --step` lists before it says how many it left out."""


def step_records_view(
    step: int,
    rows: Sequence[EventRow],
    bounds: Bounds = Bounds(),
    usage: UsageReport | None = None,
) -> RenderableType:
    """What led to a step: its records, one summarised row each (the last `STEP_RECORDS`
    unless the bounds are full); with `usage`, its model calls' tokens and latency."""
    span = f" (seq {rows[0].seq} to {rows[-1].seq})" if rows else ""
    took = next((r.duration_ms for r in rows if r.kind == StepAdvanced.KIND), None)
    span += f", took {duration(took)}" if took is not None else ""
    table = _table(f"step {step}: {len(rows)} records{span}", "seq", "duration")
    table.columns[0].justify = "right"
    table.columns[1].justify = "right"
    for column in ("kind", "actor", "node", "summary"):
        table.add_column(column, overflow="fold")
    hidden = 0 if bounds.messages is None else max(0, len(rows) - STEP_RECORDS)
    for r in rows[hidden:]:
        took, summary, _ = _row_parts(r, usage)
        table.add_row(
            Text(str(r.seq)),
            Text(duration(took)),
            cell(r.kind),
            cell(r.actor or ""),
            cell(r.node or ""),
            cell(summary),
        )
    parts: list[RenderableType] = [_left_out(hidden, "records")] if hidden else []
    parts.append(table)
    if usage is not None and usage.step(step).calls:
        parts.append(Text(f"step {step}: {usage.step(step).brief()}", style="bold"))
    return Group(*parts) if len(parts) > 1 else table


# ---- diff ------------------------------------------------------------------------------


def diff_json(
    thread_id: str,
    a: int,
    b: int,
    by: str,
    d: StateDiff,
    points: tuple[OpenState, OpenState] | None = None,
) -> dict[str, Any]:
    from agentlog.projections import to_builtins

    data = {
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
    if points is not None:
        data["notes"] = [dict(points[0].notes), dict(points[1].notes)]
        data["unset"] = [list(points[0].unset), list(points[1].unset)]
    return data


def _unset_or(name: str, value: Any, point: OpenState | None, limit: int | None) -> Text:
    if point is not None and name in point.unset:
        return Text("(not set in the log: the class default)", style="dim")
    shown = bounded(_value(value), limit)
    if point is not None and name in point.notes:
        shown.append(" (see note)", style="yellow")
    return shown


def diff_view(
    thread_id: str,
    a: int,
    b: int,
    by: str,
    d: StateDiff,
    bounds: Bounds = Bounds(),
    points: tuple[OpenState, OpenState] | None = None,
) -> RenderableType:
    title = _title(
        "thread ", (thread_id,), f": {by} {a} (seq {d.a_seq}) -> {by} {b} (seq {d.b_seq})"
    )
    if d.empty:
        title.append(": no change")
        return title
    table = _table(title, "what", "before", "after")
    if d.step[0] != d.step[1]:
        table.add_row(Text("step"), Text(str(d.step[0])), Text(str(d.step[1])))
    if d.status is not None:
        table.add_row(Text("status"), cell(d.status[0]), cell(d.status[1]))
    if d.interrupt is not None:
        table.add_row(Text("interrupt"), *(bounded(_value(i), bounds.text) for i in d.interrupt))
    before, after = points if points is not None else (None, None)
    for name, (old, new) in d.fields.items():
        table.add_row(
            cell(name),
            _unset_or(name, old, before, bounds.text),
            _unset_or(name, new, after, bounds.text),
        )
    left_out: list[Text] = []

    def last(items: Sequence[Any], what: str) -> Sequence[Any]:
        if bounds.messages is None or len(items) <= bounds.messages:
            return items
        hidden = len(items) - bounds.messages
        left_out.append(_left_out(hidden, what))
        return items[hidden:]

    for m in last(d.messages_added, "added messages"):
        table.add_row(_message_label("+", m), Text(""), message_line(m, bounds.text))
    for m in last(d.messages_removed, "removed messages"):
        table.add_row(_message_label("-", m), message_line(m, bounds.text), Text(""))
    for old_m, new_m in last(d.messages_changed, "changed messages"):
        table.add_row(
            _message_label("~", new_m),
            message_line(old_m, bounds.text),
            message_line(new_m, bounds.text),
        )
    notes: list[Text] = []
    for label, point in (("before", before), ("after", after)):
        for name, note in (point.notes if point is not None else {}).items():
            if name in d.fields:
                line = Text(f"note ({label}): ", style="yellow")
                line.append(f"field {inert(name)}: {inert(note)}")
                notes.append(line)
    return Group(*left_out, table, *notes)


def _message_label(sign: str, message: Message) -> Text:
    """`+`, `-` or `~`, the role and the id of a message in a diff (the id inert)."""
    from agentlog.projections.timetravel import quoted_id

    return cell(f"{sign} {message.role} message {quoted_id(message.message_id)}")


# ---- verify ----------------------------------------------------------------------------


def head_of(report: VerifyReport) -> str | None:
    """The verified head as `thread@seq:hash`, to save for a later `verify --head`."""
    if not report.ok or not report.head_hash:
        return None
    return f"{report.thread_id}@{report.records_checked}:{report.head_hash}"


def verify_json(
    reports: Sequence[VerifyReport], checked: Sequence[ThreadFindings] = ()
) -> dict[str, Any]:
    """The chains under "ok" and "threads"; the invariants of the threads whose chain is
    intact under "invariants" (damaged threads are listed there as not checked)."""
    done = {c.thread_id for c in checked}
    return {
        "ok": all(r.ok for r in reports),
        "invariants": {
            "ok": all(c.ok for c in checked),
            "checked": [c.thread_id for c in checked],
            "not_checked": [r.thread_id for r in reports if r.thread_id not in done],
            "findings": [
                {
                    "thread_id": c.thread_id,
                    "seq": c.seq,
                    "kind": f.kind,
                    "call_id": f.call_id,
                    "tool": f.tool,
                    "message": f.message,
                }
                for c in checked
                for f in c.findings
            ],
        },
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
        table.add_row(
            cell(r.thread_id), Text(str(r.records_checked)), verdict_cell, cell(detail or "")
        )
    return table


def invariants_view(
    reports: Sequence[VerifyReport], checked: Sequence[ThreadFindings]
) -> RenderableType:
    """The invariant findings after the chain table, one line each, labelled as such.

    Threads whose chain is damaged were not folded: they are counted as not checked.
    """
    found = [(c.thread_id, f) for c in checked for f in c.findings]
    skipped = len(reports) - len(checked)
    not_checked = f"; {skipped} not checked (damaged chain)" if skipped else ""
    if not found:
        head = Text("tool-call invariants: ", style="bold")
        head.append("ok", style="green")
        head.append(f" in {len(checked)} of {len(reports)} threads{not_checked}")
        return head
    bad = len({thread for thread, _ in found})
    head = Text("invariant findings", style="bold red")
    head.append(
        f": {len(found)} in {bad} of {len(reports)} threads{not_checked} (the hash chains "
        "of these threads are intact: what they record breaks a rule of the transcript)"
    )
    lines: list[RenderableType] = [head]
    for thread, finding in found:
        line = Text("invariant finding", style="red")
        line.append(f" [{finding.kind}]: thread ")
        line.append(inert(thread))
        line.append(": ")
        line.append(inert(finding.message))
        lines.append(line)
    return Group(*lines)


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
    table = _table(
        _title("thread ", (timeline[0].thread_id,), ": the log, read back from ", (db,)),
        "seq", "kind", "actor", "summary", "hash",
    )  # fmt: skip
    from agentlog.projections import summarize

    for r in timeline:
        table.add_row(
            Text(str(r.seq)),
            cell(r.kind),
            cell(r.actor or ""),
            cell(summarize(r)),
            Text(r.hash[:12]),
        )
    meta = state.execution_meta
    replayed = Text("replayed state: status=")
    replayed.append(meta.status.value, style="bold")
    replayed.append(
        f" step={meta.step} node={inert(meta.current_node)} messages={len(state.context)}"
    )
    verified = Text(f"hash chain of {report.records_checked} records verified: ")
    if report.ok:
        verified.append("ok", style="green")
    else:
        verified.append(inert(report.problem or ""), style="red")
    return Group(table, replayed, verified)


def snapshot_lines(findings: Sequence[Any], stored: int) -> RenderableType:
    """One line per snapshot finding (inert: its values come from the file), or that all
    `stored` snapshots agree with the log."""
    if not any(f.problem for f in findings):
        informative = [f for f in findings if not f.problem]
        said = (
            f"snapshots: all {stored} agree with the log"
            if stored
            else "snapshots: none stored (the state is folded from the log)"
        )
        lines = [Text(said)]
        lines += [Text(f"snapshot note [{f.kind}]: {inert(str(f))}") for f in informative]
        return Group(*lines)
    return Group(
        *(
            Text(
                f"snapshot finding [{f.kind}]: thread {inert(f.thread_id)}, seq {f.seq}"
                + (f", at {inert(f.path)}" if f.path else "")
                + f": {inert(str(f))}"
            )
            for f in findings
        )
    )
