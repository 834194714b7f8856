"""A node may change anything it is given: the log, the live state and the next node's view
never see it (the view copies what the node reads, and only that)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from agentlog.actors import ToolNode
from agentlog.events import SQLiteEventStore
from agentlog.projections import (
    AgentState,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    append_items,
    replay,
)
from tests.helpers import agent_with_tools, line


class Notes(AgentState):
    notes: Annotated[list[str], append_items] = []
    facts: dict[str, Any] = {}


def vandal(state: Notes) -> list[Message]:
    """Mutate every message, block and field the node can reach, then return a new message."""
    for message in state.context:
        message.metadata["vandal"] = True
        message.message_id = f"{message.message_id}-changed"
        for block in message.content:
            if isinstance(block, TextBlock):
                block.text = "CHANGED"
            elif isinstance(block, ToolCallBlock):
                block.args["city"] = "Nowhere"
        message.content.append(TextBlock(text="extra"))
        if message.tools_calls:
            message.tools_calls[0]["id"] = "forged"
    last = state.context[-1]
    last.content.clear()
    state.context[0].role = "system"  # type: ignore[misc]
    state.notes.append("sneaked in")
    state.facts["k"] = "sneaked"
    state.execution_meta.internal_data["run_id"] = "forged"
    state.context.append(Message.text_message("appended to the view"))
    state.context.pop(0)
    return [Message.text_message("vandal done", role="assistant", message_id="m-vandal")]


def snapshot(state: AgentState) -> list[Any]:
    return [m.model_dump() for m in state.context]


async def test_a_node_that_mutates_everything_it_can_reach_changes_nothing(
    tmp_path: Path,
) -> None:
    seen: list[list[Any]] = []

    def before(state: Notes) -> dict[str, Any]:
        call = ToolCallBlock(id="c1", name="x", args={"city": "Oslo"})
        calls = [{"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}]
        ask = Message(role="assistant", content=[call], tools_calls=calls, message_id="m-ask")
        answer = Message.tool_message([ToolResultBlock(call_id="c1", output={"t": 1})])
        return {"messages": [ask, answer], "notes": ["kept"], "facts": {"k": "v"}}

    def after(state: Notes) -> None:
        seen.append(snapshot(state))
        assert state.notes == ["kept"] and state.facts == {"k": "v"}

    async with SQLiteEventStore(tmp_path / "v.db") as store:
        app = line(("before", before), ("vandal", vandal), ("after", after), state_cls=Notes)
        compiled = app.compile(store)
        config = {"thread_id": "t"}
        await compiled.ainvoke(Message.text_message("hi", message_id="m-hi"), config)
        live: Notes = await compiled.aget_state(config)
        records = [r async for r in store.read("t")]
        assert replay(records, Notes) == live
        texts = [(m.role, m.message_id, m.text()) for m in live.context]
        assert texts == [
            ("user", "m-hi", "hi"),
            ("assistant", "m-ask", ""),
            ("tool", live.context[2].message_id, ""),
            ("assistant", "m-vandal", "vandal done"),
        ]
        assert live.context[1].content == [ToolCallBlock(id="c1", name="x", args={"city": "Oslo"})]
        assert live.context[1].tools_calls is not None
        assert live.context[1].tools_calls[0]["id"] == "c1"
        assert all("vandal" not in m.metadata for m in live.context)
        assert live.notes == ["kept"] and live.facts == {"k": "v"}
        assert live.execution_meta.internal_data["run_id"] != "forged"
        assert seen == [snapshot(live)]  # the next node saw the log's state


async def test_a_tool_that_mutates_the_state_it_is_given_changes_nothing(tmp_path: Path) -> None:
    def meddle(state: AgentState) -> str:
        """Meddle with the state."""
        for message in state.context:
            message.content.clear()
        state.context.clear()
        return "done"

    def agent(state: AgentState) -> list[Message]:
        if state.context[-1].role == "tool":
            return [Message.text_message("ok", role="assistant", message_id="m-ok")]
        call = ToolCallBlock(id="c1", name="meddle", args={})
        return [Message(role="assistant", content=[call], message_id="m-call")]

    async with SQLiteEventStore(tmp_path / "t.db") as store:
        compiled = agent_with_tools(agent, [meddle]).compile(store)
        assert isinstance(compiled.graph.nodes["tools"], ToolNode)
        config = {"thread_id": "t"}
        await compiled.ainvoke(Message.text_message("go", message_id="m-go"), config)
        live = await compiled.aget_state(config)
        assert [m.text() for m in live.context] == ["go", "", "done", "ok"]
        assert live.context[1].content == [ToolCallBlock(id="c1", name="meddle", args={})]
        assert replay([r async for r in store.read("t")]) == live
