"""What the runtime hands a node beyond its state and config."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.offload import InFlight
from agentlog.events import Event, EventRecord, EventStore, kind_of
from agentlog.events.kinds import FACT_KINDS
from agentlog.projections import StreamChunk

if TYPE_CHECKING:
    import asyncio

    from agentlog.actors.engine.callbacks import Callbacks
    from agentlog.actors.engine.longterm import BaseStore
    from agentlog.actors.engine.stream import RunStream

RECORDABLE: tuple[type[Event], ...] = FACT_KINDS
"""The facts a node may add to its own step's commit (`NodeContext.record`)."""


class NotInNodeError(GraphError):
    """Something that belongs to a running node's step was asked for outside one."""


T = TypeVar("T")


@dataclass
class NodeContext:
    """A node's link to the log while it runs.

    `commit` appends events durably right away, as this node (a tool node records each tool
    call's start and result this way, so a crash never re-runs a finished call);
    `step_records` holds what this node already committed in the current step before a
    crash, read back from the log when the step is run again. `offload` runs sync work on
    the engine's executor, tracked so the thread stays owned until that work returns.
    """

    thread_id: str
    run_id: str
    node: str
    commit: Callable[..., Awaitable[list[EventRecord]]]
    """Commit events as this node (`actor=` names another writer: a hook's change)."""
    step_records: list[EventRecord] = field(default_factory=list)
    in_flight: InFlight = field(default_factory=InFlight)
    dispatched: set[str] = field(default_factory=set)
    """Ids of the tool calls this run has handed to their tool (started running)."""
    callbacks: Callbacks | None = None
    """The graph's hooks, which a tool node calls around each tool call."""
    stream: RunStream | None = None
    """The run's stream when someone consumes it (`astream`), else None."""
    step_seq: int = 0
    """The seq of this step's `node_entered`: with the thread id, the step's identity, the
    same when a crash makes the step run again."""
    recorded: list[Event] = field(default_factory=list)
    """Facts this node recorded (`record`): they ride in its step's commit, before its
    outputs, so a step that never commits leaves none of them behind."""
    store: BaseStore | None = None
    """The long-term store the graph was compiled with (`get_store()`), or None."""
    store_writes: int = 0
    """How many long-term store writes this step has made: each write's place in it."""
    step: int = 0
    """The number of the step this node runs in (the thread's step counter once it commits)."""
    branch: int | None = None
    """The node's place among its step's branches, when the step runs several."""
    log: EventStore | None = None
    """The run's event log: a subgraph this node runs is recorded in it too."""
    subgraphs: int = 0
    """How many subgraph runs this step has begun: each one's place in it (its namespace)."""
    loop: asyncio.AbstractEventLoop | None = None
    """The event loop the run lives on: a sync node's blocking call to a subgraph runs there."""

    def record(self, event: Event) -> None:
        """Add a fact (a model call, an outcome, a shared write) to this node's step commit.

        Safe from a sync node's worker thread. Other kinds are the engine's to write.
        """
        if not isinstance(event, RECORDABLE):
            allowed = ", ".join(kind_of_type(t) for t in RECORDABLE)
            raise TypeError(
                f"a node records only {allowed}; {kind_of(event)!r} is written by the engine"
            )
        self.recorded.append(event)

    async def publish(self, chunk: StreamChunk) -> None:
        """Hand a chunk (a streamed delta) to the run's consumers; nothing when none listen.

        Chunks are not events: the log gets the step's outputs when it commits.
        """
        if self.stream is not None:
            await self.stream.tell(
                chunk.model_copy(update={"thread_id": self.thread_id, "run_id": self.run_id})
            )

    async def offload(self, label: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run the sync `fn` on a worker thread, on behalf of this run (named by `label`)."""
        return await self.in_flight.run(label, fn, *args, **kwargs)


def kind_of_type(cls: type[Event]) -> str:
    """The `kind` string of an event class."""
    return str(cls.__struct_config__.tag)


_current: ContextVar[NodeContext | None] = ContextVar("agentlog_node_context", default=None)


def current_context() -> NodeContext:
    """The context of the node running in this task or worker thread.

    Lets code a node calls (a model client, `record_outcome`) reach the step without the
    node passing `context` along.
    """
    found = _current.get()
    if found is None:
        raise NotInNodeError(
            "no node is running here: call this from inside a node (or a tool it runs)"
        )
    return found
