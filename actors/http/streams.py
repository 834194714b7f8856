"""Where a live stream resumes: a position the client was sent, checked. What the streams
send (a thread's records, a run's own records) comes from `RuntimeFacade`; `EventStream`
is how the OpenAPI document declares them."""

from __future__ import annotations

from fastapi.responses import StreamingResponse

from agentlog.events.errors import InvalidArgumentError
from agentlog.events.store import MAX_POSITION


class BadResumePoint(InvalidArgumentError):
    """A `Last-Event-ID` or `after` that is no position this server sends (HTTP 400)."""


def resume_point(after: str | None, last_event_id: str | None) -> int:
    """The position a stream continues after: `Last-Event-ID` (what an EventSource sends on
    reconnecting), else `?after=`, else 0 (from the start). Anything but ASCII digits of a
    position the log can hold raises `BadResumePoint`, before the stream opens."""
    for name, value in (("Last-Event-ID", last_event_id), ("after", after)):
        if value is None:
            continue
        text = value.strip()
        if not (text.isascii() and text.isdigit() and len(text) <= len(str(MAX_POSITION))):
            raise BadResumePoint(
                f"{name} is a position this server sent (an integer 0 to {MAX_POSITION}), "
                f"got {value[:40]!r}"
            )
        position = int(text)
        if position > MAX_POSITION:
            raise BadResumePoint(f"{name} is at most {MAX_POSITION}, got {position}")
        return position
    return 0


class EventStream(StreamingResponse):
    """A streaming route's answer, Server-Sent Events: its `response_class`, so the OpenAPI
    document declares `text/event-stream`."""

    media_type = "text/event-stream"
