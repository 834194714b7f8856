"""`ModelNode`: a graph node that calls a real model (OpenAI or Anthropic SDK) and records
every attempt beside the message it produced."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, Literal

from agentlog.actors.engine.context import NodeContext, current_context
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.modes import StreamMode
from agentlog.actors.engine.redact import redact
from agentlog.actors.engine.replaying import log_answers
from agentlog.actors.models._common import ModelAnswer, Tools, dumps, plain, request_hash
from agentlog.actors.models.anthropic_messages import (
    AnthropicStream,
    anthropic_tools,
    from_anthropic_message,
    to_anthropic_messages,
)
from agentlog.actors.models.errors import (
    ModelEmptyRequestError,
    ModelRefusedError,
    ModelSpecError,
    ModelUnavailableError,
)
from agentlog.actors.models.openai_chat import (
    ChatStream,
    chat_tools,
    from_chat_completion,
    to_chat_messages,
)
from agentlog.actors.models.openai_responses import (
    ResponsesStream,
    from_response,
    responses_tools,
    to_responses_input,
)
from agentlog.actors.models.replay import LoggedAnswers
from agentlog.actors.models.retry import ModelRetry, retry_after, status_of, verdict
from agentlog.events import ModelCalled
from agentlog.projections import (
    AgentState,
    Message,
    ReasoningBlock,
    StreamChunk,
    StreamEvent,
    TextBlock,
    ToolCallBlock,
    generate_id,
)
from agentlog.projections.ids import monotonic

__all__ = ["ModelNode"]

Api = Literal["chat", "responses", "anthropic"]
ANTHROPIC_MAX_TOKENS = 1024
"""`max_tokens` sent to Anthropic (which requires it) unless the node's params set one."""
LONG_ANTHROPIC = 600 * 128_000 // 3600
"""The `max_tokens` above which the Anthropic SDK refuses an unstreamed call (it expects
it to take over ten minutes): the node streams it instead."""


