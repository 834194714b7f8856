"""Node actors: run a user's function with what it asks for, and turn its result into events."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable, Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentlog.actors.engine.actor import Actor
from agentlog.actors.engine.command import Command
from agentlog.actors.engine.context import NodeContext, _current
from agentlog.actors.engine.errors import GraphInterrupt, NodeReturnError
from agentlog.actors.engine.ids import IdSource
from agentlog.actors.engine.options import CONTEXT_KEY, Runtime
from agentlog.actors.engine.writer import get_stream_writer
from agentlog.actors.tools.node import is_tool_node
from agentlog.events.kinds import ContextSummarized, Event
from agentlog.projections import (
    AgentState,
    Message,
    add_messages,
    message_appended,
    state_updated,
)
from agentlog.projections.fold import field_plan
from agentlog.projections.langchain import is_langchain_message
from agentlog.projections.messages import RemoveMessage, context_items
from agentlog.projections.transcript import context_events


class _Answers:
    """The resume values a node's step has received, handed to its `interrupt()` calls in turn."""

    def __init__(self, values: Sequence[Any]) -> None:
        self.values = list(values)
        self.used = 0


_answers: contextvars.ContextVar[_Answers | None] = contextvars.ContextVar(
    "agentlog_resume", default=None
)


def interrupt(reason: str, data: dict[str, Any] | None = None) -> Any:
    """Pause the run inside a node; when it is resumed, return the resume value instead.

    The first time, this raises and the run pauses (`interrupted_before` the node). When the
    run is resumed (with `Command(resume=value)`, or plainly, giving None) the node runs
    again from its start and this call returns that value. A node that calls `interrupt()`
    several times gets each call its own value, in call order, across resumes.
    """
    answers = _answers.get()
    if answers is None or answers.used >= len(answers.values):
        raise GraphInterrupt(reason, data)
    value = answers.values[answers.used]
    answers.used += 1
    return value


def take_resume() -> tuple[bool, Any]:
    """The next resume value of the running node's step, as its next `interrupt()` call
    would take it: (True, value), or (False, None) when none is left (a subgraph the node
    runs takes one for the interrupt it paused at)."""
    answers = _answers.get()
    if answers is None or answers.used >= len(answers.values):
        return False, None
    answers.used += 1
    return True, answers.values[answers.used - 1]


def resume_values(pending: Any, branch: int | None = None) -> list[Any]:
    """The resume values recorded for the node's current step (see `agentlog.projections.fold`);
    for a `branch` of a superstep, the answers to that branch's own pauses only."""
    if not pending:
        return []
    if branch is not None:
        return list((pending.get("by_branch") or {}).get(str(branch), []))
    if "values" in pending:
        return list(pending["values"])
    return [pending["value"]]  # written before each interrupt() call had its own value


@dataclass(frozen=True)
class RunNode:
    """Run the node once on `state`, answering its `interrupt()` calls with `resume`."""

    state: AgentState
    config: Mapping[str, Any]
    context: NodeContext
    resume: Sequence[Any] = ()


class NodeActor(Actor[RunNode, Any]):
    """One per node and run: injects `state`, `config`, `context` and the graph's dependencies.

    `slots`, shared by the node's actors of every run, caps how many calls of the node run
    at once (an LLM node limited to N concurrent calls).
    """

    def __init__(
        self,
        name: str,
        fn: Any,
        dependencies: Mapping[str, Any],
        *,
        slots: asyncio.Semaphore | None = None,
        ids: IdSource | None = None,
    ) -> None:
        super().__init__(f"node:{name}", concurrency=None)
        self.slots = slots
        self.ids = ids if ids is not None and ids.active else None
        self.node = name
        self.fn = fn
        self.dependencies = dict(dependencies)
        self.is_async = _is_async(fn)
        self.wants = _wanted_parameters(fn)

    async def receive(self, message: RunNode) -> Any:
        if self.ids is not None:
            await self.ids.resolve()
            with self.ids.applied():
                return await self._slotted(message)
        return await self._slotted(message)

    async def _slotted(self, message: RunNode) -> Any:
        if self.slots is None:
            return await self._call(message)
        async with self.slots:
            return await self._call(message)

    async def _call(self, message: RunNode) -> Any:
        token = _answers.set(_Answers(message.resume))
        message.context.loop = asyncio.get_running_loop()  # a sync node's subgraph runs there
        current = _current.set(message.context)
        try:
            run = getattr(self.fn, "run", None)
            if is_tool_node(self.fn) and run is not None:
                return await run(message.state, message.context)
            kwargs = self._arguments(message)
            if self.is_async:
                output = await self.fn(**kwargs)
            else:
                output = await message.context.offload(f"node {self.node!r}", self.fn, **kwargs)
            return await _answer_read(output)
        finally:
            _current.reset(current)
            _answers.reset(token)

    def _arguments(self, message: RunNode) -> dict[str, Any]:
        given = {"state": message.state, "config": message.config, "context": message.context}
        kwargs: dict[str, Any] = {}
        for name in self.wants:
            if name in given:
                kwargs[name] = given[name]
            elif name in self.dependencies:
                kwargs[name] = self.dependencies[name]
            elif name == "runtime":
                kwargs[name] = runtime_of(message.config, message.context.store)
        return kwargs


