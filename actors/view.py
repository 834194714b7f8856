"""What a node or a condition sees: a copy of the state it may change without touching the
log's, paying only for what it reads."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, TypeVar

from projections import (
    AgentState,
    Message,
)
from projections.fold import (
    copy_meta,
)

S = TypeVar("S", bound=AgentState)


def node_view(state: S, requests: list[tuple[str, tuple[Any, ...]]] | None = None) -> S:
    """What a node or condition sees: a copy it may change without touching the log's state.

    With `requests`, the copy's state methods note what the node asks of the run there.
    """
    view = state.model_copy()
    view.context = CopyOnRead(state.context)
    view.execution_meta = copy_meta(state.execution_meta)
    view.execution_meta._requests = requests
    for name in type(state).model_fields:
        if name not in ("context", "execution_meta", "context_summary"):
            setattr(view, name, copy.deepcopy(getattr(state, name)))
    return view


class CopyOnRead(list[Message]):
    """The context as a node sees it: each message it reads is its own copy.

    Copying only what is read keeps a step's cost flat as the conversation grows, and a
    node that edits a message in place cannot reach the log's state.
    """

    def __getitem__(self, index: Any) -> Any:
        item = super().__getitem__(index)
        if isinstance(index, slice):
            return CopyOnRead(item)
        return item.model_copy(deep=True)

    def __iter__(self) -> Iterator[Message]:
        for item in super().__iter__():
            yield item.model_copy(deep=True)

    def __reversed__(self) -> Iterator[Message]:
        for item in super().__reversed__():
            yield item.model_copy(deep=True)

    def copy(self) -> list[Message]:
        return list(self)

    def pop(self, index: Any = -1) -> Message:
        return super().pop(index).model_copy(deep=True)

    def originals(self) -> Iterator[Message]:
        """The messages themselves, for the runtime's own read-only passes."""
        return super().__iter__()
