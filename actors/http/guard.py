"""What a request must be before the API acts on it, checked in front of every route.

- **Host**: one of the allowed names (loopback names always, plus those configured), so a
  page on a rebinding domain (`Host: evil.example` resolving to 127.0.0.1) reads nothing.
- **Origin**: a request that changes something (any method but GET, HEAD, OPTIONS) from a
  browser page of another origin (an `Origin` that is neither this server nor configured,
  or `Sec-Fetch-Site: cross-site`) is refused (403 `cross_origin`) before it is read. An
  empty body with no `Origin` is a non-browser client (LangGraph's SDK posts cancel and copy
  that way) and goes on.
- **Body**: read whole within `body_timeout` seconds (408 `body_timeout`, the connection
  closed), so a client trickling bytes holds nothing for long; outside the webhook routes
  (which take text and check their own bodies) a non-empty body must be JSON (415
  `unsupported_media_type`) nesting at most `MAX_DEPTH` deep (400 `too_deep`), so no value
  that reads could not show is ever written.
- **Size**: a body over the limit is refused with 413 (`BodyLimit`), counted as it arrives.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import Collection, Iterable
from typing import Any

from agentlog.actors.http.limits import MAX_DEPTH, nesting_within, too_deep_message

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing: a cross-origin page may send them (it cannot read answers)."""
BODY_TIMEOUT_S = 30.0
"""The default time a request's whole body may take to arrive, from its headers."""


def is_loopback_name(host: str) -> bool:
    """Whether `host` (no port) names this machine's loopback: `localhost` (or a name under
    it) or a loopback address."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a `Host` header, without its port or IPv6 brackets, lowercased."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    name, _, port = value.rpartition(":")
    return name if name and port.isdigit() else value.rstrip(":")


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class RequestGuard:
    """An ASGI middleware refusing, before any route (or token check) runs, what the module
    docstring lists; a refusal writes nothing."""

    def __init__(
        self,
        app: Any,
        *,
        allowed_hosts: Iterable[str] | None = None,
        allowed_origins: Iterable[str] = (),
        exempt_paths: Collection[str] = (),
        body_timeout: float = BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        hosts = {h.strip().lower().strip("[]").rstrip(".") for h in allowed_hosts or ()}
        self.any_host = "*" in hosts
        self.hosts = frozenset(hosts - {"*"})
        self.origins = frozenset(o.strip().lower().rstrip("/") for o in allowed_origins)
        self.exempt = frozenset(exempt_paths)
        self.body_timeout = body_timeout

    def host_allowed(self, header: str | None) -> bool:
        if header is None or self.any_host:
            return True  # no Host: HTTP/1.0, never a browser (every browser sends one)
        name = host_name(header)
        return is_loopback_name(name) or name in self.hosts

    def origin_allowed(self, origin: str, host: str | None) -> bool:
        origin = origin.strip().lower().rstrip("/")
        if origin in self.origins or "*" in self.origins:
            return True
        _, sep, netloc = origin.partition("://")
        return bool(sep) and host is not None and netloc == host.strip().lower()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for key, value in scope.get("headers") or []:
            headers.setdefault(key.lower(), value)

        def header(name: bytes) -> str | None:
            value = headers.get(name)
            return None if value is None else value.decode("latin-1")

        host = header(b"host")
        if not self.host_allowed(host):
            await answer(
                send, 400, "host_not_allowed",
                f"this server does not answer for the host {host!r}: name it by a loopback "
                "name, or start it with --allowed-host NAME (create_app(allowed_hosts=...))",
            )  # fmt: skip
            return
        method = scope.get("method", "GET").upper()
        if method not in SAFE_METHODS:
            origin = header(b"origin")
            cross = (
                not self.origin_allowed(origin, host)
                if origin is not None
                else (header(b"sec-fetch-site") or "").strip().lower() == "cross-site"
            )
            if cross:
                await answer(
                    send, 403, "cross_origin",
                    f"a {method} from the web page of another origin ({origin or 'cross-site'}) "
                    "changes nothing here: call the API from its own origin, a non-browser "
                    "client, or an origin the server allows (--allowed-origin)",
                )  # fmt: skip
                return
        length = header(b"content-length")
        if (length is None or length.strip() in ("", "0")) and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body: nothing to read or check
            return
        try:
            async with asyncio.timeout(self.body_timeout):
                body, ended = await _read_body(receive)
        except TimeoutError:
            await answer(
                send, 408, "body_timeout",
                f"the request body did not arrive within {self.body_timeout:g} s",
                close=True,
            )  # fmt: skip
            return
        if ended and scope.get("path") not in self.exempt and body:
            refusal = _refusal(body, header(b"content-type") or "")
            if refusal is not None:
                await answer(send, *refusal)
                return
        await self.app(scope, _replay(body, ended, receive), send)


def _refusal(body: bytes, content_type: str) -> tuple[int, str, str] | None:
    """Why a non-empty body is refused (status, code, message), or None."""
    if not _is_json(content_type):
        return (
            415,
            "unsupported_media_type",
            f"the body must be JSON sent as application/json, not {content_type or 'untyped'!r}",
        )
    try:
        parsed = json.loads(body)
    except RecursionError:
        return 400, "too_deep", too_deep_message()
    except ValueError:
        return None  # malformed: the route says so (422 invalid_request)
    if not nesting_within(parsed, MAX_DEPTH):
        return 400, "too_deep", too_deep_message()
    return None


async def _read_body(receive: Any) -> tuple[bytes, bool]:
    """The whole body, and whether it ended (False: the client left, or it was cut short)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replay(body: bytes, ended: bool, receive: Any) -> Any:
    """A `receive` handing the app the body read already, then the client's own messages
    (a disconnect), as if nothing had read it."""
    given = False

    async def replayed() -> Any:
        nonlocal given
        if not given:
            given = True
            if ended:
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}
        return await receive()

    return replayed


async def answer(send: Any, status: int, code: str, message: str, *, close: bool = False) -> None:
    """An error answer (`{"error": {"code", "message"}}`) sent from ASGI middleware, before
    any route runs."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse a request body over `max_body` bytes with 413, whether it declares its length
    or streams it: the bytes are counted as they arrive, never held beyond the limit."""

    def __init__(self, app: Any, max_body: int) -> None:
        self.app, self.max_body = app, max_body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await self._refuse(send)
            return
        seen = 0
        over = False

        async def counted() -> Any:
            nonlocal seen, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:  # the request is never handled: the answer is a 413
                    over = True
                    return {"type": "http.disconnect"}
            return message

        refused = False

        async def sending(message: Any) -> None:
            nonlocal refused
            if over:
                if not refused:
                    refused = True
                    await self._refuse(send)
                return
            await send(message)

        await self.app(scope, counted, sending)
        if over and not refused:
            await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        message = f"request bodies are limited to {self.max_body} bytes"
        await answer(send, 413, "body_too_large", message)
