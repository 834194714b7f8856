"""The state of one call of a run, the engine's settings every part reads, and a call's config."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agentlog.actors.engine.callbacks import Callbacks
from agentlog.actors.engine.errors import (
    GraphError,
    MissingThreadIdError,
)
from agentlog.events import (
    Claim,
    EventRecord,
    EventStore,
)
from agentlog.events.store import brief, check_thread_id
from agentlog.projections import (
    AgentState,
    Fold,
)
from agentlog.projections.messages import monotonic
from agentlog.projections.snapshots import SnapshotWriter

if TYPE_CHECKING:
    from agentlog.actors.engine.graph import StateGraph
from agentlog.actors.engine.nodes import NodeActor
from agentlog.actors.engine.offload import InFlight
from agentlog.actors.engine.stream import RunStream

S = TypeVar("S", bound=AgentState)
T = TypeVar("T")
_log = logging.getLogger("agentlog.runtime")
DEFAULT_RECURSION_LIMIT = 25


@dataclass
class Run(Generic[S]):
    thread_id: str
    run_id: str
    config: dict[str, Any]
    fold: Fold[S]
    stream: RunStream | None
    skip_interrupt_before: str | None = None
    idle: bool = False
    cut_short: bool = False
    last_snapshot: int = 0
    """The seq of the thread's latest snapshot: the one its fold was loaded from, then the
    last this run took."""
    snapshots: SnapshotWriter | None = None
    """Follows the context as commits land, so a snapshot references the log (see
    `agentlog.projections.snapshots`)."""
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    actors: dict[str, NodeActor] = field(default_factory=dict)
    claim: Claim | None = None
    in_flight: InFlight = field(default_factory=InFlight)
    committing: asyncio.Future[list[EventRecord]] | None = None
    """The append under way, which goes on if the run is cancelled while it waits."""
    recursion_limit: int = DEFAULT_RECURSION_LIMIT
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Commits of one run go one at a time (a tool node's calls finish concurrently)."""
    own: set[str | int] = field(default_factory=set)
    """Ids of the messages this call appended: the `messages` of its result."""
    last_node: str | None = None
    """The node whose step this call committed last: a stop between nodes pauses after it."""
    taken: int = 0
    """Steps this call has run (its recursion limit counts them)."""
    ahead: tuple[str, list[EventRecord]] | None = None
    """The node the last step's commit already entered, and the tool calls it started."""
    dispatched: set[str] = field(default_factory=set)
    """Tool calls this call handed to their tool."""
    started_ahead: set[str] = field(default_factory=set)
    """Tool calls this call recorded as started with the step before their tool node: those
    not dispatched never ran."""

    started: float = field(default_factory=monotonic)
    """When the call began (`monotonic()`): run records measure their duration from it."""

    def elapsed_ms(self) -> float:
        """Milliseconds since the call began, as a run record stores it."""
        return elapsed_ms(self.started)

    def never_ran(self) -> set[str]:
        """Calls recorded as started that no tool has run: only this call could have."""
        return self.started_ahead - self.dispatched


async def finish(future: asyncio.Future[T]) -> T:
    """Await `future` to its end even when the caller is cancelled meanwhile, then raise
    that cancellation: work that frees a thread is never left half done behind a caller
    that has already moved on (a shield alone returns at once on a second cancel)."""
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled
    return future.result()


def elapsed_ms(since: float) -> float:
    """Milliseconds from `since` (a `monotonic()` reading) to now, to the microsecond:
    a recorded value, never recomputed when the log is read."""
    return round((monotonic() - since) * 1000, 3)


class Engine(Generic[S]):
    """What the parts of the engine share: the graph, its store and how it was compiled."""

    graph: StateGraph[S]
    store: EventStore
    interrupt_before: frozenset[str]
    interrupt_after: frozenset[str]
    recursion_limit: int
    snapshot_every: int | None
    node_concurrency: dict[str, int]
    node_timeout: float | None
    node_timeouts: dict[str, float | None]
    callbacks: Callbacks | None
    hooked: frozenset[str]
    """The hooks `callbacks` overrides: the only ones the engine calls."""
    _slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]]
    _left: set[InFlight]
    """Sync work runs of this graph left running when they ended (each keeps its thread
    claimed until it returns)."""


ABANDONED_BY_CALLER = (
    "the caller stopped waiting (task.cancel(), a timeout around ainvoke, or a server dropping "
    "the request)"
)


def run_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of a call's config with its thread id found and checked.

    Both shapes work: `{"thread_id": ...}` and LangGraph's
    `{"configurable": {"thread_id": ...}}` (whose other keys join the config too).
    """
    if config is not None and not isinstance(config, Mapping):
        raise MissingThreadIdError(
            f"config must be a dict such as {{'thread_id': 'chat-42'}}, got "
            f"{type(config).__name__} {config!r:.60}"
        )
    merged: dict[str, Any] = {}
    if config:
        configurable = config.get("configurable")
        if isinstance(configurable, Mapping):
            merged.update(configurable)
        merged.update({k: v for k, v in config.items() if k != "configurable"})
    merged["thread_id"] = _thread_of(config)
    return merged


def _thread_of(config: Mapping[str, Any] | None) -> str:
    thread_id: Any = None
    if config:
        thread_id = config.get("thread_id")
        configurable = config.get("configurable")
        if isinstance(configurable, Mapping) and configurable.get("thread_id") is not None:
            other = configurable["thread_id"]
            if thread_id is not None and other != thread_id:
                raise GraphError(
                    f"the config names two threads ({brief(thread_id)} and configurable "
                    f"{brief(other)}): pass the thread id once"
                )
            thread_id = other
    if thread_id is None:
        raise MissingThreadIdError(
            "this call needs the thread it works on: pass config={'thread_id': 'chat-42'} "
            "or LangGraph's config={'configurable': {'thread_id': 'chat-42'}}; a new id "
            "starts a new thread when given input"
        )
    return check_thread_id(thread_id)


def _recursion_limit(config: Mapping[str, Any], default: int) -> int:
    limit = config.get("recursion_limit", default)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise GraphError(f"config['recursion_limit'] must be an int >= 1, got {limit!r}")
    return limit


def _timeout(value: Any, what: str) -> float | None:
    """A time limit in seconds, or None for none; anything else is refused by name."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise GraphError(f"{what} must be a number of seconds > 0, or None; got {value!r}")
    return float(value)
