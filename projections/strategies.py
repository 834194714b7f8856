"""Hypothesis strategies for property tests of an agent built on agentlog.

Messages with every content block kind, transcripts both major providers accept, states of
`AgentState` or a subclass derived from its fields, and event sequences the gate (`decide`)
accepts or must refuse. Every value drawn is one the log stores exactly: ints within 64 bits,
text without lone surrogates, bytes, NaN, the infinities and -0.0; compare round trips with
`same`, which is exact where `==` is not. It imports hypothesis (install `agentlog[testing]`);
`import agentlog.projections` does not.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast

from hypothesis import strategies as st
from pydantic import BaseModel

from agentlog.events.kinds import (
    Event,
    Forked,
    InterruptRaised,
    MessageAppended,
    MessageReplaced,
    MessagesRemoved,
    NodeEntered,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    StateUpdated,
    StepAdvanced,
    Stopped,
    StopRequested,
    ThreadCreated,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.events.verify_export import same as exactly_same
from agentlog.projections.edge import message_appended, state_updated
from agentlog.projections.fold import CONTEXT_FIELDS, before_first_run, field_plan
from agentlog.projections.keys import TOOL_CALLS_KEY
from agentlog.projections.messages import (
    AnnotationBlock,
    AnnotationRef,
    AudioBlock,
    ContentBlock,
    DataBlock,
    DocumentBlock,
    ErrorBlock,
    ImageBlock,
    MediaRef,
    Message,
    ReasoningBlock,
    RemoteToolCallBlock,
    TextBlock,
    TokenUsages,
    ToolCallBlock,
    ToolResultBlock,
    VideoBlock,
)
from agentlog.projections.state import (
    END,
    START,
    AgentState,
    ExecutionState,
    ExecutionStatus,
    StopRequestStatus,
)
from agentlog.projections.transcript import calls_of, open_calls

S = TypeVar("S", bound=AgentState)

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "accepted_events",
    "binary",
    "content_blocks",
    "data",
    "event_sequences",
    "execution_states",
    "floats",
    "for_type",
    "leaves",
    "media_refs",
    "messages",
    "refused_events",
    "same",
    "states",
    "storable_ints",
    "text",
    "text_messages",
    "token_usages",
    "transcripts",
]

# ---- scalars the log stores exactly ------------------------------------------------------

INT_MIN, INT_MAX = -(2**63), 2**64 - 1
"""The ints the log stores natively; an event refuses ints beyond them."""

storable_ints: st.SearchStrategy[int] = st.integers(INT_MIN, INT_MAX) | st.sampled_from(
    [INT_MIN, -1, 0, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, INT_MAX]
)
"""Ints from -2**63 to 2**64-1, with the edges drawn often."""

floats: st.SearchStrategy[float] = st.floats() | st.sampled_from(
    [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7e308]
)
"""Any float, with NaN, the infinities, -0.0 and the extremes drawn often."""

text: st.SearchStrategy[str] = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
"""Valid Unicode (NUL, control characters, astral code points; no lone surrogates)."""

binary: st.SearchStrategy[bytes] = st.binary(max_size=16) | st.sampled_from(
    [b"", b"\x00\xff", b"\x80"]
)
"""Bytes, including sequences that are not valid UTF-8."""

leaves: st.SearchStrategy[Any] = st.none() | st.booleans() | storable_ints | floats | text | binary
"""Every scalar the log stores exactly."""

_visible = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=24).filter(
    str.strip
)
"""Text with something other than whitespace in it: providers refuse blank text blocks."""

_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_-]{0,15}", fullmatch=True)
"""Tool and node names in the alphabet providers accept."""


def data(leaf: st.SearchStrategy[Any] = leaves, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Nested data: lists and dicts with str keys, a few levels deep, of `leaf`."""
    return st.recursive(
        leaf,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def _objects(max_leaves: int = 8) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(text, data(max_leaves=max_leaves), max_size=3)


def same(a: Any, b: Any) -> bool:
    """Exact equality for round trips: types match, NaN equals NaN, -0.0 differs from 0.0,
    object keys in order, models field by field (`agentlog.events.verify_export.same`).

    `==` is too lenient for a round trip (1 == 1.0 == True, -0.0 == 0.0) and too strict for
    NaN.
    """
    return exactly_same(a, b, ordered=True)


# ---- messages ----------------------------------------------------------------------------


def media_refs() -> st.SearchStrategy[MediaRef]:
    """A `MediaRef` of each kind: a URL, a provider file id, or inline base64 data."""
    sizes = st.none() | st.integers(0, 2**40)
    return st.builds(
        MediaRef,
        kind=st.sampled_from(["url", "file_id", "data"]),
        url=st.none() | text.map(lambda s: f"https://example.com/{s}"),
        file_id=st.none() | text,
        data_base64=st.none() | st.from_regex(r"[A-Za-z0-9+/]{0,12}={0,2}", fullmatch=True),
        mime_type=st.none() | st.sampled_from(["image/png", "audio/wav", "video/mp4", "text/x"]),
        size_bytes=sizes,
        sha256=st.none() | st.from_regex(r"[0-9a-f]{64}", fullmatch=True),
        filename=st.none() | text,
        width=sizes,
        height=sizes,
        duration_ms=sizes,
        page=st.none() | st.integers(0, 10_000),
    )


def _annotation_refs() -> st.SearchStrategy[AnnotationRef]:
    small = st.none() | st.integers(0, 10_000)
    return st.builds(
        AnnotationRef,
        url=st.none() | text,
        file_id=st.none() | text,
        page=small,
        index=small,
        title=st.none() | text,
    )


def token_usages() -> st.SearchStrategy[TokenUsages]:
    """Token accounting of one model call, totals consistent with their parts."""
    count = st.integers(0, 2**31)
    return st.builds(
        lambda completion, prompt, reasoning, cache_w, cache_r, image, audio: TokenUsages(
            completion_tokens=completion,
            prompt_tokens=prompt,
            total_tokens=completion + prompt,
            reasoning_tokens=reasoning,
            cache_creation_input_tokens=cache_w,
            cache_read_input_tokens=cache_r,
            image_tokens=image,
            audio_tokens=audio,
        ),
        count,
        count,
        count,
        count,
        count,
        st.none() | count,
        st.none() | count,
    )


def content_blocks(
    kinds: Sequence[str] | None = None,
) -> st.SearchStrategy[ContentBlock]:
    """Content blocks of every kind `agentlog.projections.messages` defines (or only `kinds`)."""
    media = media_refs()
    ids = text.map(lambda s: f"call_{s}")
    builders: dict[str, st.SearchStrategy[Any]] = {
        "text": st.builds(
            TextBlock, text=text, annotations=st.lists(_annotation_refs(), max_size=2)
        ),
        "image": st.builds(
            ImageBlock,
            media=media,
            alt_text=st.none() | text,
            bbox=st.none() | st.lists(floats, min_size=4, max_size=4),
        ),
        "audio": st.builds(
            AudioBlock,
            media=media,
            transcript=st.none() | text,
            sample_rate=st.none() | st.integers(1, 192_000),
            channels=st.none() | st.integers(1, 8),
        ),
        "video": st.builds(VideoBlock, media=media, thumbnail=st.none() | media),
        "document": st.builds(
            DocumentBlock,
            media=media,
            text=st.none() | text,
            pages=st.none() | st.lists(st.integers(0, 10_000), max_size=3),
            excerpt=st.none() | text,
        ),
        "data": st.builds(
            DataBlock,
            mime_type=st.sampled_from(["application/json", "application/octet-stream"]),
            data_base64=st.none() | text,
            media=st.none() | media,
        ),
        "tool_call": st.builds(
            ToolCallBlock,
            id=ids,
            name=_names,
            args=_objects(),
            tool_type=st.none() | st.just("function"),
        ),
        "remote_tool_call": st.builds(
            RemoteToolCallBlock, id=ids, name=_names, args=_objects(), tool_type=_names
        ),
        "tool_result": st.builds(
            ToolResultBlock,
            call_id=ids,
            output=data(),
            is_error=st.booleans(),
            status=st.none() | st.sampled_from(["completed", "failed", "abandoned", "rejected"]),
        ),
        "reasoning": st.builds(
            ReasoningBlock, summary=text, details=st.none() | st.lists(text, max_size=3)
        ),
        "annotation": st.builds(
            AnnotationBlock,
            kind=st.sampled_from(["citation", "note"]),
            refs=st.lists(_annotation_refs(), max_size=2),
            spans=st.none()
            | st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), max_size=2),
        ),
        "error": st.builds(
            ErrorBlock, message=text, code=st.none() | text, data=st.none() | _objects()
        ),
    }
    chosen = list(builders) if kinds is None else list(kinds)
    unknown = [k for k in chosen if k not in builders]
    if unknown:
        raise ValueError(
            f"no content block kind {', '.join(map(repr, unknown))}: "
            f"use some of {', '.join(builders)}"
        )
    return cast(st.SearchStrategy[ContentBlock], st.one_of([builders[k] for k in chosen]))


