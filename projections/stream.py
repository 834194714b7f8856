"""What a run streams to its consumers."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from agentlog.projections.messages import Message
from agentlog.projections.state import AgentState


class StreamEvent(StrEnum):
    """The kind of a stream chunk."""

    STATE = "state"
    MESSAGE = "message"
    ERROR = "error"
    UPDATES = "updates"


class StreamChunk(BaseModel):
    """One item of a run's stream: a message, a state, an update or an error.

    `event` is always a `StreamEvent` member (a str enum, so it also equals "message" etc.):
    the annotation and the value agree, and JSON output carries the plain string.
    """

    event: StreamEvent = StreamEvent.MESSAGE
    message: Message | None = None
    state: AgentState | None = None
    data: dict[str, Any] | None = None
    thread_id: str | None = None
    run_id: str | None = None
    metadata: dict[str, Any] | None = None
    timestamp: float = Field(default_factory=lambda: datetime.now().timestamp())
