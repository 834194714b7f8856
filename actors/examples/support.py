"""The demo job: a scripted support agent that needs a human's approval for a refund.

By default no network and no model: `support_model` plays the model, deterministically.
With a model named as `openai:MODEL` or `anthropic:MODEL` (`demo_model`), a real one plays
the agent through `agentlog.actors.models.ModelNode`, its client configured from the environment
(OPENAI_BASE_URL / OPENAI_API_KEY, ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY). The graph is
agent -> lookup tool -> agent -> refund tool (interrupted before it runs, until a human
approves) -> agent -> END, on a SQLite log.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.compiled import CompiledGraph
from agentlog.actors.engine.graph import StateGraph
from agentlog.actors.tools.node import ToolNode
from agentlog.events import EventRecord, EventStore, VerifyReport
from agentlog.projections import (
    END,
    AgentState,
    ContentBlock,
    Message,
    StreamChunk,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    state_at,
)

if TYPE_CHECKING:
    from agentlog.actors.models import ModelNode

ORDERS = {"A-1042": {"status": "delivered damaged", "total": 89.90, "customer": "Ingrid"}}


def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order by its id.

    Args:
        order_id: The order's id, like A-1042.
    """
    if order_id not in ORDERS:
        raise KeyError(f"no order {order_id}")
    return {"order_id": order_id, **ORDERS[order_id]}


def issue_refund(order_id: str, amount: float) -> dict[str, object]:
    """Refund an order (needs a human's approval first).

    Args:
        order_id: The order to refund.
        amount: How much to refund.
    """
    return {"order_id": order_id, "refunded": amount, "reference": f"RF-{order_id}"}


def _results(state: AgentState) -> dict[str, ToolResultBlock]:
    found: dict[str, ToolResultBlock] = {}
    for message in state.context:
        for block in message.content:
            if isinstance(block, ToolResultBlock) and message.metadata.get("tool_name"):
                found[str(message.metadata["tool_name"])] = block
    return found


def support_model(state: AgentState) -> list[Message]:
    """The scripted model: look the order up, propose a refund, then confirm it."""
    turn = sum(1 for m in state.context if m.role == "assistant")
    thread = state.execution_meta.thread_id or "t"
    results = _results(state)
    if "lookup_order" not in results:
        call = ToolCallBlock(
            id=f"{thread}-lookup", name="lookup_order", args={"order_id": "A-1042"}
        )
        content: list[ContentBlock] = [TextBlock(text="Let me look up order A-1042."), call]
    elif "issue_refund" not in results:
        order = results["lookup_order"].output
        total = order["total"] if isinstance(order, dict) else 0.0
        call = ToolCallBlock(
            id=f"{thread}-refund", name="issue_refund", args={"order_id": "A-1042", "amount": total}
        )
        content = [
            TextBlock(text=f"The order arrived damaged; I propose a refund of {total}."),
            call,
        ]
    elif results["issue_refund"].is_error:  # refused at the breakpoint, or failed: say so
        why = results["issue_refund"].output
        content = [TextBlock(text=f"The refund was not issued: {why}")]
    else:
        refund = results["issue_refund"].output
        reference = refund.get("reference") if isinstance(refund, dict) else "?"
        content = [TextBlock(text=f"Done: your refund is on its way (reference {reference}).")]
    return [Message(message_id=f"{thread}-a{turn}", role="assistant", content=content)]


SUPPORT_PROMPT = (
    "You are a customer-support agent for an online shop. Look an order up with lookup_order "
    "before saying anything about it. When an order arrived damaged, propose a refund of its "
    "total by calling issue_refund (a supervisor approves it first). Once refunded, confirm "
    "briefly with the refund's reference. Call one tool at a time."
)
"""What the real model is told it is."""


def demo_model(spec: str, **params: Any) -> ModelNode:
    """The agent node for a real model named `openai:MODEL` or `anthropic:MODEL`; raises
    `ModelSpecError` for another form or a client that cannot be set up (no key)."""
    from agentlog.actors.models import ModelNode

    return ModelNode.from_spec(
        spec, tools=[lookup_order, issue_refund], system_prompt=SUPPORT_PROMPT, **params
    )


def route(state: AgentState) -> str:
    """Go to the tool the last message calls, or end."""
    calls = state.context[-1].tool_calls() if state.context else []
    return calls[0].name if calls else END


def support_graph(store: EventStore, model: str | None = None) -> CompiledGraph[AgentState]:
    """The demo graph, compiled onto `store`, pausing before every refund; `model`
    (`openai:MODEL`, `anthropic:MODEL`) puts a real model in place of the scripted one."""
    graph: StateGraph[AgentState] = StateGraph(name="support")
    graph.add_node("agent", support_model if model is None else demo_model(model))
    graph.add_node("lookup", ToolNode([lookup_order]))
    graph.add_node("refund", ToolNode([issue_refund]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent", route, {"lookup_order": "lookup", "issue_refund": "refund", END: END}
    )
    graph.add_edge("lookup", "agent")
    graph.add_edge("refund", "agent")
    return graph.compile(checkpointer=store, interrupt_before=["refund"])


async def run_demo(
    store: EventStore,
    show: Callable[[StreamChunk], None],
    approve: Callable[[AgentState], bool],
    thread_id: str | None = None,
    model: str | None = None,
) -> tuple[list[EventRecord], AgentState, VerifyReport]:
    """Run the conversation, ask `approve` at the interrupt, then read the log back.

    `model` (`openai:MODEL`, `anthropic:MODEL`) runs it against a real model."""
    thread_id = thread_id or f"demo-{uuid.uuid4().hex[:8]}"
    app = support_graph(store, model)
    config = {"thread_id": thread_id}
    question = Message.text_message(
        "My order A-1042 arrived damaged. Can I get my money back?", message_id=f"{thread_id}-u0"
    )
    await _drain(app.astream({"messages": [question]}, config), show)
    paused = await app.aget_state(config)
    if paused.is_interrupted():
        if not approve(paused):
            return [r async for r in store.read(thread_id)], paused, await store.verify(thread_id)
        approver = {**config, "user": "supervisor"}  # recorded as who resumed the run
        await _drain(app.astream(None, approver), show)  # None approves a breakpoint
    timeline = [r async for r in store.read(thread_id)]
    replayed: AgentState = await state_at(store, thread_id)
    return timeline, replayed, await store.verify(thread_id)


async def _drain(chunks: AsyncIterator[StreamChunk], show: Callable[[StreamChunk], None]) -> None:
    async for chunk in chunks:
        show(chunk)
