"""What the runtime hands a node beyond its state and config."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from events import EventRecord

from .offload import InFlight

if TYPE_CHECKING:
    from .callbacks import Callbacks

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

    async def offload(self, label: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run the sync `fn` on a worker thread, on behalf of this run (named by `label`)."""
        return await self.in_flight.run(label, fn, *args, **kwargs)
