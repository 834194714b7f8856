"""OpenTelemetry from the log: GenAI spans of every run, live or rebuilt after the fact.

Needs the `otel` extra: `pip install 'agentlog[otel]'`. The spans are folded from the
records (`agentlog.projections.spans`), so a live follower (`follow`) and an export of an
archived database or an export file (`export_thread`, `spans_of_export`) give the same
spans, ids and attributes alike.
"""

from agentlog.actors.otel.emit import (
    SCOPE,
    Emitter,
    LogIdGenerator,
    OtelConfigError,
    otlp_meter_provider,
    otlp_provider,
)
from agentlog.actors.otel.export import (
    ExportFileError,
    export_records,
    export_thread,
    spans_of_export,
    spans_of_thread,
)
from agentlog.actors.otel.live import SpanFollower, follow
from agentlog.actors.otel.metrics import SpanMetrics, observe_runtime
from agentlog.projections.spans import Span, SpanEvent, SpanFold, parse_traceparent

__all__ = [
    "SCOPE",
    "Emitter",
    "ExportFileError",
    "LogIdGenerator",
    "OtelConfigError",
    "Span",
    "SpanEvent",
    "SpanFold",
    "SpanFollower",
    "SpanMetrics",
    "export_records",
    "export_thread",
    "follow",
    "observe_runtime",
    "otlp_meter_provider",
    "otlp_provider",
    "parse_traceparent",
    "spans_of_export",
    "spans_of_thread",
]
