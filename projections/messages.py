"""Messages and their content blocks, by the names of the seed framework's state package."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from agentlog.events.errors import InvalidArgumentError
from agentlog.projections.errors import ProjectionError
from agentlog.projections.ids import _now, generate_id
from agentlog.projections.ids import monotonic as monotonic  # its earlier home

Role = Literal["user", "assistant", "system", "tool"]


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
    status: Literal["completed", "failed", "abandoned", "rejected"] | None = None


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
    timestamp: float | None = Field(default_factory=_now)
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
        """The text of the message as the seed defines it: its text blocks, and the outputs
        of its tool results that are strings, concatenated (reasoning and errors left out)."""
        parts: list[str] = []
        for block in self.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolResultBlock) and isinstance(block.output, str):
                parts.append(block.output)
        return "".join(parts)

    def attach_media(
        self, media: MediaRef, as_type: Literal["image", "audio", "video", "document"]
    ) -> None:
        """Append a media block of the given type."""
        block_cls = _MEDIA_BLOCKS.get(as_type)
        if block_cls is None:
            raise InvalidArgumentError(
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


REMOVE_ALL_MESSAGES = "__remove_all__"
"""`RemoveMessage(REMOVE_ALL_MESSAGES)` removes every message before it (LangGraph's name)."""


class RemoveMessage(BaseModel, frozen=True):
    """A marker, returned in a context update, that removes the message with `message_id`.

    `RemoveMessage(REMOVE_ALL_MESSAGES)` removes them all; messages after it in the same
    update become the new context. Removal is an event: the log keeps every message.
    """

    message_id: str | int

    def __init__(self, message_id: str | int | None = None, **data: Any) -> None:
        if message_id is None:
            message_id = data.pop("id", None)  # LangGraph spells it RemoveMessage(id=...)
        if message_id is None:
            raise InvalidArgumentError(
                "RemoveMessage needs the message_id of the message to remove"
            )
        super().__init__(message_id=message_id, **data)

    @property
    def id(self) -> str | int:
        """LangGraph's name for `message_id`."""
        return self.message_id

    @property
    def removes_all(self) -> bool:
        """True for the remove-all marker."""
        return self.message_id == REMOVE_ALL_MESSAGES


# ---- input as users write it ---------------------------------------------------------------

ACCEPTED_INPUT = (
    "a str (one user message), a Message, a dict such as {'role': 'user', 'content': 'hi'} "
    "(OpenAI style: role user/assistant/system/tool, content a str or a list of "
    "{'type': 'text', 'text': ...} parts, tool_calls on an assistant message, tool_call_id on "
    "a tool message), a Message's own dict form, a LangChain message (agentlog[langchain]), or "
    "a list of these"
)
"""The forms `to_messages` accepts, quoted by its errors."""

_ROLES = ("user", "assistant", "system", "tool")
_ROLE_ALIASES = {"developer": "system"}
"""OpenAI's `developer` role is its newer name for the system prompt."""

_OPENAI_KEYS = {"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}
_OWN_KEYS = set(Message.model_fields)
MESSAGE_KEYS = frozenset(_OPENAI_KEYS | _OWN_KEYS)
"""Keys a message dict may have; a dict with `role` and only these keys is a message."""

_BLOCK_TYPES = {b.model_fields["type"].default for b in get_args(get_args(ContentBlock)[0])}
"""The `type` of each content block."""


_BLOCK: TypeAdapter[ContentBlock] = TypeAdapter(ContentBlock)


class InvalidMessageError(ProjectionError, ValueError):
    """Input that cannot be read as messages; the message says what and lists what can."""

    def __init__(self, why: str) -> None:
        super().__init__(f"{why}; messages can be given as {ACCEPTED_INPUT}")


def to_messages(value: Any) -> list[Message]:
    """Read messages as users write them: a str, a Message, an OpenAI-style or our own dict,
    or a list of these; anything else raises `InvalidMessageError` naming the problem."""
    return _read(value, markers=False)  # type: ignore[return-value]


def context_items(value: Any) -> list[Message | RemoveMessage]:
    """Like `to_messages`, keeping `RemoveMessage` markers where they stand."""
    return _read(value, markers=True)


def _read(value: Any, *, markers: bool) -> list[Message | RemoveMessage]:
    def one(item: Any) -> Message | RemoveMessage:
        item = _foreign(item)
        return item if markers and isinstance(item, RemoveMessage) else _one_message(item)

    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        items: list[Message | RemoveMessage] = []
        for index, item in enumerate(value):
            try:
                items.append(one(item))
            except InvalidMessageError as exc:
                raise InvalidMessageError(f"item {index} of the list: {_why(exc)}") from exc
        return items
    return [one(value)]


def is_message_dict(value: object) -> bool:
    """True for a dict that reads as one message (a `role` and only message keys)."""
    return isinstance(value, Mapping) and "role" in value and set(value) <= MESSAGE_KEYS


def normalize_input(value: Any) -> Any:
    """Input to a run as the engine takes it: messages in any `to_messages` form become
    `list[Message]`; in a dict of state fields, `messages` / `context` (lists) are read the
    same way and the other fields are left as they are; None and an `AgentState` pass through."""
    value = _foreign(value)
    if value is None or isinstance(value, Message):
        return None if value is None else [value]
    if isinstance(value, Mapping) and not is_message_dict(value):
        if not any(key in value for key in ("messages", "context")):
            return value
        update = dict(value)
        for key in ("messages", "context"):
            if key in update:
                if not isinstance(update[key], list | tuple):
                    raise InvalidMessageError(
                        f"{key!r} must be a list of messages, got {type(update[key]).__name__} "
                        f"{update[key]!r:.60}"
                    )
                try:
                    update[key] = context_items(update[key])
                except InvalidMessageError as exc:
                    raise InvalidMessageError(f"in {key!r}: {_why(exc)}") from exc
        return update
    if isinstance(value, RemoveMessage):
        return [value]
    if isinstance(value, str | Mapping) or (
        isinstance(value, Sequence) and not isinstance(value, bytes | bytearray)
    ):
        return context_items(value)
    return value  # an AgentState, or something the engine will refuse by its own rules


def _why(exc: InvalidMessageError) -> str:
    """The first part of an error's message, without the list of accepted forms."""
    return str(exc).split("; messages can be given as ", 1)[0]


def _foreign(value: Any) -> Any:
    """A message of another library (LangChain's) as ours; anything else as it is."""
    if isinstance(value, BaseModel) and not isinstance(value, Message | RemoveMessage):
        from agentlog.projections.langchain import read_foreign

        return read_foreign(value)
    return value


def _one_message(value: Any) -> Message:
    if isinstance(value, Message):
        return value
    if isinstance(value, str):
        return Message.text_message(value)
    if not isinstance(value, Mapping):
        raise InvalidMessageError(f"a {type(value).__name__} is not a message ({value!r:.60})")
    if "messages" in value or "context" in value:
        raise InvalidMessageError(
            "a dict with 'messages' is a state update, not one message: pass it to the graph as "
            "it is, or pass its list here"
        )
    if "role" not in value:
        raise InvalidMessageError(f"the dict {dict(value)!r:.80} has no 'role'")
    role = _ROLE_ALIASES.get(value["role"], value["role"])
    if role not in _ROLES:
        raise InvalidMessageError(
            f"role {value['role']!r} is not one of {', '.join(map(repr, _ROLES))}"
        )
    data: dict[str, Any] = {k: v for k, v in value.items() if k in _OWN_KEYS}
    data["role"] = role
    content = _content_blocks(value.get("content"))
    if value.get("refusal"):
        content.append(TextBlock(text=str(value["refusal"])))
    if value.get("tool_calls"):
        if role != "assistant":
            raise InvalidMessageError(f"a {role} message cannot carry tool_calls")
        content.extend(_tool_calls(value["tool_calls"]))
    if role == "tool" and not any(isinstance(b, ToolResultBlock) for b in content):
        call_id = value.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessageError(
                "a tool message needs the 'tool_call_id' of the call it answers"
            )
        texts = [b.text for b in content if isinstance(b, TextBlock)]
        others = [b for b in content if not isinstance(b, TextBlock)]
        content = [ToolResultBlock(call_id=call_id, output="".join(texts)), *others]
    data["content"] = content
    if "name" in value:
        data["metadata"] = {**dict(value.get("metadata") or {}), "name": value["name"]}
    try:
        return Message.model_validate(data)
    except ValidationError as exc:
        raise InvalidMessageError(f"the message dict is invalid ({_problems(exc)})") from exc


def _problems(exc: ValidationError) -> str:
    """Pydantic's complaints, one `field: message` each."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())


def _content_blocks(content: Any) -> list[Any]:
    """OpenAI content (a str, None, or a list of parts) or our blocks, as content blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [TextBlock(text=content)]
    if not isinstance(content, Sequence) or isinstance(content, bytes | bytearray):
        raise InvalidMessageError(
            f"content must be a str or a list of parts, got {type(content).__name__}"
        )
    blocks: list[Any] = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            blocks.append(TextBlock(text=part))
        elif isinstance(part, BaseModel):
            blocks.append(part)
        elif isinstance(part, Mapping):
            blocks.append(_content_part(index, part))
        else:
            raise InvalidMessageError(
                f"content part {index} is a {type(part).__name__}, not a dict such as "
                "{'type': 'text', 'text': ...}"
            )
    return blocks


def _content_part(index: int, part: Mapping[str, Any]) -> Any:
    """One OpenAI content part, or one of our own blocks as a dict."""
    kind = part.get("type")
    try:
        if kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            return ImageBlock(media=_media_from_url(str(url)))
        if kind == "input_audio":
            audio = part["input_audio"]
            return AudioBlock(
                media=MediaRef(
                    kind="data", data_base64=audio["data"], mime_type=f"audio/{audio['format']}"
                )
            )
        if kind == "file":
            file = part["file"]
            if file.get("file_id"):
                media = MediaRef(kind="file_id", file_id=file["file_id"])
            else:
                media = _media_from_url(str(file["file_data"]))
            media.filename = file.get("filename")
            return DocumentBlock(media=media)
        if kind == "refusal":
            return TextBlock(text=str(part["refusal"]))
    except (KeyError, TypeError, AttributeError) as exc:
        raise InvalidMessageError(f"content part {index} ({kind!r}) lacks {exc}") from exc
    if kind in _BLOCK_TYPES:
        try:
            return _BLOCK.validate_python(dict(part))
        except ValidationError as exc:
            raise InvalidMessageError(
                f"content part {index} ({kind!r}) is invalid ({_problems(exc)})"
            ) from exc
    known = ", ".join(map(repr, ["text", "image_url", "input_audio", "file", *_BLOCK_TYPES]))
    raise InvalidMessageError(f"content part {index} has type {kind!r}; known types: {known}")


def _media_from_url(url: str) -> MediaRef:
    """A URL, or a `data:<mime>;base64,<data>` URL kept inline."""
    if url.startswith("data:") and "," in url:
        header, data = url[5:].split(",", 1)
        mime = header.split(";", 1)[0] or None
        return MediaRef(kind="data", data_base64=data, mime_type=mime)
    return MediaRef(kind="url", url=url)


def _tool_calls(calls: Any) -> list[ToolCallBlock]:
    """OpenAI `tool_calls` ({'id', 'function': {'name', 'arguments': JSON}}) as blocks."""
    if not isinstance(calls, Sequence) or isinstance(calls, str | bytes):
        raise InvalidMessageError(f"tool_calls must be a list, got {type(calls).__name__}")
    blocks: list[ToolCallBlock] = []
    for index, call in enumerate(calls):
        fn = call.get("function", call) if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise InvalidMessageError(
                f"tool call {index} must look like {{'id': ..., 'function': {{'name': ..., "
                f"'arguments': '{{...}}'}}}}, got {call!r:.80}"
            )
        args = fn.get("arguments", fn.get("args", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                raise InvalidMessageError(
                    f"the arguments of tool call {index} ({fn['name']!r}) are not JSON: {exc}"
                ) from exc
        if not isinstance(args, dict):
            raise InvalidMessageError(
                f"the arguments of tool call {index} ({fn['name']!r}) must be a JSON object"
            )
        call_id = call.get("id") if isinstance(call, Mapping) else None
        blocks.append(ToolCallBlock(id=str(call_id or generate_id()), name=fn["name"], args=args))
    return blocks
