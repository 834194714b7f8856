"""Parts of a runtime: a relay and a live span follower attached to an `AgentRuntime` start
with it, see the runs it makes, and stop with it; what cannot be a part is refused."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentlog.actors import END, StateGraph
from agentlog.actors.http import create_app
from agentlog.actors.relay import ChainCheck, Relay, redis_records
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.runtime.spec import RegistrationError
from agentlog.events import SQLiteEventStore
from agentlog.events.follow import last_position
from agentlog.otel import follow
from agentlog.projections import AgentState, Message

REDIS = "redis://127.0.0.1:6379/0"


def answer(state: AgentState) -> list[Message]:
    return [Message.text_message("done", role="assistant")]


def runtime_on(store: Any) -> AgentRuntime:
    graph: StateGraph[AgentState] = StateGraph(name="support")
    graph.add_node("answer", answer)
    graph.set_entry_point("answer")
    graph.add_edge("answer", END)
    runtime = AgentRuntime(store)
    runtime.add_graph("support", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    return runtime


@pytest.fixture
async def key() -> AsyncIterator[str]:
    import redis.asyncio

    name = f"t-parts-{uuid.uuid4().hex[:12]}"
    yield name
    async with redis.asyncio.Redis.from_url(REDIS) as conn:
        await conn.delete(name)


async def test_an_attached_relay_runs_with_the_runtime_and_sends_its_runs(
    tmp_path: Path, key: str
) -> None:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        runtime = runtime_on(store)
        relay = Relay(store, REDIS, name="parts", subject_template=key)
        await runtime.attach(relay)
        assert relay._task is None  # entered only when the runtime starts
        async with runtime:
            assert relay._task is not None and not relay._task.done()
            thread = await runtime.trigger("chat", "hi")
            await runtime.wait(thread)
            head = await last_position(store)
            await relay.wait_for(head)
            transport = httpx.ASGITransport(app=create_app(runtime))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                shown = (await http.get("/log/readers")).json()["readers"]
            assert [(r["name"], r["position"], r["head"], r["lag"]) for r in shown] == [
                ("parts", head, head, 0)
            ]
        assert relay._task is None  # left with the runtime
        ours = [r async for r in store.read(thread)]
    taken: list[dict[str, Any]] = []
    async with asyncio.timeout(60):  # a failure guard: the records are in the stream
        async for record in redis_records(REDIS, keys=(key,), check=ChainCheck()):
            taken.append(record)
            if record["position"] == head:
                break
    assert [r["seq"] for r in taken if r["thread_id"] == thread] == [r.seq for r in ours]


async def test_a_part_attached_while_running_starts_at_once_and_sees_the_next_run(
    tmp_path: Path,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        runtime = runtime_on(store)
        async with runtime:
            follower = follow(store, tracer_provider=provider, cursor="spans")
            await runtime.attach(follower)
            with pytest.raises(RegistrationError, match="attached already"):
                await runtime.attach(follower)
            thread = await runtime.trigger("chat", "hi")
            await runtime.wait(thread)
            following = runtime.parts.attached[0]
            assert following is follower
        names = {s.name for s in exporter.get_finished_spans()}
    assert any(n.startswith("invoke_agent") for n in names), names


async def test_what_is_no_async_context_manager_is_refused(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        runtime = runtime_on(store)
        with pytest.raises(RegistrationError, match="async context manager"):
            await runtime.attach(object())  # type: ignore[arg-type]
        assert runtime.parts.attached == []
