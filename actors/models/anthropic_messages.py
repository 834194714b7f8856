"""Anthropic's Messages API to and from `Message`s: pure functions, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentlog.actors.models._common import (
    ModelAnswer,
    Tools,
    agentflow_calls,
    as_dict,
    dumps,
    function_schemas,
    parse_arguments,
    result_text,
    usage_of,
)
from agentlog.actors.models.errors import ModelResponseError, ModelStreamError
from agentlog.projections import (
    AnnotationRef,
    ContentBlock,
    DocumentBlock,
    ErrorBlock,
    ImageBlock,
    MediaRef,
    Message,
    ReasoningBlock,
    RemoteToolCallBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    generate_id,
)
from agentlog.projections.messages import Role

__all__ = [
    "AnthropicStream",
    "anthropic_tools",
    "from_anthropic_message",
    "from_anthropic_messages",
    "to_anthropic_messages",
]

PROVIDER = "anthropic"


def from_anthropic_message(response: Any) -> ModelAnswer:
    """A Messages-API response (the SDK's `Message` or its JSON) as an assistant message.

    Reads text (with citations), thinking (its signature kept in
    `metadata["thinking_signatures"]`, which Anthropic needs when it is sent back),
    redacted thinking (kept in metadata) and tool uses. `prompt_tokens` counts every input
    token, cached or not, as OpenAI's does; the cache counts are kept apart too.
    """
    data = as_dict(response, "the Anthropic message")
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise ModelResponseError(f"the Anthropic message has no content list: {dumps(data)[:120]}")
    finish = data.get("stop_reason")
    content, meta = _read_blocks(blocks, finish)
    calls = [(b.id, b.name, b.args) for b in content if isinstance(b, ToolCallBlock)]
    usages = None
    usage = data.get("usage")
    if isinstance(usage, dict):
        read = int(usage.get("cache_read_input_tokens") or 0)
        write = int(usage.get("cache_creation_input_tokens") or 0)
        usages = usage_of(
            int(usage.get("input_tokens") or 0) + read + write,
            usage.get("output_tokens"),
            cache_read=read,
            cache_write=write,
        )
    meta |= {"provider": PROVIDER}
    meta |= {k2: data[k1] for k1, k2 in (("model", "model"), ("id", "response_id")) if data.get(k1)}
    if finish:
        meta["finish_reason"] = finish
    thoughts = "".join(b.summary for b in content if isinstance(b, ReasoningBlock))
    message = Message(
        role="assistant",
        content=content,
        tools_calls=agentflow_calls(calls) or None,
        reasoning=thoughts or None,
        usages=usages,
        metadata=meta,
    )
    return ModelAnswer(message, finish, data.get("id"), data.get("model"), usages)


def _read_blocks(
    blocks: Sequence[Any], finish: str | None = None
) -> tuple[list[ContentBlock], dict[str, Any]]:
    """Anthropic content blocks as ours, and what only metadata can keep; `finish` (the
    stop reason) tells a tool use cut at the token limit from a broken one."""
    content: list[ContentBlock] = []
    signatures: list[str | None] = []
    redacted: list[str] = []
    for raw in blocks:
        block: dict[str, Any] = raw if isinstance(raw, dict) else {"type": "text", "text": str(raw)}
        kind = block.get("type")
        if kind == "text":
            refs = [
                AnnotationRef(url=c.get("url"), title=c.get("title") or c.get("document_title"))
                for c in block.get("citations") or []
            ]
            content.append(TextBlock(text=str(block.get("text", "")), annotations=refs))
        elif kind == "thinking":
            content.append(ReasoningBlock(summary=str(block.get("thinking", ""))))
            signatures.append(block.get("signature"))
        elif kind == "redacted_thinking":
            redacted.append(str(block.get("data", "")))
        elif kind in ("tool_use", "server_tool_use"):
            name = str(block.get("name") or "")
            call_id = str(block.get("id") or generate_id())
            args = parse_arguments(block.get("input"), name, finish)
            cls = ToolCallBlock if kind == "tool_use" else RemoteToolCallBlock
            content.append(cls(id=call_id, name=name, args=args))
        elif kind in ("image", "document"):
            media = _media(block.get("source") or {})
            if kind == "image":
                content.append(ImageBlock(media=media))
            else:
                text = (
                    (block.get("source") or {}).get("data")
                    if media.kind == "url" and media.url is None
                    else None
                )
                content.append(DocumentBlock(media=media, text=text))
        elif kind == "tool_result":
            output = block.get("content")
            if isinstance(output, list):
                output = "".join(str(p.get("text", "")) for p in output if isinstance(p, dict))
            content.append(
                ToolResultBlock(
                    call_id=str(block.get("tool_use_id")),
                    output=output,
                    is_error=bool(block.get("is_error")),
                )
            )
    meta: dict[str, Any] = {}
    if any(signatures):
        meta["thinking_signatures"] = signatures
    if redacted:
        meta["redacted_thinking"] = redacted
    return content, meta


def _media(source: dict[str, Any]) -> MediaRef:
    kind = source.get("type")
    if kind == "base64":
        return MediaRef(
            kind="data", data_base64=source.get("data"), mime_type=source.get("media_type")
        )
    if kind == "file":
        return MediaRef(kind="file_id", file_id=source.get("file_id"))
    if kind == "text":
        return MediaRef(kind="url", mime_type=source.get("media_type") or "text/plain")
    return MediaRef(kind="url", url=source.get("url"))


def from_anthropic_messages(messages: Sequence[Any]) -> list[Message]:
    """Messages-API request messages (`{"role", "content"}`) as `Message`s: a user turn
    holding only tool results becomes a tool message, as our contexts keep them."""
    out: list[Message] = []
    for raw in messages:
        entry = as_dict(raw, "an Anthropic message")
        body = entry.get("content")
        blocks = [{"type": "text", "text": body}] if isinstance(body, str) else list(body or [])
        content, meta = _read_blocks(blocks)
        role: Role = "assistant" if entry.get("role") == "assistant" else "user"
        if content and all(isinstance(b, ToolResultBlock) for b in content):
            role = "tool"
        out.append(Message(role=role, content=content, metadata=meta))
    return out


def to_anthropic_messages(context: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """A context as the Messages API takes it: the system messages' text (for `system`)
    and the user/assistant messages, each turn's blocks in order.

    Tool messages become user turns of `tool_result` blocks (consecutive ones merged, as
    the API requires); thinking goes back with its signature when the message kept one,
    and is left out when it did not (reasoning of another model, which Anthropic refuses).
    Blocks Anthropic cannot carry (audio, video, data, annotations) are left out; an error
    block is sent as text.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in context:
        if message.role == "system":
            system.append(message.text())
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if out and out[-1]["role"] == role == "user" and message.role == "tool":
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return "\n\n".join(system), out


def _blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    signatures = list(message.metadata.get("thinking_signatures") or [])
    for data in message.metadata.get("redacted_thinking") or []:
        blocks.append({"type": "redacted_thinking", "data": data})
    for block in message.content:
        if isinstance(block, TextBlock):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ErrorBlock):
            blocks.append({"type": "text", "text": block.message})
        elif isinstance(block, ReasoningBlock):
            signature = signatures.pop(0) if signatures else None
            if signature:  # Anthropic refuses thinking it did not sign (another model's)
                blocks.append(
                    {"type": "thinking", "thinking": block.summary, "signature": signature}
                )
        elif isinstance(block, ToolCallBlock | RemoteToolCallBlock):
            blocks.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.args}
            )
        elif isinstance(block, ToolResultBlock):
            result: dict[str, Any] = {
                "type": "tool_result", "tool_use_id": block.call_id, "content": result_text(block),
            }  # fmt: skip
            if block.is_error or block.status in ("failed", "rejected", "abandoned"):
                result["is_error"] = True
            blocks.append(result)
        elif isinstance(block, ImageBlock | DocumentBlock):
            source = _source(block)
            if source is not None:
                blocks.append(
                    {
                        "type": "image" if isinstance(block, ImageBlock) else "document",
                        "source": source,
                    }
                )
    return blocks