_ids: st.SearchStrategy[str | int] = text | storable_ints


def messages(
    *,
    roles: Sequence[Literal["user", "assistant", "system", "tool"]] = (
        "user",
        "assistant",
        "system",
        "tool",
    ),
    message_ids: st.SearchStrategy[str | int] = _ids,
    max_blocks: int = 4,
) -> st.SearchStrategy[Message]:
    """Messages of any of `roles` holding blocks of every kind, with metadata, raw data and
    token usages: the whole `Message` model, as a provider adapter or a user may fill it."""
    return st.builds(
        Message,
        message_id=message_ids,
        role=st.sampled_from(list(roles)),
        content=st.lists(content_blocks(), max_size=max_blocks),
        reasoning=st.none() | text,
        timestamp=st.none() | floats,
        metadata=_objects(),
        usages=st.none() | token_usages(),
        raw=st.none() | _objects(),
    )


def text_messages(
    *,
    roles: Sequence[Literal["user", "assistant", "system"]] = ("user", "assistant", "system"),
    message_ids: st.SearchStrategy[str | int] = _ids,
) -> st.SearchStrategy[Message]:
    """Plain messages: one non-blank text block, a role, an id."""
    return st.builds(
        lambda content, role, message_id: Message.text_message(
            content, role=role, message_id=message_id
        ),
        _visible,
        st.sampled_from(list(roles)),
        message_ids.map(str),
    )


