"""A local HTTP server speaking the model providers' wire formats, for tests.

It answers `POST /v1/chat/completions`, `/v1/responses` (OpenAI) and `/v1/messages`
(Anthropic) from recorded responses under tests/fixtures/models/: JSON, or SSE when the
request asks for a stream. A test scripts what comes next with `script(Reply(...))`: an
HTTP error with its headers (429 with retry-after, 500, 401 ...), a malformed body, a slow
answer, a stream cut mid-way or held open. A request the real API would refuse (no
messages, tool results and calls that do not pair up, no max_tokens or unsigned thinking
for Anthropic) gets
its 400 instead. The real `openai` and `anthropic` clients talk to it through `base_url`;
every request's JSON body is kept in `requests`.

Run as a module (`python -m tests.workers.fake_provider`) it serves until killed, printing
its port first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "models"

DEFAULTS = {
    "/v1/chat/completions": "chat_text",
    "/v1/responses": "responses_text",
    "/v1/messages": "anthropic_text",
}
"""The fixture each endpoint answers with when nothing is scripted."""


def fixture_json(name: str) -> dict[str, Any]:
    """A recorded JSON response."""
    return json.loads((FIXTURES / f"{name}.json").read_text())  # type: ignore[no-any-return]


def fixture_sse(name: str) -> list[str]:
    """A recorded SSE stream, one event (its `event:`/`data:` lines) per item."""
    text = (FIXTURES / f"{name}.sse").read_text()
    return [part + "\n\n" for part in text.split("\n\n") if part.strip()]


@dataclass
class Reply:
    """One scripted answer.

    `fixture` names a recorded response (JSON, or SSE when the request streams); `body`
    replaces it (a dict as JSON, a str sent as is: malformed JSON); `cut_after` sends that
    many SSE events and drops the connection; `hold` sends them and then waits until the
    client goes away; `delay` waits before answering at all.
    """

    status: int = 200
    fixture: str | None = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    cut_after: int | None = None
    hold: bool = False
    delay: float = 0.0


@dataclass
class Seen:
    """A request the server received."""

    path: str
    headers: dict[str, str]
    body: Any


class FakeProvider:
    """The server; `async with FakeProvider() as server:` serves on 127.0.0.1, random port."""

    def __init__(self) -> None:
        self.queue: list[Reply] = []
        self.requests: list[Seen] = []
        self.held = asyncio.Event()
        """Set once a `hold` reply has sent its events (the stream is mid-way)."""
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with these, in order (then the defaults again)."""
        self.queue.extend(replies)

    async def __aenter__(self) -> FakeProvider:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            if not line:
                return
            _, path, _ = line.decode().split(" ", 2)
            headers: dict[str, str] = {}
            while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
                key, _, value = raw.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            data = await reader.readexactly(int(headers.get("content-length", "0")))
            body = json.loads(data) if data else None
            self.requests.append(Seen(path, headers, body))
            reply = self.queue.pop(0) if self.queue else Reply()
            if (problem := invalid(path, body)) is not None and reply.status == 200:
                reply = Reply(status=400, body=_error_body(problem))
            await self._answer(reply, path, body, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(
        self, reply: Reply, path: str, body: Any, writer: asyncio.StreamWriter
    ) -> None:
        if reply.delay:
            await asyncio.sleep(reply.delay)
        name = reply.fixture or DEFAULTS.get(path)
        streaming = isinstance(body, dict) and body.get("stream") is True
        if reply.status != 200 or reply.body is not None or not streaming or name is None:
            payload = reply.body
            if payload is None:
                payload = (
                    fixture_json(name) if reply.status == 200 and name else _error(reply.status)
                )
            text = payload if isinstance(payload, str) else json.dumps(payload)
            head = _head(reply.status, "application/json", reply.headers, len(text.encode()))
            writer.write(head + text.encode())
            await writer.drain()
            return
        events = fixture_sse(name)
        writer.write(_head(200, "text/event-stream", reply.headers, None))
        for index, event in enumerate(events):
            if reply.cut_after is not None and index >= reply.cut_after:
                if reply.hold:
                    self.held.set()
                    await reader_gone(writer)
                writer.transport.abort()  # no closing chunk: the client sees a cut stream
                return
            chunk = event.encode()
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def reader_gone(writer: asyncio.StreamWriter) -> None:
    """Wait until the peer closes its side (or dies)."""
    while not writer.transport.is_closing():
        await asyncio.sleep(0.05)
        try:
            writer.write(b"")
            await writer.drain()
        except ConnectionError:
            return


def invalid(path: str, body: Any) -> str | None:
    """Why the provider would refuse this request (HTTP 400), or None: the checks the real
    APIs make that a converter could get wrong (no messages, a tool result answering no
    call, a call left unanswered, Anthropic's required max_tokens and thinking signatures)."""
    if not isinstance(body, dict) or not body.get("model"):
        return "model: field required"
    if path == "/v1/messages":
        if not isinstance(body.get("max_tokens"), int):
            return "max_tokens: field required"
        if not body.get("messages"):
            return "messages: at least one message is required"
        return _unpaired_anthropic(body["messages"])
    if path == "/v1/chat/completions":
        if not body.get("messages"):
            return "'messages' must contain at least one message"
        return _unpaired_chat(body["messages"])
    if path == "/v1/responses" and not (body.get("input") or body.get("instructions")):
        return "'input' is required"
    return None


def _unpaired_chat(messages: list[dict[str, Any]]) -> str | None:
    waiting: set[str] = set()
    for message in messages:
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in waiting:
                return "messages with role 'tool' must be a response to a preceding 'tool_calls'"
            waiting.discard(message["tool_call_id"])
        elif waiting:
            return "an assistant message with 'tool_calls' must be followed by tool messages"
        if message.get("role") == "assistant":
            waiting = {c["id"] for c in message.get("tool_calls") or []}
    return None


def _unpaired_anthropic(messages: list[dict[str, Any]]) -> str | None:
    asked: set[str] = set()
    for message in messages:
        blocks = message["content"] if isinstance(message["content"], list) else []
        if any(b.get("type") == "thinking" and not b.get("signature") for b in blocks):
            return "thinking.signature: Field required"
        answered = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        if answered - asked:
            return "unexpected tool_use_id found in tool_result blocks"
        if asked and not asked <= answered:
            return "tool_use ids were found without tool_result blocks immediately after"
        asked = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    return None


def _error_body(message: str) -> dict[str, Any]:
    code = "invalid_request_error"
    return {"error": {"message": message, "type": code, "code": code}, "type": "error"}


def _error(status: int) -> dict[str, Any]:
    messages = {
        401: ("invalid_api_key", "Incorrect API key provided: sk-test."),
        404: ("model_not_found", "The model `no-such-model` does not exist."),
        400: ("invalid_request_error", "Invalid value for 'temperature'."),
        429: ("rate_limit_exceeded", "Rate limit reached for requests."),
        500: ("server_error", "The server had an error while processing your request."),
    }
    code, message = messages.get(status, ("error", f"HTTP {status}"))
    return {"error": {"message": message, "type": code, "code": code}, "type": "error"}


def _head(status: int, content_type: str, extra: dict[str, str], length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"content-type: {content_type}", "connection: close"]
    lines.append(
        f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    )
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _main() -> None:
    async with FakeProvider() as server:
        print(server.port, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main())
    sys.exit(0)
