"""Worker programs the reliability tests run (and kill) as real processes."""

from __future__ import annotations

import os
from typing import Any


def append_line(path: str, line: str, *, durable: bool = True) -> None:
    """Append one line in one write: a side effect a test can count, surviving a SIGKILL."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def shipping_graph(ship: Any) -> Any:
    """ "support": an agent asking once for `ship()` (call id `ship-<thread>`), a ToolNode
    running it, the agent confirming: the graph the runtime and server workers run."""
    from projections import AgentState, Message, TextBlock, ToolCallBlock, ToolResultBlock
    from tests.helpers import agent_with_tools

    def agent(state: AgentState) -> list[Message]:
        if any(isinstance(b, ToolResultBlock) for m in state.context for b in m.content):
            return [Message.text_message("shipped", role="assistant")]
        call = ToolCallBlock(id=f"ship-{state.execution_meta.thread_id}", name="ship", args={})
        return [Message(role="assistant", content=[TextBlock(text="shipping"), call])]

    graph = agent_with_tools(agent, [ship])
    graph.name = "support"
    return graph