def _source(block: ImageBlock | DocumentBlock) -> dict[str, Any] | None:
    media = block.media
    if media.kind == "data" and media.data_base64 is not None:
        default = "image/png" if isinstance(block, ImageBlock) else "application/pdf"
        data = media.data_base64
        return {"type": "base64", "media_type": media.mime_type or default, "data": data}
    if media.kind == "file_id" and media.file_id:
        return {"type": "file", "file_id": media.file_id}
    if media.kind == "url" and media.url:
        return {"type": "url", "url": media.url}
    if isinstance(block, DocumentBlock) and block.text is not None:
        return {"type": "text", "media_type": "text/plain", "data": block.text}
    return None


def anthropic_tools(tools: Tools) -> list[dict[str, Any]]:
    """Tools as Messages-API tool schemas (`{"name", "description", "input_schema"}`)."""
    return [
        {
            "name": f["name"],
            "description": f.get("description", ""),
            "input_schema": f["parameters"],
        }
        for f in (s["function"] for s in function_schemas(tools))
    ]


class AnthropicStream:
    """Folds Messages-API stream events into the message they stream, yielding deltas.

    `result()` raises `ModelStreamError` when the stream ended before `message_stop`.
    """

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}
        self.done = False

    def feed(self, event: Any) -> list[dict[str, Any]]:
        """Take one stream event; return its deltas."""
        data = as_dict(event, "an Anthropic stream event")
        kind = data.get("type")
        if kind == "message_start":
            self.message = as_dict(data.get("message"), "message_start's message")
        elif kind == "content_block_start":
            block = dict(data.get("content_block") or {})
            self.blocks[int(data.get("index", len(self.blocks)))] = block
        elif kind == "content_block_delta":
            index = int(data.get("index", 0))
            block = self.blocks.setdefault(index, {"type": "text", "text": ""})
            delta = data.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
                return [{"kind": "text", "delta": delta.get("text", "")}]
            if dtype == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
                return [{"kind": "reasoning", "delta": delta.get("thinking", "")}]
            if dtype == "signature_delta":
                block["signature"] = block.get("signature", "") + delta.get("signature", "")
            elif dtype == "input_json_delta":
                part = delta.get("partial_json", "")
                self.json.setdefault(index, []).append(part)
                return [
                    {
                        "kind": "tool_call",
                        "delta": part,
                        "call_id": block.get("id"),
                        "name": block.get("name"),
                    }
                ]
        elif kind == "content_block_stop":
            index = int(data.get("index", 0))
            if index in self.json and index in self.blocks:
                # kept as the JSON text: read with the stop reason, which comes after
                self.blocks[index]["input"] = "".join(self.json.pop(index))
        elif kind == "message_delta" and self.message is not None:
            self.message.update(data.get("delta") or {})
            usage = {**(self.message.get("usage") or {}), **(data.get("usage") or {})}
            self.message["usage"] = {k: v for k, v in usage.items() if v is not None}
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise ModelResponseError(f"the Anthropic stream reported an error: {dumps(data)[:200]}")
        return []

    def result(self) -> ModelAnswer:
        """The streamed answer, converted like a non-streamed one."""
        if self.message is None or not self.done:
            raise ModelStreamError(
                "the Anthropic stream ended before message_stop: the connection was cut"
            )
        whole = {**self.message, "content": [self.blocks[i] for i in sorted(self.blocks)]}
        return from_anthropic_message(whole)
