"""The span fold's invariants on real logs: cut a thread's records at any point, fold the
part before silently (as a follower restarted there does) and go on: the spans after the cut
are exactly those the whole fold closes after it, ids and all; every span id is unique, each
child sits in its parent's trace and inside its times. And on PostgreSQL: a live follower
keeps its cursor in the schema, and `agentlog otel export --dsn` rebuilds the same spans."""

from __future__ import annotations

import json
from pathlib import Path

from agentlog.actors import Command
from agentlog.actors.examples.support import run_demo
from agentlog.actors.otel import follow
from agentlog.events import EventRecord, EventStore, MemoryEventStore
from agentlog.events.cursors import load_cursor
from agentlog.projections import Message
from agentlog.projections.spans import SpanFold
from tests.helpers import agentlog
from tests.test_otel_spans import failing_graph, provider
from tests.workers.pg_env import DSN, fresh_schema, needs_pg


async def logs() -> list[list[EventRecord]]:
    """The records of the demo thread and of the failing graph's thread."""
    async with MemoryEventStore() as store:
        await run_demo(store, lambda chunk: None, lambda state: True, thread_id="d")
        app = failing_graph(store)
        await app.ainvoke("where is Z-9?", {"thread_id": "t"})
        edit = Message.text_message("please close it", role="user")
        await app.aupdate_state({"thread_id": "t"}, {"messages": [edit]}, actor="ops")
        await app.ainvoke(Command(resume="yes"), {"thread_id": "t"})
        return [[r async for r in store.read(t)] for t in ("d", "t")]


async def test_a_fold_cut_anywhere_and_resumed_closes_the_same_spans() -> None:
    for records in await logs():
        whole = SpanFold(records[0].thread_id)
        closed = [whole.feed(r) for r in records]
        for cut in range(len(records) + 1):
            resumed = SpanFold(records[0].thread_id)
            for record in records[:cut]:
                resumed.feed(record)  # silently, as a restarted follower does
            after = [span for record in records[cut:] for span in resumed.feed(record)]
            assert after == [span for spans in closed[cut:] for span in spans], cut


async def test_span_ids_are_unique_and_children_sit_inside_their_parents() -> None:
    for records in await logs():
        fold = SpanFold(records[0].thread_id)
        spans = [span for r in records for span in fold.feed(r)]
        by_id = {span.span_id: span for span in spans}
        assert len(by_id) == len(spans)
        for span in spans:
            assert span.start_ns <= span.end_ns
            parent = by_id.get(span.parent_id) if span.parent_id is not None else None
            if parent is not None:
                assert parent.trace_id == span.trace_id
                assert parent.start_ns <= span.start_ns and span.end_ns <= parent.end_ns


@needs_pg
async def test_on_postgresql_the_cursor_is_kept_and_export_rebuilds_the_same_spans(
    tmp_path: Path,
) -> None:
    from agentlog.events.stores.postgres import PostgresEventStore

    async with fresh_schema() as schema:
        store: EventStore
        async with PostgresEventStore(DSN, schema=schema) as store:
            live, exported = provider()
            app = failing_graph(store)
            async with follow(store, tracer_provider=live, cursor="otel") as f:
                await app.ainvoke("where is Z-9?", {"thread_id": "t"})
                await app.ainvoke(Command(resume="yes"), {"thread_id": "t"})
            assert await load_cursor(store, "otel") == f.position > 0
        url = f"{DSN}?schema={schema}"
        done = agentlog("otel", "export", "--thread", "t", "--dsn", url, "--stdout")
        assert done.returncode == 0, done.stderr
        printed = [json.loads(line) for line in done.stdout.splitlines()]
        live_spans = sorted(exported.get_finished_spans(), key=lambda s: s.context.span_id)
        assert sorted(int(p["span_id"], 16) for p in printed) == [
            s.context.span_id for s in live_spans
        ]
        by_id = {int(p["span_id"], 16): p for p in printed}
        for span in live_spans:
            shown = by_id[span.context.span_id]
            assert shown["name"] == span.name
            assert (shown["start_ns"], shown["end_ns"]) == (span.start_time, span.end_time)
            assert shown["attributes"] == json.loads(json.dumps(dict(span.attributes or {})))


async def test_cancels_stops_forks_and_stop_requests_are_events_of_their_run() -> None:
    from agentlog.events.kinds import (
        Forked,
        NodeEntered,
        Resumed,
        RunCancelled,
        RunStarted,
        Stopped,
        StopRequested,
    )

    async with MemoryEventStore() as store:
        script = [
            ([Forked(source_thread="src", source_seq=4, state={})], None, "ops"),
            ([RunStarted(entry_node="a", graph="g")], "r1", "user"),
            ([NodeEntered(node="a")], "r1", "a"),
            ([StopRequested(by="ops", reason="lunch")], "r1", "ops"),
            ([Stopped(node="a", reason="asked")], "r1", "runtime"),
            ([Resumed(by="user", node="a")], "r1", "user"),
            ([NodeEntered(node="a")], "r1", "a"),
            ([RunCancelled(by="ops", node="a", reason="wrong order")], "r1", "ops"),
        ]
        for seq, (events, run_id, actor) in enumerate(script):
            await store.append("f", events, expected_seq=seq, run_id=run_id, actor=actor)
        records = [r async for r in store.read("f")]
    fold = SpanFold("f")
    spans = [span for record in records for span in fold.feed(record)]
    runs = [s for s in spans if s.name == "invoke_agent g"]
    assert [s.attributes["agentlog.outcome"] for s in runs] == ["stopped", "cancelled"]
    assert [e.name for e in runs[0].events] == ["forked", "stop_requested", "stopped"]
    assert runs[0].events[0].attributes["agentlog.fork.source_thread"] == "src"
    assert [e.name for e in runs[1].events] == ["resumed", "cancelled"]
    assert runs[1].events[1].attributes["agentlog.reason"] == "wrong order"
    assert {s.trace_id for s in spans} == {runs[0].trace_id}  # one run, one trace
    assert [s.name for s in spans if s.parent_id is not None] == ["a", "a"]
