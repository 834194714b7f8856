"""What a node or a condition sees: a copy of the state it may change without touching the
log's, paying only for what it reads."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from agentlog.projections import AgentState
from agentlog.projections.copies import copy_message, copy_meta, shallow_copy
from agentlog.projections.views import SharedContext

__all__ = ["copy_message", "node_view"]

S = TypeVar("S", bound=AgentState)

_OWN = ("context", "execution_meta")
"""The fields a view replaces with copies of its own (its other fields are deep copies,
but for the summary, a str)."""


def node_view(state: S, requests: list[tuple[str, tuple[Any, ...]]] | None = None) -> S:
    """What a node or condition sees: a copy it may change without touching the log's state.

    Its context hands out each message as a copy of its own the first time it is read
    (`SharedContext.copy_on_read`): a step's cost stays flat as the conversation grows, and
    a node that edits a message in place cannot reach the log's state. With `requests`, the
    copy's state methods note what the node asks of the run there.
    """
    meta = copy_meta(state.execution_meta)
    meta._requests = requests
    cls = type(state)
    if cls.model_config.get("validate_assignment"):  # assigned through its validators
        view = state.model_copy()
        view.context = SharedContext.copy_on_read(state.context)
        view.execution_meta = meta
        for name in cls.model_fields:
            if name not in ("context", "execution_meta", "context_summary"):
                setattr(view, name, copy.deepcopy(getattr(state, name)))
        return view
    values = dict(state.__dict__)
    values["context"] = SharedContext.copy_on_read(state.context)
    values["execution_meta"] = meta
    for name in cls.model_fields:  # a state class's own fields: deep copies
        if name not in ("context", "execution_meta", "context_summary"):
            values[name] = copy.deepcopy(values[name])
    view = shallow_copy(state, values)
    view.__pydantic_fields_set__.update(_OWN)
    return view
