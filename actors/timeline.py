"""One-line, human-readable summaries of log records."""

from __future__ import annotations

from events import EventRecord
from projections import Message


def summarize(record: EventRecord) -> str:
    """What the record says, in a few words."""
    event = record.event
    fields = event.__struct_fields__
    if record.kind == "message_appended":
        message = Message.model_validate(event.message)  # type: ignore[union-attr]
        calls = ", ".join(c.name for c in message.tool_calls())
        text = message.text()[:50]
        return f"{message.role}: {text}" + (f" [calls {calls}]" if calls else "")
    if record.kind == "tool_call_finished":
        return f"{event.name} {event.status}"  # type: ignore[union-attr]
    for name in ("name", "node", "next_node", "entry_node", "reason"):
        if name in fields and getattr(event, name):
            return f"{name}={getattr(event, name)}"
    return ""
