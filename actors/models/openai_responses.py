"""OpenAI's Responses API to and from `Message`s: pure functions, no I/O."""

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
    media_url,
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

__all__ = ["ResponsesStream", "from_response", "responses_tools", "to_responses_input"]

PROVIDER = "openai"


def from_response(response: Any) -> ModelAnswer:
    """A Responses-API response (the SDK's `Response` or its JSON) as an assistant message.

    Reads output messages (text with URL citations, refusals), reasoning summaries,
    function calls (arguments parsed) and generated images. The finish reason is
    `tool_calls` when the model called a function, `stop` when complete, and the
    `incomplete_details.reason` (say `max_output_tokens`) when not.
    """
    data = as_dict(response, "the response")
    output = data.get("output")
    if not isinstance(output, list):
        raise ModelResponseError(f"the response has no output list: {dumps(data)[:120]}")
    content: list[ContentBlock] = []
    calls: list[tuple[str, str, dict[str, Any]]] = []
    reasoning_ids: list[str] = []
    cut = (data.get("incomplete_details") or {}).get("reason")
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    refs = [
                        AnnotationRef(
                            url=a.get("url"),
                            file_id=a.get("file_id"),
                            title=a.get("title"),
                            index=a.get("start_index", a.get("index")),
                        )
                        for a in part.get("annotations") or []
                    ]
                    content.append(TextBlock(text=str(part.get("text", "")), annotations=refs))
                elif part.get("type") == "refusal":
                    content.append(ErrorBlock(message=str(part.get("refusal")), code="refusal"))
        elif kind == "reasoning":
            summary = "".join(str(s.get("text", "")) for s in item.get("summary") or [])
            details = [str(c.get("text", "")) for c in item.get("content") or []] or None
            content.append(ReasoningBlock(summary=summary, details=details))
            reasoning_ids.append(str(item.get("id") or ""))
        elif kind == "function_call":
            name = str(item.get("name") or "")
            call_id = str(item.get("call_id") or item.get("id") or generate_id())
            calls.append((call_id, name, parse_arguments(item.get("arguments"), name, cut)))
            content.append(ToolCallBlock(id=call_id, name=name, args=calls[-1][2]))
        elif kind == "image_generation_call" and item.get("result"):
            media = MediaRef(kind="data", data_base64=item["result"], mime_type="image/png")
            content.append(ImageBlock(media=media))
    status = data.get("status")
    if status == "incomplete":
        finish = str((data.get("incomplete_details") or {}).get("reason") or "incomplete")
    elif status == "failed":
        finish = "error"
    else:
        finish = "tool_calls" if calls else "stop"
    usages = None
    usage = data.get("usage")
    if isinstance(usage, dict):
        usages = usage_of(
            usage.get("input_tokens"),
            usage.get("output_tokens"),
            usage.get("total_tokens"),
            reasoning=(usage.get("output_tokens_details") or {}).get("reasoning_tokens"),
            cache_read=(usage.get("input_tokens_details") or {}).get("cached_tokens"),
        )
    meta: dict[str, Any] = {"provider": PROVIDER, "api": "responses", "finish_reason": finish}
    meta |= {k: data[k] for k in ("model",) if data.get(k)}
    if data.get("id"):
        meta["response_id"] = data["id"]
    if any(reasoning_ids):
        meta["reasoning_ids"] = reasoning_ids
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


def to_responses_input(
    context: Sequence[Message], *, reasoning: bool = False
) -> list[dict[str, Any]]:
    """A context as Responses-API input items (put the system prompt in `instructions`).

    User content becomes `input_text` / `input_image` / `input_file` parts; assistant text
    an `output_text` message; tool calls `function_call` items; tool results
    `function_call_output` items. Reasoning is sent back only when `reasoning` is true, with
    the provider's reasoning ids when the message kept them (`metadata["reasoning_ids"]`).
    OpenAI itself takes a reasoning item only beside the items that followed it with their
    own ids (and its `encrypted_content` when the response was not stored), which a
    `Message` does not keep, so `ModelNode` leaves reasoning out (docs/models.md says why);
    `reasoning=True` is for a stateless compatible server that reads these items as given.
    """
    items: list[dict[str, Any]] = []
    for message in context:
        if message.role == "tool":
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    items.append(
                        {
                            "type": "function_call_output",
                            "call_id": block.call_id,
                            "output": result_text(block),
                        }
                    )
        elif message.role == "assistant":
            items.extend(_assistant_items(message, reasoning))
        else:
            role = "system" if message.role == "system" else "user"
            items.append({"role": role, "content": _input_parts(message.content)})
    return items


