"""LangChain tools in a `ToolNode`, and a LangChain chat model as a node (`agentlog[langchain]`).

A `BaseTool` (what `@tool` and `StructuredTool.from_function` make, and the tools of
Composio's LangChain provider) runs through the tool node like any tool: its name, description
and argument schema are the ones LangChain gives a model, its arguments are checked against
that schema, and it is called with the call itself (LangChain's `ToolCall`), so a tool that
asks for its `InjectedToolCallId` gets the call's id. The tool node records the call before it
runs and its result the moment it ends, so a committed result is never run again.

Nothing here imports `langchain_core` at import time: a program that has a LangChain tool or
model has imported it already.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agentlog.actors.engine.context import NodeContext
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.tools.described import SchemaTool, check_arguments, schema_validator
from agentlog.events.errors import AgentlogError
from agentlog.projections import AgentState, Message
from agentlog.projections.langchain import from_langchain, to_langchain_messages

__all__ = ["LangChainTool", "LangChainToolError", "chat_model_node", "is_langchain_tool"]


class LangChainToolError(AgentlogError, RuntimeError):
    """A LangChain tool answered with an error (`ToolMessage(status="error")`, as its
    `handle_tool_error` makes): the call is recorded as failed, with the tool's text."""


def is_langchain_tool(value: object) -> bool:
    """True for a LangChain `BaseTool` (a `@tool` function, a `StructuredTool` ...)."""
    import sys

    module = sys.modules.get("langchain_core.tools")
    return module is not None and isinstance(value, module.BaseTool)


@dataclass(frozen=True)
class LangChainTool(SchemaTool):
    """A LangChain `BaseTool` as a `ToolNode` runs it (a `ToolLike`)."""

    tool: Any = field(repr=False)
    name: str
    description: str
    parameters: dict[str, Any]
    validator: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, tool: Any) -> LangChainTool:
        """Describe `tool` by the OpenAI form LangChain gives it (`convert_to_openai_tool`,
        which leaves out injected arguments)."""
        from langchain_core.utils.function_calling import convert_to_openai_tool

        try:
            function = convert_to_openai_tool(tool)["function"]
        except Exception as exc:
            raise GraphError(
                f"LangChain tool {getattr(tool, 'name', tool)!r} has no schema a model can "
                f"read ({type(exc).__name__}: {exc})"
            ) from exc
        parameters = dict(function.get("parameters") or {"type": "object", "properties": {}})
        return cls(
            tool=tool,
            name=str(function["name"]),
            description=" ".join(str(function.get("description") or "").split()),
            parameters=parameters,
            validator=schema_validator(parameters),
        )

    def bind(
        self, args: dict[str, Any], state: AgentState, context: NodeContext, call_id: str = ""
    ) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments, checked against the tool's schema (pydantic's own when the
        tool has one, so a wrong argument fails before the tool is called)."""
        model = getattr(self.tool, "tool_call_schema", None)
        if isinstance(model, type) and hasattr(model, "model_validate"):
            model.model_validate(args)  # a ValidationError is the tool node's to report
        else:
            check_arguments(self.name, self.validator, args)
        return [], dict(args)

    async def call(
        self, pos: list[Any], kw: dict[str, Any], context: NodeContext, call_id: str = ""
    ) -> Any:
        """Run the tool with LangChain's `ToolCall` (so injected call ids reach it): natively
        when it is async, else on the run's worker threads. Its `ToolMessage` becomes the
        call's result message."""
        request = {"name": self.name, "args": kw, "id": call_id, "type": "tool_call"}
        if _is_async(self.tool):
            answer = await self.tool.ainvoke(request)
        else:
            label = f"tool call {self.name!r} ({call_id})" if call_id else f"tool {self.name!r}"
            answer = await context.offload(label, self.tool.invoke, request)
        return _result(answer, self.name, call_id)


def _is_async(tool: Any) -> bool:
    """True for a tool with a coroutine of its own (an `async def` tool, or a class that
    overrides `_arun`); LangChain would run any other on a thread pool of its own."""
    from langchain_core.tools import BaseTool

    if getattr(tool, "coroutine", None) is not None:
        return True
    return type(tool)._arun is not BaseTool._arun and inspect.iscoroutinefunction(tool._arun)


def _result(answer: Any, name: str, call_id: str) -> Any:
    """What the tool node records for a LangChain tool's answer: a `ToolMessage` as a result
    message (its id derived from the call's when it has none), anything else as it is."""
    from langchain_core.messages import ToolMessage

    if not isinstance(answer, ToolMessage):
        return answer
    if answer.status == "error":
        raise LangChainToolError(str(answer.content))
    if answer.id is None:
        answer = answer.model_copy(update={"id": f"tool-{call_id}"})
    message = from_langchain(answer)
    if isinstance(message, Message) and answer.artifact is not None:
        meta = {**message.metadata, "artifact": answer.artifact}
        message = message.model_copy(update={"metadata": meta})
    return message


def chat_model_node(
    model: Any, *, tools: Iterable[Any] | None = None
) -> Callable[[AgentState], Awaitable[dict[str, list[Any]]]]:
    """A node that calls a LangChain chat model on the thread's messages and adds its reply.

    `tools` (a `ToolNode`, or anything LangChain's `bind_tools` takes) are bound to the model
    first; a model already bound (`model.bind_tools([...])`) needs none. The reply, an
    `AIMessage` with any tool calls, is stored as an agentlog `Message`, so `tools_condition`
    routes its calls to the tool node.
    """
    if not hasattr(model, "ainvoke"):
        raise GraphError(
            f"chat_model_node takes a LangChain chat model (a BaseChatModel, or one from "
            f"model.bind_tools(...)), got {type(model).__name__}"
        )
    if tools is not None:
        schemas = getattr(tools, "schemas", None)
        given = schemas() if callable(schemas) else list(tools)
        try:
            model = model.bind_tools(given)
        except (AttributeError, NotImplementedError) as exc:
            raise GraphError(
                f"{type(model).__name__} cannot bind tools (bind_tools: {type(exc).__name__}), "
                "so tools= cannot be given to it: use a chat model that supports tool calling"
            ) from exc

    async def call_model(state: AgentState) -> dict[str, list[Any]]:
        reply = await model.ainvoke(to_langchain_messages(state.context))
        return {"messages": [reply]}

    return call_model


def langchain_tool_of(value: object) -> LangChainTool | None:
    """The `ToolLike` of a LangChain tool; None for anything else."""
    return LangChainTool.of(value) if is_langchain_tool(value) else None
