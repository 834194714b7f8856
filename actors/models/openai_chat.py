"""OpenAI chat completions (and every OpenAI-compatible server: vLLM, Ollama, LiteLLM) to
and from `Message`s: pure functions, no I/O."""

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
    media_from_url,
    media_url,
    parse_arguments,
    result_text,
    usage_of,
)
from agentlog.actors.models.errors import ModelResponseError, ModelStreamError
from agentlog.projections import (
    AnnotationRef,
    AudioBlock,
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

__all__ = [
    "ChatStream",
    "chat_tools",
    "from_chat_completion",
    "to_chat_messages",
]

PROVIDER = "openai"


def from_chat_completion(response: Any) -> ModelAnswer:
    """A chat completion (the SDK's `ChatCompletion` or its JSON) as an assistant message.

    Reads text, refusals, `reasoning_content` / `reasoning` (what compatible servers send),
    tool calls (arguments parsed, also kept in the seed's `tools_calls` form), audio, images
    (`message.images`, as some servers send) and URL citations.
    """
    data = as_dict(response, "the chat completion")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelResponseError(f"the chat completion has no choices: {dumps(data)[:120]}")
    choice = choices[0]
    msg = choice.get("message")
    if not isinstance(msg, dict):
        raise ModelResponseError("the chat completion's first choice has no message")
    content: list[ContentBlock] = []
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        content.append(ReasoningBlock(summary=reasoning))
    text = msg.get("content")
    if isinstance(text, list):  # some servers send parts
        text = "".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
    if isinstance(text, str) and text:
        refs = [
            AnnotationRef(url=c.get("url"), title=c.get("title"), index=a.get("start_index"))
            for a in msg.get("annotations") or []
            if isinstance(a, dict) and isinstance(c := a.get("url_citation"), dict)
        ]
        content.append(TextBlock(text=text, annotations=refs))
    if msg.get("refusal"):
        content.append(ErrorBlock(message=str(msg["refusal"]), code="refusal"))
    audio = msg.get("audio")
    if isinstance(audio, dict) and audio.get("data"):
        media = MediaRef(kind="data", data_base64=audio["data"], file_id=audio.get("id"))
        content.append(AudioBlock(media=media, transcript=audio.get("transcript")))
    for image in msg.get("images") or []:
        url = (image.get("image_url") or {}).get("url") if isinstance(image, dict) else None
        if isinstance(url, str):
            content.append(ImageBlock(media=media_from_url(url)))
    finish = choice.get("finish_reason")
    calls: list[tuple[str, str, dict[str, Any]]] = []
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        name = str(fn.get("name") or "")
        if not name:
            raise ModelResponseError(f"a tool call without a function name: {dumps(call)[:120]}")
        calls.append(
            (
                str(call.get("id") or generate_id()),
                name,
                parse_arguments(fn.get("arguments"), name, finish),
            )
        )
    content.extend(ToolCallBlock(id=cid, name=name, args=args) for cid, name, args in calls)
    usage = data.get("usage")
    usages = None
    if isinstance(usage, dict):
        done = usage.get("completion_tokens_details") or {}
        asked = usage.get("prompt_tokens_details") or {}
        usages = usage_of(
            usage.get("prompt_tokens"),
            usage.get("completion_tokens"),
            usage.get("total_tokens"),
            reasoning=done.get("reasoning_tokens"),
            cache_read=asked.get("cached_tokens"),
            audio=done.get("audio_tokens"),
        )
    meta = {"provider": PROVIDER, "model": data.get("model"), "finish_reason": finish}
    meta["response_id"] = data.get("id")
    message = Message(
        role="assistant",
        content=content,
        tools_calls=agentflow_calls(calls) or None,
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
        usages=usages,
        metadata={k: v for k, v in meta.items() if v is not None},
    )
    return ModelAnswer(message, finish, data.get("id"), data.get("model"), usages)


def to_chat_messages(
    context: Sequence[Message],
    system_prompt: str | None = None,
    *,
    reasoning_key: str | None = None,
) -> list[dict[str, Any]]:
    """A context as chat-completions messages, the system prompt first.

    User content becomes parts (text, `image_url`, `input_audio`, `file`); assistant tool
    calls become `tool_calls`; each tool result becomes its own `tool` message. Reasoning is
    left out unless `reasoning_key` names the field a server takes it in (say
    `reasoning_content`). Blocks chat completions cannot carry (video, data, annotations)
    are left out; an error block is sent as text.
    """
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    for message in context:
        if message.role == "system":
            out.append({"role": "system", "content": message.text()})
        elif message.role == "tool":
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    out.append(
                        {
                            "role": "tool",
                            "tool_call_id": block.call_id,
                            "content": result_text(block),
                        }
                    )
        elif message.role == "assistant":
            out.append(_assistant(message, reasoning_key))
        else:
            out.append({"role": "user", "content": _user_content(message.content)})
    return out


def _assistant(message: Message, reasoning_key: str | None) -> dict[str, Any]:
    texts = [b.text for b in message.content if isinstance(b, TextBlock)]
    texts += [b.message for b in message.content if isinstance(b, ErrorBlock)]
    entry: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    reasoning = [b.summary for b in message.content if isinstance(b, ReasoningBlock)]
    if reasoning_key and reasoning:
        entry[reasoning_key] = "".join(reasoning)
    calls = [b for b in message.content if isinstance(b, ToolCallBlock | RemoteToolCallBlock)]
    if not calls and message.tools_calls:
        calls = list(message.tool_calls())
    if calls:
        entry["tool_calls"] = agentflow_calls([(c.id, c.name, c.args) for c in calls])
    return entry


def _user_content(blocks: Sequence[ContentBlock]) -> str | list[dict[str, Any]]:
    if all(isinstance(b, TextBlock) for b in blocks):
        return "".join(b.text for b in blocks if isinstance(b, TextBlock))
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ErrorBlock):
            parts.append({"type": "text", "text": block.message})
        elif isinstance(block, ImageBlock):
            url = media_url(block.media, "image/png")
            if url:
                parts.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(block, AudioBlock) and block.media.data_base64:
            fmt = (block.media.mime_type or "audio/wav").split("/")[-1]
            parts.append(
                {
                    "type": "input_audio",
                    "input_audio": {"data": block.media.data_base64, "format": fmt},
                }
            )
        elif isinstance(block, DocumentBlock):
            file: dict[str, Any] = {}
            if block.media.kind == "file_id" and block.media.file_id:
                file["file_id"] = block.media.file_id
            elif block.media.kind == "data" and (url := media_url(block.media, "application/pdf")):
                file["file_data"] = url  # chat files are inline data or file ids, not URLs
            else:
                continue
            if block.media.filename:
                file["filename"] = block.media.filename
            parts.append({"type": "file", "file": file})
    return parts


