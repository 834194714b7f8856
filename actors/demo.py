"""The demo job: a conversation appended to the log, then read back and replayed."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from events import (
    EventRecord,
    NodeEntered,
    RunCompleted,
    RunStarted,
    SQLiteEventStore,
    StepAdvanced,
    ToolCallFinished,
    ToolCallStarted,
)
from events.kinds import Event
from projections import (
    AgentState,
    Message,
    ToolCallBlock,
    ToolResultBlock,
    decide,
    message_appended,
    replay,
    state_at,
)


def support_conversation(thread_id: str) -> list[tuple[str, list[Event]]]:
    """The steps of a small support conversation: (actor, events) per commit."""
    call = ToolCallBlock(id=f"call-{thread_id}", name="lookup_order", args={"order_id": "A-1042"})
    ask = Message.text_message("Where is my order A-1042?", role="user")
    plan = Message(role="assistant", content=[call])
    result = Message.tool_message(
        [ToolResultBlock(call_id=call.id, output={"status": "shipped", "eta": "2 days"})]
    )
    answer = Message.text_message(
        "Your order A-1042 has shipped and arrives in 2 days.", "assistant"
    )
    return [
        ("user", [RunStarted(entry_node="agent", input={"messages": 1}), message_appended(ask)]),
        ("agent", [NodeEntered(node="agent")]),
        ("agent", [message_appended(plan), StepAdvanced(step=1, next_node="tools")]),
        ("tools", [NodeEntered(node="tools")]),
        ("tools", [ToolCallStarted(call_id=call.id, name=call.name, args=call.args, node="tools")]),
        (
            "tools",
            [
                ToolCallFinished(call_id=call.id, name=call.name, output={"status": "shipped"}),
                message_appended(result),
                StepAdvanced(step=2, next_node="agent"),
            ],
        ),
        ("agent", [NodeEntered(node="agent")]),
        ("agent", [message_appended(answer), StepAdvanced(step=3), RunCompleted()]),
    ]


async def run_demo(db: str, thread_id: str | None = None) -> tuple[list[EventRecord], AgentState]:
    """Append the conversation (each commit checked by `decide`), then replay it from disk."""
    thread_id = thread_id or f"demo-{uuid.uuid4().hex[:8]}"
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    async with SQLiteEventStore(db) as store:
        live = AgentState()
        seq = 0
        for actor, events in support_conversation(thread_id):
            decide(live, events, seq=seq)
            records = await store.append(
                thread_id, events, expected_seq=seq, run_id=run_id, actor=actor
            )
            live = replay(records, state=live)
            seq = records[-1].seq
    async with SQLiteEventStore(db) as store:
        timeline = [r async for r in store.read(thread_id)]
        replayed: AgentState = await state_at(store, thread_id)
        report = await store.verify(thread_id)
    if replayed != live or not report.ok:
        raise AssertionError("replaying the log did not give the live state")
    return timeline, replayed


def summarize(record: EventRecord) -> str:
    """A one-line summary of a record, for people."""
    event = record.event
    fields: Sequence[str] = getattr(event, "__struct_fields__", ())
    for name in ("node", "next_node", "name", "entry_node"):
        if name in fields and getattr(event, name):
            return f"{name}={getattr(event, name)}"
    if record.kind == "message_appended":
        message = Message.model_validate(event.message)  # type: ignore[union-attr]
        return f"{message.role}: {message.text()[:60] or '[' + message.content[0].type + ']'}"
    return ""