# ---- transcripts -------------------------------------------------------------------------


class _Ids:
    """Fresh message and call ids within one draw, none equal to one already `taken`."""

    def __init__(self, prefix: str, taken: Iterable[str | int] = ()) -> None:
        self.prefix = prefix
        self.taken: set[str | int] = set(taken)
        self.n = 0

    def __call__(self, kind: str = "m") -> str:
        while True:
            self.n += 1
            candidate = f"{self.prefix}{kind}{self.n}"
            if candidate not in self.taken:
                self.taken.add(candidate)
                return candidate


def _user_message(draw: st.DrawFn, ids: _Ids) -> Message:
    extra = draw(st.lists(content_blocks(["image", "document"]), max_size=1))
    content: list[ContentBlock] = [TextBlock(text=draw(_visible)), *extra]
    return Message(message_id=ids(), role="user", content=content, timestamp=draw(_times))


_times = st.none() | st.floats(0, 4e9)


def _assistant_turn(draw: st.DrawFn, ids: _Ids, max_calls: int) -> list[Message]:
    """An assistant message, and when it calls tools, one tool message answering each call."""
    content: list[ContentBlock] = []
    if draw(st.booleans()):
        content.append(ReasoningBlock(summary=draw(_visible)))
    calls: list[ToolCallBlock | RemoteToolCallBlock] = []
    for _ in range(draw(st.integers(0, max_calls))):
        kind = ToolCallBlock if draw(st.booleans()) else RemoteToolCallBlock
        calls.append(kind(id=ids("call"), name=draw(_names), args=draw(_objects(4))))
    if not calls or draw(st.booleans()):
        content.append(TextBlock(text=draw(_visible)))
    content.extend(calls)
    usages = draw(st.none() | token_usages())
    turn = [
        Message(message_id=ids(), role="assistant", content=content, usages=usages, timestamp=None)
    ]
    for call in calls:
        result = ToolResultBlock(
            call_id=call.id, output=draw(data(max_leaves=4)), is_error=draw(st.booleans())
        )
        turn.append(Message(message_id=ids(), role="tool", content=[result], timestamp=None))
    return turn


