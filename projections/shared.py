"""A context whose messages are shared with other readers until read, or not validated yet.

`state_at` builds a state whose context holds, until each is read, either a message shared
with the process's message cache or the message as the log stores it (its builtins, a
`dict`, or the payload of the `message_appended` record carrying it), not validated yet: a
first read of a past state reads its messages but decodes and validates only those read.
`SharedContext` turns each into a message of the state's own the first time it is read, and
every way of looking at the whole context (equality, `model_dump`, pickling, copying,
`repr`) sees messages, as a context of messages would give them.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterable, Iterator
from typing import Any, Self, SupportsIndex, overload

from pydantic import TypeAdapter

from agentlog.events.codec import stored_message, stored_message_id
from agentlog.projections.copies import copy_message
from agentlog.projections.messages import Message

_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_validate_message = Message.model_validate


def held_id(item: Message | dict[str, Any] | bytes) -> str | int:
    """The id of a message as a context holds it, validated or not (no copy, no check)."""
    if isinstance(item, bytes):
        return stored_message_id(item)
    if isinstance(item, dict):
        message_id: str | int = item["message_id"]
        return message_id
    return item.message_id


def _stored(item: dict[str, Any] | bytes) -> dict[str, Any]:
    return stored_message(item) if isinstance(item, bytes) else item


def settle(context: object) -> None:
    """Validate, in place, the messages a `SharedContext` holds unvalidated (for a pass
    over the list as it holds them)."""
    if isinstance(context, SharedContext):
        context.settle()


class SharedContext(list[Message]):
    """A context whose messages, until read, are shared with the process's message cache,
    or are still as the log stores them (builtins, or a record's payload), not validated yet.

    It hands out a message of its own for each the first time it is read, kept in its place
    from then on: a private copy of a shared message, the validated form of a stored one.
    Reading costs what is read, and changing what was read changes this state only, never
    the cache or another reader's state. Equality, `model_dump`, copies, slices and pickles
    see validated messages (copies of the shared ones), and so does a state built from it
    (`AgentState(context=...)` copies what is still shared).
    """

    __slots__ = ("_owned", "_raw", "_shared")

    def __init__(
        self, messages: Iterable[Message] = (), shared: Iterable[Message] = (), *, raw: bool = False
    ) -> None:
        """`shared`: those of `messages` shared with others; `raw`: whether some of them are
        stored builtins, to validate when read."""
        super().__init__(messages)
        self._shared: dict[int, Message] = dict(zip(map(id, shared), shared, strict=False))
        self._owned: set[int] | None = None
        self._raw = raw

    @classmethod
    def copy_on_read(cls, messages: Iterable[Message]) -> SharedContext:
        """A context every message of which is shared until read (a node's view of the
        log's state): it costs a list copy to build, however long the context, and tracks
        the copies it made instead of the messages it shares."""
        context = cls(messages)
        context._owned = set()
        return context

    def _own(self, index: int) -> Message:
        item: Message | dict[str, Any] | bytes = list.__getitem__(self, index)
        owned = self._owned
        if isinstance(item, dict | bytes):
            mine = _validate_message(_stored(item))
        elif owned is None:
            if self._shared.pop(id(item), None) is None:
                return item
            mine = copy_message(item)
        elif id(item) in owned:
            return item
        else:
            mine = copy_message(item)
        list.__setitem__(self, index, mine)
        if owned is not None:
            owned.add(id(mine))
        return mine

    def settle(self) -> None:
        """Validate every message still held as stored, in place (one pass for them all)."""
        if not self._raw:
            return
        items: list[Any] = list(list.__iter__(self))
        at = [i for i, m in enumerate(items) if isinstance(m, dict | bytes)]
        if at:
            held = [_stored(items[i]) for i in at]
            for index, message in zip(at, _MESSAGES.validate_python(held), strict=True):
                list.__setitem__(self, index, message)
                if self._owned is not None:
                    self._owned.add(id(message))
        self._raw = False

    def originals(self) -> Iterator[Message]:
        """The messages as held, shared ones included, for read-only passes (never hand
        them out: a change would reach every reader of the thread in this process)."""
        self.settle()
        return list.__iter__(self)

    @overload
    def __getitem__(self, index: SupportsIndex) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: SupportsIndex | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [self._own(i) for i in range(*index.indices(len(self)))]
        position = operator.index(index)
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError("list index out of range")
        return self._own(position)

    def __iter__(self) -> Iterator[Message]:
        index = 0
        while index < len(self):
            yield self._own(index)
            index += 1

    def __reversed__(self) -> Iterator[Message]:
        for index in range(len(self) - 1, -1, -1):
            if index < len(self):
                yield self._own(index)

    def __eq__(self, other: object) -> bool:
        self.settle()
        settle(other)
        return list.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def __repr__(self) -> str:
        self.settle()
        return list.__repr__(self)

    def __contains__(self, item: object) -> bool:
        self.settle()
        return list.__contains__(self, item)

    def index(self, *args: Any) -> int:
        self.settle()
        return list.index(self, *args)

    def count(self, item: Message) -> int:
        self.settle()
        return list.count(self, item)

    def remove(self, item: Message) -> None:
        self.settle()
        list.remove(self, item)

    def pop(self, index: SupportsIndex = -1) -> Message:
        item = self[index]
        del self[index]
        return item

    def copy(self) -> list[Message]:
        return list(self)

    def __copy__(self) -> list[Message]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Message]:
        return [copy.deepcopy(m, memo) for m in self.originals()]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))

    def __add__(self, other: list[Message]) -> list[Message]:  # type: ignore[override]
        return [*self, *other]

    def __radd__(self, other: list[Message]) -> list[Message]:
        return [*other, *self]

    def __mul__(self, n: SupportsIndex) -> list[Message]:
        return list(self) * n

    __rmul__ = __mul__

    def _own_all(self) -> None:
        for index in range(len(self)):
            self._own(index)

    def __imul__(self, n: SupportsIndex) -> Self:
        self._own_all()  # one shared message in two places could not be told apart
        return super().__imul__(n)

    def __iadd__(self, other: Iterable[Message]) -> Self:  # type: ignore[override]
        if other is self:
            self._own_all()
        return super().__iadd__(other)

    def sort(self, *, key: Any = None, reverse: bool = False) -> None:
        self._own_all()  # a key function is handed each message
        super().sort(key=key, reverse=reverse)

    def extend(self, other: Iterable[Message]) -> None:
        if other is self:
            self._own_all()
        super().extend(other)

    @overload
    def __setitem__(self, index: SupportsIndex, value: Message) -> None: ...
    @overload
    def __setitem__(self, index: slice, value: Iterable[Message]) -> None: ...
    def __setitem__(self, index: SupportsIndex | slice, value: Any) -> None:
        if value is self:
            self._own_all()
        super().__setitem__(index, value)
        if isinstance(index, slice):
            self._raw = self._raw or any(isinstance(m, dict | bytes) for m in list.__iter__(self))
