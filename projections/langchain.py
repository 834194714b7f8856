"""LangChain messages and agentlog's, converted both ways (install `agentlog[langchain]`).

This module lives beside the `Message` model because the one reader of messages
(`agentlog.projections.messages`, behind a run's input, a node's output, a tool's `Command` and
a state edit) hands it any object it does not know, so a LangChain message is read wherever
agentlog reads messages; the engine and the tools above it only call it.

Nothing here imports `langchain_core` until a conversion needs it: telling whether an object
is a LangChain message looks at `sys.modules`, since a program holding one has imported it.

Both directions keep what the two models share: the id, the role (`HumanMessage` user,
`AIMessage` and `AIMessageChunk` assistant, `SystemMessage` system, `ToolMessage` tool), the text
and other content, tool calls, a tool message's `tool_call_id` and error status, token usage
(`usage_metadata`), the `name` (kept in `Message.metadata["name"]`), `response_metadata` (the
rest of `Message.metadata`) and a reasoning text (`additional_kwargs["reasoning_content"]`).
LangChain's `RemoveMessage` becomes agentlog's. A tool result that is not text is sent to
LangChain as JSON text.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentlog.projections.ids import generate_id
from agentlog.projections.messages import (
    AudioBlock,
    DocumentBlock,
    ImageBlock,
    InvalidMessageError,
    MediaRef,
    Message,
    ReasoningBlock,
    RemoveMessage,
    TextBlock,
    TokenUsages,
    ToolCallBlock,
    ToolResultBlock,
    VideoBlock,
    _content_blocks,
)

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

__all__ = [
    "from_langchain",
    "is_langchain_message",
    "read_foreign",
    "to_langchain",
    "to_langchain_messages",
]

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
"""LangChain's message `type`s (and `ChatMessage` roles) as agentlog roles."""

_CHAT_ROLES = {**_ROLES, "user": "user", "assistant": "assistant", "developer": "system"}

_CHUNKS = {
    "AIMessageChunk": "ai",
    "HumanMessageChunk": "human",
    "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool",
    "ChatMessageChunk": "chat",
}
"""A streamed chunk's `type` and the message it is a piece of (stored as a whole message)."""

_REASONING_KEY = "reasoning_content"
"""Where `Message.reasoning` travels in `additional_kwargs` (the key several providers use)."""

_SKIPPED_PARTS = frozenset({"tool_use", "tool_call", "function_call"})
"""Content parts of an AI message that repeat its `tool_calls` (Anthropic's `tool_use`)."""


def is_langchain_message(value: object) -> bool:
    """True for a LangChain message (any `BaseMessage`, `RemoveMessage` among them)."""
    module = sys.modules.get("langchain_core.messages")
    return module is not None and isinstance(value, module.BaseMessage)


def read_foreign(value: Any) -> Any:
    """`value` as agentlog reads it: a LangChain message converted (a `Message`, or a
    `RemoveMessage` for LangChain's), anything else returned as it is."""
    return from_langchain(value) if is_langchain_message(value) else value


def from_langchain(message: BaseMessage) -> Message | RemoveMessage:
    """The agentlog form of a LangChain message; `InvalidMessageError` for one agentlog has
    no form for (a `FunctionMessage`, or a `ChatMessage` with an unknown role)."""
    kind = message.type
    if kind == "remove":
        return RemoveMessage(message.id)
    role = _role_of(message)
    content = _content_of(message, role)
    data: dict[str, Any] = {
        "message_id": message.id if message.id is not None else generate_id(),
        "role": role,
        "content": content,
        "metadata": dict(message.response_metadata or {}),
    }
    if message.name is not None:
        data["metadata"]["name"] = message.name
    reasoning = (message.additional_kwargs or {}).get(_REASONING_KEY)
    if isinstance(reasoning, str):
        data["reasoning"] = reasoning
    usage = getattr(message, "usage_metadata", None)
    if usage:
        data["usages"] = _usages_from(usage)
    return Message.model_validate(data)


