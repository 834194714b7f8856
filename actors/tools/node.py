"""The tool node: runs the tool calls of an assistant message, each recorded in the log.

Every call is recorded as `tool_call_started` before it runs and `tool_call_finished` the
moment it ends, so a step run again after a crash answers finished calls from the log
instead of running them twice (and a replay test answers every call from its log).

A tool returns like a node: a plain value is its result's output; a `Message` is its result
message; a `Command(update=..., goto=...)` also updates the state and routes the run. All
of it is recorded in the call's `tool_call_finished`, and the node's output is rebuilt from
those records, so a step run again answers exactly as it did the first time.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from agentlog.actors.engine.callbacks import (
    HookError,
    Invocation,
    InvocationType,
    call_hook,
    recovered,
)
from agentlog.actors.engine.command import Command
from agentlog.actors.engine.context import NodeContext
from agentlog.actors.engine.errors import GraphError, GraphInterrupt, ToolCommandConflictError
from agentlog.actors.engine.redact import redact
from agentlog.actors.engine.replaying import log_answers
from agentlog.actors.tools.docstrings import args_section
from agentlog.events.errors import AgentlogError
from agentlog.events.kinds import Event, ToolCallFinished, ToolCallStarted
from agentlog.projections import (
    AgentState,
    InvalidMessageError,
    Message,
    RemoveMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    to_builtins,
)
from agentlog.projections.langchain import read_foreign
from agentlog.projections.messages import context_items, monotonic

__all__ = [
    "INJECTED",
    "Tool",
    "ToolArgumentsError",
    "ToolLike",
    "ToolNode",
    "ToolReturnError",
    "ToolUnusableError",
    "UnknownToolError",
    "node_output",
    "pending_calls",
    "rejected_message",
    "tool_message",
]

INJECTED = frozenset({"state", "config", "context", "tool_call_id"})
"""Parameter names the runtime fills in; they never appear in a tool's schema. `tool_call_id`
is the call's id: a tool with side effects can pass it on as an idempotency key, since a call
cut short by a crash runs again on resume (at least once)."""

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class UnknownToolError(AgentlogError, LookupError):
    """A model asked for a tool the node does not have."""


class ToolArgumentsError(AgentlogError, ValueError):
    """A model's arguments for a tool do not fit the tool's signature."""


class ToolReturnError(AgentlogError, ValueError):
    """A tool returned a `Message` or `Command` that cannot be its call's result; the call
    is recorded as failed and nothing it returned is applied."""


class ToolUnusableError(AgentlogError, RuntimeError):
    """A tool cannot run as the program set it up (an MCP tool whose session has closed, or
    was opened on another event loop). A mistake in the program, not an answer for the
    model: the step fails with it, and the call, never sent, runs again on resume."""


_UPDATE_MESSAGE_KEYS = ("messages", "context")
"""The keys of a state update that hold messages."""

_REMOVE = "remove"
"""The `type` of a recorded `RemoveMessage` in a call's update: {"type": "remove",
"message_id": ...} (a message dict has a `role` instead)."""


@dataclass(frozen=True)
class Tool:
    """One registered callable: its name, description and argument model."""

    name: str
    fn: Callable[..., Any]
    description: str
    args_model: type[BaseModel]
    params: tuple[inspect.Parameter, ...]

    @classmethod
    def from_function(cls, fn: Callable[..., Any]) -> Tool:
        """Describe `fn` from its signature, type hints and docstring."""
        name = getattr(fn, "__name__", None)
        if not isinstance(name, str) or not callable(fn):
            raise GraphError(f"a tool must be a named function or a LangChain tool, got {fn!r}")
        if not _TOOL_NAME.fullmatch(name):
            raise GraphError(
                f"tool name {name!r} is not one model providers accept (letters, digits, _ "
                "and -, at most 64): use a def with such a name, not a lambda"
            )
        try:
            hints = _parameter_hints(fn)
        except Exception as exc:
            raise GraphError(f"tool {name!r}: cannot resolve its type hints ({exc})") from exc
        doc = inspect.getdoc(fn) or ""
        arg_docs, params = args_section(doc), tuple(inspect.signature(fn).parameters.values())
        fields: dict[str, Any] = {}
        for i, p in enumerate(params):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                stars = "*" if p.kind is p.VAR_POSITIONAL else "**"
                raise GraphError(
                    f"tool {name!r}: {stars}{p.name} cannot be described by a schema; name "
                    "each argument the model may pass"
                )
            if p.name in INJECTED:
                continue
            default = ... if p.default is p.empty else p.default
            info = Field(default, alias=p.name, description=arg_docs.get(p.name) or None)
            # Field names are positional so any parameter name (model_*, _x ...) is allowed.
            fields[f"a{i}"] = (hints.get(p.name, Any), info)
        config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
        model = create_model(f"{name}_args", __config__=config, **fields)
        paragraph = doc.split("\n\n", 1)[0]
        return cls(name, fn, " ".join(paragraph.split()), model, params)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool form of this tool."""
        parameters = self.args_model.model_json_schema(by_alias=True)
        parameters.pop("title", None)
        for prop in parameters.get("properties", {}).values():
            prop.pop("title", None)
        function = {"name": self.name, "description": self.description, "parameters": parameters}
        return {"type": "function", "function": function}

    def bind(
        self, args: dict[str, Any], state: AgentState, context: NodeContext, call_id: str = ""
    ) -> tuple[list[Any], dict[str, Any]]:
        """Validate `args` against the signature and add the injected values."""
        values = self.args_model.model_validate(args)
        injected: dict[str, Any] = {
            "state": state,
            "context": context,
            "config": None,
            "tool_call_id": call_id,
        }
        pos: list[Any] = []
        kw: dict[str, Any] = {}
        for i, p in enumerate(self.params):
            if p.name in INJECTED:
                if p.name == "config" and p.default is not p.empty:
                    continue
                value = injected[p.name]
            else:
                value = getattr(values, f"a{i}")
            if p.kind is p.POSITIONAL_ONLY:
                pos.append(value)
            else:
                kw[p.name] = value
        return pos, kw

    async def call(
        self, pos: list[Any], kw: dict[str, Any], context: NodeContext, call_id: str = ""
    ) -> Any:
        """Call the tool with bound arguments, on the run's worker threads when it is sync."""
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(*pos, **kw)
        label = f"tool call {self.name!r} ({call_id})" if call_id else f"tool {self.name!r}"
        result = await context.offload(label, self.fn, *pos, **kw)
        # An async callable object or a partial returns its coroutine from the thread.
        return await result if inspect.isawaitable(result) else result


