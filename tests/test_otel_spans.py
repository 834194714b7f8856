"""OpenTelemetry spans derived from the log: the tree a live follower emits for the demo
agent and for a graph with a tool failure, an interrupt, a human edit and a resume, and the
same spans, ids and attributes alike, rebuilt afterwards from the database and from an
export file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import agentlog.otel
from agentlog.actors import END, Command, StateGraph, ToolNode, interrupt
from agentlog.actors.examples.support import run_demo
from agentlog.actors.testing import ScriptedModel, ask_tool, reply
from agentlog.events import EventStore, SQLiteEventStore
from agentlog.events.audit import export_jsonl
from agentlog.projections import AgentState, Message
from tests.workers.fake_provider import FakeProvider, Reply


def provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider, exporter


def canonical(span: ReadableSpan) -> tuple[Any, ...]:
    """Everything a backend receives of a span, but the resource and the scope."""
    context = span.context
    assert context is not None
    return (
        span.name,
        context.trace_id,
        context.span_id,
        span.parent.span_id if span.parent else None,
        span.kind,
        span.start_time,
        span.end_time,
        dict(span.attributes or {}),
        [(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events],
        (span.status.status_code, span.status.description),
    )


def tree(spans: list[ReadableSpan]) -> list[str]:
    """The spans as indented names, children in start order."""
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    ids = {s.context.span_id for s in spans if s.context}
    for span in spans:
        parent = span.parent.span_id if span.parent else None
        by_parent.setdefault(parent if parent in ids else None, []).append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(by_parent.get(parent, []), key=lambda s: s.start_time or 0):
            lines.append("  " * depth + span.name)
            walk(span.context.span_id if span.context else None, depth + 1)

    walk(None, 0)
    return lines


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def test_the_demo_agent_gives_the_genai_span_tree_live_and_after_the_fact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live, exported = provider()
    async with FakeProvider() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        server.script(
            Reply(fixture="chat_tool_call"),
            Reply(fixture="chat_refund_call"),
            Reply(fixture="chat_text"),
        )
        async with SQLiteEventStore(tmp_path / "demo.db") as store:
            async with agentlog.otel.follow(store, tracer_provider=live):
                await run_demo(
                    store, lambda c: None, lambda s: True, thread_id="d1", model="openai:gpt-test"
                )
            spans = list(exported.get_finished_spans())
            assert tree(spans) == [
                "invoke_agent support",
                "  agent",
                "    chat gpt-test",
                "  lookup",
                "    execute_tool lookup_order",
                "  agent",
                "    chat gpt-test",
                "invoke_agent support",
                "  refund",
                "    execute_tool issue_refund",
                "  agent",
                "    chat gpt-test",
            ]
            first, second = named(spans, "invoke_agent support")
            assert first.context and second.context
            assert first.context.trace_id == second.context.trace_id  # one run, two calls
            assert first.parent is None and second.parent is None
            attrs = dict(first.attributes or {})
            assert attrs["gen_ai.operation.name"] == "invoke_agent"
            assert attrs["gen_ai.agent.name"] == "support"
            assert attrs["gen_ai.conversation.id"] == "d1"
            assert attrs["agentlog.outcome"] == "interrupted"
            assert attrs["agentlog.seq"] == 1 and len(str(attrs["agentlog.hash"])) == 64
            assert [e.name for e in first.events] == ["interrupt"]
            assert [e.name for e in second.events] == ["resumed"]
            assert dict(second.attributes or {})["agentlog.outcome"] == "completed"
            chats = named(spans, "chat gpt-test")
            calls_in = sum(
                int(dict(c.attributes or {})["gen_ai.usage.input_tokens"]) for c in chats
            )
            both = [
                dict(r.attributes or {}).get("gen_ai.usage.input_tokens") for r in (first, second)
            ]
            assert sum(int(n or 0) for n in both) == calls_in > 0  # a run sums its calls'
            chat = named(spans, "chat gpt-test")[0]
            assert chat.kind == SpanKind.CLIENT
            chat_attrs = dict(chat.attributes or {})
            assert chat_attrs["gen_ai.operation.name"] == "chat"
            assert chat_attrs["gen_ai.provider.name"] == "openai"
            assert chat_attrs["gen_ai.request.model"] == "gpt-test"
            assert isinstance(chat_attrs["gen_ai.usage.input_tokens"], int)
            assert isinstance(chat_attrs["gen_ai.usage.output_tokens"], int)
            assert chat_attrs["gen_ai.response.finish_reasons"] == ("tool_calls",)
            tool = named(spans, "execute_tool lookup_order")[0]
            tool_attrs = dict(tool.attributes or {})
            assert tool_attrs["gen_ai.tool.name"] == "lookup_order"
            assert tool_attrs["agentlog.tool.status"] == "completed"
            assert "gen_ai.tool.call.arguments" not in tool_attrs  # content only when asked

            after, rebuilt = provider()
            await agentlog.otel.export_thread(store, "d1", after)
            assert sorted(map(canonical, rebuilt.get_finished_spans())) == sorted(
                map(canonical, spans)
            )
            out = tmp_path / "d1.jsonl"
            await export_jsonl(store, "d1", out)
    from_file, filed = provider()
    agentlog.otel.Emitter(from_file).emit(agentlog.otel.spans_of_export(out))
    assert sorted(map(canonical, filed.get_finished_spans())) == sorted(map(canonical, spans))


def fetch_order(order_id: str) -> dict[str, Any]:
    """Fetch an order by its id."""
    raise KeyError(f"no order {order_id}")


def agent(state: AgentState) -> Message:
    if state.context[-1].role == "tool":
        return reply("that order does not exist; asking a human")
    return ask_tool("fetch_order", call_id="c1", order_id="Z-9")


def approve(state: AgentState) -> list[Message]:
    answer = interrupt("close the case?")
    return [reply(f"closed: {answer}")]


def failing_graph(store: EventStore) -> Any:
    graph: StateGraph[AgentState] = StateGraph(name="desk")
    graph.add_node("agent", ScriptedModel(agent))
    graph.add_node("tools", ToolNode([fetch_order]))
    graph.add_node("approve", approve)
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent", lambda s: "tools" if s.context[-1].tool_calls() else "approve"
    )
    graph.add_edge("tools", "agent")
    graph.add_edge("approve", END)
    return graph.compile(store)


async def test_a_tool_failure_an_interrupt_an_edit_and_a_resume(tmp_path: Path) -> None:
    live, exported = provider()
    async with SQLiteEventStore(tmp_path / "desk.db") as store:
        app = failing_graph(store)
        config = {"thread_id": "t"}
        async with agentlog.otel.follow(store, tracer_provider=live, capture_content=True):
            await app.ainvoke("where is Z-9?", config)
            edit = Message.text_message("please close it", role="user")
            await app.aupdate_state(config, {"messages": [edit]}, actor="ops")
            await app.ainvoke(Command(resume="yes"), config)
        spans = list(exported.get_finished_spans())
        assert tree(spans) == [
            "invoke_agent desk",
            "  agent",
            "  tools",
            "    execute_tool fetch_order",
            "  agent",
            "  approve",
            "invoke_agent desk",
            "  approve",
        ]
        tool = named(spans, "execute_tool fetch_order")[0]
        assert tool.status.status_code == StatusCode.ERROR
        assert "no order Z-9" in (tool.status.description or "")
        tool_attrs = dict(tool.attributes or {})
        assert tool_attrs["agentlog.tool.status"] == "failed"
        assert tool_attrs["gen_ai.tool.call.id"] == "c1"
        assert tool_attrs["gen_ai.tool.call.arguments"] == '{"order_id": "Z-9"}'
        first, second = named(spans, "invoke_agent desk")
        assert [e.name for e in first.events] == ["interrupt"]
        assert dict(first.events[0].attributes or {})["agentlog.interrupt.by_node"] is True
        assert [e.name for e in second.events] == ["human_edit", "resumed"]
        edited = dict(second.events[0].attributes or {})
        assert edited["agentlog.edit.by"] == "ops"
        assert dict(second.events[1].attributes or {})["agentlog.resume.value"] == '"yes"'

        after, rebuilt = provider()
        await agentlog.otel.export_thread(store, "t", after, capture_content=True)
        assert sorted(map(canonical, rebuilt.get_finished_spans())) == sorted(map(canonical, spans))


async def test_a_failed_run_is_an_error_span_naming_the_error(tmp_path: Path) -> None:
    def broken(state: AgentState) -> list[Message]:
        raise RuntimeError("the disk is full")

    graph: StateGraph[AgentState] = StateGraph(name="broken")
    graph.add_node("work", broken)
    graph.set_entry_point("work")
    graph.add_edge("work", END)
    async with SQLiteEventStore(tmp_path / "b.db") as store:
        app = graph.compile(store)
        with pytest.raises(Exception, match="the disk is full"):
            await app.ainvoke("go", {"thread_id": "b"})
        spans = await agentlog.otel.spans_of_thread(store, "b")
    run, node = (
        [s for s in spans if s.name == "invoke_agent broken"],
        [s for s in spans if s.name == "work"],
    )
    assert run[0].status == "error" and node[0].status == "error"
    assert run[0].attributes["error.type"] == "RuntimeError"
    assert run[0].attributes["agentlog.outcome"] == "failed"
    assert [e.name for e in run[0].events] == ["exception"]


async def test_a_traceparent_in_the_config_is_the_run_spans_parent(tmp_path: Path) -> None:
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    async with SQLiteEventStore(tmp_path / "tp.db") as store:
        app = failing_graph(store)
        config = {"thread_id": "t", "traceparent": f"00-{trace_id}-{parent_id}-01"}
        await app.ainvoke("where is Z-9?", config)
        spans = await agentlog.otel.spans_of_thread(store, "t")
    (run,) = [s for s in spans if s.name == "invoke_agent desk"]
    assert (f"{run.trace_id:032x}", run.parent_id, run.remote_parent) == (
        trace_id,
        int(parent_id, 16),
        True,
    )
    assert all(f"{s.trace_id:032x}" == trace_id for s in spans)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, "W3C"),
        ({"traceparent": "not a header\n"}, "not a W3C trace context"),
        ({"callbacks": [object()]}, "LangChain callbacks, which agentlog does not call"),
    ],
)
async def test_tracing_config_agentlog_cannot_honour_is_refused_before_anything_is_written(
    extra: dict[str, Any], says: str
) -> None:
    from agentlog.actors.engine.errors import TracingConfigError
    from agentlog.events import MemoryEventStore

    async with MemoryEventStore() as store:
        app = failing_graph(store)
        with pytest.raises(TracingConfigError, match=says):
            await app.ainvoke("hello", {"thread_id": "t", **extra})
        with pytest.raises(TracingConfigError, match=says):
            async for _ in app.astream("hello", {"thread_id": "t", **extra}):
                pass
        assert await store.last_seq("t") == 0


def points(reader: Any) -> dict[str, list[Any]]:
    """Each metric's data points, by name."""
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


