"""Webhook entry points: a delivery is verified (Standard Webhooks, GitHub's signature, or
the route's own verifier), then starts one run keyed by its delivery id, so a delivery seen
before starts nothing, across restarts too.

The checks are pure functions (no I/O, the time passed in); `receive` is the one coroutine,
an ASGI endpoint body the HTTP app mounts per webhook entry point.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import math
import re
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentlog.actors.engine.errors import GraphError
from agentlog.actors.http.limits import MAX_DEPTH, nesting_within, too_deep_message
from agentlog.actors.runtime.facade import RuntimeFacade
from agentlog.actors.runtime.spec import (
    EntryPoint,
    InvalidTriggerInputError,
    RuntimeNotStartedError,
    UnknownEntryPointError,
)
from agentlog.events.errors import AgentlogError, InvalidArgumentError
from agentlog.projections import Message, TextBlock

if TYPE_CHECKING:
    from agentlog.actors.runtime import AgentRuntime

MAX_BODY = 1 << 20
"""The default limit of a delivery's body, in bytes (1 MiB); larger ones get 413."""

SECRET_PREFIX = "whsec_"
"""Standard Webhooks' secret form: `whsec_` then the key in base64."""

MAX_DELIVERY_ID = 200
"""A delivery id is 1 to this many printable ASCII characters (it keys the run)."""

Headers = Mapping[str, str]
Verifier = Callable[[Headers, bytes, Sequence[str]], bool]

_DELIVERY_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_DELIVERY_ID}}}")
_TIMESTAMP = re.compile(r"[0-9]{1,15}")
_CONTENT_LENGTH = re.compile(r"[0-9]{1,19}")
_ID_HEADERS = ("webhook-id", "x-github-delivery", "x-request-id")


