"""The caller's W3C trace context, handed from an HTTP request or a webhook delivery to the
trigger it causes: the HTTP app sets it for the request (`caller_trace`), the runtime records
it on the trigger's acceptance, and the run it starts takes it as its `traceparent`, so the
run's spans (`agentlog.otel`) hang under the caller's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from agentlog.projections.spans import parse_traceparent

_CALLER: ContextVar[str | None] = ContextVar("agentlog_caller_traceparent", default=None)


def caller_traceparent() -> str | None:
    """The trace context of the request being served, when it sent a valid one."""
    return _CALLER.get()


@contextlib.contextmanager
def caller_trace(header: str | None) -> Iterator[None]:
    """Within the block, the request's `traceparent` header is the caller's trace context;
    a malformed one is ignored, as W3C Trace Context asks (the request is served anyway)."""
    valid = None
    if header is not None and parse_traceparent(header) is not None:
        valid = header.strip().lower()
    token = _CALLER.set(valid)
    try:
        yield
    finally:
        _CALLER.reset(token)
