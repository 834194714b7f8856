"""Tools: the tool node that runs a model's calls, and MCP servers' tools as graph tools."""

from agentlog.actors.tools.node import ToolNode, ToolUnusableError

__all__ = ["ToolNode", "ToolUnusableError"]
