"""What requests send: the bodies and the query values the routes take, bounded."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query
from pydantic import BaseModel, ConfigDict, Field

from agentlog.projections import ExecutionStatus

MAX_THREAD_ID = 200
"""The longest thread id a request may name."""
SEARCH_LIMIT = 100
"""The most threads one search returns."""
WaitTimeout = Annotated[float, Query(gt=0, le=3600, description="seconds to wait")]
"""How long a request waits for a run (the run goes on after it)."""
RunStatus = Literal[
    "pending", "running", "success", "interrupted", "failed", "cancelled", "rejected"
]
"""A run's status as the API shows it."""


class StrictBody(BaseModel):  # a body with no field but those it declares
    model_config = ConfigDict(extra="forbid")


class ThreadCreate(StrictBody):
    thread_id: str | None = Field(default=None, min_length=1, max_length=MAX_THREAD_ID)
    graph_id: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "the graph the thread runs (default: metadata's graph_id, else the server's only graph)"
        ),
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="recorded with the thread (its thread_created record)"
    )
    if_exists: Literal["raise", "do_nothing"] = Field(
        default="raise",
        description="a thread_id already in the log: 409 (raise), or that thread (do_nothing)",
    )


class ThreadSearch(StrictBody):
    limit: int = Field(default=10, ge=1, le=SEARCH_LIMIT)
    values: bool = Field(default=True, description="false: each thread without its values")
    offset: int = Field(default=0, ge=0)
    status: ExecutionStatus | None = Field(
        default=None,
        description="A thread status ('idle': created with POST /threads and never run yet)",
    )
    graph_id: str | None = None
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="threads whose creation metadata holds each of these keys, equal",
    )


class HistoryQuery(StrictBody):
    limit: int = Field(default=20, ge=1, le=1000)
    before: int | None = Field(default=None, ge=0, description="only steps before this one")


class ResumeCommand(StrictBody):
    resume: Any = None


class RunCreate(StrictBody):
    assistant_id: str = Field(min_length=1, description="the entry point to run")
    input: Any = None
    command: ResumeCommand | None = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    multitask_strategy: Literal["reject", "enqueue", "interrupt", "rollback"] | None = Field(
        default=None, description="new input for a busy thread (default: the entry point's)"
    )
    correlation_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="ties related runs together (hive's correlation_id); recorded with the run",
    )


class RunCancel(StrictBody):
    reason: str | None = Field(default=None, max_length=2000)


class ThreadFork(StrictBody):
    step: int | None = Field(default=None, ge=0, description="the step to fork at (default: now)")
    thread_id: str | None = Field(default=None, min_length=1, max_length=MAX_THREAD_ID)
