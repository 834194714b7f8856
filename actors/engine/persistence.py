"""The persistence line of `StateGraph.compile`, as LangGraph names it.

`checkpointer=` is the event log the graph's threads are written to (an `EventStore`; a
`MemoryEventStore` when omitted), and `store=` the long-term store its nodes reach with
`get_store()` (a `BaseStore`: `InMemoryStore`, `LogStore`). Before this, `store=` named the
event log: an event store given there still works, for one release, with a
`DeprecationWarning`. Anything else is refused here, before anything is written.
"""

from __future__ import annotations

import warnings

from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.longterm import BaseStore
from agentlog.events import EventStore


class PersistenceError(GraphError, TypeError):
    """`compile` was given something that is neither an event store for `checkpointer=`
    nor a long-term store for `store=`, or both parameters named the log."""


STORE_IS_THE_LOG = (
    "compile(store=<an event store>) is deprecated: store= is the long-term store now, as in "
    "LangGraph; name the event log with compile(checkpointer=...) (or pass it first, "
    "positionally)"
)
"""The warning for an event store given as `store=`."""


def persistence(checkpointer: object, store: object) -> tuple[EventStore | None, BaseStore | None]:
    """The event log and the long-term store `compile(checkpointer=..., store=...)` names,
    or `PersistenceError` naming both parameters."""
    if checkpointer is not None and not isinstance(checkpointer, EventStore):
        if isinstance(checkpointer, BaseStore):
            raise PersistenceError(
                f"checkpointer= is the event log, got the long-term store {checkpointer!r}: "
                "pass it as store=, and the event store (SQLiteEventStore, PostgresEventStore, "
                "MemoryEventStore) as checkpointer="
            )
        raise PersistenceError(
            f"checkpointer= takes an event store (SQLiteEventStore, PostgresEventStore, "
            f"MemoryEventStore), got {_what(checkpointer)}; store= takes a long-term store "
            "(InMemoryStore, LogStore)"
        )
    if store is None or isinstance(store, BaseStore):
        return checkpointer, store
    if isinstance(store, EventStore):
        if checkpointer is not None:
            raise PersistenceError(
                "compile got an event store both as checkpointer= and as store=: the log is "
                "checkpointer=; store= is the long-term store (InMemoryStore, LogStore)"
            )
        warnings.warn(STORE_IS_THE_LOG, DeprecationWarning, stacklevel=3)
        return store, None
    raise PersistenceError(
        f"store= takes a long-term store (InMemoryStore, LogStore(event_store)), got "
        f"{_what(store)}; the event log goes in checkpointer= (SQLiteEventStore, "
        "PostgresEventStore, MemoryEventStore)"
    )


def _what(value: object) -> str:
    kind = type(value)
    where = f"{kind.__module__}.{kind.__qualname__}"
    if kind.__module__.startswith("langgraph"):
        where += " (a LangGraph class: use agentlog's InMemoryStore or an event store)"
    return where


__all__ = ["STORE_IS_THE_LOG", "PersistenceError", "persistence"]