class ModelNode:
    """An agent node over an `openai.AsyncOpenAI` (any OpenAI-compatible server) or an
    `anthropic.AsyncAnthropic` client: it sends the state's context (with `system_prompt`
    and the tools' schemas) and returns the assistant message.

    Each attempt is recorded as a `model_called` fact in the step's commit (request hash,
    usage, latency, finish reason; failed attempts too). Rate limits, timeouts, 5xx and
    broken answers are retried per `retry`; a refused request raises `ModelRefusedError`,
    and a context with nothing to send `ModelEmptyRequestError` (no call is made).
    `stream` (default: when someone consumes `astream`, or Anthropic's `max_tokens` is
    too large for an unstreamed call) publishes deltas as they arrive;
    the log still gets one message. `replay_from` answers a request seen before from the
    log. Other keyword arguments (`temperature=`, `max_tokens=` ...) go to the provider, and
    are recorded; `extra_headers=` are sent but recorded by name only.
    """

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        tools: Tools = None,
        system_prompt: str | None = None,
        api: Literal["chat", "responses"] = "chat",
        stream: bool | None = None,
        retry: ModelRetry | None = None,
        timeout: float | None = None,
        replay_from: LoggedAnswers | None = None,
        **params: Any,
    ) -> None:
        provider = _provider_of(client)
        self.provider = provider
        self.api: Api = "anthropic" if provider == "anthropic" else api
        self.model = model
        self.system_prompt = system_prompt
        self.stream = stream
        self.retry = retry or ModelRetry()
        self.replay_from = replay_from
        headers = params.pop("extra_headers", None) or {}
        self._headers: dict[str, str] = dict(headers)
        """Sent with each request, kept out of the log and the hash (they may hold keys)."""
        self.params: dict[str, Any] = _json_params(params)
        """The params sent with every request, as each `model_called` records them."""
        if self.api == "anthropic":  # Anthropic requires max_tokens: record the one it is sent
            self.params.setdefault("max_tokens", ANTHROPIC_MAX_TOKENS)
        options: dict[str, Any] = {"max_retries": 0}  # every attempt is ours, to record it
        if timeout is not None:
            options["timeout"] = timeout
        self.client: Any = client.with_options(**options)
        make = {"chat": chat_tools, "responses": responses_tools, "anthropic": anthropic_tools}
        self.tools = make[self.api](tools)
        self._takes = _parameters(self._create())

    @classmethod
    def from_spec(
        cls,
        spec: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        **kwargs: Any,
    ) -> ModelNode:
        """`openai:MODEL` or `anthropic:MODEL`, with a client configured from `base_url` and
        `api_key` when given, else the usual environment variables (OPENAI_BASE_URL /
        OPENAI_API_KEY, ANTHROPIC_*); the other keywords are `ModelNode`'s."""
        options: dict[str, Any] = {"base_url": base_url, "api_key": api_key}
        options = {k: v for k, v in options.items() if v}
        provider, _, model = spec.strip().partition(":")
        provider, model = provider.strip().lower(), model.strip()
        if provider not in ("openai", "anthropic") or not model:
            raise ModelSpecError(
                f"model {spec!r} is not provider:model; use openai:MODEL or anthropic:MODEL "
                "(openai: also reaches any OpenAI-compatible server set in OPENAI_BASE_URL)"
            )
        try:
            if provider == "openai":
                import openai

                client: Any = openai.AsyncOpenAI(**options)
            else:
                import anthropic

                client = anthropic.AsyncAnthropic(**options)
        except ImportError as exc:
            raise ModelSpecError(
                f"the {provider} SDK is not installed: pip install 'agentlog[{provider}]'"
            ) from exc
        except Exception as exc:  # the SDKs raise their own base error for a missing key
            key = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
            raise ModelSpecError(f"cannot set up the {provider} client ({exc}); set {key}") from exc
        if provider == "anthropic" and client.api_key is None and client.auth_token is None:
            raise ModelSpecError("cannot set up the anthropic client: set ANTHROPIC_API_KEY")
        return cls(client, model=model, **kwargs)

    def fingerprint(self) -> dict[str, Any]:
        """What this node sends beside the context (the graph's fingerprint hashes it)."""
        return {
            "provider": self.provider,
            "api": self.api,
            "model": self.model,
            "system_prompt": self.system_prompt,
            "params": self.params,
            "tools": self.tools,
        }

    def request(self, state: AgentState) -> dict[str, Any]:
        """The request this node sends for `state` (without the streaming switches)."""
        system = self.system_prompt
        if state.context_summary:
            summary = f"Summary of the earlier conversation: {state.context_summary}"
            system = f"{system}\n\n{summary}" if system else summary
        request: dict[str, Any] = {"model": self.model}
        if self.api == "chat":
            request["messages"] = to_chat_messages(state.context, system)
        elif self.api == "responses":
            request["input"] = to_responses_input(state.context)
            if system:
                request["instructions"] = system
        else:
            extra, messages = to_anthropic_messages(state.context)
            joined = "\n\n".join(s for s in (system, extra) if s)
            if joined:
                request["system"] = joined
            request["messages"] = messages
        if self.tools:
            request["tools"] = self.tools
        return {**request, **self.params}

    async def __call__(self, state: AgentState) -> list[Message]:
        """Call the model (retrying what is transient); return its message."""
        context = current_context()
        request = self.request(state)
        if not (request.get("messages") or request.get("input") or request.get("instructions")):
            raise ModelEmptyRequestError(self.provider, self.model, context.node)
        digest = request_hash(self.provider, request)
        stream = self._streams(context)
        if (session := log_answers()) is not None:  # a replay test: the log answers
            called, message = session.model_answer(digest, request, context)
            context.record(called)
            return [message]
        if self.replay_from is not None:
            found = await self.replay_from.find(digest)
            if found is not None:
                message = self._answered_from_log(found, digest, context)
                if stream:  # a consumer rendering deltas sees the logged answer too
                    await self._publish_whole(message, context)
                return [message]
        for attempt in range(1, self.retry.attempts + 1):
            started = monotonic()
            try:
                answer = await self._attempt(request, context, attempt, stream)
            except Exception as exc:
                latency = (monotonic() - started) * 1000.0
                self._record(context, digest, attempt, latency, stream, failed=exc)
                judged = verdict(exc)
                if judged == "refuse":
                    raise ModelRefusedError(
                        self.provider, self.model, status_of(exc), _cause(exc)
                    ) from exc
                if judged == "raise":
                    raise
                if attempt == self.retry.attempts:
                    raise ModelUnavailableError(
                        self.provider, self.model, attempt, _cause(exc)
                    ) from exc
                if stream:
                    await context.publish(
                        self._chunk(context, attempt, kind="retry", error=_cause(exc))
                    )
                await self.retry.sleep(self.retry.delay(attempt, retry_after(exc)))
                continue
            latency = (monotonic() - started) * 1000.0
            self._record(context, digest, attempt, latency, stream, answer=answer)
            return [answer.message]
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _attempt(
        self, request: dict[str, Any], context: NodeContext, attempt: int, stream: bool
    ) -> ModelAnswer:
        create = self._create()
        request = _fitted(self._takes, request)
        if self._headers:
            request["extra_headers"] = self._headers
        if not stream:
            response = await create(**request)
            convert = {"chat": from_chat_completion, "responses": from_response}
            return convert.get(self.api, from_anthropic_message)(response)
        folder: ChatStream | ResponsesStream | AnthropicStream
        extra: dict[str, Any] = {"stream": True}
        if self.api == "chat":
            folder = ChatStream()
            extra["stream_options"] = {"include_usage": True}
        else:
            folder = ResponsesStream() if self.api == "responses" else AnthropicStream()
        events = await create(**request, **extra)
        try:
            async for event in events:
                for delta in folder.feed(plain(event)):
                    await context.publish(self._chunk(context, attempt, **delta))
        finally:
            await events.close()
        return folder.result()

    def _create(self) -> Callable[..., Any]:
        if self.api == "chat":
            return self.client.chat.completions.create  # type: ignore[no-any-return]
        if self.api == "responses":
            return self.client.responses.create  # type: ignore[no-any-return]
        return self.client.messages.create  # type: ignore[no-any-return]

    def _chunk(self, context: NodeContext, attempt: int, **data: Any) -> StreamChunk:
        info = {"node": context.node, "model": self.model, "attempt": attempt}
        return StreamChunk(event=StreamEvent.MESSAGE, data={**data, **info})

    def _record(
        self,
        context: NodeContext,
        digest: str,
        attempt: int,
        latency_ms: float,
        streamed: bool,
        *,
        answer: ModelAnswer | None = None,
        failed: BaseException | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        usage = answer.usage.model_dump() if answer and answer.usage else None
        context.record(
            ModelCalled(
                node=context.node,
                provider=self.provider,
                model=self.model,
                request_hash=digest,
                attempt=attempt,
                status="failed" if failed is not None else "completed",
                params=self._recorded(params),
                message_id=answer.message.message_id if answer else None,
                usage=usage,
                latency_ms=round(latency_ms, 3),
                finish_reason=answer.finish_reason if answer else None,
                response_id=answer.response_id if answer else None,
                error_type=type(failed).__name__ if failed is not None else None,
                error=_cause(failed)[:500] if failed is not None else None,
                streamed=streamed,
            )
        )

    def _recorded(self, params: dict[str, Any] | None) -> dict[str, Any]:
        """The params a `model_called` records: extra headers by name only."""
        recorded = self.params if params is None else params
        if self._headers:
            recorded = {**recorded, "extra_headers": sorted(self._headers)}
        return recorded

    def _streams(self, context: NodeContext) -> bool:
        """Whether this call streams: as told, else when someone consumes `astream` (in
        agentlog's chunks or the `messages` mode), or when the Anthropic SDK would refuse
        the call unstreamed (a `max_tokens` it expects to take over ten minutes, about
        21,000 and up, or over its limit for the model)."""
        if self.stream is not None:
            return self.stream
        projection = None if context.stream is None else context.stream.projection
        if context.stream is not None and (
            projection is None or projection.wants(StreamMode.MESSAGES)
        ):
            return True
        tokens = self.params.get("max_tokens")
        if self.api != "anthropic" or not isinstance(tokens, int):
            return False
        try:  # the SDK's own lower limits for some models
            from anthropic._constants import MODEL_NONSTREAMING_TOKENS
        except ImportError:
            return tokens > LONG_ANTHROPIC
        return tokens > min(
            LONG_ANTHROPIC, MODEL_NONSTREAMING_TOKENS.get(self.model, LONG_ANTHROPIC)
        )

    async def _publish_whole(self, message: Message, context: NodeContext) -> None:
        """A logged answer's reasoning, text and tool calls, one delta each."""
        for block in message.content:
            if isinstance(block, ReasoningBlock) and block.summary:
                delta: dict[str, Any] = {"kind": "reasoning", "delta": block.summary}
            elif isinstance(block, TextBlock) and block.text:
                delta = {"kind": "text", "delta": block.text}
            elif isinstance(block, ToolCallBlock):
                delta = {"kind": "tool_call", "delta": dumps(block.args), "call_id": block.id}
                delta["name"] = block.name
            else:
                continue
            await context.publish(self._chunk(context, 1, **delta, answered_from_log=True))

    def _answered_from_log(self, found: Message, digest: str, context: NodeContext) -> Message:
        """A fresh copy of a logged answer, recorded as a call the log answered."""
        meta = {**found.metadata, "answered_from_log": found.message_id}
        message = found.model_copy(
            update={"message_id": generate_id(), "metadata": meta}, deep=True
        )
        answer = ModelAnswer(
            message, found.metadata.get("finish_reason"), found.metadata.get("response_id"),
            self.model, found.usages,
        )  # fmt: skip
        params = {**self.params, "answered_from_log": True}
        self._record(context, digest, 1, 0.0, False, answer=answer, params=params)
        return message


_RESERVED = {
    "messages": "the node sends the state's context",
    "input": "the node sends the state's context",
    "system": "pass system_prompt=",
    "instructions": "pass system_prompt=",
    "max_retries": "the node retries, recording each attempt: pass retry=ModelRetry(attempts=N)",
    "stream_options": "the node sets them when it streams: pass stream=True or False",
    "api_key": "give it to the client (or ModelNode.from_spec), never to the log",
    "base_url": "give it to the client (or ModelNode.from_spec)",
}
"""Keyword arguments that are not provider params, and what to do instead."""


def _json_params(params: dict[str, Any]) -> dict[str, Any]:
    """The provider params as JSON (what is sent, hashed and recorded); a `GraphError`
    naming a reserved name or a value that is not JSON."""
    for name, value in params.items():
        if name in _RESERVED:
            raise GraphError(f"ModelNode does not take {name}=: {_RESERVED[name]}")
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise GraphError(
                f"ModelNode's {name}= is not JSON ({type(value).__name__}: {exc}): pass the JSON "
                "the provider takes (a response_format is a dict, say {'type': 'json_schema', "
                "'json_schema': {...}}, not a pydantic class)"
            ) from exc
    return json.loads(json.dumps(params))  # type: ignore[no-any-return]


def _parameters(create: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword arguments `create` names; None when it takes any."""
    try:
        params = inspect.signature(create).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params)


def _fitted(takes: frozenset[str] | None, request: dict[str, Any]) -> dict[str, Any]:
    """The request as the SDK's `create` takes it: what it has no parameter for (a param
    this SDK version does not name, a compatible server's own) goes in `extra_body`."""
    if takes is None or all(k in takes for k in request):
        return request
    fitted = {k: v for k, v in request.items() if k in takes}
    extra = {k: v for k, v in request.items() if k not in takes}
    fitted["extra_body"] = {**extra, **dict(request.get("extra_body") or {})}
    return fitted


def _provider_of(client: Any) -> str:
    """`openai` or `anthropic`, from the client's package; a `GraphError` for anything else."""
    package = type(client).__module__.split(".", 1)[0]
    if package in ("openai", "anthropic") and type(client).__name__.startswith("Async"):
        return package
    raise GraphError(
        f"ModelNode takes an openai.AsyncOpenAI or anthropic.AsyncAnthropic client, got "
        f"{type(client).__module__}.{type(client).__name__}: pass the async client"
    )


def _cause(exc: BaseException | None) -> str:
    """An exception as one line: its type and message."""
    if exc is None:
        return ""
    text = " ".join(str(exc).split()) or "no message"
    return redact(f"{type(exc).__name__}: {text}")  # a provider's error may quote its URL