@st.composite
def transcripts(
    draw: st.DrawFn,
    *,
    min_turns: int = 0,
    max_turns: int = 3,
    max_calls: int = 2,
    system: bool | None = None,
    id_prefix: str = "",
    taken: frozenset[str | int] = frozenset(),
) -> list[Message]:
    """A conversation every major provider accepts, as a list of messages.

    An optional system message first (`system=True`/`False` forces it); then turns, each a
    user message followed by assistant messages until one calls no tool; an assistant
    message that calls tools is followed right away by one tool message per call, answering
    each exactly once, in call order. Ids are unique and none is in `taken`.
    """
    ids = _Ids(id_prefix, set(taken))
    out: list[Message] = []
    if system if system is not None else draw(st.booleans()):
        out.append(Message.text_message(draw(_visible), role="system", message_id=ids()))
    for _ in range(draw(st.integers(min_turns, max_turns))):
        out.append(_user_message(draw, ids))
        for hop in range(3):
            turn = _assistant_turn(draw, ids, max_calls if hop < 2 else 0)
            out.extend(turn)
            if len(turn) == 1:
                break
    return out


# ---- states ------------------------------------------------------------------------------


def for_type(tp: Any) -> st.SearchStrategy[Any]:
    """Values of type `tp` that the log stores exactly.

    Builtins, containers, unions, literals, enums and pydantic models are resolved here so
    that ints stay within 64 bits, text has no lone surrogates and dict keys are strs;
    anything else is left to `hypothesis.strategies.from_type`.
    """
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is object:
        return data()
    if tp is type(None) or tp is None:
        return st.none()
    if tp is bool:
        return st.booleans()
    if tp is int:
        return storable_ints
    if tp is float:
        return floats
    if tp is str:
        return text
    if tp is bytes:
        return binary
    if origin is typing.Annotated:
        return for_type(args[0])
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([for_type(a) for a in args])
    if origin in (list, Sequence) or tp is list:
        return st.lists(for_type(args[0]) if args else data(), max_size=4)
    if origin is set or origin is frozenset:
        return st.sets(for_type(args[0]), max_size=4).map(origin)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(for_type(args[0]), max_size=4).map(tuple)
        return st.tuples(*(for_type(a) for a in args))
    if origin in (dict, Mapping) or tp is dict:
        values = for_type(args[1]) if args else data()
        return st.dictionaries(text, values, max_size=4)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if isinstance(tp, type) and issubclass(tp, Message):
        return messages()
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        fields = {
            name: for_type(info.annotation)
            for name, info in tp.model_fields.items()
            if info.annotation is not None
        }
        return st.fixed_dictionaries(fields).map(tp.model_validate)
    return st.from_type(tp)


def execution_states(
    *, nodes: st.SearchStrategy[str] = _names
) -> st.SearchStrategy[ExecutionState]:
    """The metadata of a thread at rest between commits: a run completed, failed, paused by
    an interrupt or stopped, at some step, with no tool call in flight."""

    def build(kind: str, step: int, node: str, reason: str, when: str) -> ExecutionState:
        meta = ExecutionState(current_node=node, step=step)
        if kind == "completed":
            meta.current_node = END
            meta.status = ExecutionStatus.COMPLETED
        elif kind == "failed":
            meta.status = ExecutionStatus.ERROR
            meta.internal_data.update(error=f"RuntimeError: {reason}", failed_node=node)
        else:
            status = (
                ExecutionStatus.INTERRUPTED_BEFORE
                if when == "before"
                else ExecutionStatus.INTERRUPTED_AFTER
            )
            data = {"source": "stop"} if kind == "stopped" else None
            meta.set_interrupt(node, reason, status, data)
            if kind == "stopped":
                meta.stop_current_execution = StopRequestStatus.STOPPED
        return meta

    return st.builds(
        build,
        st.sampled_from(["completed", "failed", "interrupted", "stopped"]),
        st.integers(0, 50),
        nodes,
        text,
        st.sampled_from(["before", "after"]),
    )


