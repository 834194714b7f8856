"""The transcript's rules: updates of the context as events, and tool calls paired with results.

A context update (a node's output, an edit, the input of a run) is a list of messages and
`RemoveMessage` markers; `context_events` turns it into the events that record it. Every
tool call in a context ends in exactly one result, so a transcript stays valid for every
model provider: `check_pairs` refuses an update that would leave a call open or a result
without its call, and `open_calls` names the calls still waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any

from agentlog.events.kinds import (
    Event,
    MessageAppended,
    MessageReplaced,
    MessagesRemoved,
    MessagesReplaced,
)
from agentlog.projections.edge import to_builtins
from agentlog.projections.errors import InvalidStateUpdateError
from agentlog.projections.messages import (
    Message,
    RemoteToolCallBlock,
    RemoveMessage,
    ToolCallBlock,
    ToolResultBlock,
)
from agentlog.projections.reducers import add_messages
from agentlog.projections.shared import settle

Call = ToolCallBlock | RemoteToolCallBlock


def context_events(
    items: Sequence[Message | RemoveMessage],
    *,
    known: Container[str | int],
    reducer: Callable[..., Any] | None = None,
    current: Sequence[Message] = (),
    waiting: Container[str] = (),
    edit: bool = False,
    reason: str | None = None,
) -> list[Event]:
    """The events recording an update of the context by `items`, in order.

    `RemoveMessage(id)` removes one message, `RemoveMessage(REMOVE_ALL_MESSAGES)` all of
    them (the messages after it become the context). Without markers a declared reducer
    other than `add_messages` (such as `replace_messages`) gives the new context whole.
    Otherwise messages merge as `add_messages` does: a new id is appended, a known one is
    left as it is, or, for a human edit (`edit`), replaces the message with that id. A
    result answering a call still `waiting` is never taken for one already there: when a
    model reuses a call id in a later turn, its new result gets an id of its own.
    """
    replacing = reducer is not None and reducer is not add_messages
    if replacing and not any(isinstance(i, RemoveMessage) for i in items):
        assert reducer is not None
        messages = [i for i in items if isinstance(i, Message)]
        merged = reducer(list(current), messages)
        return [MessagesReplaced(messages=[to_builtins(m) for m in merged])]
    start = 0
    for index, item in enumerate(items):
        if isinstance(item, RemoveMessage) and item.removes_all:
            start = index
    events: list[Event] = []
    seen: set[str | int] = set()
    if start or (items and isinstance(items[0], RemoveMessage) and items[0].removes_all):
        rest = [i for i in items[start + 1 :] if isinstance(i, Message)]
        events.append(MessagesReplaced(messages=[to_builtins(m) for m in rest]))
        known, seen = (), {m.message_id for m in rest}
        items = [i for i in items[start + 1 :] if isinstance(i, RemoveMessage)]
    removing: list[str | int] = []
    for item in items:
        if isinstance(item, RemoveMessage):
            removing.append(item.message_id)
            continue
        if removing:
            events.append(MessagesRemoved(message_ids=removing, reason=reason))
            removing = []
        if item.delta or item.message_id in seen:
            continue
        if item.message_id in known and _answers(item, waiting):
            item = item.model_copy(update={"message_id": unique_id(item.message_id, known)})
        data = to_builtins(item)
        if item.message_id in known:
            if edit:
                events.append(MessageReplaced(message=data, reason=reason))
            continue
        seen.add(item.message_id)
        events.append(MessageAppended(message=data, reason=reason))
    if removing:
        events.append(MessagesRemoved(message_ids=removing, reason=reason))
    return events


def _answers(message: Message, waiting: Container[str]) -> bool:
    return any(r.call_id in waiting for r in results_of(message))


def unique_id(message_id: str | int, known: Container[str | int]) -> str | int:
    """`message_id`, or, when a message of the context has it, that id with the first `~N`
    suffix none has yet."""
    if message_id not in known:
        return message_id
    n = 2
    while f"{message_id}~{n}" in known:
        n += 1
    return f"{message_id}~{n}"


def calls_of(message: Message) -> list[Call]:
    """The tool calls a message asks for: local ones and those a client runs."""
    remote = [b for b in message.content if isinstance(b, RemoteToolCallBlock)]
    return [*message.tool_calls(), *remote] if message.role == "assistant" else []


def results_of(message: Message) -> list[ToolResultBlock]:
    """The tool results a message carries."""
    return [b for b in message.content if isinstance(b, ToolResultBlock)]


def open_calls(context: Iterable[Message]) -> list[Call]:
    """The calls of the context that no later message answers, oldest first."""
    waiting: dict[str, Call] = {}
    track_calls(context, waiting)
    return list(waiting.values())


def track_calls(messages: Iterable[Message], waiting: dict[str, Call]) -> None:
    """Carry `waiting` (the open calls of the messages before, by id, oldest first) over
    `messages`: what they answer leaves it, what they call joins it."""
    for message in messages:
        for result in results_of(message):
            waiting.pop(result.call_id, None)
        for call in calls_of(message):
            waiting[call.id] = call


class OpenCalls:
    """`open_calls` of a context asked again and again as it grows (a run asks after every
    step): while the context it is given still starts with the messages it read last time,
    the very same objects, it reads only the messages added since."""

    __slots__ = ("_read", "_waiting")

    def __init__(self) -> None:
        self._read: list[Message] = []
        self._waiting: dict[str, Call] = {}

    def of(self, context: list[Message]) -> list[Call]:
        """The calls of `context` that no later message answers, oldest first."""
        settle(context)  # the messages of a state read from time travel, validated
        read, held = self._read, len(self._read)
        # list's own slice: a `SharedContext` would copy what it hands out; equal lists of
        # the same objects compare by identity, at C speed
        if len(context) < held or list.__getitem__(context, slice(0, held)) != read:
            read, held, self._waiting = [], 0, {}
        new = list.__getitem__(context, slice(held, None))
        track_calls(new, self._waiting)
        read.extend(new)
        self._read = read
        return list(self._waiting.values())


def unpaired_results(context: Iterable[Message]) -> list[str]:
    """Call ids of results with no call before them, or answering a call a second time."""
    called: set[str] = set()
    answered: set[str] = set()
    stray: list[str] = []
    for message in context:
        for result in results_of(message):
            if result.call_id not in called or result.call_id in answered:
                stray.append(result.call_id)
            answered.add(result.call_id)
        for call in calls_of(message):
            called.add(call.id)
            answered.discard(call.id)  # a provider may reuse an id in a later turn
    return stray


def order_problems(context: Sequence[Message]) -> list[str]:
    """What a model provider (OpenAI, Anthropic) would refuse in `context`'s order: the
    results of an assistant message's calls come right after it, before any other message,
    and answer only its calls. The last assistant message may still wait for some results
    (a run paused at its tool node), as long as nothing but results follows it."""
    problems: list[str] = []
    calls: list[str] = []  # the calls of the assistant message the tool messages follow
    for index, message in enumerate(context):
        results = [r.call_id for r in results_of(message)]
        if results:
            stray = [c for c in results if c not in calls]
            if stray:
                problems.append(
                    f"message {index} ({message.message_id!r}) answers {stray}, which the "
                    "assistant message right before its run of results did not call"
                )
            calls = [c for c in calls if c not in results]
            continue
        if calls:
            problems.append(
                f"message {index} ({message.message_id!r}) comes before the results of "
                f"{calls}, which must directly follow the message that called them"
            )
        calls = [c.id for c in calls_of(message)]
    return problems


def check_pairs(before: Sequence[Message], after: Sequence[Message], what: str) -> None:
    """Refuse `what` when it leaves a tool call open or a result unpaired that was not before.

    A call already open before (a run waiting at its tool node) may stay open, or leave with
    its message; a call cannot lose its result, and a result cannot lose its call.
    """
    had = {call.id for message in before for call in calls_of(message)}
    opened = ({c.id for c in open_calls(after)} - {c.id for c in open_calls(before)}) & had
    if opened:
        raise InvalidStateUpdateError(
            f"{what} would leave tool call(s) {', '.join(map(repr, sorted(opened)))} without "
            "their result: remove a tool call's assistant message and its tool result together"
        )
    stray = set(unpaired_results(after)) - set(unpaired_results(before))
    if stray:
        raise InvalidStateUpdateError(
            f"{what} would leave the result(s) of tool call(s) "
            f"{', '.join(map(repr, sorted(stray)))} without their call: remove a tool call's "
            "assistant message and its tool result together"
        )


__all__ = [
    "calls_of",
    "check_pairs",
    "context_events",
    "open_calls",
    "order_problems",
    "results_of",
    "unique_id",
    "unpaired_results",
]
