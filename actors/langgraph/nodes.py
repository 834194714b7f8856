"""A LangGraph node or router, wrapped to run on agentlog's engine: it is handed the state in
its schema's shape (and the `config`, `runtime`, `store` or `writer` it asks for), and what it
returns is read back in the shape agentlog records."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentlog.actors.engine.command import Command
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.longterm import LongTermStoreError, get_store
from agentlog.actors.engine.nodes import runtime_of
from agentlog.actors.engine.options import CONTEXT_KEY, DURABILITY_KEY
from agentlog.actors.engine.writer import get_stream_writer
from agentlog.actors.langgraph.schema import MESSAGES, Schema
from agentlog.actors.langgraph.tokens import tokens_streamed
from agentlog.projections import AgentState, Message

_ROLES = {"human": "user", "user": "user", "ai": "assistant", "assistant": "assistant",
          "system": "system", "tool": "tool"}  # fmt: skip
_INJECTED = ("config", "runtime", "store", "writer")


@dataclasses.dataclass(frozen=True)
class Shapes:
    """How values cross the edge between a LangGraph program and agentlog's state."""

    schema: Schema
    messages_out: Callable[[list[Message]], Any]
    output_keys: frozenset[str] | None = None
    """The keys `invoke` returns (the graph's output schema), None: all of them."""

    def message_out(self, message: Message) -> Any:
        return self.messages_out([message])[0]

    def update_out(self, update: dict[str, Any]) -> dict[str, Any]:
        """One node's update as LangGraph streams it: the context under the message key."""
        out = dict(update)
        if "context" in out:
            items = out.pop("context")
            key = self.schema.messages_key or MESSAGES
            out[key] = [self.message_out(m) if isinstance(m, Message) else m for m in items]
        return out

    def values(self, state: AgentState) -> dict[str, Any]:
        return self.schema.values(state, self.messages_out)

    def node_input(self, state: Any) -> Any:
        """The state in the schema's shape; a `Send`'s argument is handed over as it is."""
        if not isinstance(state, AgentState):
            return state
        return self.schema.node_input(self.values(state))

    def update(self, output: Any) -> Any:
        """A node's output (or a call's input) as agentlog reads it."""
        if isinstance(output, Command):
            if output.update is None:
                return output
            return dataclasses.replace(output, update=self.update(output.update))
        output = self.schema.update_of(output)
        if isinstance(output, Mapping) and MESSAGES in output:
            output = {**output, MESSAGES: message_likes(output[MESSAGES])}
        return output


def message_likes(value: Any) -> Any:
    """LangGraph's message-likes (a string, a `(role, content)` pair) as messages agentlog
    reads; messages and dicts pass as they are."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, tuple) or not isinstance(value, Sequence):
        value = [value]
    out: list[Any] = []
    for item in value:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            role = _ROLES.get(item[0])
            if role is None:
                raise GraphError(
                    f"message role {item[0]!r} is not one of {sorted(_ROLES)}: write "
                    f"('user', 'text') or ('ai', 'text')"
                )
            out.append({"role": role, "content": item[1]})
        elif isinstance(item, str):
            out.append({"role": "user", "content": item})
        else:
            out.append(item)
    return out


def wrap_node(name: str, fn: Callable[..., Any], shapes: Shapes) -> Callable[..., Any]:
    """`fn` as an agentlog node: handed its state first, then what it asks for by name."""
    wants = asks_for(name, fn)
    if _is_async(fn):

        async def run_async(state: AgentState, config: Mapping[str, Any]) -> Any:
            with tokens_streamed():
                return shapes.update(await fn(shapes.node_input(state), **extras(wants, config)))

        return _named(run_async, fn)

    def run(state: AgentState, config: Mapping[str, Any]) -> Any:
        with tokens_streamed():
            return shapes.update(fn(shapes.node_input(state), **extras(wants, config)))

    return _named(run, fn)


def wrap_router(fn: Callable[..., Any], shapes: Shapes) -> Callable[[AgentState], Any]:
    """A condition handed the state in its schema's shape."""

    def route(state: AgentState) -> Any:
        return fn(shapes.node_input(state))

    return _named(route, fn)


def _named(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    wrapper.__name__ = getattr(fn, "__name__", type(fn).__name__)
    wrapper.__qualname__ = getattr(fn, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    return wrapper


def asks_for(name: str, fn: Callable[..., Any], also: Sequence[str] = ()) -> tuple[str, ...]:
    """The names `fn` asks for besides its state (of `config`, `runtime`, `store`, `writer`,
    and `also`), refusing a parameter nothing can give."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return ()
    if not params or params[0].kind in (params[0].KEYWORD_ONLY, params[0].VAR_KEYWORD):
        raise GraphError(
            f"node {name!r} takes no state: LangGraph hands a node its state as the first "
            f"argument, write `def {getattr(fn, '__name__', name)}(state): ...`"
        )
    wants = []
    for param in params[1:]:
        if param.name in _INJECTED or param.name in also:
            wants.append(param.name)
        elif param.default is param.empty and param.kind not in (
            param.VAR_POSITIONAL,
            param.VAR_KEYWORD,
        ):
            raise GraphError(
                f"node {name!r} needs parameter {param.name!r}; a node may ask for "
                f"{', '.join(_INJECTED)} besides its state"
            )
    return tuple(wants)


def extras(wants: Sequence[str], config: Mapping[str, Any]) -> dict[str, Any]:
    """What a node asked for (`asks_for`), for the run's `config`."""
    if not wants:
        return {}
    given: dict[str, Any] = {}
    for name in wants:
        if name == "config":
            given[name] = runnable_config(config)
        elif name == "store":
            given[name] = _store()
        elif name == "writer":
            given[name] = get_stream_writer()
        else:
            given[name] = runtime_of(config, _store())
    return given


def _store() -> Any:
    """The graph's long-term store, None when it was compiled without one (as LangGraph)."""
    try:
        return get_store()
    except LongTermStoreError:
        return None


def runnable_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run's config as LangGraph shows it to a node: its keys under `configurable`."""
    configurable = {k: v for k, v in config.items() if k not in (CONTEXT_KEY, DURABILITY_KEY)}
    return {"configurable": configurable, "metadata": {"thread_id": config.get("thread_id")}}


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's own method
    )