def states(
    state_cls: type[S] = AgentState,  # type: ignore[assignment]
    *,
    context: st.SearchStrategy[list[Message]] | None = None,
    execution_meta: st.SearchStrategy[ExecutionState] | None = None,
    **fields: st.SearchStrategy[Any],
) -> st.SearchStrategy[S]:
    """Instances of `state_cls` (`AgentState` or a subclass), derived from its fields.

    `context` is a `transcripts()` one; `execution_meta` a thread at rest
    (`execution_states()`); every other field's annotation picks its strategy (`for_type`),
    unless given by name in `fields`. Values are validated by the class, so a reducer folds
    them as it would an update.
    """
    declared = state_cls.model_fields
    unknown = [name for name in fields if name not in declared]
    if unknown:
        raise ValueError(
            f"{state_cls.__name__} has no field {', '.join(map(repr, unknown))} "
            f"(fields: {', '.join(declared)})"
        )
    plan: dict[str, st.SearchStrategy[Any]] = {}
    for name, info in declared.items():
        if name in fields:
            plan[name] = fields[name]
        elif name == "context":
            plan[name] = context if context is not None else transcripts()
        elif name == "execution_meta":
            plan[name] = execution_meta if execution_meta is not None else execution_states()
        elif name == "context_summary":
            plan[name] = st.none() | text
        else:
            plan[name] = for_type(info.annotation)
    return st.fixed_dictionaries(plan).map(lambda values: state_cls.model_validate(values))


# ---- events the gate accepts -------------------------------------------------------------


class _Run:
    """What a generator must know of a thread to write a legal next event."""

    def __init__(self, state: AgentState) -> None:
        meta = state.execution_meta
        self.step = meta.step
        self.node = meta.current_node
        self.finished = meta.status in (ExecutionStatus.COMPLETED, ExecutionStatus.ERROR)
        self.failed = meta.status == ExecutionStatus.ERROR
        self.paused = meta.is_interrupted() or (
            meta.stop_current_execution == StopRequestStatus.STOPPED
        )
        self.stop = meta.stop_current_execution
        self.pending: dict[str, str] = dict(meta.internal_data.get(TOOL_CALLS_KEY, {}))
        self.open = {c.id for c in open_calls(state.context)}
        self.ids = _Ids("", {m.message_id for m in state.context})
        for message in state.context:
            for call in calls_of(message):
                self.ids.taken.add(call.id)


def _custom_updates(draw: st.DrawFn, state_cls: type[AgentState]) -> dict[str, Any] | None:
    names = [
        name
        for name in field_plan(state_cls)
        if name not in CONTEXT_FIELDS and name != "context_summary"
    ]
    if not names or not draw(st.booleans()):
        return None
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
    return {name: draw(for_type(state_cls.model_fields[name].annotation)) for name in chosen}


def _step(draw: st.DrawFn, run: _Run, state_cls: type[AgentState], out: list[Event]) -> None:
    """One node's step: entered, messages and tool calls, custom updates, advanced."""
    node = draw(_names)
    out.append(NodeEntered(node=node))
    turn = draw(st.sampled_from(["nothing", "text", "tools"]))
    if turn != "nothing":
        message = _assistant_turn(draw, run.ids, 2 if turn == "tools" else 0)
        assistant, results = message[0], message[1:]
        out.append(message_appended(assistant))
        for call, result in zip(calls_of(assistant), results, strict=True):
            if isinstance(call, ToolCallBlock):
                out.append(ToolCallStarted(call_id=call.id, name=call.name, node=node))
                out.append(
                    ToolCallFinished(
                        call_id=call.id,
                        name=call.name,
                        output=draw(data(max_leaves=4)),
                        duration_ms=draw(st.floats(0, 1e6)),
                    )
                )
            out.append(message_appended(result))
    updates = _custom_updates(draw, state_cls)
    if updates is not None:
        out.append(state_updated(updates))
    run.step += 1
    out.append(StepAdvanced(step=run.step, next_node=draw(st.none() | _names)))


