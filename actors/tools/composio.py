"""Composio's tools in a `ToolNode`, without a dependency on Composio's SDK.

Composio gives a program its tools in the shape of the framework it names (its "provider").
agentlog takes two of them:

- with Composio's LangChain provider (`Composio(provider=LangchainProvider())`), its tools
  are LangChain `StructuredTool`s: hand them to `ToolNode` as they are;
- with the default provider (OpenAI's), `composio_tools(composio, user_id=..., toolkits=[...])`
  reads the tools' OpenAI function schemas (`composio.tools.get(user_id=..., **query)`) and runs
  each call with `composio.tools.execute(name, arguments=..., user_id=...)`, whose answer says
  `successful` with its `data`, or gives an `error`. The older SDK's `ComposioToolSet`
  (`get_tools(**query)` and `execute_action(action=..., params=..., entity_id=...)`) is taken
  the same way.

A call Composio answers unsuccessfully is a failed result (`ComposioToolError`), as a local
tool that raised. The tool node records every call before it runs and its result the moment it
ends, so a committed result is never run again; a call cut short by a crash runs again on
resume (Composio's own idempotency, if any, is the tool's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentlog.actors.engine.context import NodeContext
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.tools.described import SchemaTool, schema_validator
from agentlog.actors.tools.langchain import langchain_tool_of
from agentlog.actors.tools.node import ToolLike
from agentlog.events.errors import AgentlogError

__all__ = ["ComposioTool", "ComposioToolError", "composio_tools"]


class ComposioToolError(AgentlogError, RuntimeError):
    """Composio answered a call unsuccessfully; the message is its error."""


@dataclass(frozen=True)
class ComposioTool(SchemaTool):
    """One Composio tool, as a `ToolNode` runs it (a `ToolLike`)."""

    name: str
    description: str
    parameters: dict[str, Any]
    client: Any = field(repr=False, compare=False)
    user_id: str | None = None
    validator: Any = field(default=None, repr=False, compare=False)

    async def call(
        self, pos: list[Any], kw: dict[str, Any], context: NodeContext, call_id: str = ""
    ) -> Any:
        """Execute the tool through the client, on the run's worker threads (Composio's SDK
        is synchronous); its `data` is the result, an unsuccessful answer raises."""
        label = f"composio tool {self.name!r} ({call_id})"
        answer = await context.offload(label, self._execute, kw)
        successful = _field(answer, "successful", _field(answer, "successfull", None))
        error = _field(answer, "error", None)
        if successful is False or (successful is None and error):
            raise ComposioToolError(f"Composio tool {self.name!r} failed: {error or answer!r}")
        return _field(answer, "data", answer)

    def _execute(self, arguments: dict[str, Any]) -> Any:
        tools = getattr(self.client, "tools", None)
        if tools is not None and hasattr(tools, "execute"):
            return tools.execute(self.name, arguments=arguments, user_id=self.user_id)
        return self.client.execute_action(
            action=self.name, params=arguments, entity_id=self.user_id
        )


def composio_tools(client: Any, *, user_id: str | None = None, **query: Any) -> list[ToolLike]:
    """The tools `client` (a `Composio` or a `ComposioToolSet`) gives for `query` (such as
    `toolkits=["GITHUB"]` or `tools=["GITHUB_STAR_A_REPOSITORY"]`), for a `ToolNode`.

    Each call is executed for `user_id` (Composio's user, an `entity_id` in the older SDK).
    """
    tools = getattr(client, "tools", None)
    if tools is not None and hasattr(tools, "get") and hasattr(tools, "execute"):
        given = tools.get(user_id=user_id, **query)
    elif hasattr(client, "get_tools") and hasattr(client, "execute_action"):
        given = client.get_tools(**query)
    else:
        raise GraphError(
            f"composio_tools takes a Composio client (composio.Composio(), whose tools.get and "
            f"tools.execute it uses) or a ComposioToolSet, got {type(client).__name__}"
        )
    return [_tool_of(client, user_id, item) for item in given]


def _tool_of(client: Any, user_id: str | None, item: Any) -> ToolLike:
    adapted = langchain_tool_of(item)
    if adapted is not None:
        return adapted  # from Composio's LangChain provider: the tool runs itself
    function = item.get("function") if isinstance(item, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise GraphError(
            f"Composio gave {item!r:.80}, not a tool agentlog reads: use Composio's default "
            "(OpenAI) provider, whose tools are {'type': 'function', 'function': {'name': ..., "
            "'description': ..., 'parameters': {...}}}, or its LangChain provider"
        )
    parameters = dict(function.get("parameters") or {"type": "object", "properties": {}})
    return ComposioTool(
        name=function["name"],
        description=" ".join(str(function.get("description") or "").split()),
        parameters=parameters,
        client=client,
        user_id=user_id,
        validator=schema_validator(parameters),
    )


def _field(answer: Any, name: str, default: Any) -> Any:
    """A field of Composio's answer, a dict or an object."""
    if isinstance(answer, Mapping):
        return answer.get(name, default)
    return getattr(answer, name, default)
