"""Tools known by a JSON schema (MCP servers' tools, Composio's, LangChain's): their OpenAI
function form, and their arguments checked against the schema before the tool is called."""

from __future__ import annotations

from typing import Any

from agentlog.actors.engine.context import NodeContext
from agentlog.actors.tools.node import ToolArgumentsError
from agentlog.projections import AgentState


class SchemaTool:
    """What a tool described by `name`, `description` and a JSON schema (`parameters`,
    checked by `validator`) shares, as a `ToolNode` runs it."""

    name: str
    description: str
    parameters: dict[str, Any]
    validator: Any

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool form, with the tool's schema as parameters."""
        function = {"name": self.name, "description": self.description}
        return {"type": "function", "function": {**function, "parameters": self.parameters}}

    def bind(
        self, args: dict[str, Any], state: AgentState, context: NodeContext, call_id: str = ""
    ) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments, checked against the tool's schema (its own side checks too)."""
        check_arguments(self.name, self.validator, args)
        return [], dict(args)


def schema_validator(schema: dict[str, Any]) -> Any:
    """A JSON Schema validator for `schema`, or None when the schema itself is not valid, or
    jsonschema is not installed (the tool's own side is then left to check the arguments)."""
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return cls(schema)


def check_arguments(name: str, validator: Any, args: dict[str, Any]) -> None:
    """`ToolArgumentsError` naming each way `args` fails `validator` (None checks nothing)."""
    if validator is None:
        return
    problems = sorted(validator.iter_errors(args), key=lambda e: list(e.path))
    if problems:
        said = "; ".join(
            f"{'.'.join(map(str, p.path)) or '(arguments)'}: {p.message}" for p in problems
        )
        raise ToolArgumentsError(f"invalid arguments for {name!r}: {said}")
