"""Reducers: how a field's old value and a node's update combine into the new value."""

from __future__ import annotations

from typing import Any, TypeVar

from agentlog.projections.messages import Message

T = TypeVar("T")


def add_messages(left: list[Message], right: list[Message]) -> list[Message]:
    """Append `right` to `left`, skipping ids already present and streaming deltas."""
    seen = {m.message_id for m in left}
    added: list[Message] = []
    for m in right:
        if m.delta or m.message_id in seen:
            continue
        seen.add(m.message_id)
        added.append(m)
    return left + added


def replace_messages(left: list[Message], right: list[Message]) -> list[Message]:
    """The new list replaces the old one."""
    return list(right)


def append_items(left: list[T], right: list[T]) -> list[T]:
    """Append the items of `right` not yet present, judged by their `.id`.

    An item without an `id` (attribute, or key of a dict) is judged by its value, so a
    `list[str]` field with this reducer collects distinct strings.
    """
    seen = {_item_key(item) for item in left}
    added: list[T] = []
    for item in right:
        key = _item_key(item)
        if key in seen:
            continue
        seen.add(key)
        added.append(item)
    return left + added


def _item_key(item: Any) -> Any:
    key = item.get("id", item) if isinstance(item, dict) else getattr(item, "id", item)
    try:
        hash(key)
    except TypeError:
        return repr(key)
    return key


def replace_value(left: T, right: T) -> T:
    """The new value replaces the old one."""
    return right


def remove_tool_messages(messages: list[Message]) -> list[Message]:
    """Drop complete tool sequences: an assistant call, its tool results, and a final answer.

    Only the call and the results go; the final assistant answer stays. A sequence without
    a final answer yet is kept whole, so an unfinished exchange is never cut.
    """
    drop: set[int] = set()
    i, n = 0, len(messages)
    while i < n:
        msg = messages[i]
        if msg.role != "assistant" or not _asks_for_tools(msg):
            i += 1
            continue
        start = i
        i += 1
        while i < n and messages[i].role == "tool":
            i += 1
        if i < n and messages[i].role == "assistant" and not _asks_for_tools(messages[i]):
            drop.update(range(start, i))
            i += 1
    return [m for k, m in enumerate(messages) if k not in drop]


def _asks_for_tools(msg: Message) -> bool:
    return bool(msg.tools_calls) or any(b.type == "tool_call" for b in msg.content)