class WebhookRejected(AgentlogError):
    """A delivery was refused: `status` is its HTTP status (401 bad or missing signature,
    400 malformed, 413 too large, 405 method; 404, 500 and 503 when the entry point is gone,
    its secret is malformed or the runtime is not running) and `code` a stable name for the
    reason.

    The message says what is wrong; it never holds a secret or a header's value.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


# ---- secrets and signatures ------------------------------------------------------------------


def secret_key(secret: str) -> bytes:
    """The HMAC key of a secret: a `whsec_<base64>` secret is the bytes its base64 decodes
    to (Standard Webhooks' form); any other string is used as its UTF-8 bytes."""
    if not secret.startswith(SECRET_PREFIX):
        return secret.encode()
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not key:
        raise InvalidArgumentError(
            "a secret starting with 'whsec_' must be base64 after the prefix (Standard "
            "Webhooks' form); fix the entry point's secret, or drop the prefix to use the "
            "string itself as the key"
        )
    return key


def _standard_mac(key: bytes, delivery_id: str, timestamp: str, body: bytes) -> str:
    signed = delivery_id.encode() + b"." + timestamp.encode() + b"." + body
    return base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def sign_standard(secret: str, delivery_id: str, timestamp: int | str, body: bytes) -> str:
    """The `webhook-signature` header value a Standard Webhooks sender sends: `v1,<base64>`."""
    return "v1," + _standard_mac(secret_key(secret), delivery_id, str(timestamp), body)


def sign_github(secret: str, body: bytes) -> str:
    """The `X-Hub-Signature-256` header value GitHub sends: `sha256=<hex>`; GitHub's secrets
    are plain strings, used as their UTF-8 bytes (a `whsec_` prefix means nothing here)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _header(headers: Headers, name: str) -> str | None:
    """A header by its lower-case name, whatever case the mapping holds it in."""
    value = headers.get(name)
    if value is not None:
        return value
    for key, found in headers.items():
        if key.lower() == name:
            return found
    return None


def _checked_id(value: str, header: str) -> str:
    if not _DELIVERY_ID.fullmatch(value):
        raise WebhookRejected(
            400,
            "bad_delivery_id",
            f"the {header} header must be 1 to {MAX_DELIVERY_ID} printable ASCII characters "
            "(no spaces)",
        )
    return value


def _any_match(expected: Sequence[str], given: Sequence[str]) -> bool:
    """Whether any given value equals any expected one; every pair is compared in constant
    time, with no early exit, so timing tells nothing about which (if any) matched."""
    matched = False
    for want in expected:
        for got in given:
            matched |= hmac.compare_digest(want.encode(), got.encode("utf-8", "replace"))
    return matched


def verify_standard(
    headers: Headers,
    body: bytes,
    secrets: Sequence[str],
    *,
    now: float,
    tolerance_s: float = 300.0,
) -> str:
    """Check a Standard Webhooks delivery and return its delivery id (`webhook-id`).

    The signature is `v1,` + base64 HMAC-SHA256 of `id.timestamp.body`; any secret may
    match (rotation). The timestamp must lie within `tolerance_s` of `now`, either way, so
    a captured delivery cannot be replayed later. Raises `WebhookRejected`.
    """
    signature = _header(headers, "webhook-signature")
    if not signature:
        raise WebhookRejected(401, "missing_signature", "no webhook-signature header")
    delivery_id = _header(headers, "webhook-id")
    if delivery_id is None:
        raise WebhookRejected(400, "missing_delivery_id", "no webhook-id header")
    delivery_id = _checked_id(delivery_id, "webhook-id")
    timestamp = _header(headers, "webhook-timestamp")
    if timestamp is None or not _TIMESTAMP.fullmatch(timestamp):
        raise WebhookRejected(
            400,
            "bad_timestamp",
            "the webhook-timestamp header must be the send time in whole seconds since the epoch",
        )
    drift = now - int(timestamp)
    if abs(drift) > tolerance_s:
        when = "old" if drift > 0 else "in the future"
        raise WebhookRejected(
            401,
            "timestamp_out_of_tolerance",
            f"the delivery's timestamp is {abs(drift):.0f} s {when}; at most {tolerance_s:g} s "
            "is accepted (check the sender's clock, or it is a replayed delivery)",
        )
    given = [token[3:] for token in signature.split(" ") if token.startswith("v1,") and token[3:]]
    if not given:
        raise WebhookRejected(
            401, "bad_signature", "the webhook-signature header holds no 'v1,<base64>' signature"
        )
    expected = [_standard_mac(secret_key(s), delivery_id, timestamp, body) for s in secrets]
    if not _any_match(expected, given):
        raise WebhookRejected(
            401, "bad_signature", "no signature matches the entry point's secrets"
        )
    return delivery_id


def verify_github(headers: Headers, body: bytes, secrets: Sequence[str]) -> str:
    """Check a GitHub delivery (`X-Hub-Signature-256: sha256=<hex HMAC of the body>`) and
    return its delivery id (`X-GitHub-Delivery`, required: 400 without it).

    GitHub signs neither a time nor the delivery id: see the README on replays.
    """
    signature = _header(headers, "x-hub-signature-256")
    if not signature:
        raise WebhookRejected(401, "missing_signature", "no X-Hub-Signature-256 header")
    expected = [sign_github(s, body) for s in secrets]
    if not _any_match(expected, [signature]):
        raise WebhookRejected(
            401, "bad_signature", "the X-Hub-Signature-256 does not match the entry point's secrets"
        )
    delivery_id = _header(headers, "x-github-delivery")
    if delivery_id is None:
        raise WebhookRejected(400, "missing_delivery_id", "no X-GitHub-Delivery header")
    return _checked_id(delivery_id, "X-GitHub-Delivery")


def _header_delivery_id(headers: Headers) -> str | None:
    """The delivery id from `webhook-id`, else `X-GitHub-Delivery`, else `X-Request-Id`."""
    for name in _ID_HEADERS:
        value = _header(headers, name)
        if value is not None:
            return _checked_id(value, name)
    return None


def verify_custom(headers: Headers, body: bytes, secrets: Sequence[str], verify: Verifier) -> str:
    """Check a delivery with the route's own `verify(headers, body, secrets)`, which must
    return True (anything else, or an exception, refuses it: 401), and return the delivery
    id: the `webhook-id` header, else `X-GitHub-Delivery`, else `X-Request-Id`, else 400.
    """
    try:
        verdict: object = verify(headers, body, tuple(secrets))
    except Exception as exc:
        raise WebhookRejected(
            401,
            "bad_signature",
            f"the route's verifier refused the delivery (it raised {type(exc).__name__})",
        ) from None
    if asyncio.iscoroutine(verdict):
        verdict.close()
        raise WebhookRejected(
            401,
            "bad_signature",
            "the route's verifier returned a coroutine: it must be a plain function returning True",
        )
    if verdict is not True:
        raise WebhookRejected(401, "bad_signature", "the route's verifier refused the delivery")
    delivery_id = _header_delivery_id(headers)
    if delivery_id is None:
        raise WebhookRejected(
            400,
            "missing_delivery_id",
            "no delivery id: send a webhook-id, X-GitHub-Delivery or X-Request-Id header",
        )
    return delivery_id


def unsigned_delivery_id(headers: Headers, body: bytes) -> str:
    """The delivery id of an unsigned delivery: the `webhook-id`, `X-GitHub-Delivery` or
    `X-Request-Id` header, else `sha256:<hex of the body>`, so that a byte-identical
    re-delivery is a duplicate (and an identical body sent on purpose twice starts one run)."""
    return _header_delivery_id(headers) or "sha256:" + hashlib.sha256(body).hexdigest()


def verify_delivery(entry: EntryPoint, headers: Headers, body: bytes, *, now: float) -> str:
    """Check a delivery by its entry point's scheme and return its delivery id, or raise
    `WebhookRejected`; `now` is the time in seconds since the epoch."""
    if entry.unsigned:
        return unsigned_delivery_id(headers, body)
    if callable(entry.scheme):
        return verify_custom(headers, body, entry.secrets, entry.scheme)
    if entry.scheme == "github":
        return verify_github(headers, body, entry.secrets)
    return verify_standard(headers, body, entry.secrets, now=now, tolerance_s=entry.tolerance_s)


# ---- the body ----------------------------------------------------------------------------------


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _charset(content_type: str) -> str | None:
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number is too large for a 64-bit float")
    return value


def parse_body(body: bytes, content_type: str | None) -> tuple[str, Any]:
    """The body as text (UTF-8), and as what the entry node gets: the parsed JSON when the
    content type is JSON (`application/json` or `application/*+json`), else that text.

    Raises `WebhookRejected` (400) for invalid UTF-8, another declared charset, malformed
    JSON (NaN and infinities included), nesting deeper than `MAX_DEPTH`, or values the log
    cannot record (integers beyond 64 bits, lone surrogates).
    """
    content_type = content_type or ""
    charset = _charset(content_type)
    if charset not in (None, "utf-8", "utf8", "us-ascii"):
        raise WebhookRejected(
            400, "unsupported_charset", "the body must be UTF-8 (send charset=utf-8 or none)"
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WebhookRejected(
            400, "bad_encoding", f"the body is not valid UTF-8 (byte {exc.start} is not)"
        ) from None
    if not _is_json(content_type):
        return text, text
    try:
        parsed = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise WebhookRejected(400, "too_deep", too_deep_message()) from None
    except ValueError as exc:
        raise WebhookRejected(400, "malformed_json", f"the body is not valid JSON: {exc}") from None
    if not nesting_within(parsed, MAX_DEPTH):
        raise WebhookRejected(400, "too_deep", too_deep_message())
    try:
        msgspec.msgpack.encode(parsed)
    except (OverflowError, UnicodeEncodeError, RecursionError, TypeError, ValueError):
        raise WebhookRejected(
            400,
            "unrecordable_body",
            "the JSON body holds a value the log cannot record (integers must fit in 64 "
            "bits, strings must have no lone surrogates)",
        ) from None
    return text, parsed


async def read_body(request: Request, max_body: int = MAX_BODY) -> bytes:
    """The request's body, read in chunks and refused (413) as soon as it passes `max_body`
    bytes, so an oversized body is never held whole."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not _CONTENT_LENGTH.fullmatch(declared.strip()):
            raise WebhookRejected(
                400, "bad_content_length", "the Content-Length header is no number"
            )
        if int(declared) > max_body:
            raise _too_large(max_body)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body:
            raise _too_large(max_body)
    return bytes(body)


def _too_large(max_body: int) -> WebhookRejected:
    return WebhookRejected(413, "body_too_large", f"the body is larger than {max_body} bytes")


def webhook_message(entry: EntryPoint, delivery_id: str, text: str, parsed: Any) -> Message:
    """The user message a delivery becomes: the body's text, with the parsed body, the route
    and the delivery id in `metadata["webhook"]` for the entry node."""
    return Message(
        role="user",
        content=[TextBlock(text=text)],
        metadata={"webhook": {"route": entry.path, "delivery_id": delivery_id, "body": parsed}},
    )


# ---- the endpoint --------------------------------------------------------------------------------


class _KeyLocks:
    """One lock per (entry point, delivery id) while deliveries of it are in flight, so two
    copies arriving at once are one run and one duplicate, never two acceptances."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: tuple[str, str]) -> AsyncIterator[None]:
        lock, users = self._held.get(key, (asyncio.Lock(), 0))
        self._held[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._held[key]
            if users == 1:
                del self._held[key]
            else:
                self._held[key] = (lock, users - 1)


_LOCKS: weakref.WeakKeyDictionary[AgentRuntime, _KeyLocks] = weakref.WeakKeyDictionary()


def _error(exc: WebhookRejected, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": exc.code, "message": str(exc)}},
        status_code=exc.status,
        headers=dict(headers or {}),
    )


async def receive(
    runtime: AgentRuntime, entry: EntryPoint, request: Request, *, max_body: int = MAX_BODY
) -> Response:
    """Take one delivery for a webhook entry point: method (405), size (413), signature
    (401 / 400), body (400), then `runtime.trigger` keyed by the delivery id.

    Answers 202 `{"thread_id", "delivery_id", "duplicate"}` (duplicate: that id was seen
    before and started nothing), or `{"error": {"code", "message"}}`; a refused delivery
    writes nothing.
    """
    if entry.trigger != "webhook":
        raise InvalidArgumentError(
            f"receive() serves webhook entry points; {entry.id!r} has trigger={entry.trigger!r}"
        )
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
        raise InvalidArgumentError(f"max_body is a number of bytes >= 0, got {max_body!r}")
    rt = RuntimeFacade(runtime)
    methods = [m.upper() for m in entry.methods]
    if request.method.upper() not in methods:
        exc = WebhookRejected(
            405, "method_not_allowed", f"this webhook takes {', '.join(methods)} requests"
        )
        return _error(exc, {"Allow": ", ".join(methods)})
    try:
        body = await read_body(request, max_body)
        try:
            delivery_id = verify_delivery(entry, request.headers, body, now=rt.clock())
        except InvalidArgumentError:  # the entry point's own secret is malformed
            raise WebhookRejected(
                500, "webhook_misconfigured", "this webhook's secret is malformed: fix it"
            ) from None
        text, parsed = parse_body(body, request.headers.get("content-type"))
        message = webhook_message(entry, delivery_id, text, parsed)
        key = (entry.id, delivery_id)
        async with _LOCKS.setdefault(runtime, _KeyLocks()).hold(key):
            duplicate = rt.knows_key(entry.id, _sender(entry), delivery_id)
            thread_id = await _trigger(rt, entry, message, delivery_id)
    except WebhookRejected as exc:
        return _error(exc)
    return JSONResponse(
        {"thread_id": thread_id, "delivery_id": delivery_id, "duplicate": duplicate},
        status_code=202,
    )


def _sender(entry: EntryPoint) -> str:
    """Who a delivery acts as (the actor of its records, and its keys' caller)."""
    return f"webhook:{entry.id}"


async def _trigger(rt: RuntimeFacade, entry: EntryPoint, message: Message, delivery_id: str) -> str:
    try:
        return await rt.trigger(
            entry.id,
            {"messages": [message]},
            idempotency_key=delivery_id,
            actor=_sender(entry),
            cause="webhook",
        )
    except RuntimeNotStartedError:
        raise WebhookRejected(
            503, "not_running", "the runtime is not running; send the delivery again later"
        ) from None
    except UnknownEntryPointError:
        raise WebhookRejected(
            404, "no_entry_point", "this webhook is no longer registered"
        ) from None
    except (InvalidTriggerInputError, GraphError):
        raise WebhookRejected(
            400, "unrecordable_body", "the body cannot be recorded as a run's input"
        ) from None


__all__ = [
    "MAX_BODY",
    "MAX_DEPTH",
    "SECRET_PREFIX",
    "WebhookRejected",
    "parse_body",
    "read_body",
    "receive",
    "secret_key",
    "sign_github",
    "sign_standard",
    "unsigned_delivery_id",
    "verify_custom",
    "verify_delivery",
    "verify_github",
    "verify_standard",
    "webhook_message",
]