def chat_tools(tools: Tools) -> list[dict[str, Any]]:
    """Tools as chat-completions tool schemas (`{"type": "function", "function": ...}`)."""
    return function_schemas(tools)


class ChatStream:
    """Folds chat-completion chunks into the completion they stream, yielding each delta.

    `feed(chunk)` returns the deltas it carried (text, reasoning, tool-call arguments) as
    dicts for a stream chunk's `data`; `result()` converts the whole, and raises
    `ModelStreamError` when no chunk said why the answer finished (a cut stream).
    """

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None

    def feed(self, chunk: Any) -> list[dict[str, Any]]:
        """Take one chunk; return its deltas."""
        data = as_dict(chunk, "a chat-completion chunk")
        for key in ("id", "model", "usage"):
            if data.get(key) is not None:
                self.data[key] = data[key]
        deltas: list[dict[str, Any]] = []
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if text := delta.get("content"):
                self.text.append(text)
                deltas.append({"kind": "text", "delta": text})
            if thought := delta.get("reasoning_content") or delta.get("reasoning"):
                self.reasoning.append(thought)
                deltas.append({"kind": "reasoning", "delta": thought})
            if refusal := delta.get("refusal"):
                self.refusal.append(refusal)
            for part in delta.get("tool_calls") or []:
                call = self.calls.setdefault(int(part.get("index", 0)), {"arguments": []})
                fn = part.get("function") or {}
                for key, value in (("id", part.get("id")), ("name", fn.get("name"))):
                    if value:
                        call[key] = value
                if args := fn.get("arguments"):
                    call["arguments"].append(args)
                    deltas.append(
                        {
                            "kind": "tool_call",
                            "delta": args,
                            "call_id": call.get("id"),
                            "name": call.get("name"),
                        }
                    )
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return deltas

    def result(self) -> ModelAnswer:
        """The streamed answer as a whole, converted like a non-streamed one."""
        if self.finish is None:
            raise ModelStreamError(
                f"the chat stream ended before its finish_reason ({len(self.text)} text deltas "
                "received): the connection was cut"
            )
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "type": "function",
                    "function": {"name": c.get("name"), "arguments": "".join(c["arguments"])},
                }
                for _, c in sorted(self.calls.items())
            ]
        whole = {
            **self.data,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
        }
        return from_chat_completion(whole)
