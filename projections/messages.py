"""Messages and their content blocks, by the names of the seed framework's state package."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

Role = Literal["user", "assistant", "system", "tool"]


def generate_id(default_id: str | int | None = None) -> str | int:
    """`default_id` when given, else a fresh UUID4 string."""
    return default_id if default_id is not None else str(uuid.uuid4())


class MediaRef(BaseModel):
    """Where media lives: a URL, a provider file id, or inline base64 data."""

    kind: Literal["url", "file_id", "data"] = "url"
    url: str | None = None
    file_id: str | None = None
    data_base64: str | None = None
    mime_type: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    filename: str | None = None
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
    page: int | None = None


class AnnotationRef(BaseModel):
    """A pointer from text to its source (a citation target)."""

    url: str | None = None
    file_id: str | None = None
    page: int | None = None
    index: int | None = None
    title: str | None = None


class TextBlock(BaseModel):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str
    annotations: list[AnnotationRef] = Field(default_factory=list)


class ImageBlock(BaseModel):
    """An image."""

    type: Literal["image"] = "image"
    media: MediaRef
    alt_text: str | None = None
    bbox: list[float] | None = None


class AudioBlock(BaseModel):
    """A sound clip, optionally transcribed."""

    type: Literal["audio"] = "audio"
    media: MediaRef
    transcript: str | None = None
    sample_rate: int | None = None
    channels: int | None = None


class VideoBlock(BaseModel):
    """A video."""

    type: Literal["video"] = "video"
    media: MediaRef
    thumbnail: MediaRef | None = None


class DocumentBlock(BaseModel):
    """A document (PDF, text file ...), optionally with extracted text."""

    type: Literal["document"] = "document"
    media: MediaRef
    text: str | None = None
    pages: list[int] | None = None
    excerpt: str | None = None


class DataBlock(BaseModel):
    """Opaque data with a MIME type."""

    type: Literal["data"] = "data"
    mime_type: str
    data_base64: str | None = None
    media: MediaRef | None = None


class ToolCallBlock(BaseModel):
    """A call of a local tool, as a model asked for it."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    tool_type: str | None = None


class RemoteToolCallBlock(BaseModel):
    """A call of a tool that runs elsewhere (a client or a remote service)."""

    type: Literal["remote_tool_call"] = "remote_tool_call"
    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    tool_type: str = "remote"


class ToolResultBlock(BaseModel):
    """The result of one tool call, tied to it by `call_id`."""

    type: Literal["tool_result"] = "tool_result"
    call_id: str
    output: Any = None
    is_error: bool = False
    status: Literal["completed", "failed"] | None = None


class ReasoningBlock(BaseModel):
    """A model's reasoning summary."""

    type: Literal["reasoning"] = "reasoning"
    summary: str
    details: list[str] | None = None


class AnnotationBlock(BaseModel):
    """Citations or notes attached to a message."""

    type: Literal["annotation"] = "annotation"
    kind: Literal["citation", "note"] = "citation"
    refs: list[AnnotationRef] = Field(default_factory=list)
    spans: list[tuple[int, int]] | None = None


class ErrorBlock(BaseModel):
    """An error shown in the conversation."""

    type: Literal["error"] = "error"
    message: str
    code: str | None = None
    data: dict[str, Any] | None = None


ContentBlock = Annotated[
    TextBlock
    | ImageBlock
    | AudioBlock
    | VideoBlock
    | DocumentBlock
    | DataBlock
    | ToolCallBlock
    | RemoteToolCallBlock
    | ToolResultBlock
    | ReasoningBlock
    | AnnotationBlock
    | ErrorBlock,
    Field(discriminator="type"),
]
"""Any content block, told apart by its `type`."""

_MEDIA_BLOCKS: dict[str, type[ImageBlock | AudioBlock | VideoBlock | DocumentBlock]] = {
    "image": ImageBlock,
    "audio": AudioBlock,
    "video": VideoBlock,
    "document": DocumentBlock,
}


class TokenUsages(BaseModel):
    """Token accounting of one model call."""

    completion_tokens: int
    prompt_tokens: int
    total_tokens: int
    reasoning_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    image_tokens: int | None = 0
    audio_tokens: int | None = 0


class Message(BaseModel):
    """One turn of a conversation: a role and a list of content blocks."""

    message_id: str | int = Field(default_factory=generate_id)
    role: Role
    content: list[ContentBlock]
    delta: bool = False
    tools_calls: list[dict[str, Any]] | None = None
    reasoning: str | None = None
    timestamp: float | None = Field(default_factory=lambda: datetime.now().timestamp())
    metadata: dict[str, Any] = Field(default_factory=dict)
    usages: TokenUsages | None = None
    raw: dict[str, Any] | None = None

    @classmethod
    def text_message(
        cls, content: str, role: Role = "user", message_id: str | None = None
    ) -> Message:
        """A message holding one text block."""
        return cls(message_id=generate_id(message_id), role=role, content=[TextBlock(text=content)])

    @classmethod
    def tool_message(
        cls,
        content: Sequence[ContentBlock],
        message_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Message:
        """A `tool` message (usually one `ToolResultBlock`)."""
        return cls(
            message_id=generate_id(message_id),
            role="tool",
            content=list(content),
            metadata=meta or {},
        )

    def text(self) -> str:
        """The text of every text-bearing block, concatenated."""
        parts: list[str] = []
        for block in self.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolResultBlock) and block.output is not None:
                parts.append(block.output if isinstance(block.output, str) else str(block.output))
            elif isinstance(block, ReasoningBlock):
                parts.append(block.summary)
            elif isinstance(block, ErrorBlock):
                parts.append(block.message)
        return "".join(parts)

    def attach_media(
        self, media: MediaRef, as_type: Literal["image", "audio", "video", "document"]
    ) -> None:
        """Append a media block of the given type."""
        block_cls = _MEDIA_BLOCKS.get(as_type)
        if block_cls is None:
            raise ValueError(
                f"cannot attach media as {as_type!r}: use one of {sorted(_MEDIA_BLOCKS)}"
            )
        self.content.append(block_cls(media=media))

    def tool_calls(self) -> list[ToolCallBlock]:
        """The local tool calls this message asks for, from its blocks or `tools_calls`."""
        calls = [b for b in self.content if isinstance(b, ToolCallBlock)]
        if calls or not self.tools_calls:
            return calls
        for raw in self.tools_calls:
            fn = raw.get("function", raw)
            args = fn.get("arguments", fn.get("args", {}))
            if isinstance(args, str):
                args = json.loads(args) if args.strip() else {}
            calls.append(ToolCallBlock(id=str(raw.get("id")), name=fn["name"], args=args))
        return calls
