"""`agentlog otel export`: a thread's spans rebuilt from a database or an export file and
sent over OTLP/HTTP where OTEL_EXPORTER_OTLP_ENDPOINT points, to a receiver on loopback
that decodes them with the official protobuf messages."""

from __future__ import annotations

import json
from pathlib import Path

from agentlog.actors.otel import spans_of_thread
from agentlog.events import SQLiteEventStore
from tests.helpers import agentlog
from tests.otlp_receiver import otlp_receiver


def demo_db(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "demo.db"
    done = agentlog("demo", "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    return db, json.loads(done.stdout)["thread_id"]


async def test_otel_export_sends_the_threads_spans_to_an_otlp_receiver(tmp_path: Path) -> None:
    db, thread = demo_db(tmp_path)
    async with SQLiteEventStore(db) as store:
        expected = await spans_of_thread(store, thread)
    with otlp_receiver() as receiver:
        done = agentlog(
            "otel", "export", "--thread", thread, "--db", db,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_SERVICE_NAME="support-desk",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"exported {len(expected)} spans of {thread!r}"
        got = receiver.wait_for(len(expected))
    assert len(got) == len(expected) == 9
    by_id = {span.span_id: span for span in got}
    for span in expected:
        received = by_id[f"{span.span_id:016x}"]
        assert received.name == span.name
        assert received.trace_id == f"{span.trace_id:032x}"
        parent = f"{span.parent_id:016x}" if span.parent_id is not None else ""
        assert received.parent_span_id == parent
        assert (received.start_ns, received.end_ns) == (span.start_ns, span.end_ns)
        assert received.attributes == span.attributes
        assert received.events == [e.name for e in span.events]
        assert (received.service, received.scope) == ("support-desk", "agentlog")


def test_otel_export_reads_an_export_file_and_prints_the_same_spans(tmp_path: Path) -> None:
    db, thread = demo_db(tmp_path)
    out = tmp_path / "thread.jsonl"
    assert agentlog("export", thread, "--db", db, "--out", out).returncode == 0
    from_db = agentlog("otel", "export", "--thread", thread, "--db", db, "--stdout")
    from_file = agentlog("otel", "export", "--thread", thread, "--file", out, "--stdout")
    assert from_db.returncode == 0 and from_file.returncode == 0, from_file.stderr
    assert from_db.stdout == from_file.stdout
    names = [json.loads(line)["name"] for line in from_db.stdout.splitlines()]
    assert names.count("invoke_agent support") == 2


def test_a_tampered_export_file_is_refused_before_any_span_is_sent(tmp_path: Path) -> None:
    db, thread = demo_db(tmp_path)
    out = tmp_path / "thread.jsonl"
    assert agentlog("export", thread, "--db", db, "--out", out).returncode == 0
    lines = out.read_text().splitlines()
    lines[3] = lines[3].replace('"agent"', '"agent2"', 1)
    out.write_text("\n".join(lines) + "\n")
    done = agentlog("otel", "export", "--thread", thread, "--file", out, "--stdout")
    assert done.returncode == 1
    assert "line 4 of the export is not intact" in done.stderr
    assert done.stdout == ""


def test_a_grpc_protocol_is_refused_with_what_to_set(tmp_path: Path) -> None:
    db, thread = demo_db(tmp_path)
    done = agentlog(
        "otel", "export", "--thread", thread, "--db", db, OTEL_EXPORTER_OTLP_PROTOCOL="grpc"
    )
    assert done.returncode == 1
    assert "set it to http/protobuf" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_an_export_file_of_another_thread_is_refused(tmp_path: Path) -> None:
    db, thread = demo_db(tmp_path)
    out = tmp_path / "thread.jsonl"
    assert agentlog("export", thread, "--db", db, "--out", out).returncode == 0
    done = agentlog("otel", "export", "--thread", "other", "--file", out, "--stdout")
    assert done.returncode == 1 and done.stdout == ""
    assert f"holds thread {thread!r}, not 'other'" in done.stderr
