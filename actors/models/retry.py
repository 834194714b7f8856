"""When a failed model call is tried again, and after how long."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Literal

from agentlog.actors.models.errors import ModelResponseError

Verdict = Literal["retry", "refuse", "raise"]

_RETRIED_STATUS = frozenset({408, 409, 429})
"""Statuses below 500 worth another try: a timeout, a conflict, a rate limit."""
_TRANSIENT_TYPES = frozenset(
    {"APIConnectionError", "APITimeoutError", "APIResponseValidationError", "TransportError"}
)
"""Names (anywhere in an exception's classes) of the SDKs' and httpx's transient errors:
matched by name so neither provider SDK must be installed to classify the other's."""


@dataclass(frozen=True)
class ModelRetry:
    """How a model node retries: `attempts` in all, backing off exponentially from
    `base_delay` (capped at `max_delay`, with +-`jitter` spread) unless the provider said
    how long to wait (`retry-after`, honoured up to `max_retry_after` seconds)."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    jitter: float = 0.1
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False)
    """How to wait (a test passes one that records the delays)."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"ModelRetry(attempts={self.attempts}): at least 1 attempt")

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed `attempt` (1-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        base = min(self.base_delay * 2 ** (attempt - 1), self.max_delay)
        spread: float = random.uniform(-self.jitter, self.jitter)
        return max(0.0, float(base) * (1 + spread))


def verdict(exc: BaseException) -> Verdict:
    """`retry` for a rate limit, a timeout, a 5xx, a cut connection or an unreadable answer;
    `refuse` for any other HTTP error (401, 403, 404, 400 ..., and a 429 saying the quota is
    used up); `raise` for the rest."""
    status = status_of(exc)
    if status == 429 and _error_code(exc) in _QUOTA_CODES:
        return "refuse"  # the quota is used up: waiting does not bring it back
    if status is not None:
        return "retry" if status in _RETRIED_STATUS or status >= 500 else "refuse"
    if isinstance(exc, ModelResponseError | json.JSONDecodeError | TimeoutError):
        return "retry"
    if any(cls.__name__ in _TRANSIENT_TYPES for cls in type(exc).__mro__):
        return "retry"
    return "raise"


_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
"""Error codes OpenAI sends with a 429 that is not a rate limit but an exhausted quota."""


def _error_code(exc: BaseException) -> str | None:
    """The provider's error code (or type) in an SDK error's body, if any."""
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        return code
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        found = inner if isinstance(inner, dict) else body
        value = found.get("code") or found.get("type")
        return value if isinstance(value, str) else None
    return None


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an SDK's error carries, if any."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked to wait (`retry-after-ms`, or `retry-after` as seconds or
    an HTTP date), or None."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return float(ms) / 1000.0
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            when = parsedate_to_datetime(value)
            return max(0.0, (when - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None
