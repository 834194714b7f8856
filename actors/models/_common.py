"""What the providers' converters share: plain data, the converted answer, tool arguments,
media URLs, tool schemas and the request hash."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from agentlog.actors.models.errors import ModelResponseError, ModelTruncatedError
from agentlog.actors.tools.node import ToolLike, ToolNode
from agentlog.projections import MediaRef, Message, TokenUsages, ToolResultBlock

Tools = ToolNode | Sequence[Callable[..., Any] | ToolLike] | None
"""What a model node is told it may call: a `ToolNode`, or functions and ready tools."""


@dataclass(frozen=True)
class ModelAnswer:
    """One provider answer, converted: the message and what the log records beside it."""

    message: Message
    finish_reason: str | None = None
    response_id: str | None = None
    model: str | None = None
    usage: TokenUsages | None = None


def plain(value: Any) -> Any:
    """A provider SDK object (pydantic) or a mapping as plain dicts and lists."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def as_dict(value: Any, what: str) -> dict[str, Any]:
    """`plain(value)`, which must be a dict; a `ModelResponseError` naming `what` otherwise."""
    data = plain(value)
    if not isinstance(data, dict):
        raise ModelResponseError(f"{what} is a {type(data).__name__}, not a JSON object")
    return data


CUT_AT_LIMIT = frozenset({"length", "max_tokens", "max_output_tokens"})
"""Finish reasons that say the answer stopped at the token limit (chat, Anthropic, Responses)."""


def parse_arguments(raw: Any, name: str, finish: str | None = None) -> dict[str, Any]:
    """A tool call's arguments (a JSON string or a dict) as a dict; arguments that are not
    JSON in an answer cut at the token limit (`finish`) raise `ModelTruncatedError`."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            if finish in CUT_AT_LIMIT:
                raise ModelTruncatedError(name, str(finish)) from exc
            raise ModelResponseError(
                f"the model's arguments for tool {name!r} are not JSON ({exc}): {raw[:80]!r}"
            ) from exc
    if not isinstance(raw, dict):
        raise ModelResponseError(f"the model's arguments for tool {name!r} are not an object")
    return raw


def agentflow_calls(calls: Sequence[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Tool calls in the seed's `Message.tools_calls` form (OpenAI's, arguments as JSON)."""
    return [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": dumps(args)}}
        for cid, name, args in calls
    ]


def dumps(value: Any) -> str:
    """Compact JSON, keys as given (what providers are sent as arguments)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def result_text(block: ToolResultBlock) -> str:
    """A tool result's output as the text a provider takes: a str as is, else JSON."""
    return block.output if isinstance(block.output, str) else dumps(block.output)


def media_from_url(url: str, mime: str | None = None) -> MediaRef:
    """A URL, or a `data:<mime>;base64,<data>` URL kept inline."""
    if url.startswith("data:") and "," in url:
        header, data = url[5:].split(",", 1)
        return MediaRef(kind="data", data_base64=data, mime_type=header.split(";", 1)[0] or mime)
    return MediaRef(kind="url", url=url, mime_type=mime)


def media_url(media: MediaRef, default_mime: str) -> str | None:
    """Media as a URL, by its kind: a data URL for inline data, its URL; None for a
    provider file id (or a reference missing what its kind needs)."""
    if media.kind == "data":
        if media.data_base64 is None:
            return None
        return f"data:{media.mime_type or default_mime};base64,{media.data_base64}"
    return media.url if media.kind == "url" else None


def usage_of(
    prompt: int | None,
    completion: int | None,
    total: int | None = None,
    *,
    reasoning: int | None = None,
    cache_read: int | None = None,
    cache_write: int | None = None,
    audio: int | None = None,
) -> TokenUsages:
    """Token counts as `TokenUsages` (missing counts are 0; the total defaults to the sum)."""
    p, c = int(prompt or 0), int(completion or 0)
    return TokenUsages(
        prompt_tokens=p,
        completion_tokens=c,
        total_tokens=int(total) if total is not None else p + c,
        reasoning_tokens=int(reasoning or 0),
        cache_read_input_tokens=int(cache_read or 0),
        cache_creation_input_tokens=int(cache_write or 0),
        audio_tokens=int(audio or 0),
    )


def function_schemas(tools: Tools) -> list[dict[str, Any]]:
    """The tools' OpenAI function schemas ({"type": "function", "function": {...}}), the
    form every converter starts from; the same as `ToolNode.schemas()`."""
    if tools is None:
        return []
    if isinstance(tools, ToolNode):
        return tools.schemas()
    return ToolNode(list(tools)).schemas()  # its checks: one name per tool, clear refusals


def request_hash(provider: str, request: Mapping[str, Any]) -> str:
    """SHA-256 of the request as sent (provider, model, messages, tools, params), in
    canonical JSON; streaming or not does not change it, so either answers the other."""
    body = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
    canonical = json.dumps(
        {"provider": provider, "request": body},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()