async def test_the_follower_counts_runs_steps_and_tools_by_their_attributes(
    tmp_path: Path,
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    live, _ = provider()
    async with SQLiteEventStore(tmp_path / "m.db") as store:
        app = failing_graph(store)
        async with agentlog.otel.follow(store, tracer_provider=live, meter_provider=meters):
            await app.ainvoke("where is Z-9?", {"thread_id": "t"})
            await app.ainvoke(Command(resume="yes"), {"thread_id": "t"})
    found = points(reader)
    (started,) = found["agentlog.runs.started"]
    assert (started.value, dict(started.attributes)) == (1, {"gen_ai.agent.name": "desk"})
    ended = {p.attributes["agentlog.outcome"]: p.value for p in found["agentlog.runs.ended"]}
    assert ended == {"interrupted": 1, "completed": 1}
    (tool,) = found["agentlog.tool.duration"]
    assert dict(tool.attributes) == {
        "gen_ai.tool.name": "fetch_order",
        "agentlog.tool.status": "failed",
    }
    assert tool.count == 1 and tool.sum > 0
    steps = {p.attributes["agentlog.node"]: p.count for p in found["agentlog.step.duration"]}
    assert steps == {"agent": 2, "tools": 1, "approve": 2}


async def test_runtime_gauges_read_the_runtimes_figures(tmp_path: Path) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from agentlog.actors.runtime import AgentRuntime, EntryPoint

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    async with SQLiteEventStore(tmp_path / "r.db") as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("desk", failing_graph(store))
        runtime.register_entry_point(EntryPoint(id="ask", graph_id="desk"))
        agentlog.otel.observe_runtime(runtime, meters)
        async with runtime:
            await runtime.trigger_and_wait("ask", "where is Z-9?")
            found = points(reader)
    assert [p.value for p in found["agentlog.runtime.queue.depth"]] == [0]
    assert [p.value for p in found["agentlog.runtime.executing"]] == [0]
    latency = {
        p.attributes["agentlog.quantile"]: p.value for p in found["agentlog.store.commit.latency"]
    }
    assert set(latency) == {"p50", "p99"} and latency["p50"] > 0


async def test_a_follower_that_lets_folds_go_rebuilds_them_from_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentlog.actors.otel import live as live_module

    monkeypatch.setattr(live_module, "MAX_THREADS", 1)  # every other thread evicts the last
    live, exported = provider()
    async with SQLiteEventStore(tmp_path / "lru.db") as store:
        app = failing_graph(store)
        async with agentlog.otel.follow(store, tracer_provider=live):
            await app.ainvoke("where is Z-9?", {"thread_id": "t1"})  # paused
            await app.ainvoke("where is Z-9?", {"thread_id": "t2"})  # evicts t1's fold
            await app.ainvoke(Command(resume="yes"), {"thread_id": "t1"})
        expected = [s for t in ("t1", "t2") for s in await agentlog.otel.spans_of_thread(store, t)]
    got = {s.context.span_id: s for s in exported.get_finished_spans() if s.context}
    assert sorted(got) == sorted(s.span_id for s in expected)
    for span in expected:
        assert got[span.span_id].name == span.name
        assert dict(got[span.span_id].attributes or {}) == span.attributes


async def test_reading_a_thread_takes_a_config_with_callbacks_as_langgraph_does() -> None:
    from agentlog.events import MemoryEventStore

    async with MemoryEventStore() as store:
        app = failing_graph(store)
        await app.ainvoke("where is Z-9?", {"thread_id": "t"})
        state = await app.aget_state({"thread_id": "t", "callbacks": [object()]})
        assert state.execution_meta.status.value == "interrupted_before"