def _pause(draw: st.DrawFn, run: _Run, out: list[Event]) -> None:
    """An interrupt or a stop, then the resume that ends it."""
    node = draw(_names)
    when: Literal["before", "after"] = "before" if draw(st.booleans()) else "after"
    if draw(st.booleans()):
        out.append(
            InterruptRaised(
                node=node,
                reason=draw(text),
                when=when,
                data=draw(st.none() | _objects(4)),
                by_node=draw(st.booleans()),
            )
        )
    else:
        out.append(StopRequested(by=draw(st.none() | text), reason=draw(st.none() | text)))
        out.append(Stopped(node=node, when=when, reason=draw(st.none() | text)))
    out.append(Resumed(value=draw(data(max_leaves=4)), by=draw(st.none() | text)))


@st.composite
def accepted_events(
    draw: st.DrawFn, state: AgentState, *, max_runs: int = 2, max_steps: int = 3
) -> list[Event]:
    """Events `decide` accepts, in order, from `state` (a thread with at least one event).

    From a paused or failed run, a resume or new input; then runs, each run_started with a
    user message, steps (node_entered, messages, tool calls answered, custom field updates,
    step_advanced), interrupts and stops each followed by its resume, and an end:
    run_completed, run_failed, or (last run only) a pause left waiting.
    """
    state_cls = type(state)
    run = _Run(state)
    out: list[Event] = []
    if run.paused or run.failed:
        if draw(st.booleans()):
            out.append(Resumed(value=draw(data(max_leaves=4))))
            run.finished = False
            for _ in range(draw(st.integers(0, max_steps))):
                _step(draw, run, state_cls, out)
            _finish(draw, run, out, last=False)
    elif not run.finished:  # a run in progress: finish it before starting another
        for call_id, name in run.pending.items():
            out.append(ToolCallFinished(call_id=call_id, name=name, status="abandoned"))
        if run.open:
            raise ValueError(
                "accepted_events needs a state at rest: this one has tool calls with no "
                f"result ({', '.join(sorted(run.open))}); answer them first"
            )
        out.append(RunFailed(node=run.node, error_type="Cancelled", message="superseded"))
    for index in range(draw(st.integers(1, max_runs))):
        out.append(RunStarted(entry_node=START, input=draw(st.none() | text)))
        out.append(message_appended(_user_message(draw, run.ids)))
        for _ in range(draw(st.integers(0, max_steps))):
            if draw(st.integers(0, 3)) == 0:
                _pause(draw, run, out)
            _step(draw, run, state_cls, out)
        _finish(draw, run, out, last=index == max_runs - 1)
    return out


def _finish(draw: st.DrawFn, run: _Run, out: list[Event], *, last: bool) -> None:
    endings = ["failed"] if run.open else ["completed", "failed"]
    ending = draw(st.sampled_from([*endings, "paused"] if last else endings))
    if ending == "completed":
        out.append(RunCompleted(duration_ms=draw(st.none() | st.floats(0, 1e6))))
    elif ending == "failed":
        out.append(
            RunFailed(
                node=draw(st.none() | _names),
                error_type=draw(_names),
                message=draw(text),
            )
        )
    else:
        out.append(InterruptRaised(node=draw(_names), reason=draw(text)))


@st.composite
def event_sequences(
    draw: st.DrawFn,
    state_cls: type[AgentState] = AgentState,
    *,
    max_runs: int = 2,
    max_steps: int = 3,
) -> list[Event]:
    """Events `decide` accepts from a new thread of `state_cls` (seq 0): whole runs, with
    interrupts, stops and resumes, as `accepted_events` writes them."""
    fresh = state_cls().model_copy(
        update={
            "execution_meta": ExecutionState(current_node=START, status=ExecutionStatus.COMPLETED)
        }
    )
    return draw(accepted_events(fresh, max_runs=max_runs, max_steps=max_steps))


