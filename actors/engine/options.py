"""A call's options beside its config: the run-time `context` (checked against the graph's
`context_schema`, handed to nodes in their `Runtime`, never recorded) and the `durability`
mode (when a step's records become durable: `agentlog.actors.engine.durability`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import TypeAdapter, ValidationError

from agentlog.actors.engine.errors import GraphError

C = TypeVar("C")

CONTEXT_KEY = "__context__"
"""Where a call's `context=` travels in the run's config, to build each node's `Runtime`."""
DURABILITY_KEY = "__durability__"
"""Where a call's `durability=` travels in the run's config."""

Durability = Literal["sync", "async", "exit"]
DURABILITIES: tuple[str, ...] = ("sync", "async", "exit")


class InvalidContextError(GraphError):
    """A call's `context=` is not of the graph's `context_schema`; nothing was written."""


class InvalidDurabilityError(GraphError):
    """A call's `durability=` is none of sync, async, exit; nothing was written."""


@dataclass(frozen=True)
class Runtime(Generic[C]):
    """What a node may ask for besides the state (a `runtime` parameter): the call's
    context (of the graph's `context_schema`), the long-term store and the custom stream
    writer."""

    context: C = None  # type: ignore[assignment]
    store: Any = None
    stream_writer: Any = field(default=None, repr=False)


def check_context_schema(schema: Any) -> None:
    """Refuse a `context_schema` that is no type (a dataclass, a TypedDict, a pydantic model,
    any class)."""
    if schema is not None and not isinstance(schema, type):
        raise GraphError(
            f"context_schema is a class (a dataclass, a TypedDict, a pydantic model), got "
            f"{schema!r:.60}"
        )


def checked_context(schema: Any, context: Any) -> Any:
    """`context` as the graph's `context_schema` reads it (a dict made into the schema's
    dataclass or model); `InvalidContextError` naming what is wrong when it does not fit."""
    if context is None or schema is None:
        return context
    try:
        return TypeAdapter(schema).validate_python(context)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'context'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidContextError(
            f"context= does not fit the graph's context_schema {schema.__name__}: {problems}; "
            f"pass a {schema.__name__} (or a dict of its fields)"
        ) from None


def call_config(
    config: Mapping[str, Any] | None,
    schema: Any,
    *,
    context: Any = None,
    durability: str | None = None,
) -> dict[str, Any] | None:
    """The call's config carrying its checked `context` and `durability` (unchanged when
    neither is given)."""
    if config is not None and not isinstance(config, Mapping):
        return config  # not a dict: `run_config` refuses it, naming what a config is
    if context is None and durability is None:
        return None if config is None else dict(config)
    out: dict[str, Any] = dict(config or {})
    if context is not None:
        out[CONTEXT_KEY] = checked_context(schema, context)
    if durability is not None:
        if durability not in DURABILITIES:
            raise InvalidDurabilityError(
                f"durability= is one of {', '.join(DURABILITIES)}, got {durability!r:.40}"
            )
        out[DURABILITY_KEY] = durability
    return out


def durability_of(config: Mapping[str, Any]) -> Durability:
    """The call's durability mode: sync unless the call asked for another."""
    mode = config.get(DURABILITY_KEY, "sync")
    if mode not in DURABILITIES:
        raise InvalidDurabilityError(
            f"durability= is one of {', '.join(DURABILITIES)}, got {mode!r:.40}"
        )
    return mode  # type: ignore[no-any-return]
