"""The edge: validated models in, events of plain builtins out.

Models are validated once here (what a node returns, what a human edits); the log stores
builtins, and the fold validates them back into models on replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic_core import to_jsonable_python

from events.kinds import MessageAppended, MessagesReplaced, StateUpdated

from .messages import Message


def to_builtins(value: Any) -> Any:
    """A JSON-compatible copy of `value` (models, enums, datetimes ... become builtins)."""
    return to_jsonable_python(value)


def message_appended(message: Message) -> MessageAppended:
    """The event recording that `message` joined the context."""
    return MessageAppended(message=message.model_dump(mode="json"))


def messages_appended(messages: Iterable[Message]) -> list[MessageAppended]:
    """One `message_appended` per message, in order."""
    return [message_appended(m) for m in messages]


def messages_replaced(messages: Iterable[Message]) -> MessagesReplaced:
    """The event recording that the context became `messages`."""
    return MessagesReplaced(messages=[m.model_dump(mode="json") for m in messages])


def state_updated(
    values: Mapping[str, Any], *, source: str = "node", reason: str | None = None
) -> StateUpdated:
    """The event recording that custom fields took `values` (merged through reducers)."""
    return StateUpdated(values=to_builtins(dict(values)), source=source, reason=reason)