def _role_of(message: BaseMessage) -> str:
    kind = _CHUNKS.get(message.type, message.type)
    if kind == "chat":
        given = str(getattr(message, "role", ""))
        if given in _CHAT_ROLES:
            return _CHAT_ROLES[given]
        raise InvalidMessageError(
            f"LangChain ChatMessage role {given!r} is not one agentlog knows "
            f"({', '.join(sorted(_CHAT_ROLES))})"
        )
    if kind not in _ROLES:
        raise InvalidMessageError(
            f"a LangChain {type(message).__name__} (type {message.type!r}) has no agentlog "
            "form: use HumanMessage, AIMessage, SystemMessage or ToolMessage"
        )
    return _ROLES[kind]


def _content_of(message: BaseMessage, role: str) -> list[Any]:
    raw = message.content
    parts: list[Any] = [raw] if isinstance(raw, str) and raw else []
    if isinstance(raw, list):
        parts = [p for p in raw if not (isinstance(p, Mapping) and p.get("type") in _SKIPPED_PARTS)]
        parts = [_part(p) for p in parts]
    if role == "tool":
        texts = [p.text if isinstance(p, TextBlock) else p for p in _blocks(message, parts)]
        if all(isinstance(t, str) for t in texts):
            output: Any = "".join(texts)
        else:
            output = [t.model_dump() if hasattr(t, "model_dump") else t for t in texts]
        failed = getattr(message, "status", "success") == "error"
        call_id = str(getattr(message, "tool_call_id", "") or "")
        if not call_id:
            raise InvalidMessageError("a LangChain ToolMessage needs the tool_call_id it answers")
        status = "failed" if failed else "completed"
        return [ToolResultBlock(call_id=call_id, output=output, is_error=failed, status=status)]
    blocks = _blocks(message, parts)
    for call in getattr(message, "tool_calls", None) or []:
        ident = str(call.get("id") or generate_id())
        blocks.append(ToolCallBlock(id=ident, name=call["name"], args=call["args"]))
    return blocks


def _part(part: Any) -> Any:
    """One LangChain content part in a form `_content_blocks` reads: a provider's reasoning
    part (`reasoning` text, Anthropic's `thinking`, OpenAI's list of summary texts) as a
    reasoning block, LangChain's standard media blocks as ours, the rest (our own blocks
    among them) as they are."""
    if not isinstance(part, Mapping):
        return part
    if part.get("type") in _MEDIA and "media" not in part:
        return _media_part(part)
    if part.get("type") not in ("reasoning", "thinking"):
        return part
    summary = part.get("summary")
    if isinstance(summary, str):
        return part  # one of ours
    found = part.get("reasoning", part.get("thinking"))
    if isinstance(summary, list):
        found = "".join(str(s.get("text", "")) for s in summary if isinstance(s, Mapping))
    return ReasoningBlock(summary=found) if isinstance(found, str) else part


_MEDIA = {"image": ImageBlock, "audio": AudioBlock, "video": VideoBlock, "file": DocumentBlock}
"""LangChain's standard media blocks (`{"type": "image", "url": ...}`) and ours for them."""


def _media_part(part: Mapping[str, Any]) -> Any:
    """A standard media block by URL, base64 data or file id (LangChain 1's keys, or 0.3's
    `source_type` with `data` / `id`) as our block; anything else as it is."""
    source = part.get("source_type")
    url = part.get("url")
    data = part.get("base64") or (part.get("data") if source == "base64" else None)
    file_id = part.get("file_id") or (part.get("id") if source == "id" else None)
    kind = "url" if url else "data" if data else "file_id" if file_id else None
    if kind is None:
        return part
    media = MediaRef(
        kind=kind, url=url, data_base64=data, file_id=file_id, mime_type=part.get("mime_type")
    )
    return _MEDIA[str(part["type"])](media=media)


def _blocks(message: BaseMessage, parts: list[Any]) -> list[Any]:
    try:
        return _content_blocks(parts)
    except InvalidMessageError as exc:
        why = str(exc).split("; messages can be given as ", 1)[0]
        raise InvalidMessageError(
            f"the content of a LangChain {message.type} message: {why}"
        ) from exc