# ---- events the gate refuses -------------------------------------------------------------


@st.composite
def refused_events(
    draw: st.DrawFn, state: AgentState, *, kinds: Sequence[str] | None = None
) -> Event:
    """One event `decide` must refuse from `state` (a thread with at least one event),
    raising `IllegalTransitionError` or `InvalidStateUpdateError`; of one of `kinds` (event
    kind names such as "step_advanced") when given.

    Among them: step_advanced with a wrong step, resumed when nothing is paused or failed,
    tool_call_finished of a call never started, run_completed with a call open, a result of
    an unknown call, an update of a field the class lacks, a fork or a thread's creation
    after the first event.
    """
    run = _Run(state)
    fresh_call = run.ids("call")
    unknown_id = run.ids()

    def wrong_step(step: int) -> bool:
        return step != run.step + 1

    choices: dict[str, Callable[[], Event]] = {
        StepAdvanced.KIND: lambda: StepAdvanced(
            step=draw(st.integers(0, run.step + 9).filter(wrong_step))
        ),
        ToolCallFinished.KIND: lambda: ToolCallFinished(call_id=fresh_call, name=draw(_names)),
        Forked.KIND: lambda: Forked(source_thread=draw(text), source_seq=0, state={}),
        ThreadCreated.KIND: lambda: ThreadCreated(
            by=draw(_names), graph_id=draw(st.none() | _names), metadata=draw(_objects(4))
        ),
        MessagesRemoved.KIND: lambda: MessagesRemoved(message_ids=[unknown_id]),
        MessageReplaced.KIND: lambda: MessageReplaced(
            message=message_appended(Message.text_message("x", message_id=unknown_id)).message
        ),
        MessageAppended.KIND: lambda: MessageAppended(
            message=message_appended(
                Message.tool_message([ToolResultBlock(call_id=fresh_call, output="x")])
            ).message
        ),
        StateUpdated.KIND: lambda: StateUpdated(values={_missing_field(type(state)): draw(text)}),
    }
    if not (run.paused or run.failed):
        choices[Resumed.KIND] = lambda: Resumed(value=draw(data(max_leaves=4)))
    if run.stop != StopRequestStatus.STOP_REQUESTED:
        choices[Stopped.KIND] = lambda: Stopped(node=draw(st.none() | _names))
    if run.finished or run.stop != StopRequestStatus.NONE:
        choices[StopRequested.KIND] = lambda: StopRequested()
    if run.finished or run.paused:
        choices[NodeEntered.KIND] = lambda: NodeEntered(node=draw(_names))
        choices[ToolCallStarted.KIND] = lambda: ToolCallStarted(
            call_id=fresh_call, name=draw(_names)
        )
        choices[InterruptRaised.KIND] = lambda: InterruptRaised(
            node=draw(_names), reason=draw(text)
        )
        choices[RunFailed.KIND] = lambda: RunFailed(
            node=None, error_type=draw(_names), message=draw(text)
        )
    if run.finished or run.paused or run.open:
        choices[RunCompleted.KIND] = lambda: RunCompleted()
    if not (run.finished or run.paused or before_first_run(state.execution_meta)):
        choices[RunStarted.KIND] = lambda: RunStarted(entry_node=START)
    names = list(choices) if kinds is None else [k for k in kinds if k in choices]
    if not names:
        raise ValueError(
            f"from this state (status {state.execution_meta.status.value}) no event of kind "
            f"{', '.join(map(repr, kinds or ()))} must be refused; these must: "
            f"{', '.join(choices)}"
        )
    return choices[draw(st.sampled_from(names))]()


def _missing_field(state_cls: type[AgentState]) -> str:
    """A name that is no field of `state_cls` nor a name of its context."""
    name = "no_such_field"
    while name in state_cls.model_fields or name in CONTEXT_FIELDS:
        name += "_"
    return name
