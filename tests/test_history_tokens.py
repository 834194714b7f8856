"""Tokens and latency per step and per run, from the `model_called` records a node leaves in
its step's commit: what `agentlog history` and `agentlog show` print (human and --json)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agentlog.actors import NodeError, current_context
from agentlog.actors.cli import render
from agentlog.events import MemoryEventStore, ModelCalled
from agentlog.projections import AgentState, Message, event_history
from tests.helpers import line


def called(
    prompt: int,
    completion: int,
    latency: float,
    *,
    status: str = "completed",
    attempt: int = 1,
    anthropic: bool = False,
) -> ModelCalled:
    usage: dict[str, Any] = (
        {"input_tokens": prompt, "output_tokens": completion}
        if anthropic
        else {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "completion_tokens_details": {"reasoning_tokens": 3},
        }
    )
    return ModelCalled(
        node="agent",
        provider="anthropic" if anthropic else "openai",
        model="m-1",
        request_hash="h",
        attempt=attempt,
        status=status,  # type: ignore[arg-type]
        usage=None if status == "failed" else usage,
        latency_ms=latency,
        finish_reason=None if status == "failed" else "stop",
        error_type="RateLimitError" if status == "failed" else None,
    )


class Model:
    """A node that records its model calls: per run, a list of steps, each a list of calls."""

    def __init__(self, script: list[list[ModelCalled]], fail_first: bool = False) -> None:
        self.script = script
        self.fail_first = fail_first

    def __call__(self, state: AgentState) -> list[Message]:
        calls = self.script.pop(0)
        for call in calls:
            current_context().record(call)
        if self.fail_first:
            self.fail_first = False
            raise RuntimeError("the model is down")
        return [Message.text_message("answer", role="assistant")]


async def thread_with_calls() -> tuple[MemoryEventStore, list[Any]]:
    """Two runs on one thread: the first with a retried call then a second step, the second
    with an Anthropic-style usage; then a run whose step fails and is retried."""
    store = MemoryEventStore()
    first = Model(
        [
            [called(100, 20, 50.0, status="failed"), called(100, 20, 400.0, attempt=2)],
            [called(150, 30, 600.0)],
        ]
    )
    graph = line(("agent", first), ("again", first))
    app = graph.compile(checkpointer=store)
    config = {"thread_id": "t"}
    await app.ainvoke({"messages": [Message.text_message("hi")]}, config)
    second = Model([[called(10, 5, 100.0, anthropic=True)], [called(20, 5, 100.0)]])
    await (
        line(("agent", second), ("again", second))
        .compile(checkpointer=store)
        .ainvoke({"messages": [Message.text_message("more")]}, config)
    )
    records = [r async for r in store.read("t")]
    return store, records


async def test_a_report_totals_each_step_and_each_run() -> None:
    _, records = await thread_with_calls()
    report = render.usage_report(records)
    assert [(c.step, c.status, c.usage.total_tokens) for c in report.calls] == [
        (1, "failed", 0),
        (1, "completed", 120),
        (2, "completed", 180),
        (3, "completed", 15),
        (4, "completed", 25),
    ]
    runs = [u for _, u in report.runs]
    assert len(runs) == 2
    assert runs[0] == render.Usage(3, 250, 50, 300, 6, 1050.0, 1)
    assert runs[1].total_tokens == 40 and runs[1].input_tokens == 30
    assert report.total.calls == 5 and report.total.total_tokens == 340
    assert report.step(1).latency_ms == 450.0 and report.step(1).failed == 1
    assert [(n, node) for _, n, node, _ in report.steps] == [
        (1, "agent"),
        (2, "agent"),
        (3, "agent"),
        (4, "agent"),
    ]


async def test_a_failed_step_counts_its_calls_towards_the_step_run_again() -> None:
    store = MemoryEventStore()
    model = Model([[called(7, 1, 10.0)], [called(8, 2, 20.0)]], fail_first=True)
    app = line(("agent", model)).compile(checkpointer=store)
    with pytest.raises(NodeError):
        await app.ainvoke({"messages": [Message.text_message("x")]}, {"thread_id": "t"})
    await app.ainvoke(None, {"thread_id": "t"})
    report = render.usage_report([r async for r in store.read("t")])
    assert [c.step for c in report.calls] == [1, 1]
    assert report.step(1).total_tokens == 18


async def test_history_json_and_table_carry_tokens_and_latency() -> None:
    store, records = await thread_with_calls()
    report = render.usage_report(records)
    rows = await event_history(store, "t")
    data = render.history_json(rows, report)
    model_rows = [r for r in data if r["kind"] == "model_called"]
    assert len(model_rows) == 5
    assert model_rows[1]["tokens"]["total_tokens"] == 120
    assert model_rows[1]["duration_ms"] == 400.0 and model_rows[1]["status"] == "completed"
    assert model_rows[0]["status"] == "failed"
    assert model_rows[1]["summary"] == "openai:m-1 100 in + 20 out = 120 tokens, stop"
    assert all("tokens" not in r for r in data if r["kind"] != "model_called")
    assert render.history_json(rows) == render.history_json(rows, None)  # unchanged without
    whole = render.usage_json(report)
    assert whole["total"]["total_tokens"] == 340
    assert [s["step"] for s in whole["steps"]] == [1, 2, 3, 4]
    assert json.loads(json.dumps(whole)) == whole
    text = printed(render.history_table("t", rows, report), render.usage_view(report))
    assert "100 in + 20 out = 120 tokens" in text
    assert "tokens and latency per step" in text and "per run" in text
    assert "total: 5 model calls (1 failed): 280 in + 60 out = 340 tokens" in text
    lines = "\n".join(render.history_lines("t", rows, usage=report))
    assert "400.0 ms" in lines and "openai:m-1 failed (attempt 1): RateLimitError" in lines


async def test_show_names_the_runs_tokens_and_the_steps() -> None:
    store, records = await thread_with_calls()
    report = render.usage_report(records)
    from agentlog.projections.generic import open_states

    (point,) = await open_states(store, "t", [records[-1].seq])
    data = render.state_json("t", point.seq, point.state, point, report)
    assert data["tokens"]["runs"][1]["total_tokens"] == 40
    assert "tokens" not in render.state_json("t", point.seq, point.state, point)
    text = printed(render.state_view("t", point.seq, point.state, render.Bounds(), point, report))
    assert "2 model calls: 30 in + 10 out = 40 tokens" in text
    assert "thread: 5 model calls (1 failed)" in text
    rows = await event_history(store, "t", first=1, last=records[-1].seq)
    step_rows = [r for r in rows if r.seq <= next(c.seq for c in report.calls if c.step == 2)]
    view = printed(render.step_records_view(1, step_rows, render.Bounds(), report))
    assert "step 1: 2 model calls (1 failed): 100 in + 20 out = 120 tokens, 450.0 ms" in view


def test_usage_in_any_providers_names() -> None:
    assert render.token_usage({"prompt_tokens": 3, "completion_tokens": 4}) == (3, 4, 7, 0)
    assert render.token_usage({"input_tokens": 3, "output_tokens": 4, "total_tokens": 9}) == (
        3,
        4,
        9,
        0,
    )
    assert render.token_usage({"output_tokens_details": {"reasoning_tokens": 2}})[3] == 2
    assert render.token_usage({"prompt_tokens": True, "completion_tokens": "x"}) == (0, 0, 0, 0)
    assert render.token_usage(None) == (0, 0, 0, 0)


def test_stored_text_in_a_model_call_is_shown_inert() -> None:
    call = render.ModelCall(
        1, "r", 1, "agent", "evil\x1b[2J", "m\u202e", "completed", 1, "stop\n", render.Usage(1)
    )
    report = render.UsageReport([call], [("r", 1, "agent\x07", call.usage)], [], call.usage)
    text = printed(render.usage_view(report))
    assert "\x07" not in text and "\\x07" in text
    said = render.cell(render.call_brief(call)).plain
    assert "\x1b" not in said and "\u202e" not in said and "\\x1b" in said


def printed(*parts: Any) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    for part in parts:
        console.print(part)
    return out.getvalue()


async def test_the_commands_print_tokens(tmp_path: Any) -> None:
    """`agentlog history` and `show`, end to end, on a SQLite log with model calls."""
    from agentlog.events import SQLiteEventStore
    from tests.helpers import agentlog

    if "--tokens" not in agentlog("history", "--help").stdout:
        pytest.skip("the history command does not take --tokens yet (actors/cli/__init__.py)")
    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as store:
        model = Model([[called(100, 20, 50.0, status="failed"), called(100, 20, 400.0)]])
        app = line(("agent", model)).compile(checkpointer=store)
        await app.ainvoke({"messages": [Message.text_message("hi")]}, {"thread_id": "t"})
    table = agentlog("history", "t", "--db", db)
    assert table.returncode == 0, table.stderr
    assert "openai:m-1 100 in + 20 out = 120 tokens, stop" in table.stdout
    assert "total: 2 model calls (1 failed): 100 in + 20 out = 120 tokens" in table.stdout
    report = json.loads(agentlog("history", "t", "--db", db, "--tokens", "--json").stdout)
    assert report["total"]["total_tokens"] == 120 and report["steps"][0]["calls"] == 2
    rows = json.loads(agentlog("history", "t", "--db", db, "--json").stdout)
    assert [r["tokens"]["total_tokens"] for r in rows if r["kind"] == "model_called"] == [0, 120]
    shown = agentlog("show", "t", "--db", db)
    assert "2 model calls (1 failed): 100 in + 20 out = 120 tokens" in shown.stdout
    step = json.loads(agentlog("show", "t", "--step", "1", "--db", db, "--json").stdout)
    assert step["tokens"]["steps"][0]["latency_ms"] == 450.0


def test_tokens_with_slowest_or_kind_is_refused_in_one_line(tmp_path: Path) -> None:
    from tests.helpers import agentlog

    for extra in (["--slowest", "3"], ["--kind", "step_advanced"]):
        done = agentlog("history", "--db", tmp_path / "x.db", "t", "--tokens", *extra)
        assert done.returncode == 2 and "--tokens shows the model calls alone" in done.stderr