def _assistant_items(message: Message, reasoning: bool) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    ids = list(message.metadata.get("reasoning_ids") or [])
    text: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ReasoningBlock) and reasoning:
            item: dict[str, Any] = {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": block.summary}],
            }
            if ids and ids[0]:
                item["id"] = ids[0]
            ids = ids[1:]
            if block.details:
                item["content"] = [{"type": "reasoning_text", "text": d} for d in block.details]
            items.append(item)
        elif isinstance(block, TextBlock):
            text.append({"type": "output_text", "text": block.text, "annotations": []})
        elif isinstance(block, ErrorBlock) and block.code == "refusal":
            text.append({"type": "refusal", "refusal": block.message})
        elif isinstance(block, ToolCallBlock | RemoteToolCallBlock):
            if text:
                items.append({"type": "message", "role": "assistant", "content": text})
                text = []
            items.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": dumps(block.args),
                }
            )
    if text:
        items.append({"type": "message", "role": "assistant", "content": text})
    return items


def _input_parts(blocks: Sequence[ContentBlock]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "input_text", "text": block.text})
        elif isinstance(block, ErrorBlock):
            parts.append({"type": "input_text", "text": block.message})
        elif isinstance(block, ImageBlock):
            if block.media.kind == "file_id" and block.media.file_id:
                parts.append({"type": "input_image", "file_id": block.media.file_id})
            elif url := media_url(block.media, "image/png"):
                parts.append({"type": "input_image", "image_url": url})
        elif isinstance(block, DocumentBlock):
            if block.media.kind == "file_id" and block.media.file_id:
                part: dict[str, Any] = {"type": "input_file", "file_id": block.media.file_id}
            elif block.media.kind == "data" and (url := media_url(block.media, "application/pdf")):
                part = {"type": "input_file", "file_data": url}
            elif block.media.url:
                part = {"type": "input_file", "file_url": block.media.url}
            else:
                continue
            if block.media.filename:
                part["filename"] = block.media.filename
            parts.append(part)
    return parts


def responses_tools(tools: Tools) -> list[dict[str, Any]]:
    """Tools as Responses-API function tools (`{"type": "function", "name", ...}`, flat)."""
    return [{"type": "function", **s["function"]} for s in function_schemas(tools)]


class ResponsesStream:
    """Folds Responses-API stream events into the response they stream, yielding deltas.

    Deltas come from the text, reasoning-summary and function-argument delta events (a
    tool call's with the `call_id` its `ToolCallBlock` will have, and its item id); the
    answer is the `response.completed` (or `.incomplete`) event's response. `result()`
    raises `ModelStreamError` when the stream ended without one.
    """

    def __init__(self) -> None:
        self.final: dict[str, Any] | None = None
        self.calls: dict[str, tuple[str, str]] = {}
        """Each function-call item's (call id, name), by item id: its deltas name only the item."""

    def feed(self, event: Any) -> list[dict[str, Any]]:
        """Take one stream event; return its deltas."""
        data = as_dict(event, "a response stream event")
        kind = data.get("type")
        if kind == "response.output_text.delta":
            return [{"kind": "text", "delta": data.get("delta", "")}]
        if kind == "response.reasoning_summary_text.delta":
            return [{"kind": "reasoning", "delta": data.get("delta", "")}]
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "function_call":
                item_id = str(item.get("id"))
                call_id = str(item.get("call_id") or item_id)
                self.calls[item_id] = (call_id, str(item.get("name")))
        elif kind == "response.function_call_arguments.delta":
            item_id = str(data.get("item_id"))
            call_id, name = self.calls.get(item_id, (item_id, None))
            return [
                {
                    "kind": "tool_call",
                    "delta": data.get("delta", ""),
                    "call_id": call_id,
                    "name": name,
                    "item_id": item_id,
                }
            ]
        elif kind in ("response.completed", "response.incomplete"):
            self.final = as_dict(data.get("response"), "the streamed response")
        elif kind in ("response.failed", "error"):
            failure = (data.get("response") or {}).get("error") or data
            raise ModelResponseError(
                f"the response stream reported an error: {dumps(failure)[:200]}"
            )
        return []

    def result(self) -> ModelAnswer:
        """The streamed answer, converted like a non-streamed one."""
        if self.final is None:
            raise ModelStreamError(
                "the response stream ended before response.completed: the connection was cut"
            )
        return from_response(self.final)
