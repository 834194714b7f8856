"""Metrics through the OpenTelemetry API: what the runs did, counted from the spans the log
gives (`SpanMetrics`, fed by the live follower), and how the runtime and its store are
doing, read from `AgentRuntime.stats()` whenever the meter provider collects
(`observe_runtime`).

| instrument | kind, unit | attributes |
| --- | --- | --- |
| `agentlog.runs.started` | counter | `gen_ai.agent.name` |
| `agentlog.runs.ended` | counter | `gen_ai.agent.name`, `agentlog.outcome` |
| `agentlog.step.duration` | histogram, s | `agentlog.node` |
| `agentlog.tool.duration` | histogram, s | `gen_ai.tool.name`, `agentlog.tool.status` |
| `gen_ai.client.token.usage` | histogram, {token} | `gen_ai.token.type`, provider, model |
| `gen_ai.client.operation.duration` | histogram, s | `gen_ai.operation.name`, provider, model |
| `agentlog.runtime.queue.depth` | gauge, {run} | (total) |
| `agentlog.runtime.executing` | gauge, {run} | |
| `agentlog.runtime.subscriber.lag` | gauge, {record} | (the largest) |
| `agentlog.store.commit.latency` | gauge, ms | `agentlog.quantile` (p50, p99) |

Counters count what the follower reads: after a crash, the records between its last saved
position and the crash are counted again (the spans they give are sent again with the same
ids, which a backend shows once; a counter has no such identity).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from agentlog.events.kinds import RunStarted
from agentlog.events.record import EventRecord
from agentlog.projections.spans import Span

if TYPE_CHECKING:
    from agentlog.actors.runtime import AgentRuntime

SCOPE = "agentlog"


class SpanMetrics:
    """The run, step, tool and model-call instruments, recorded from the log's spans."""

    def __init__(self, meter_provider: MeterProvider) -> None:
        meter = meter_provider.get_meter(SCOPE)
        self.started = meter.create_counter(
            "agentlog.runs.started", unit="{run}", description="Runs started."
        )
        self.ended = meter.create_counter(
            "agentlog.runs.ended",
            unit="{run}",
            description="Calls of runs that ended or paused, by outcome.",
        )
        self.steps = meter.create_histogram(
            "agentlog.step.duration", unit="s", description="How long a node's step took."
        )
        self.tools = meter.create_histogram(
            "agentlog.tool.duration", unit="s", description="How long a tool call took."
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens of a model call."
        )
        self.calls = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="How long a model call took."
        )

    def record(self, record: EventRecord, spans: Iterable[Span]) -> None:
        """Count what `record` started and the `spans` it closed."""
        event = record.event
        if isinstance(event, RunStarted):
            self.started.add(1, {"gen_ai.agent.name": event.graph or ""})
        for span in spans:
            self._span(span)

    def _span(self, span: Span) -> None:
        attrs = span.attributes
        operation = attrs.get("gen_ai.operation.name")
        seconds = (span.end_ns - span.start_ns) / 1e9
        if operation == "invoke_agent":
            self.ended.add(1, {
                "gen_ai.agent.name": str(attrs.get("gen_ai.agent.name", "")),
                "agentlog.outcome": str(attrs.get("agentlog.outcome", "")),
            })  # fmt: skip
        elif operation == "execute_tool":
            duration = attrs.get("agentlog.duration_ms")
            self.tools.record(
                float(duration) / 1000 if isinstance(duration, int | float) else seconds,
                {"gen_ai.tool.name": str(attrs.get("gen_ai.tool.name", "")),
                 "agentlog.tool.status": str(attrs.get("agentlog.tool.status", ""))},
            )  # fmt: skip
        elif operation == "chat":
            model = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": str(attrs.get("gen_ai.provider.name", "")),
                "gen_ai.request.model": str(attrs.get("gen_ai.request.model", "")),
            }
            self.calls.record(seconds, model)
            for kind in ("input", "output"):
                count = attrs.get(f"gen_ai.usage.{kind}_tokens")
                if isinstance(count, int):
                    self.tokens.record(count, {**model, "gen_ai.token.type": kind})
        elif "agentlog.node" in attrs and operation is None:
            duration = attrs.get("agentlog.duration_ms")
            self.steps.record(
                float(duration) / 1000 if isinstance(duration, int | float) else seconds,
                {"agentlog.node": str(attrs["agentlog.node"])},
            )


def observe_runtime(runtime: AgentRuntime, meter_provider: MeterProvider) -> None:
    """Register gauges read from `runtime.stats()` at each collection: its queue depth, the
    runs executing, its subscribers' largest lag and the store's commit latency."""
    meter = meter_provider.get_meter(SCOPE)

    def stat(
        read: Callable[[dict[str, Any]], list[Observation]],
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            return read(runtime.stats())

        return callback

    meter.create_observable_gauge(
        "agentlog.runtime.queue.depth",
        [stat(lambda s: [Observation(s["queued"])])],
        unit="{run}",
        description="Runs accepted and waiting to start.",
    )
    meter.create_observable_gauge(
        "agentlog.runtime.executing",
        [stat(lambda s: [Observation(s["executing"])])],
        unit="{run}",
        description="Runs executing now.",
    )
    meter.create_observable_gauge(
        "agentlog.runtime.subscriber.lag",
        [stat(lambda s: [Observation(max(s["subscriber_lag"], default=0))])],
        unit="{record}",
        description="How many records the slowest event subscriber is behind.",
    )
    meter.create_observable_gauge(
        "agentlog.store.commit.latency",
        [stat(lambda s: [
            Observation(value, {"agentlog.quantile": name})
            for name, value in s["commit_latency_ms"].items() if value is not None
        ])],
        unit="ms",
        description="The runtime's commit latency to its store (p50, p99).",
    )  # fmt: skip
