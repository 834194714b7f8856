"""Graphs for the replay tests: the code that wrote a recorded corpus, and planted changes
of it (each a builder taking the store, as `agentlog replay-test --app` takes one)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import openai

from agentlog.actors import ToolNode
from agentlog.actors.engine.compiled import CompiledGraph
from agentlog.actors.engine.graph import StateGraph
from agentlog.actors.examples import support
from agentlog.actors.models import ModelNode
from agentlog.events import EventStore
from agentlog.projections import END, AgentState, Message
from tests.helpers import agent_with_tools

NOTES = Path(tempfile.gettempdir()) / "agentlog-replay-notes.txt"
"""Where `write_note` appends (the tests point it at a file of their own): a replay must
leave it untouched."""
PROMPT = "You help with orders. Look orders up before answering."


def lookup_order(order_id: str) -> dict[str, str]:
    """Look an order up.

    Args:
        order_id: The order's id.
    """
    return {"order_id": order_id, "status": "delivered"}


def lookup_order_v2(order_id: str, include_history: bool = False) -> dict[str, str]:
    """Look an order up.

    Args:
        order_id: The order's id.
        include_history: Add the order's history.
    """
    return {"order_id": order_id, "status": "delivered"}


lookup_order_v2.__name__ = "lookup_order"


def write_note(text: str) -> str:
    """Write a note to the notes file (a side effect a replay must never repeat).

    Args:
        text: What to write.
    """
    with NOTES.open("a") as f:
        f.write(text + "\n")
    return "noted"


def client(url: str = "http://127.0.0.1:9/v1") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key="sk-test")


def tools_graph(
    store: EventStore, *, url: str = "http://127.0.0.1:9/v1", prompt: str = PROMPT, v2: bool = False
) -> CompiledGraph[Any]:
    """A model node asking for parallel tool calls, and the tool node running them."""
    lookup = lookup_order_v2 if v2 else lookup_order
    model = ModelNode(client(url), model="test-model", tools=[lookup, write_note],
                      system_prompt=prompt)  # fmt: skip
    graph = agent_with_tools(model, [lookup, write_note])
    graph.name = "tools"
    return graph.compile(checkpointer=store)


def tools_graph_prompt(store: EventStore) -> CompiledGraph[Any]:
    return tools_graph(store, prompt=PROMPT + " Be brief.")


def tools_graph_schema(store: EventStore) -> CompiledGraph[Any]:
    return tools_graph(store, v2=True)


def chat_body(*calls: tuple[str, dict[str, Any]], text: str | None = None) -> dict[str, Any]:
    """A chat completion answering with `calls` (parallel tool calls) or `text`."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(calls)
        ]  # fmt: skip
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "test-model",
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }  # fmt: skip


def _support(store: EventStore, agent: Any = None, route: Any = None, extra: bool = False) -> Any:
    graph: StateGraph[AgentState] = StateGraph(name="support")
    graph.add_node("agent", agent or support.support_model)
    graph.add_node("lookup", ToolNode([support.lookup_order]))
    graph.add_node("refund", ToolNode([support.issue_refund]))
    graph.set_entry_point("agent")
    paths = {"lookup_order": "lookup", "issue_refund": "refund", END: END}
    graph.add_conditional_edges("agent", route or support.route, paths)
    if extra:  # a new node in the middle: lookup -> audit -> agent
        graph.add_node("audit", lambda state: None)
        graph.add_edge("lookup", "audit")
        graph.add_edge("audit", "agent")
    else:
        graph.add_edge("lookup", "agent")
    graph.add_edge("refund", "agent")
    return graph.compile(checkpointer=store, interrupt_before=["refund"])


def support_router_changed(store: EventStore) -> Any:
    """Refunds end the run instead of going to the refund tool."""

    def route(state: AgentState) -> str:
        calls = state.context[-1].tool_calls() if state.context else []
        return END if calls and calls[0].name == "issue_refund" else support.route(state)

    return _support(store, route=route)


def support_extra_message(store: EventStore) -> Any:
    """The agent adds one more message when it proposes the refund."""

    def agent(state: AgentState) -> list[Message]:
        out = support.support_model(state)
        if out[0].tool_calls() and out[0].tool_calls()[0].name == "issue_refund":
            out.append(Message(message_id="extra", role="assistant", content=[]))
        return out

    return _support(store, agent=agent)


def support_new_node(store: EventStore) -> Any:
    return _support(store, extra=True)


def fan_graph(
    store: EventStore, *, reordered: bool = False, b_says: str = "b"
) -> CompiledGraph[Any]:
    """prep, then b and c together, then done: the order of prep's edges is the branch order."""
    graph: StateGraph[AgentState] = StateGraph(name="fan")
    for name in ("prep", "b", "c", "done"):
        graph.add_node(name, _say(name, b_says if name == "b" else name))
    graph.set_entry_point("prep")
    for target in ("c", "b") if reordered else ("b", "c"):
        graph.add_edge("prep", target)
    graph.add_edge(["b", "c"], "done")
    graph.add_edge("done", END)
    return graph.compile(checkpointer=store)


def fan_graph_reordered(store: EventStore) -> CompiledGraph[Any]:
    return fan_graph(store, reordered=True)


def fan_graph_b_changed(store: EventStore) -> CompiledGraph[Any]:
    return fan_graph(store, b_says="b, differently")


def _say(name: str, text: str) -> Any:
    def node(state: AgentState) -> list[Message]:
        return [Message(message_id=f"{name}-{state.execution_meta.step}", role="assistant",
                        content=[{"type": "text", "text": text}])]  # fmt: skip

    return node


STOPPER: list[Any] = []
"""While recording, what node `a` calls: a stop request on its own thread."""


def stop_graph(store: EventStore, *, b_says: str = "b") -> CompiledGraph[Any]:
    """a, then b: `a` asks its run to stop between nodes (while STOPPER holds a call)."""

    async def a(state: AgentState) -> list[Message]:
        for stop in STOPPER:
            await stop()
        return _say("a", "a")(state)

    graph: StateGraph[AgentState] = StateGraph(name="stopper")
    graph.add_node("a", a)
    graph.add_node("b", _say("b", b_says))
    graph.set_entry_point("a")
    graph.add_edge("a", "b")
    graph.add_edge("b", END)
    return graph.compile(checkpointer=store)


def stop_graph_b_changed(store: EventStore) -> CompiledGraph[Any]:
    return stop_graph(store, b_says="b, differently")
