"""What live tracing costs the agent loop: `workload.py`'s loop (plain `def` nodes, the
workload of bench/compare.py) run alone and run inside `agentlog.otel.follow`, in one run.

With tracing, a follower of the log on the same event loop folds every committed record
into spans and hands them to an SDK tracer provider whose batch processor encodes each
batch as an OTLP/HTTP protobuf request (the exporter's own encoder) and drops it, so the
figure holds the whole cost on the agent's process but the network. The traced time runs
from `ainvoke` until the follower has emitted the run's last span (the follower may lag
behind the run; its catching up is counted). Rounds alternate plain / traced on fresh
SQLite files, each round swapping which goes first; medians of steps/s are reported with
the median of the per-round ratios (target: traced at least 0.9 of plain).

Usage: .venv/bin/python bench/otel.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import _common as common
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from workload import Loop, first_input

import agentlog.otel
from agentlog.events import SQLiteEventStore
from agentlog.events.follow import last_position

TARGET = 0.9


class EncodingExporter(SpanExporter):
    """Encodes each batch as the OTLP/HTTP exporter would send it, then drops it."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.bytes += len(encode_spans(spans).SerializeToString())
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


async def one_run(path: Path, steps: int, traced: bool) -> tuple[float, float, int]:
    """Steps per second of one `ainvoke` of the loop, per wall-clock second and per second
    of the process's CPU time (all its threads: the writer's, the exporter's), and the spans
    exported. The CPU figure is the one another process's load on the machine moves least."""
    async with SQLiteEventStore(path) as store:
        app = Loop("def-tool", steps).graph().compile(store, recursion_limit=steps + 10)
        if not traced:
            start, cpu = time.perf_counter(), time.process_time()
            result = await app.ainvoke(first_input(), {"thread_id": "t"}, include_state=True)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            done = result["state"].execution_meta.step
            return done / seconds, done / cpu, 0
        exporter = EncodingExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        async with agentlog.otel.follow(store, tracer_provider=provider) as follower:
            start, cpu = time.perf_counter(), time.process_time()
            result = await app.ainvoke(first_input(), {"thread_id": "t"}, include_state=True)
            await follower.wait_for(await last_position(store))
            provider.force_flush()  # the exporter's encoding is counted too
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        provider.shutdown()
        done = result["state"].execution_meta.step
        return done / seconds, done / cpu, exporter.spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 200, 3 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    steps = 200 if args.quick else 1000
    rounds = args.rounds or (3 if args.quick else 7)
    plain: list[float] = []
    traced: list[float] = []
    cpu: dict[str, list[float]] = {"plain": [], "traced": []}
    spans = 0
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(one_run(Path(tmp) / "warm.db", 20, True))  # untimed warm-up
        for r in range(rounds):
            for kind in ("plain", "traced") if r % 2 == 0 else ("traced", "plain"):
                rate, per_cpu, count = asyncio.run(
                    one_run(Path(tmp) / f"{kind}-{r}.db", steps, kind == "traced")
                )
                (traced if kind == "traced" else plain).append(rate)
                cpu[kind].append(per_cpu)
                spans = max(spans, count)
    ratios = [t / p for t, p in zip(traced, plain, strict=True)]
    ratio = round(common.median(ratios), 3)
    cpu_ratios = [t / p for t, p in zip(cpu["traced"], cpu["plain"], strict=True)]
    common.emit(
        {
            "bench": "otel",
            "steps": steps,
            "rounds": rounds,
            "spans_per_run": spans,
            "steps_per_s": {
                "plain": round(common.median(plain), 1),
                "traced": round(common.median(traced), 1),
            },
            "ratio_traced_to_plain": ratio,
            "ratio_of_medians": round(common.median(traced) / common.median(plain), 3),
            "round_ratios": [round(r, 3) for r in ratios],
            "steps_per_cpu_s": {k: round(common.median(v), 1) for k, v in cpu.items()},
            "cpu_ratio_traced_to_plain": round(common.median(cpu_ratios), 3),
            "target": TARGET,
            "met": ratio >= TARGET,
            "note": "median of per-round ratios, rounds alternating plain / traced (and which "
            "goes first); traced time includes the follower catching up with the run's last record",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
