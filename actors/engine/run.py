"""The state of one call of a run, the engine every part shares (its settings, its store,
claims, loads and routing), and a call's config."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agentlog.actors.engine.callbacks import (
    LIFECYCLE_HOOKS,
    Callbacks,
    Occurrence,
    call_hook,
    overridden,
)
from agentlog.actors.engine.errors import (
    GraphError,
    MissingThreadIdError,
    TracingConfigError,
)
from agentlog.actors.engine.fingerprint import graph_fingerprint
from agentlog.events import (
    Claim,
    EventRecord,
    EventStore,
    MemoryEventStore,
    StoreError,
)
from agentlog.events.claims import DEFAULT_LEASE
from agentlog.events.kinds import Event
from agentlog.events.store import brief, check_thread_id
from agentlog.projections import (
    AgentState,
    BaseContextManager,
    Fold,
    fold_at,
)
from agentlog.projections.fold import uncommitted_record
from agentlog.projections.ids import monotonic
from agentlog.projections.snapshots import DEFAULT_SNAPSHOT_EVERY, SnapshotWriter
from agentlog.projections.spans import parse_traceparent

if TYPE_CHECKING:
    from agentlog.actors.engine.graph import StateGraph
    from agentlog.actors.engine.longterm import BaseStore
from agentlog.actors.engine.ids import IdSource
from agentlog.actors.engine.nodes import NodeActor
from agentlog.actors.engine.offload import InFlight
from agentlog.actors.engine.stream import RunStream
from agentlog.actors.engine.tasks import BackgroundTaskManager

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
    committing: asyncio.Future[Any] | None = None
    """The append under way, which goes on if the run is cancelled while it waits."""
    recursion_limit: int = DEFAULT_RECURSION_LIMIT
    interrupt_before: frozenset[str] = frozenset()
    interrupt_after: frozenset[str] = frozenset()
    """The call's breakpoints: the graph's, with those its config asks for (`breakpoints`)."""
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

    def durable_seq(self) -> int:
        """The seq up to which the log holds this run's records: after it, only others'
        (a stop request). The fold's own, unless a durability mode holds records back."""
        return self.fold.seq


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
    """What every part of the engine shares, held by a `CompiledGraph`: the graph, its store,
    how it was compiled (its settings, hooks and context manager), the node slots and the
    sync work its runs left running; and what reads them alone: loading a thread's fold,
    routing, claiming a thread, calling the lifecycle hooks. No method takes a run: each
    call's run is its own `RunLoop`."""

    def __init__(
        self,
        graph: StateGraph[S],
        *,
        store: EventStore | None = None,
        interrupt_before: Sequence[str] = (),
        interrupt_after: Sequence[str] = (),
        recursion_limit: int = DEFAULT_RECURSION_LIMIT,
        snapshot_every: int | None = DEFAULT_SNAPSHOT_EVERY,
        node_concurrency: Mapping[str, int] | None = None,
        node_timeout: float | None = None,
        node_timeouts: Mapping[str, float | None] | None = None,
        callbacks: Callbacks | None = None,
        context_manager: BaseContextManager[Any] | None = None,
        long_term_store: BaseStore | None = None,
    ) -> None:
        graph.check(injected=("task_manager", *(("store",) if long_term_store else ())))
        names = (*interrupt_before, *interrupt_after, *(node_concurrency or {}))
        for name in (*names, *(node_timeouts or {})):
            if name not in graph.nodes:
                raise GraphError(f"{name!r} is named in compile() but is not a node of the graph")
        if recursion_limit < 1:
            raise GraphError(f"recursion_limit must be >= 1, got {recursion_limit}")
        if long_term_store is not None and "store" in graph.dependencies:
            raise GraphError(
                "the graph registered a dependency named 'store' and was compiled with a "
                "long-term store, which nodes also receive as 'store': rename the dependency"
            )
        self.graph = graph
        self.store: EventStore = store if store is not None else MemoryEventStore()
        """The event log: every thread of the graph is written here (`checkpointer=`)."""
        self.long_term_store = long_term_store
        """The long-term store (`compile(store=...)`): `get_store()`, a `store` parameter."""
        self.dependencies: dict[str, Any] = {
            **graph.dependencies,
            **({"store": long_term_store} if long_term_store is not None else {}),
        }
        """What nodes receive by parameter name beside state, config and context: a copy
        made here, so a `register` after compile does not reach the compiled graph."""
        self.tasks = BackgroundTaskManager(self.store, graph.tasks)
        """The background tasks its nodes start (`task_manager`)."""
        self.dependencies["task_manager"] = self.tasks
        self.ids = IdSource(self.dependencies)
        """The registered id settings `generate_id` follows inside the nodes."""
        self.interrupt_before = frozenset(interrupt_before)
        self.interrupt_after = frozenset(interrupt_after)
        self.recursion_limit = recursion_limit
        self.snapshot_every = snapshot_every
        self.node_concurrency = dict(node_concurrency or {})
        if callbacks is not None and not isinstance(callbacks, Callbacks):
            what = (
                f"the class {callbacks.__name__}: pass an instance, {callbacks.__name__}()"
                if isinstance(callbacks, type)
                else type(callbacks).__name__
            )
            raise GraphError(
                f"callbacks must be a Callbacks instance (subclass actors.Callbacks), got {what}"
            )
        self.callbacks = callbacks
        self.hooked = overridden(callbacks)
        """The hooks `callbacks` overrides: the only ones the engine calls."""
        if context_manager is not None and not isinstance(context_manager, BaseContextManager):
            raise GraphError(
                "context_manager must be a BaseContextManager (say "
                "MessageContextManager(max_messages=20)), got "
                f"{type(context_manager).__name__} {context_manager!r:.60}"
            )
        self.context_manager = context_manager
        """Bounds the context the nodes see (`compile(context_manager=...)`): a commit that
        leaves it over its bound carries the trim."""
        self.node_timeout = _timeout(node_timeout, "node_timeout")
        self.node_timeouts = {
            name: _timeout(limit, f"node_timeouts[{name!r}]")
            for name, limit in (node_timeouts or {}).items()
        }
        self.slots: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]
        ] = weakref.WeakKeyDictionary()
        """A node's concurrency limit per event loop: one semaphore its actors share."""
        self.left: set[InFlight] = set()
        """Sync work runs of this graph left running when they ended (each keeps its thread
        claimed until it returns)."""

    @functools.cached_property
    def fingerprint(self) -> dict[str, Any]:
        """The graph's fingerprint as compiled, which each `run_started` records."""
        return graph_fingerprint(self.graph, self.interrupt_before, self.interrupt_after)

    async def load(self, thread_id: str, claim: Claim | None = None) -> Fold[S]:
        """The thread's fold as the log has it (from its latest snapshot). `claim`, the
        caller's: a thread its store saw empty when recording it is not read again (only
        a stop request can have come since, which the first append finds, as after a read)."""
        if (claim is not None and claim.last_seq == 0) or await self.store.last_seq(thread_id) == 0:
            return Fold.new(self.graph.state_cls)
        return await fold_at(self.store, thread_id, state_cls=self.graph.state_cls)

    async def lifecycle(self, records: Sequence[EventRecord]) -> None:
        """Call the lifecycle hook of each committed record that has one, in order."""
        hooks = self.callbacks
        if hooks is None:
            return
        for record in records:
            hook = LIFECYCLE_HOOKS.get(record.kind)
            if hook is not None and hook in self.hooked:
                occurrence = Occurrence(hook, record.thread_id, record.run_id, record)
                await call_hook(hooks, hook, occurrence)

    async def claim(
        self,
        thread_id: str,
        purpose: str,
        lease: float = DEFAULT_LEASE,
        under: Claim | None = None,
    ) -> Claim:
        """Claim the thread (`lease`: how long another host waits for a silent owner, the
        config's `lease_s`; `under`: only while that claim holds, the config's
        `claim_under`); a cancellation mid-claim gives back the claim it obtained before it
        goes on, so the caller's next call finds the thread free."""
        claiming = asyncio.ensure_future(
            self.store.claim(thread_id, purpose=purpose, lease=lease, under=under)
        )
        try:
            return await asyncio.shield(claiming)
        except asyncio.CancelledError:
            await finish(asyncio.ensure_future(self._give_back(claiming)))
            raise

    async def _give_back(self, claiming: asyncio.Future[Claim]) -> None:
        """Release the claim `claiming` obtains, once it has (nothing if it failed)."""
        with contextlib.suppress(BaseException):
            claim = await claiming
            await self.store.release(claim)

    async def release(self, claim: Claim, in_flight: InFlight) -> None:
        """Give the thread up, or, while sync work of the run still runs, once it returns."""
        if await self.label_in_flight(claim, in_flight):
            self.left.add(in_flight)  # `aclose` waits for it

            def release() -> None:
                self.left.discard(in_flight)
                self.store.release_threadsafe(claim)

            in_flight.leave(claim.thread_id, release)
            return
        with contextlib.suppress(StoreError):
            await self.store.release(claim)

    async def label_in_flight(self, claim: Claim, in_flight: InFlight) -> bool:
        """Make the claim name the sync work of the run still running (what a caller
        refused meanwhile waits for); False when there is none."""
        running = in_flight.running()
        if running:
            with contextlib.suppress(StoreError):
                await self.store.relabel(
                    claim,
                    f"{', '.join(running)} of an earlier run, still running on a worker thread",
                )
        return bool(running)


