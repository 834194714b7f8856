"""An OTLP/HTTP receiver on loopback for the tests: it takes `POST /v1/traces`, decodes the
protobuf body with the official `opentelemetry-proto` messages, and keeps every span."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Received:
    """One span as the receiver decoded it, with the resource and scope it came under."""

    service: str
    scope: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[str]
    status_code: int


class Receiver:
    """The spans received so far, and an event set whenever more arrive."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.arrived = threading.Condition()
        self.url = ""

    def wait_for(self, count: int, timeout: float = 60.0) -> list[Received]:
        """The spans, once at least `count` have arrived (a failure guard, not a clock)."""
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.spans) >= count, timeout)
            return list(self.spans)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        got: list[Received] = []
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: _value(MessageToDict(a.value)) for a in span.attributes}
                    got.append(
                        Received(
                            service=resource.get("service.name", ""),
                            scope=scope_spans.scope.name,
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes=attributes,
                            events=[e.name for e in span.events],
                            status_code=span.status.code,
                        )
                    )
        with self.arrived:
            self.spans += got
            self.arrived.notify_all()


def _value(value: dict[str, Any]) -> Any:
    ((kind, found),) = value.items()
    if kind == "intValue":
        return int(found)
    if kind == "arrayValue":
        return tuple(_value(v) for v in found.get("values", []))
    return found


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver listening on 127.0.0.1 (its `url` is the OTLP endpoint to export to)."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            receiver.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