ANSWER_READERS: list[Callable[[Any], Awaitable[list[Message]] | None]] = []
"""Readers of a model's answer a node returned in place of messages: each gives the messages
it stands for (awaitable), or None for an output it does not read. `agentlog.actors.models`
adds its own when imported (a `ModelResponseConverter`, a provider SDK's raw response)."""


async def _answer_read(output: Any) -> Any:
    """A node's output, with a model's answer it returned read into its messages."""
    if output is None or isinstance(output, list | dict | Message | Command | AgentState):
        return output
    for reader in ANSWER_READERS:
        read = reader(output)
        if read is not None:
            return await read
    return output


def runtime_of(config: Mapping[str, Any], store: Any) -> Runtime[Any]:
    """A node's `runtime`: the call's context, the graph's long-term store (None without
    one) and the run's custom stream writer."""
    return Runtime(context=config.get(CONTEXT_KEY), store=store, stream_writer=get_stream_writer())


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's own method
    )


def _wanted_parameters(fn: Callable[..., Any]) -> list[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def output_events(
    node: str,
    output: Any,
    state: AgentState,
    *,
    known: Container[str | int] | None = None,
    waiting: Container[str] = (),
    append: bool = False,
) -> tuple[list[Event], str | None]:
    """The events recording what a node returned, and the node it chose to go to, if any.

    `known` holds the ids of the messages in `state.context` (the engine keeps them; given
    nothing, they are gathered here); `waiting` the ids of the tool calls still open, whose
    results always join. With `append` (a tool node's results), messages are appended
    whatever reducer the state declares for the context.
    """
    goto: str | None = None
    if isinstance(output, Command):
        goto = output.goto
        output = output.update
    if output is None:
        return [], goto
    if known is None:
        known = {m.message_id for m in state.context}
    how = _Merge(known, waiting, append)
    if isinstance(output, AgentState):
        return _state_events(node, output, state, how), goto
    if isinstance(output, Mapping):
        return _mapping_events(node, output, state, how), goto
    if isinstance(output, Message | RemoveMessage) or is_langchain_message(output):
        output = [output]
    if (
        isinstance(output, Sequence)
        and not isinstance(output, str | bytes)
        and all(isinstance(m, Message | RemoveMessage) or is_langchain_message(m) for m in output)
    ):
        return _context_events(context_items(output), state, how), goto
    raise NodeReturnError(node, output)


@dataclass(frozen=True)
class _Merge:
    """How returned messages join the context: see `output_events`."""

    known: Container[str | int]
    waiting: Container[str]
    append: bool


def _context_events(
    items: Sequence[Message | RemoveMessage], state: AgentState, how: _Merge
) -> list[Event]:
    reducer = None if how.append else field_plan(type(state))["context"][1]
    return context_events(
        items, known=how.known, reducer=reducer, current=state.context, waiting=how.waiting
    )


def _mapping_events(
    node: str, values: Mapping[str, Any], state: AgentState, how: _Merge
) -> list[Event]:
    events: list[Event] = []
    rest = dict(values)
    for key in ("messages", "context"):
        if key in rest:
            items = rest.pop(key)
            if not isinstance(items, Sequence) or isinstance(items, str | bytes):
                raise NodeReturnError(node, items)
            events.extend(_context_events(context_items(items), state, how))
    summary = rest.get("context_summary")
    if isinstance(summary, str):
        del rest["context_summary"]
        events.append(ContextSummarized(summary=summary))
    if rest:
        events.append(state_updated(rest, source=node))
    return events


def _state_events(node: str, returned: AgentState, current: AgentState, how: _Merge) -> list[Event]:
    """A returned state is merged: new messages appended, changed fields updated.

    A context that merely lacks messages removes nothing, unless the state class declares
    a replacing reducer for it (`replace_messages`): then a changed context replaces it.
    """
    originals = getattr(returned.context, "originals", None)
    messages = list(originals() if originals is not None else returned.context)
    reducer = None if how.append else field_plan(type(current))["context"][1]
    if reducer is not None and reducer is not add_messages:
        ids = [m.message_id for m in messages]
        same = ids == [m.message_id for m in current.context]
        events: list[Event] = [] if same else _context_events(messages, current, how)
    else:
        events = [message_appended(m) for m in messages if m.message_id not in how.known]
    if returned.context_summary != current.context_summary and returned.context_summary:
        events.append(ContextSummarized(summary=returned.context_summary))
    changed = {
        name: getattr(returned, name)
        for name in type(returned).model_fields
        if name not in ("context", "execution_meta", "context_summary")
        and getattr(returned, name) != getattr(current, name, None)
    }
    if changed:
        events.append(state_updated(changed, source=node))
    return events