def scratch_records(
    thread_id: str | None, events: Sequence[Event], base: int, run_id: str | None = None
) -> list[EventRecord]:
    """The records `events` will be once appended after seq `base`, folded ahead of it."""
    return [uncommitted_record(e, base + i + 1, thread_id, run_id) for i, e in enumerate(events)]


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


def check_tracing(config: Mapping[str, Any]) -> None:
    """Refuse a run's config, before anything is written, when it holds LangChain callbacks
    (the engine would never call them) or a `traceparent` that is not a W3C trace context."""
    if config.get("callbacks"):
        raise TracingConfigError(
            "config['callbacks'] holds LangChain callbacks, which agentlog does not call: "
            "pass agentlog hooks with compile(callbacks=...) (a subclass of "
            "agentlog.actors.Callbacks), or trace runs with agentlog.otel (OpenTelemetry "
            "spans derived from the log); drop 'callbacks' from the config"
        )
    traceparent = config.get("traceparent")
    if traceparent is not None and parse_traceparent(traceparent) is None:
        raise TracingConfigError(
            f"config['traceparent'] is {brief(traceparent)}, not a W3C trace context: pass "
            "'00-<32 hex trace id>-<16 hex span id>-<2 hex flags>' (ids not all zeros), or "
            "leave it out"
        )


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


def breakpoints(engine: Engine[Any], config: Mapping[str, Any], name: str) -> frozenset[str]:
    """The graph's breakpoints `name` ("interrupt_before" or "interrupt_after") with those
    the call's config asks for, for this call only: node names, or "*" for every node."""
    compiled: frozenset[str] = getattr(engine, name)
    asked = config.get(name)
    if asked is None:
        return compiled
    nodes = list(engine.graph.nodes)
    names = nodes if asked == "*" else asked
    if isinstance(names, str) or not isinstance(names, list | tuple | frozenset | set):
        raise GraphError(f"config[{name!r}] is '*' or a list of node names, got {brief(asked)}")
    unknown = sorted(str(n) for n in names if n not in engine.graph.nodes)
    if unknown:
        raise GraphError(
            f"config[{name!r}] names {', '.join(map(repr, unknown))}, not nodes of the graph "
            f"(its nodes: {', '.join(nodes)})"
        )
    return compiled | frozenset(names)


def _timeout(value: Any, what: str) -> float | None:
    """A time limit in seconds, or None for none; anything else is refused by name."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise GraphError(f"{what} must be a number of seconds > 0, or None; got {value!r}")
    return float(value)
