"""Graphs for the graph state machine's own tests: healthy ones, and ones with planted bugs
the machine must find (importable by name, for the SIGKILL variant's child process)."""

from __future__ import annotations

import time
from typing import Any

from agentlog.actors import END, StateGraph, ToolNode
from agentlog.actors.engine.compiled import CompiledGraph
from agentlog.actors.testing import RecordingTool, ScriptedModel, ask_tool, reply
from agentlog.events import EventStore
from agentlog.projections import AgentState, Message, ToolCallBlock


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id."""
    return {"order_id": order_id, "total": 89.90}


def _agent_tools_graph(agent: Any, store: EventStore) -> CompiledGraph[Any]:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([RecordingTool(lookup_order)]))
    graph.set_entry_point("agent")

    def route(state: AgentState) -> str:
        return "tools" if state.context[-1].tool_calls() else END

    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph.compile(store)


def _answer(state: AgentState) -> Message:
    """Ask for the order on a user's turn, then say what the tool found."""
    last = state.context[-1]
    if last.role == "tool":
        return reply(f"found {last.text()[:40]}")
    return ask_tool("lookup_order", order_id="A-1")


def scripted_support(store: EventStore) -> CompiledGraph[Any]:
    """Healthy: a scripted model that looks an order up on each user turn, recording tools."""
    return _agent_tools_graph(ScriptedModel(_answer), store)


COUNT = [0]
"""The planted bug: a module global a node counts its calls in."""


def global_counter(store: EventStore) -> CompiledGraph[Any]:
    """Buggy: the agent numbers its replies from a module global, not from the log."""

    def agent(state: AgentState) -> list[Message]:
        if state.context[-1].role != "tool":
            return [_answer(state)]
        COUNT[0] += 1
        return [reply(f"reply number {COUNT[0]}")]

    return _agent_tools_graph(agent, store)


def wall_clock(store: EventStore) -> CompiledGraph[Any]:
    """Buggy: the agent stamps its reply with the wall clock instead of the message's time."""

    def agent(state: AgentState) -> list[Message]:
        return [reply(f"answered at {time.time_ns()}")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    return graph.compile(store)


class RefundState(AgentState):
    refund: float = 0.0


TOTAL = 89.90


def refund_creep(store: EventStore) -> CompiledGraph[Any]:
    """Buggy: each refund request adds 40 to the refund, so the third one passes the total."""

    def agent(state: RefundState) -> dict[str, Any]:
        asks = sum(1 for m in state.context if m.role == "user" and "refund" in m.text())
        return {"refund": 40.0 * asks, "messages": [reply(f"refund of {40.0 * asks}")]}

    graph: StateGraph[RefundState] = StateGraph(RefundState)
    graph.add_node("agent", agent)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    return graph.compile(store)


def refund_within_total(state: AgentState) -> bool:
    """The domain's rule: a refund is never above the order's total."""
    return getattr(state, "refund", 0.0) <= TOTAL


def closure_counter(store: EventStore) -> CompiledGraph[Any]:
    """Buggy: the agent numbers its replies from a counter in the factory's closure. Each app
    counts alone, so only an app rebuilt after a crash disagrees with one never crashed."""
    count = [0]

    def agent(state: AgentState) -> list[Message]:
        count[0] += 1
        return [reply(f"reply number {count[0]}")]

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    return graph.compile(store)


def _count_in_a_global(state: AgentState) -> list[Message]:
    COUNT[0] += 1
    return [reply(f"reply number {COUNT[0]}")]


counting_graph: StateGraph[AgentState] = StateGraph(name="counting")
"""Buggy, and handed to the machine as a `StateGraph`: it counts in the module global."""
counting_graph.add_node("agent", _count_in_a_global)
counting_graph.set_entry_point("agent")
counting_graph.add_edge("agent", END)


def reused_call_id(store: EventStore) -> CompiledGraph[Any]:
    """Buggy: a hand-written agent that gives every tool call the same id."""

    def agent(state: AgentState) -> Message:
        if state.context[-1].role == "tool":
            return reply("found it")
        return Message(
            role="assistant",
            content=[ToolCallBlock(id="call-1", name="lookup_order", args={"order_id": "A-1"})],
        )

    return _agent_tools_graph(agent, store)
