"""The tool node: runs the tool calls of an assistant message, each recorded in the log.

Every call is recorded as `tool_call_started` before it runs and `tool_call_finished` the
moment it ends, so a step run again after a crash answers finished calls from the log
instead of running them twice.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import time
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from events.kinds import Event, ToolCallFinished, ToolCallStarted
from projections import AgentState, Message, ToolCallBlock, ToolResultBlock, to_builtins

from .context import NodeContext
from .errors import GraphError, GraphInterrupt

__all__ = [
    "INJECTED",
    "Tool",
    "ToolArgumentsError",
    "ToolNode",
    "UnknownToolError",
    "pending_calls",
    "rejected_message",
    "tool_message",
]

INJECTED = frozenset({"state", "config", "context", "tool_call_id"})
"""Parameter names the runtime fills in; they never appear in a tool's schema.

`tool_call_id` is the call's id: a tool with side effects can pass it on as an idempotency
key, since a call cut short by a crash runs again on resume (at least once)."""

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class UnknownToolError(LookupError):
    """A model asked for a tool the node does not have."""


class ToolArgumentsError(ValueError):
    """A model's arguments for a tool do not fit the tool's signature."""


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
            raise GraphError(f"a tool must be a named function, got {fn!r}")
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
        arg_docs, params = _args_section(doc), tuple(inspect.signature(fn).parameters.values())
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


class ToolNode:
    """A graph node that runs the tool calls of the last assistant message concurrently."""

    def __init__(self, tools: Sequence[Callable[..., Any]]) -> None:
        self.tools: dict[str, Tool] = {}
        for fn in tools:
            tool = Tool.from_function(fn)
            if tool.name in self.tools:
                raise GraphError(f"two tools are named {tool.name!r}: tool names must be unique")
            self.tools[tool.name] = tool

    def schemas(self) -> list[dict[str, Any]]:
        """One OpenAI function schema per tool, in registration order."""
        return [tool.schema() for tool in self.tools.values()]

    async def run(self, state: AgentState, context: NodeContext) -> list[Message]:
        """Answer each pending call of the last assistant message with one tool message."""
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
        return [tool_message(finished[c.id]) for c in calls]

    async def _run_call(
        self, call: ToolCallBlock, state: AgentState, context: NodeContext
    ) -> ToolCallFinished:
        """Run one call, turning any failure into a failed result, and commit its result."""
        begin = time.perf_counter()
        status: typing.Literal["completed", "failed"] = "completed"
        output: Any = None
        error: str | None = None
        try:
            tool = self.tools.get(call.name)
            if tool is None:
                known = ", ".join(sorted(self.tools)) or "none"
                raise UnknownToolError(f"no tool named {call.name!r} (known tools: {known})")
            try:
                pos, kw = tool.bind(call.args, state, context, call.id)
            except ValidationError as exc:
                raise ToolArgumentsError(_describe(call.name, exc)) from exc
            output = _plain(await tool.call(pos, kw, context, call.id))
        except GraphInterrupt:
            raise
        except Exception as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        result = ToolCallFinished(
            call_id=call.id,
            name=call.name,
            status=status,
            output=output,
            error=error,
            duration_ms=(time.perf_counter() - begin) * 1000,
        )
        await context.commit([result])
        return result


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
    """The tool message of a result, with an id derived from the call id."""
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


def _args_section(doc: str) -> dict[str, str]:
    """Per-parameter descriptions from a Google-style `Args:` section."""
    found: dict[str, str] = {}
    lines = doc.splitlines()
    start = next((i for i, s in enumerate(lines) if s.strip() in ("Args:", "Arguments:")), -1)
    if start < 0:
        return found
    header_indent = len(lines[start]) - len(lines[start].lstrip())
    entry_indent: int | None = None
    current: str | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= header_indent:
            break
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE.match(line.strip())
        if indent == entry_indent and match:
            current = match.group(1)
            found[current] = match.group(2).strip()
        elif current is not None:
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found
