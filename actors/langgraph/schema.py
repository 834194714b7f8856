"""LangGraph's state schemas (a `TypedDict`, a dataclass, a pydantic model) as agentlog state.

A schema becomes an `AgentState` subclass built once at graph construction: its message key
(`messages`, or the key reduced by `add_messages`) is the state's context, every other key a
field carrying its `Annotated` reducer. The log records the built class like any other, so a
thread written through this front folds, verifies and forks as every thread does. Nodes see
the schema's own shape: a dict for a `TypedDict`, an instance for a dataclass or a model.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, cast, get_args, get_origin

from pydantic import BaseModel, create_model
from typing_extensions import TypedDict, get_type_hints, is_typeddict

from agentlog.actors.engine.errors import GraphError
from agentlog.projections import AgentState, Message
from agentlog.projections.reducers import add_messages

MESSAGES = "messages"
"""The key LangGraph's `MessagesState` and its tutorials keep their messages under."""
_OWN = ("context", "context_summary", "execution_meta")


class MessagesState(TypedDict):
    """LangGraph's ready state: a list of messages reduced by `add_messages` (subclass it to
    add keys, as in LangGraph)."""

    messages: Annotated[list[Any], add_messages]


class SchemaError(GraphError):
    """A state schema this front cannot turn into agentlog state (named, with the fix)."""


@dataclasses.dataclass(frozen=True)
class Key:
    """One key of a schema: its reducer (None: the last write wins) and its empty value."""

    reducer: Callable[[Any, Any], Any] | None
    empty: Callable[[], Any] | None
    """Builds the value the key holds before any write (None: the key is absent until set)."""


@dataclasses.dataclass(frozen=True)
class Schema:
    """A user's state schema and the agentlog state class that holds it."""

    source: Any
    state_cls: type[AgentState]
    keys: Mapping[str, Key]
    messages_key: str | None

    def values(
        self, state: AgentState, messages_out: Callable[[list[Message]], Any]
    ) -> dict[str, Any]:
        """The state's values as LangGraph shows them: the schema's keys, messages shaped by
        `messages_out`, and a key without a reducer left out until something set it."""
        if self.state_cls is self.source:  # an AgentState schema: its own fields
            out = {n: getattr(state, n) for n in type(state).model_fields if n not in _OWN}
            out[MESSAGES if self.messages_key is None else self.messages_key] = messages_out(
                list(state.context)
            )
            return out
        out = {}
        for name, key in self.keys.items():
            if name == self.messages_key:
                out[name] = messages_out(list(state.context))
                continue
            value = getattr(state, name)
            if value is None and key.empty is None:
                continue  # never set (or set to None: LangGraph would show None there)
            out[name] = value
        return out

    def node_input(self, values: dict[str, Any]) -> Any:
        """What a node is handed: the values in the schema's own shape."""
        source = self.source
        if self.state_cls is source or is_typeddict(source) or source is dict:
            return values
        if dataclasses.is_dataclass(source) or (
            isinstance(source, type) and issubclass(source, BaseModel)
        ):
            built: Any = cast(Any, source)(**values)
            return built
        return values

    def update_of(self, output: Any) -> Any:
        """A node's output in the shape agentlog reads: a dataclass or a model as its fields,
        the message key as `messages`."""
        if dataclasses.is_dataclass(output) and not isinstance(output, type):
            output = {f.name: getattr(output, f.name) for f in dataclasses.fields(output)}
        elif isinstance(output, BaseModel) and not isinstance(output, AgentState):
            output = dict(output)
        if isinstance(output, Mapping) and self.messages_key not in (None, MESSAGES):
            output = dict(output)
            if self.messages_key in output:
                output[MESSAGES] = output.pop(self.messages_key)
        return output


def schema_of(source: Any) -> Schema:
    """The `Schema` of a `TypedDict`, a dataclass, a pydantic model or an `AgentState` class."""
    if isinstance(source, type) and issubclass(source, AgentState):
        return Schema(source, source, {}, MESSAGES if "messages" in dir(source) else None)
    hints = _hints(source)
    keys: dict[str, Key] = {}
    messages_key: str | None = None
    fields: dict[str, Any] = {}
    defaults = _defaults(source)
    for name, hint in hints.items():
        base, reducer = _split(hint)
        if (
            reducer is add_messages
            or _is_messages_reducer(reducer)
            or (name == MESSAGES and reducer is None)
        ):
            if messages_key is not None:
                raise SchemaError(
                    f"state schema {_name(source)} has two message keys ({messages_key!r} and "
                    f"{name!r}); keep one list of messages reduced by add_messages"
                )
            messages_key = name
            keys[name] = Key(add_messages, list)
            continue
        if name in _OWN or name.startswith("_"):
            raise SchemaError(
                f"state schema {_name(source)} has a key {name!r}, a name agentlog's state "
                f"keeps for itself; rename it"
            )
        empty = _empty(base) if reducer is not None else None
        keys[name] = Key(reducer, empty)
        if name in defaults:
            default: Any = defaults[name]
        elif empty is not None:
            default = empty()
        else:
            default = None
        annotation: Any = Annotated[Any, reducer] if reducer is not None else Any
        fields[name] = (annotation, default)
    state_cls = create_model(_name(source), __base__=AgentState, __module__=__name__, **fields)
    state_cls.__qualname__ = state_cls.__name__
    return Schema(source, state_cls, keys, messages_key)


def _hints(source: Any) -> dict[str, Any]:
    if source is dict:
        raise SchemaError(
            "StateGraph(dict) names no keys: give a TypedDict, a dataclass or a pydantic model "
            "so each key's reducer is known"
        )
    if not (
        is_typeddict(source)
        or dataclasses.is_dataclass(source)
        or (isinstance(source, type) and issubclass(source, BaseModel))
    ):
        raise SchemaError(
            f"StateGraph needs a state schema class (a TypedDict, a dataclass, a pydantic "
            f"model or an AgentState), got {source!r:.80}"
        )
    try:
        return get_type_hints(source, include_extras=True)
    except NameError as exc:
        raise SchemaError(
            f"the annotations of state schema {_name(source)} name something not importable "
            f"where it is defined: {exc}"
        ) from exc


def _defaults(source: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(source):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(source):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out
    if isinstance(source, type) and issubclass(source, BaseModel):
        return {
            n: f.get_default(call_default_factory=True)
            for n, f in source.model_fields.items()
            if not f.is_required()
        }
    return {}


def _split(hint: Any) -> tuple[Any, Callable[[Any, Any], Any] | None]:
    """A key's type and its reducer (the last callable of its `Annotated` metadata)."""
    if get_origin(hint) is typing.Required or get_origin(hint) is typing.NotRequired:
        hint = get_args(hint)[0]
    if get_origin(hint) is Annotated:
        base, *meta = get_args(hint)
        for item in reversed(meta):
            if callable(item):
                return base, item
        return base, None
    return hint, None


def _is_messages_reducer(reducer: Any) -> bool:
    """LangGraph's own `add_messages` (from a program not yet ported) counts as the message key."""
    return getattr(reducer, "__name__", "") == "add_messages"


def _empty(base: Any) -> Callable[[], Any] | None:
    """The empty value a reduced key starts from, as LangGraph builds it from the key's type."""
    origin = get_origin(base) or base
    if isinstance(origin, type):
        try:
            origin()
        except Exception:
            return None
        return origin
    return None


def _name(source: Any) -> str:
    return str(getattr(source, "__name__", type(source).__name__))