@runtime_checkable
class ToolLike(Protocol):
    """What a tool node needs of a tool: a `Tool` made from a function, or one that lives
    elsewhere (an MCP server's, a LangChain or Composio tool). `bind` checks a model's arguments
    and raises (`ToolArgumentsError`, or pydantic's `ValidationError`) when they do not fit;
    `call` runs the tool with what `bind` returned."""

    @property
    def name(self) -> str:
        """The name a model calls it by."""
        ...

    @property
    def description(self) -> str:
        """What it does, for the model."""
        ...

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool form of the tool."""
        ...

    def bind(
        self, args: dict[str, Any], state: AgentState, context: NodeContext, call_id: str = ""
    ) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments of the call, checked."""
        ...

    async def call(
        self, pos: list[Any], kw: dict[str, Any], context: NodeContext, call_id: str = ""
    ) -> Any:
        """Run the tool; what it returns is recorded as a local tool's return is."""
        ...


class ToolNode:
    """A graph node that runs the tool calls of the last assistant message concurrently.

    `tools` are functions (described from their signatures), LangChain tools (`@tool`), or
    ready tools (`ToolLike`: a `Tool`, an MCP server's from `mcp_tools`), in any mix."""

    def __init__(self, tools: Sequence[Callable[..., Any] | ToolLike]) -> None:
        from agentlog.actors.tools.mcp import MCP_HINT, is_mcp_setup

        self.tools: dict[str, ToolLike] = {}
        if (
            isinstance(tools, str | bytes | Mapping)
            or not isinstance(tools, Iterable)
            or is_mcp_setup(tools)
        ):
            raise GraphError(
                f"ToolNode takes a list of tools, got {type(tools).__name__} {tools!r:.60}"
                f"{MCP_HINT if is_mcp_setup(tools) else ': ToolNode([get_weather])'}"
            )
        for fn in tools:
            if is_mcp_setup(fn):
                raise GraphError(f"ToolNode got {type(fn).__name__}, not a tool{MCP_HINT}")
            tool: ToolLike = (
                fn if isinstance(fn, ToolLike) else _foreign(fn) or Tool.from_function(fn)
            )
            if tool.name in self.tools:
                first, second = _origin(self.tools[tool.name]), _origin(tool)
                mcp = any(hasattr(t, "remote_name") for t in (tool, self.tools[tool.name]))
                fix = "rename one" + (
                    ", or give the MCP server a prefix= (StdioServer(..., prefix='docs_'))"
                    if mcp
                    else ""
                )
                raise GraphError(
                    f"two tools are named {tool.name!r} ({first} and {second}): tool names "
                    f"must be unique, since the model calls a tool by name; {fix}"
                )
            self.tools[tool.name] = tool

    def schemas(self) -> list[dict[str, Any]]:
        """One OpenAI function schema per tool, in registration order."""
        return [tool.schema() for tool in self.tools.values()]

    async def run(self, state: AgentState, context: NodeContext) -> list[Message] | Command[str]:
        """Answer each pending call of the last assistant message with one tool message.

        The tool messages alone, in call order, unless a call returned a `Command` with an
        update or a `goto`: then one `Command` carrying them all (see `node_output`).
        """
        calls = pending_calls(state)
        if not calls:
            return []
        started: set[str] = set()
        finished: dict[str, ToolCallFinished] = {}
        for record in context.step_records:
            if isinstance(record.event, ToolCallStarted):
                started.add(record.event.call_id)
            elif isinstance(record.event, ToolCallFinished):
                finished[record.event.call_id] = record.event
        todo = [c for c in calls if c.id not in finished]
        starts: list[Event] = [
            ToolCallStarted(call_id=c.id, name=c.name, args=to_builtins(c.args), node=context.node)
            for c in todo
            if c.id not in started
        ]
        if starts:
            await context.commit(starts)
        outcomes = await asyncio.gather(
            *(self._run_call(c, state, context) for c in todo), return_exceptions=True
        )
        for call, outcome in zip(todo, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome  # an interrupt, a cancellation or a failed commit
            finished[call.id] = outcome
        return node_output([finished[c.id] for c in calls])

    async def _run_call(
        self, call: ToolCallBlock, state: AgentState, context: NodeContext
    ) -> ToolCallFinished:
        """Run one call, turning any failure into a failed result, and commit its result."""
        context.dispatched.add(call.id)
        if (session := log_answers()) is not None:  # a replay: the log answers, nothing runs
            await context.commit([answered := session.tool_result(call, context)])
            return answered
        begin = monotonic()
        status: typing.Literal["completed", "failed"] = "completed"
        returned = _Returned()
        error: str | None = None
        hooks = context.callbacks
        changed_by: str | None = None
        invocation = None
        if hooks is not None:
            invocation = Invocation(
                InvocationType.TOOL,
                call.name,
                context.thread_id,
                context.run_id,
                state,
                input=dict(call.args),
                call_id=call.id,
            )
        try:
            if hooks is not None and invocation is not None:
                await call_hook(hooks, "before", invocation)
            tool = self.tools.get(call.name)
            if tool is None:
                known = ", ".join(sorted(self.tools)) or "none"
                raise UnknownToolError(f"no tool named {call.name!r} (known tools: {known})")
            try:
                pos, kw = tool.bind(call.args, state, context, call.id)
            except ValidationError as exc:
                raise ToolArgumentsError(_describe(call.name, exc)) from exc
            value = await tool.call(pos, kw, context, call.id)
            if hooks is not None and invocation is not None:
                replaced = await call_hook(hooks, "after", invocation, value)
                if replaced is not None:
                    value, changed_by = replaced, hooks.name
            returned = _returned(call, value, state)
        except (GraphInterrupt, HookError, ToolUnusableError):
            raise  # a pause, a hook at fault, a tool set up wrong: the step fails, naming it
        except Exception as exc:
            status, error = "failed", redact(f"{type(exc).__name__}: {exc}")
            if hooks is not None and invocation is not None:
                found = await call_hook(hooks, "on_error", invocation, exc)
                if found is not None:
                    recovery = recovered(found, f"{hooks.name}.on_error")
                    returned = _returned(call, recovery, state)
                    status, changed_by = "completed", hooks.name
                    error = f"{error} (recovered by {hooks.name})"
        result = ToolCallFinished(
            call_id=call.id,
            name=call.name,
            status=status,
            output=returned.output,
            error=error,
            duration_ms=(monotonic() - begin) * 1000,
            message=returned.message,
            update=returned.update,
            goto=returned.goto,
        )
        if changed_by is None:
            await context.commit([result])
        else:  # the hook's change is recorded as the hook's
            await context.commit([result], actor=changed_by)
        return result


def _foreign(value: object) -> ToolLike | None:
    """The `ToolLike` of another library's tool (a LangChain `BaseTool`); None otherwise."""
    from agentlog.actors.tools.langchain import langchain_tool_of

    return langchain_tool_of(value)


def _origin(tool: ToolLike) -> str:
    """Where a tool comes from, for an error naming two of them: a function, or the tool of
    an MCP server."""
    session = getattr(tool, "session", None)
    server = getattr(session, "server", None)
    if server is not None and hasattr(tool, "remote_name"):
        return f"tool {tool.remote_name!r} of MCP server {server.label!r}"
    fn = getattr(tool, "fn", None)
    if fn is not None:
        return f"function {getattr(fn, '__qualname__', fn)!r}"
    return f"{type(tool).__name__} {tool.name!r}"


def _parameter_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The resolved hints of `fn`'s parameters; the return hint is never needed."""
    annotations = dict(getattr(fn, "__annotations__", {}))
    annotations.pop("return", None)
    holder = types.SimpleNamespace(__annotations__=annotations)
    scope = getattr(inspect.unwrap(fn), "__globals__", {})
    return typing.get_type_hints(holder, globalns=scope, include_extras=True)


def pending_calls(state: AgentState) -> list[ToolCallBlock]:
    """Calls of the last assistant message that no later tool message answers yet."""
    for index in range(len(state.context) - 1, -1, -1):
        message = state.context[index]
        if message.role == "assistant":
            answered = {
                block.call_id
                for later in state.context[index + 1 :]
                for block in later.content
                if isinstance(block, ToolResultBlock)
            }
            return [c for c in message.tool_calls() if c.id not in answered]
    return []


def tool_message(result: ToolCallFinished) -> Message:
    """The tool message of a result: the one the tool gave, else one made from its output."""
    if result.message is not None:
        return Message.model_validate(result.message)
    failed = result.status != "completed"
    block = ToolResultBlock(
        call_id=result.call_id,
        output=result.error if failed else result.output,
        is_error=failed,
        status=result.status,
    )
    meta = {"tool_name": result.name}
    return Message.tool_message([block], message_id=f"tool-{result.call_id}", meta=meta)


def rejected_message(call: ToolCallBlock, why: str) -> Message:
    """The tool message of a call that was never run (`why` says so to the model)."""
    block = ToolResultBlock(call_id=call.id, output=why, is_error=True, status="rejected")
    meta = {"tool_name": call.name}
    return Message.tool_message([block], message_id=f"tool-{call.id}", meta=meta)


def node_output(results: Sequence[ToolCallFinished]) -> list[Message] | Command[str]:
    """What a tool node returns for its calls' results, in call order: without any update or
    `goto`, the result messages; otherwise a `Command` whose update holds the result
    messages, then each call's other messages, and the fields the calls set. A field set by
    two calls, or two different `goto` targets, is a conflict the step cannot settle
    (`ToolCommandConflictError`). A failed call's update is never applied."""
    messages = [tool_message(r) for r in results]
    applied = [r for r in results if r.status == "completed"]
    if all(r.update is None and r.goto is None for r in applied):
        return messages
    extras: list[Message | RemoveMessage] = []
    fields: dict[str, Any] = {}
    setters: dict[str, ToolCallFinished] = {}
    router: ToolCallFinished | None = None
    for result in applied:
        if result.goto is not None:
            if router is not None and router.goto != result.goto:
                raise ToolCommandConflictError(
                    f"tool calls {_call(router)} and {_call(result)} go to different nodes, "
                    f"{router.goto!r} and {result.goto!r}: a step goes to one node, so let "
                    "one of these tools route the run, or have the model make the calls in "
                    "separate turns"
                )
            router = router or result
        update = dict(result.update or {})
        recorded = update.pop("messages", None) or []
        if not isinstance(recorded, list):
            raise ToolReturnError(
                f"the recorded update of tool call {_call(result)} holds {recorded!r:.60} "
                "under 'messages', not a list of messages"
            )
        extras.extend(_item(result, item) for item in recorded)
        for name, value in update.items():
            first = setters.setdefault(name, result)
            if first is not result:
                raise ToolCommandConflictError(
                    f"tool calls {_call(first)} and {_call(result)} both set field {name!r}: "
                    "a step sets a field once, so let one of these tools set it, or have the "
                    "model make the calls in separate turns"
                )
            fields[name] = value
    goto = router.goto if router is not None else None
    return Command(update={"messages": [*messages, *extras], **fields}, goto=goto)


def _call(result: ToolCallFinished) -> str:
    """A call as errors name it: its id and its tool."""
    return f"{result.call_id!r} ({result.name})"


def _item(result: ToolCallFinished, item: Any) -> Message | RemoveMessage:
    """One recorded message (or removal) of a call's update, as the engine takes it."""
    try:
        if isinstance(item, Mapping) and item.get("type") == _REMOVE:
            return RemoveMessage(item.get("message_id"))
        return Message.model_validate(item)
    except (ValidationError, ValueError) as exc:
        raise ToolReturnError(
            f"the recorded update of tool call {_call(result)} holds {item!r:.80}, which is "
            f"neither a message nor a removal ({exc})"
        ) from exc


@dataclass(frozen=True)
class _Returned:
    """What a tool's return value records: a plain output, or a message, update and goto."""

    output: Any = None
    message: dict[str, Any] | None = None
    update: dict[str, Any] | None = None
    goto: str | None = None


def _returned(call: ToolCallBlock, value: Any, state: AgentState) -> _Returned:
    """What `value`, returned by the tool of `call`, records. A result message must not reuse
    an id already in the context (it would be taken as already there); only a tool that
    returns a message pays for gathering those ids."""
    if isinstance(value, Command):
        return _command_returned(call, value, _known_ids(state))
    value = read_foreign(value)  # a LangChain message, as ours
    if isinstance(value, Message):
        return _Returned(message=_recorded(call, _result_message(call, value, _known_ids(state))))
    return _Returned(output=_plain(value))


def _known_ids(state: AgentState) -> set[str | int]:
    """The ids of the context's messages, read without copying them (the node's view copies
    each message it hands out)."""
    originals = getattr(state.context, "originals", None)
    messages = originals() if originals is not None else state.context
    return {m.message_id for m in messages}


def _command_returned(
    call: ToolCallBlock, command: Command[Any], known: set[str | int]
) -> _Returned:
    """The result message, the rest of the update, and the goto of a tool's `Command`."""
    what = f"the Command of tool {call.name!r} (call {call.id!r})"
    if command.resume is not None:
        raise ToolReturnError(
            f"{what} has resume=..., which answers a paused run: a tool returns update= "
            "and goto= only"
        )
    goto = command.goto
    if goto is not None and not isinstance(goto, str):
        raise ToolReturnError(f"{what} has goto={goto!r}: name one node, as a str")
    update = command.update
    if update is not None and not isinstance(update, Mapping):
        raise ToolReturnError(
            f"{what} has update={update!r:.60}: give a dict of state fields, with its "
            "messages under 'messages'"
        )
    answer: Message | None = None
    extras: list[Any] = []
    fields: dict[str, Any] = {}
    for key, items in (update or {}).items():
        if not isinstance(key, str):
            raise ToolReturnError(f"{what} updates {key!r}: state fields are named by str")
        if key not in _UPDATE_MESSAGE_KEYS:
            fields[key] = items
            continue
        if not isinstance(items, Sequence) or isinstance(items, str | bytes | bytearray):
            raise ToolReturnError(
                f"{what} has {items!r:.60} under {key!r}: give a list of messages"
            )
        try:
            read = context_items(items)
        except InvalidMessageError as exc:
            raise ToolReturnError(f"{what}, under {key!r}: {exc}") from exc
        for item in read:
            if isinstance(item, RemoveMessage):
                extras.append({"type": _REMOVE, "message_id": item.message_id})
                continue
            answered = {b.call_id for b in item.content if isinstance(b, ToolResultBlock)}
            if call.id in answered:
                if answer is not None:
                    raise ToolReturnError(
                        f"{what} holds two messages answering the call "
                        f"({answer.message_id!r} and {item.message_id!r}): give one"
                    )
                answer = item
            elif answered:
                raise ToolReturnError(
                    f"{what} holds a tool result for call {sorted(answered)[0]!r}, but this "
                    f"call is {call.id!r}: a tool answers its own call only (a "
                    "`tool_call_id` parameter gives its id)"
                )
            else:
                extras.append(_storable(item, f"{what}: message {item.message_id!r}"))
    if answer is None:
        block = ToolResultBlock(call_id=call.id, output=None, status="completed")
        meta = {"tool_name": call.name}
        message = Message.tool_message([block], message_id=f"tool-{call.id}", meta=meta)
    else:
        message = _result_message(call, answer, known)
    rest: dict[str, Any] = {}
    if extras:
        rest["messages"] = extras
    for name, field_value in fields.items():
        rest[name] = _storable(field_value, f"{what}: the value of field {name!r}")
    return _Returned(message=_recorded(call, message), update=rest or None, goto=goto)


def _result_message(call: ToolCallBlock, message: Message, known: set[str | int]) -> Message:
    """`message`, returned by the tool of `call`, as the tool message answering the call.

    One that already answers the call is kept; one answering another call is refused; any
    other becomes a tool message with the same id whose result is the message's text.
    """
    results = [b for b in message.content if isinstance(b, ToolResultBlock)]
    foreign = sorted({b.call_id for b in results if b.call_id != call.id})
    if foreign:
        raise ToolReturnError(
            f"tool {call.name!r} returned a message holding the result of call {foreign[0]!r}, "
            f"but it was called as {call.id!r}: a tool answers its own call only (a "
            "`tool_call_id` parameter gives its id)"
        )
    if message.message_id in known:
        raise ToolReturnError(
            f"tool {call.name!r} (call {call.id!r}) returned a message with id "
            f"{message.message_id!r}, which the context already holds: return a new message "
            "(a fresh id), not one of the state's"
        )
    if not results:
        block = ToolResultBlock(call_id=call.id, output=message.text(), status="completed")
        others = [b for b in message.content if not isinstance(b, TextBlock)]
        message = message.model_copy(update={"role": "tool", "content": [block, *others]})
    # A delta (a streamed fragment) is never stored as a message: the result is a whole one.
    meta = {**message.metadata, "tool_name": call.name}
    return message.model_copy(update={"metadata": meta, "delta": False})


def _recorded(call: ToolCallBlock, message: Message) -> dict[str, Any]:
    """A result message as the log stores it."""
    plain: dict[str, Any] = _storable(
        message, f"the message tool {call.name!r} returned for call {call.id!r}"
    )
    return plain


def _storable(value: Any, what: str) -> Any:
    """`value` as builtins the log can store, or a `ToolReturnError` naming `what` it is."""
    try:
        plain = to_builtins(value)
        msgspec.msgpack.encode(plain)
    except Exception as exc:
        raise ToolReturnError(f"{what} cannot be stored in the log ({exc})") from exc
    return plain


def _describe(name: str, exc: ValidationError) -> str:
    """A one-line account of what is wrong with a call's arguments."""
    problems = "; ".join(
        f"{'.'.join(map(str, e['loc'])) or '(arguments)'}: {e['msg']}" for e in exc.errors()
    )
    return f"invalid arguments for {name!r}: {problems}"


def _plain(output: Any) -> Any:
    """`output` as builtins the log can store, or its repr when it has no such form."""
    try:
        plain = to_builtins(output)
        msgspec.msgpack.encode(plain)  # e.g. an int beyond 64 bits converts but cannot be stored
    except Exception:
        return repr(output)
    return plain


def is_tool_node(fn: object) -> bool:
    """True for a `ToolNode`: the engine runs it through its `run`, not as a function."""
    return isinstance(fn, ToolNode)
