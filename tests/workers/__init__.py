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
    from agentlog.projections import AgentState, Message, TextBlock, ToolCallBlock, ToolResultBlock
    from tests.helpers import agent_with_tools

    def agent(state: AgentState) -> list[Message]:
        if any(isinstance(b, ToolResultBlock) for m in state.context for b in m.content):
            return [Message.text_message("shipped", role="assistant")]
        call = ToolCallBlock(id=f"ship-{state.execution_meta.thread_id}", name="ship", args={})
        return [Message(role="assistant", content=[TextBlock(text="shipping"), call])]

    graph = agent_with_tools(agent, [ship])
    graph.name = "support"
    return graph


def shipping_runtime(store: Any, ship: Any, tick_s: float, config: Any = None) -> Any:
    """A runtime over "support" (`shipping_graph(ship)`, entry point "api") and "audit" (one
    node noting each run), started by every `run_completed` of "support" (entry point
    "after") and by a timer every `tick_s` seconds ("tick")."""
    from agentlog.actors import END, StateGraph
    from agentlog.actors.runtime import AgentRuntime, EntryPoint
    from agentlog.projections import AgentState, Message

    def note(state: AgentState) -> list[Message]:
        return [Message.text_message("noted", role="assistant")]

    audit: StateGraph[AgentState] = StateGraph(name="audit")
    audit.add_node("note", note)
    audit.set_entry_point("note")
    audit.add_edge("note", END)

    runtime = AgentRuntime(store, config)
    runtime.add_graph("support", shipping_graph(ship).compile(store))
    runtime.add_graph("audit", audit.compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="support"))
    runtime.register_entry_point(
        EntryPoint(
            id="after", graph_id="audit", trigger="event",
            kinds=["run_completed"], from_graph="support",
        )
    )  # fmt: skip
    runtime.register_entry_point(
        EntryPoint(id="tick", graph_id="audit", trigger="timer", interval_s=tick_s)
    )
    return runtime
