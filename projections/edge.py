"""The edge: validated models in, events of plain builtins out.

Models are validated once here (what a node returns, what a human edits); the log stores
builtins, and the fold validates them back into models on replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from agentlog.events.codec import TOO_DEEP, UnstorableValueError
from agentlog.events.kinds import MessageAppended, MessagesReplaced, StateUpdated
from agentlog.projections.messages import Message
from agentlog.projections.state import AgentState

_BINARY = (bytes, bytearray, memoryview)


def _model_builtins(obj: Any) -> Any:
    """What `to_builtins` makes of an object msgspec does not know: a model or pydantic type."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="python")
    return to_jsonable_python(obj)


def to_builtins(value: Any) -> Any:
    """A copy of `value` made of builtins the log stores exactly.

    Models, dataclasses, enums, datetimes, UUIDs ... become dicts, lists and strs as in JSON,
    but floats (NaN, infinities, -0.0), bytes and ints stay what they are: a JSON step would
    turn NaN into None and cannot hold bytes at all.
    """
    try:
        return msgspec.to_builtins(
            value, builtin_types=_BINARY, str_keys=True, enc_hook=_model_builtins
        )
    except TypeError:  # keys msgspec refuses (a bool, a tuple): convert them as pydantic does
        return _keys_as_str(value)
    except RecursionError as exc:
        raise UnstorableValueError("a value", "it", TOO_DEEP) from exc


def _keys_as_str(value: Any) -> Any:
    """`to_builtins` the slow way, for dicts whose keys msgspec cannot turn into str."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="python")
    if isinstance(value, dict):
        return {_key(k): _keys_as_str(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_keys_as_str(v) for v in value]
    return msgspec.to_builtins(value, builtin_types=_BINARY, enc_hook=_model_builtins)


def _key(key: Any) -> str:
    """A dict key as the str pydantic's JSON form gives it (True -> "true", 1 -> "1")."""
    if isinstance(key, str):
        return key
    converted = to_jsonable_python({key: None})
    return str(next(iter(converted)))


def state_data(state: AgentState) -> dict[str, Any]:
    """`state` as the exact builtins a snapshot or a fork stores; validating them gives it back.

    The one way to turn a state into stored data: no JSON step, so NaN, infinities, -0.0,
    bytes and big ints in custom fields survive a snapshot or a fork exactly as a replay
    of the events would produce them.
    """
    data: dict[str, Any] = to_builtins(state)
    return data


def message_appended(message: Message) -> MessageAppended:
    """The event recording that `message` joined the context."""
    return MessageAppended(message=to_builtins(message))


def messages_appended(messages: Iterable[Message]) -> list[MessageAppended]:
    """One `message_appended` per message, in order."""
    return [message_appended(m) for m in messages]


def messages_replaced(messages: Iterable[Message]) -> MessagesReplaced:
    """The event recording that the context became `messages`."""
    return MessagesReplaced(messages=[to_builtins(m) for m in messages])


def state_updated(
    values: Mapping[str, Any], *, source: str = "node", reason: str | None = None
) -> StateUpdated:
    """The event recording that custom fields took `values` (merged through reducers)."""
    return StateUpdated(values=to_builtins(dict(values)), source=source, reason=reason)
