"""Hand the spans folded from the log (`agentlog.projections.spans`) to an OpenTelemetry
SDK tracer provider, with the ids, times, events and status the log gave them.

The spans go through the provider's own span processors and exporters (a batch processor
with the OTLP exporter, an in-memory one in tests), so what is configured for the
application's own spans applies to these too. Their ids come from `LogIdGenerator`, which
gives a span the ids its records derive while agentlog emits it, and random ids otherwise,
so it can also serve as the application's provider's id generator.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agentlog.events.errors import AgentlogError, InvalidArgumentError
from agentlog.projections.spans import Span

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Tracer as SdkTracer
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
    from opentelemetry.trace import SpanContext, SpanKind, StatusCode, TraceFlags
except ImportError as exc:  # pragma: no cover - the extra is installed in every test run
    raise ImportError(
        "agentlog.otel needs OpenTelemetry: pip install 'agentlog[otel]'", name=exc.name
    ) from exc

SCOPE = "agentlog"
"""The instrumentation scope of every span agentlog emits."""

_IDS: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "agentlog_otel_ids", default=None
)


class OtelConfigError(AgentlogError, ValueError):
    """OpenTelemetry is set up in a way agentlog cannot emit through (say, not an SDK
    tracer provider)."""


class LogIdGenerator(IdGenerator):
    """Trace and span ids derived from the log while agentlog emits a span; random ids (or
    `fallback`'s) for every other span. Give it to your own provider
    (`TracerProvider(id_generator=LogIdGenerator())`) or let `Emitter` use it on its
    tracer."""

    def __init__(self, fallback: IdGenerator | None = None) -> None:
        self._fallback = fallback or RandomIdGenerator()

    def generate_span_id(self) -> int:
        ids = _IDS.get()
        return ids[1] if ids is not None else self._fallback.generate_span_id()

    def generate_trace_id(self) -> int:
        ids = _IDS.get()
        return ids[0] if ids is not None else self._fallback.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return False


class Emitter:
    """Emits spans from the log through `tracer_provider` (an SDK `TracerProvider`)."""

    def __init__(self, tracer_provider: TracerProvider) -> None:
        if not isinstance(tracer_provider, SdkTracerProvider):
            raise OtelConfigError(
                f"tracer_provider must be an opentelemetry.sdk.trace.TracerProvider, got "
                f"{type(tracer_provider).__name__}: agentlog sets the ids of the spans it emits, "
                "which only the SDK's provider lets it do"
            )
        self.provider = tracer_provider
        tracer = tracer_provider.get_tracer(SCOPE, _version())
        if isinstance(tracer, SdkTracer) and not isinstance(tracer.id_generator, LogIdGenerator):
            tracer.id_generator = LogIdGenerator(tracer.id_generator)
        self._tracer: Tracer = tracer

    def emit(self, spans: Iterable[Span]) -> int:
        """Start and end each span with the log's ids and times; how many were emitted."""
        count = 0
        for span in spans:
            self._emit(span)
            count += 1
        return count

    def _emit(self, span: Span) -> None:
        context = Context()
        if span.parent_id is not None:
            parent = SpanContext(
                span.trace_id,
                span.parent_id,
                is_remote=span.remote_parent,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
            context = trace.set_span_in_context(trace.NonRecordingSpan(parent), context)
        token = _IDS.set((span.trace_id, span.span_id))
        try:
            live = self._tracer.start_span(
                span.name,
                context=context,
                kind=SpanKind.CLIENT if span.kind == "client" else SpanKind.INTERNAL,
                attributes=_attributes(span.attributes),
                start_time=span.start_ns,
                record_exception=False,
                set_status_on_exception=False,
            )
        finally:
            _IDS.reset(token)
        for event in span.events:
            live.add_event(event.name, _attributes(event.attributes), event.at_ns)
        if span.status == "error":
            live.set_status(StatusCode.ERROR, span.status_description)
        elif span.status == "ok":
            live.set_status(StatusCode.OK)
        live.end(span.end_ns)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Export what the provider's processors hold; whether they all finished in time."""
        return bool(self.provider.force_flush(int(timeout_s * 1000)))


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentlog")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return None


def _attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in attributes.items()}


def _resource(service_name: str | None) -> Resource:
    """The resource of `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` (or the name given),
    named "agentlog" when nothing names the service."""
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create({"service.name": service_name} if service_name else {})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "agentlog"}))
    return resource


def otlp_provider(service_name: str | None = None) -> TracerProvider:
    """A tracer provider exporting over OTLP/HTTP where the standard variables point
    (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
    `OTEL_EXPORTER_OTLP_HEADERS`, ...), its resource from `OTEL_SERVICE_NAME` and
    `OTEL_RESOURCE_ATTRIBUTES` (service name "agentlog" when neither names one)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol != "http/protobuf":
        raise InvalidArgumentError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}: agentlog exports OTLP over HTTP "
            "with protobuf bodies; set it to http/protobuf (or unset it) and point "
            "OTEL_EXPORTER_OTLP_ENDPOINT at the collector's HTTP port (4318)"
        )
    provider = SdkTracerProvider(resource=_resource(service_name), id_generator=LogIdGenerator())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def otlp_meter_provider(service_name: str | None = None) -> MeterProvider:
    """A meter provider exporting over OTLP/HTTP where the standard variables point
    (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT`), every
    `OTEL_METRIC_EXPORT_INTERVAL` milliseconds (60000 by default)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    return SdkMeterProvider(metric_readers=[reader], resource=_resource(service_name))
