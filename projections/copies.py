"""Copies of messages that share nothing mutable with their originals, made fast."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from agentlog.projections.messages import Message

_ATOMS = (str, int, float, bool, type(None))


def copy_message(message: Message) -> Message:
    """A deep copy of `message` sharing nothing mutable with it, about twice as fast as
    pydantic's generic `model_copy(deep=True)`: builtins are copied by type, models field by
    field, and only an unknown object falls back to `copy.deepcopy`."""
    copied: Message = _copy_model(message)
    return copied


def _copy_model(model: BaseModel) -> Any:
    new = copy.copy(model)  # a new __dict__ and fields-set, the values still shared
    values = new.__dict__
    for name, value in values.items():
        if type(value) not in _ATOMS:
            values[name] = _copy_value(value)
    return new


def _copy_value(value: Any) -> Any:
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {k: _copy_value(v) for k, v in value.items()}
    if kind is list:
        return [_copy_value(v) for v in value]
    if isinstance(value, BaseModel):
        return _copy_model(value)
    return copy.deepcopy(value)
