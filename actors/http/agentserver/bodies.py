"""What LangGraph's clients send: the Agent Server's request bodies, every field the
`langgraph-sdk` sends accepted by name. A field whose value this server cannot carry out is
refused by the route (`refuse`), never ignored."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentlog.actors.http.bodies import MAX_THREAD_ID
from agentlog.actors.http.errors import ApiError

MAX_AFTER_S = 366 * 24 * 3600.0
"""The longest a run may be put off (`after_seconds`): a year."""
StreamModeName = Literal[
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "events",
    "debug",
    "tasks",
    "checkpoints",
]
"""The stream modes a run's stream takes, by the Agent Server's names."""


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ThreadCreate(Body):
    thread_id: str | None = Field(default=None, min_length=1, max_length=MAX_THREAD_ID)
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None
    graph_id: str | None = None
    supersteps: list[dict[str, Any]] | None = None
    ttl: dict[str, Any] | int | None = None


class ThreadPatch(Body):
    metadata: dict[str, Any] | None = None
    ttl: dict[str, Any] | int | None = None


class ThreadSearch(Body):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    ids: list[str] | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    sort_by: Literal["thread_id", "status", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None
    extract: dict[str, str] | None = None


class ThreadCount(Body):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None


class ThreadCopy(Body):
    pass


class CheckpointRef(BaseModel):
    model_config = ConfigDict(extra="allow")
    checkpoint_id: str | None = None
    checkpoint_ns: str | None = None
    thread_id: str | None = None


class StateUpdate(Body):
    values: Any = None
    as_node: str | None = None
    checkpoint: CheckpointRef | None = None
    checkpoint_id: str | None = None


class StateAt(Body):
    checkpoint: CheckpointRef
    subgraphs: bool = False
    select: list[str] | None = None


class HistoryQuery(Body):
    limit: int = Field(default=10, ge=1, le=1000)
    before: CheckpointRef | str | None = None
    metadata: dict[str, Any] | None = None
    checkpoint: CheckpointRef | None = None
    select: list[str] | None = None


class AssistantSearch(Body):
    metadata: dict[str, Any] | None = None
    graph_id: str | None = None
    name: str | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    sort_by: str | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None


class AssistantCount(Body):
    metadata: dict[str, Any] | None = None
    graph_id: str | None = None
    name: str | None = None


class AssistantVersions(Body):
    metadata: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class RunCommand(BaseModel):
    model_config = ConfigDict(extra="forbid")
    resume: Any = None
    update: Any = None
    goto: Any = None


class RunCreate(Body):
    assistant_id: str = Field(min_length=1)
    thread_id: str | None = None
    input: Any = None
    command: RunCommand | None = None
    metadata: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    checkpoint: CheckpointRef | None = None
    checkpoint_id: str | None = None
    checkpoint_during: bool | None = None
    interrupt_before: Literal["*"] | list[str] | None = None
    interrupt_after: Literal["*"] | list[str] | None = None
    webhook: str | None = None
    feedback_keys: list[str] | None = None
    multitask_strategy: Literal["reject", "interrupt", "rollback", "enqueue"] | None = None
    if_not_exists: Literal["create", "reject"] | None = None
    on_disconnect: Literal["cancel", "continue"] | None = None
    on_completion: Literal["delete", "keep"] | None = None
    after_seconds: float | None = None
    durability: Literal["sync", "async", "exit"] | None = None
    strict_resume: bool | None = None
    langsmith_tracer: dict[str, Any] | None = None
    stream_mode: StreamModeName | list[StreamModeName] | None = None
    stream_subgraphs: bool | None = None
    stream_resumable: bool | None = None

    def checkpoint_ref(self) -> str | None:
        """The checkpoint the run starts from (`checkpoint_id`, `checkpoint`'s, or the
        config's, as `RemoteGraph` sends it); None: the thread's head."""
        configurable = (self.config or {}).get("configurable")
        named = configurable.get("checkpoint_id") if isinstance(configurable, dict) else None
        ref = self.checkpoint.checkpoint_id if self.checkpoint else None
        found = self.checkpoint_id or ref or named
        return found if isinstance(found, str) else None

    def modes(self) -> list[str]:
        """The stream modes asked for (`values` when none)."""
        if self.stream_mode is None:
            return ["values"]
        return [self.stream_mode] if isinstance(self.stream_mode, str) else list(self.stream_mode)

    def refuse(self) -> None:
        """Refuse, before anything is written, a field whose value this server cannot carry
        out as the Agent Server would."""
        after = self.after_seconds
        if after is not None and not (0 <= after <= MAX_AFTER_S):
            raise ApiError(
                422,
                "invalid_request",
                f"after_seconds is a number of seconds from 0 to {MAX_AFTER_S:,.0f} (a year), "
                f"got {after!r}",
            )
        if self.command is not None and self.command.goto:
            raise ApiError(
                422,
                "unsupported",
                "a command's goto is not carried out: agentlog's engine takes goto only from "
                "a node's return (in process too); update the state as the node before it "
                "(POST /threads/{id}/state with as_node), then run",
            )
        if self.command is not None and self.command.update is not None:
            raise ApiError(
                422,
                "unsupported",
                "a command's update is not carried out over HTTP: a queued run records its "
                "resume value only; send the update as a recorded edit first (POST "
                "/threads/{id}/state), then command={'resume': ...}",
            )
        if self.command is not None and self.input is not None:
            raise ApiError(422, "invalid_request", "send input or command, not both")