def _usages_from(usage: Mapping[str, Any]) -> TokenUsages:
    given = usage.get("input_token_details") or {}
    made = usage.get("output_token_details") or {}
    return TokenUsages(
        prompt_tokens=int(usage.get("input_tokens", 0)),
        completion_tokens=int(usage.get("output_tokens", 0)),
        total_tokens=int(usage.get("total_tokens", 0)),
        reasoning_tokens=int(made.get("reasoning", 0)),
        cache_read_input_tokens=int(given.get("cache_read", 0)),
        cache_creation_input_tokens=int(given.get("cache_creation", 0)),
        audio_tokens=given.get("audio", 0),
    )


def _usage_metadata(usages: TokenUsages) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": usages.prompt_tokens,
        "output_tokens": usages.completion_tokens,
        "total_tokens": usages.total_tokens,
    }
    given = {
        "cache_read": usages.cache_read_input_tokens,
        "cache_creation": usages.cache_creation_input_tokens,
        "audio": usages.audio_tokens,
    }
    given = {k: v for k, v in given.items() if v}
    if given:
        usage["input_token_details"] = given
    if usages.reasoning_tokens:
        usage["output_token_details"] = {"reasoning": usages.reasoning_tokens}
    return usage


def to_langchain(message: Message) -> BaseMessage:
    """The LangChain form of an agentlog message (see the module's account of what is kept).

    Needs `langchain-core` (`pip install 'agentlog[langchain]'`)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    metadata = dict(message.metadata)
    name = metadata.pop("name", None)
    common: dict[str, Any] = {
        "id": str(message.message_id),
        "response_metadata": metadata,
    }
    if isinstance(name, str):
        common["name"] = name
    if message.reasoning is not None:
        common["additional_kwargs"] = {_REASONING_KEY: message.reasoning}
    if message.role == "tool":
        result = next((b for b in message.content if isinstance(b, ToolResultBlock)), None)
        if result is None:
            raise InvalidMessageError(
                f"tool message {message.message_id!r} holds no tool result, so it has no "
                "LangChain ToolMessage form"
            )
        status = "error" if result.is_error else "success"
        return ToolMessage(
            content=_tool_content(result.output),
            tool_call_id=result.call_id,
            status=status,
            **common,
        )
    content = _lc_content(b for b in message.content if not isinstance(b, ToolCallBlock))
    if message.role == "assistant":
        calls = [
            {"name": c.name, "args": dict(c.args), "id": c.id, "type": "tool_call"}
            for c in message.tool_calls()
        ]
        extra: dict[str, Any] = {"tool_calls": calls}
        if message.usages is not None:
            extra["usage_metadata"] = _usage_metadata(message.usages)
        return AIMessage(content=content, **extra, **common)
    if message.role == "system":
        return SystemMessage(content=content, **common)
    return HumanMessage(content=content, **common)


def to_langchain_messages(messages: Iterable[Message]) -> list[BaseMessage]:
    """`to_langchain` of each message, in order: what a chat model's `invoke` takes."""
    return [to_langchain(m) for m in messages]


def _tool_content(output: Any) -> str:
    if isinstance(output, str):
        return output
    return json.dumps(output, default=str, ensure_ascii=False)


def _lc_content(blocks: Iterable[Any]) -> Any:
    """Content blocks as LangChain content: one text as a str, otherwise a list of parts."""
    blocks = list(blocks)
    if not blocks:
        return ""
    first = blocks[0]
    if len(blocks) == 1 and isinstance(first, TextBlock) and first.text and not first.annotations:
        return first.text
    parts: list[Any] = []
    for block in blocks:
        if isinstance(block, TextBlock) and not block.annotations:
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock) and _plain_url(block):
            parts.append({"type": "image_url", "image_url": {"url": block.media.url}})
        else:
            parts.append(block.model_dump())
    return parts


def _plain_url(block: ImageBlock) -> bool:
    """True for an image given by URL alone, which OpenAI's `image_url` part says whole."""
    media = block.media
    rest = media.model_dump(exclude={"kind", "url"}, exclude_defaults=True)
    plain = media.kind == "url" and bool(media.url) and not str(media.url).startswith("data:")
    return plain and not rest and block.alt_text is None and block.bbox is None
