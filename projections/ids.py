"""Where new ids, timestamps and measured durations come from: `generate_id` (the seed's,
with its id types), and `message_defaults`, which sets the sources within a block."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Literal, get_args

from agentlog.events.errors import InvalidArgumentError

IdType = Literal["string", "int", "bigint"]
"""The type of the ids `generate_id` makes, as the seed's `generated_id_type` names it."""
ID_TYPES: tuple[str, ...] = get_args(IdType)

_ids: ContextVar[Callable[[], str | int] | None] = ContextVar("agentlog_message_ids", default=None)
"""Where fresh message ids come from in this context; None means uuid4 (see `message_defaults`)."""
_id_type: ContextVar[str | None] = ContextVar("agentlog_id_type", default=None)
"""The id type set in this context (a graph's registered `generated_id_type`); None: any."""
_clock: ContextVar[Callable[[], float] | None] = ContextVar("agentlog_message_clock", default=None)
"""Where message timestamps come from in this context; None means the wall clock."""


def generate_id(default_id: str | int | None = None) -> str | int:
    """`default_id` when given (and of the id type set, if one is), else a fresh id: the
    next id of the source set in this context (a graph's registered `generated_id`, or
    `message_defaults`), else a UUID4 string, or for the id type "int" a UUID4's top 53
    bits (exact in JSON and JavaScript) and for "bigint" its top 63 (a signed 64-bit
    column). The seed's "int" has 96 bits, more than the log stores (64)."""
    kind = _id_type.get()
    if default_id is not None and (kind is None or _fits(default_id, kind)):
        return default_id
    source = _ids.get()
    if source is not None:
        return source()
    if kind == "int":
        return uuid.uuid4().int >> 75
    if kind == "bigint":
        return uuid.uuid4().int >> 65
    return str(uuid.uuid4())


def _fits(value: str | int, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    return isinstance(value, int) and not isinstance(value, bool)


def _now() -> float:
    """A new message's timestamp: the wall clock, or the clock set by `message_defaults`."""
    clock = _clock.get()
    return datetime.now().timestamp() if clock is None else float(clock())


def monotonic() -> float:
    """Seconds for measuring durations: the clock set by `message_defaults`, else
    `time.perf_counter` (so a seeded test records the same durations every time)."""
    clock = _clock.get()
    return time.perf_counter() if clock is None else float(clock())


def new_run_id() -> str:
    """A fresh run id, `run-` and 12 hex digits, drawn from the same source as message ids."""
    return f"run-{str(generate_id()).replace('-', '')[:12]}"


@contextmanager
def message_defaults(
    ids: Callable[[], str | int] | None = None,
    clock: Callable[[], float] | None = None,
    id_type: IdType | None = None,
) -> Iterator[None]:
    """Within the block (and tasks and threads started from it), draw the ids `generate_id`
    makes from `ids` and the default `Message.timestamp` from `clock`, so runs repeat exactly;
    `id_type` is the type of the ids made ("string", "int" or "bigint").

    None leaves that default as it is outside; the previous sources come back on exit.
    """
    if id_type is not None and id_type not in ID_TYPES:
        raise InvalidArgumentError(f"id_type must be one of {ID_TYPES}, got {id_type!r:.40}")
    id_token = _ids.set(ids) if ids is not None else None
    type_token = _id_type.set(id_type) if id_type is not None else None
    clock_token = _clock.set(clock) if clock is not None else None
    try:
        yield
    finally:
        if type_token is not None:
            _id_type.reset(type_token)
        if clock_token is not None:
            _clock.reset(clock_token)
        if id_token is not None:
            _ids.reset(id_token)
