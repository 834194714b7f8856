"""The agent runtime: many runs of many graphs on one log, started by API calls, by events
and by timers, watched and steered while they run.

The log is the event bus: every trigger the runtime accepts, every dispatch and every outcome
is a record of its own thread (`RuntimeConfig.runtime_thread`), written before the caller
hears of it. A runtime started on the same store folds that thread and carries on: queued
triggers run, runs cut short resume from their log, no event or timer slot fires twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Self

from events import EventRecord, EventStore
from events.errors import StoreError, ThreadBusyError
from events.follow import follow, last_position
from events.kinds import TriggerAccepted, TriggerListening
from projections import ExecutionStatus, StopRequestStatus
from projections.edge import to_builtins

from ..command import Command
from .dispatch import Dispatcher
from .journal import RuntimeJournal
from .ledger import Ledger, TriggerState
from .listeners import Listeners
from .spec import (
    MULTITASK_STRATEGIES,
    EntryPoint,
    InvalidTriggerInputError,
    MultitaskStrategy,
    RegistrationError,
    RetryPolicy,
    RunCancelledError,
    RunNotWaitingError,
    RuntimeConfig,
    RuntimeNotStartedError,
    RuntimeRunFailedError,
    ThreadBusyRunError,
    UnknownEntryPointError,
    UnknownRunError,
)
from .timers import Schedule

if TYPE_CHECKING:
    from ..compiled import CompiledGraph


@dataclass
class Subscriber:
    """One live feed, for the statistics: how far behind the log it is."""

    position: int = 0


@dataclass
class Counts:
    """Runs of one graph or entry point, by where they stand."""

    active: int = 0
    queued: int = 0
    completed: int = 0
    failed: int = 0
    interrupted: int = 0
    cancelled: int = 0


@dataclass
class _Graph:
    app: CompiledGraph[Any]
    entry_points: set[str] = field(default_factory=set)


class AgentRuntime:
    """Runs graphs on one store: `add_graph`, `register_entry_point`, then
    `async with runtime:` (or `await start()` / `await stop()`)."""

    def __init__(
        self,
        store: EventStore,
        config: RuntimeConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.config = config or RuntimeConfig()
        self.clock = clock
        self.ledger = Ledger()
        self.journal = RuntimeJournal(store, self.config.runtime_thread, self.ledger)
        self.graphs: dict[str, _Graph] = {}
        self.entry_points: dict[str, EntryPoint] = {}
        self.schedules: dict[str, Schedule] = {}
        self.dispatcher = Dispatcher(self)
        self.listeners = Listeners(self)
        self.subscribers: list[Subscriber] = []
        self.started = False
        self.stopping = False
        self._head_at_start = 0
        self._accepting: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # ---- graphs and entry points ---------------------------------------------------------

    def add_graph(self, graph_id: str, app: CompiledGraph[Any]) -> None:
        """Register a compiled graph under `graph_id`; it must be compiled on this store."""
        from ..compiled import CompiledGraph

        if not isinstance(graph_id, str) or not graph_id.strip():
            raise RegistrationError(f"a graph id is a non-empty string, got {graph_id!r}")
        if graph_id in self.graphs:
            raise RegistrationError(
                f"graph {graph_id!r} is registered already: remove_graph it first"
            )
        if not isinstance(app, CompiledGraph):
            raise RegistrationError(
                f"add_graph({graph_id!r}, ...) takes a compiled graph (graph.compile(store)), "
                f"got {type(app).__name__}"
            )
        if app.store is not self.store:
            raise RegistrationError(
                f"graph {graph_id!r} is compiled on another store: compile it on the "
                "runtime's own (graph.compile(runtime.store)), so its runs share one log"
            )
        self.graphs[graph_id] = _Graph(app)
        if self.started:
            self.dispatcher.poke()  # triggers recovered for this graph may run now

    def remove_graph(self, graph_id: str) -> None:
        """Unregister a graph and its entry points; refused while its runs execute."""
        graph = self._graph(graph_id)
        busy = [e for e in self.dispatcher.executing.values() if e.graph_id == graph_id]
        if busy:
            raise RegistrationError(
                f"graph {graph_id!r} has {len(busy)} run(s) executing: cancel or wait for "
                "them before removing it"
            )
        for entry_id in list(graph.entry_points):
            self.entry_points.pop(entry_id, None)
            self.schedules.pop(entry_id, None)
        del self.graphs[graph_id]

    def list_graphs(self) -> list[str]:
        """The registered graph ids, in registration order."""
        return list(self.graphs)

    def register_entry_point(self, entry: EntryPoint) -> None:
        """Add a way runs start; refused (nothing registered) when anything is wrong."""
        if not isinstance(entry, EntryPoint):
            raise RegistrationError(f"register_entry_point takes an EntryPoint, got {entry!r}")
        entry.check()
        if entry.id in self.entry_points:
            raise RegistrationError(f"entry point {entry.id!r} is registered already")
        graph = self._graph(entry.graph_id, f"entry point {entry.id!r}")
        if entry.entry_node is not None and entry.entry_node not in graph.app.graph.nodes:
            known = ", ".join(sorted(graph.app.graph.nodes))
            raise RegistrationError(
                f"entry point {entry.id!r}: {entry.entry_node!r} is not a node of graph "
                f"{entry.graph_id!r} (nodes: {known})"
            )
        if entry.from_graph is not None and entry.from_graph not in self.graphs:
            raise RegistrationError(
                f"entry point {entry.id!r}: from_graph {entry.from_graph!r} is not a "
                f"registered graph (graphs: {', '.join(self.graphs) or 'none'})"
            )
        if entry.from_graph == entry.graph_id and not entry.include_own:
            raise RegistrationError(
                f"entry point {entry.id!r} listens to its own graph {entry.graph_id!r}: set "
                "include_own=True if runs should start runs of the same graph"
            )
        if entry.trigger == "webhook":
            for other in self.entry_points.values():
                if other.trigger == "webhook" and other.path == entry.path:
                    raise RegistrationError(
                        f"entry point {entry.id!r}: path {entry.path!r} is served by entry "
                        f"point {other.id!r} already"
                    )
        schedule = Schedule.of(entry) if entry.trigger == "timer" else None
        if self.started and entry.trigger != "api":
            raise RegistrationError(
                f"entry point {entry.id!r}: event and timer entry points are registered "
                "before the runtime starts (they must not miss what happens meanwhile)"
            )
        self.entry_points[entry.id] = entry
        graph.entry_points.add(entry.id)
        if schedule is not None:
            self.schedules[entry.id] = schedule

    def unregister_entry_point(self, entry_id: str) -> None:
        """Remove an entry point; refused while its runs execute."""
        entry = self._entry(entry_id)
        if any(e.entry_point == entry_id for e in self.dispatcher.executing.values()):
            raise RegistrationError(
                f"entry point {entry_id!r} has runs executing: cancel or wait for them first"
            )
        self.graphs[entry.graph_id].entry_points.discard(entry_id)
        del self.entry_points[entry_id]
        self.schedules.pop(entry_id, None)

    def _graph(self, graph_id: str, who: str = "") -> _Graph:
        graph = self.graphs.get(graph_id)
        if graph is None:
            prefix = f"{who}: " if who else ""
            raise RegistrationError(
                f"{prefix}no graph {graph_id!r} is registered (graphs: "
                f"{', '.join(self.graphs) or 'none'}): add_graph it first"
            )
        return graph

    def _entry(self, entry_id: str) -> EntryPoint:
        entry = self.entry_points.get(entry_id)
        if entry is None:
            known = ", ".join(self.entry_points) or "none"
            raise UnknownEntryPointError(f"no entry point {entry_id!r} (registered: {known})")
        return entry

    # ---- life -------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Claim the runtime thread, fold it, resume what was in flight, start listening."""
        if self.started:
            return
        try:
            self.journal.claim = await self.store.claim(
                self.config.runtime_thread, purpose="an agent runtime"
            )
        except ThreadBusyError as exc:
            raise ThreadBusyError(
                f"another runtime runs on this store ({exc}); one runtime per store"
            ) from exc
        await self.journal.catch_up()
        self._head_at_start = await _head(self.store)
        self.started, self.stopping = True, False
        await self.listeners.start()
        await self.dispatcher.recover()
        self.dispatcher.start()

    async def stop(self, cancel: bool = False) -> None:
        """Stop: running steps commit, then runs pause (stopped, resumed by the next runtime
        on this store); with `cancel`, runs are abandoned at once instead. Nothing accepted
        is lost either way."""
        if not self.started:
            return
        self.stopping = True
        await self.listeners.stop()
        await self.dispatcher.stop(abandon=cancel)
        await self.journal.drain()
        claim, self.journal.claim = self.journal.claim, None
        if claim is not None:
            with contextlib.suppress(StoreError):
                await self.store.release(claim)
        self.started = False

    def _check_started(self) -> None:
        if not self.started or self.stopping:
            raise RuntimeNotStartedError(
                "the runtime is not running: use `async with runtime:` or await runtime.start()"
            )

    # ---- starting runs ------------------------------------------------------------------

    async def trigger(
        self,
        entry_point_id: str,
        input: Any = None,
        *,
        thread_id: str | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        actor: str = "api",
        cause: Literal["api", "webhook"] = "api",
        multitask_strategy: MultitaskStrategy | None = None,
    ) -> str:
        """Accept a run of the entry point's graph and return its thread id at once.

        `cause` says what the log records as the trigger's cause (a webhook delivery is one).

        The acceptance is recorded first; a key seen before returns the first run's thread
        and starts nothing (across restarts too).
        """
        accepted = await self.submit(
            entry_point_id, input, thread_id=thread_id, idempotency_key=idempotency_key,
            priority=priority, actor=actor, cause=cause, multitask_strategy=multitask_strategy,
        )  # fmt: skip
        return accepted.thread_id

    async def submit(
        self,
        entry_point_id: str,
        input: Any = None,
        *,
        thread_id: str | None = None,
        idempotency_key: str | None = None,
        priority: int | None = None,
        actor: str = "api",
        cause: Literal["api", "webhook"] = "api",
        multitask_strategy: MultitaskStrategy | None = None,
    ) -> TriggerAccepted:
        """`trigger`, returning the accepted trigger itself (its id names the run).

        New input for a thread whose run is still going follows `multitask_strategy` (else
        the entry point's): "reject" raises `ThreadBusyRunError` writing nothing, "enqueue"
        waits, "interrupt" stops the running run and then continues with this input.
        """
        self._check_started()
        entry = self._entry(entry_point_id)
        if idempotency_key is not None:
            if not isinstance(idempotency_key, str) or not idempotency_key:
                raise RegistrationError(
                    f"idempotency_key must be a non-empty string, got {idempotency_key!r}"
                )
            seen = self.ledger.keys.get((entry.id, idempotency_key))
            if seen is not None:
                return self.ledger.triggers[seen].accepted
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
            raise RegistrationError(f"thread_id must be a non-empty string, got {thread_id!r}")
        if thread_id == self.config.runtime_thread:
            raise RegistrationError(f"{thread_id!r} is the runtime's own thread")
        if thread_id is not None:
            await self._check_thread_graph(thread_id, entry)
        resume = isinstance(input, Command)
        if resume:
            if input.goto is not None or input.update is not None:
                raise RegistrationError(
                    "trigger takes Command(resume=...) to answer an interrupt; update and goto "
                    "are for nodes to return"
                )
            await self._check_waiting(thread_id, entry)
            input = input.resume
        strategy = multitask_strategy or entry.multitask_strategy
        if strategy not in MULTITASK_STRATEGIES:
            raise RegistrationError(
                f"multitask_strategy is one of {', '.join(MULTITASK_STRATEGIES)}, got {strategy!r}"
            )
        busy = thread_id is not None and (
            thread_id in self.dispatcher.executing or bool(self.dispatcher.queued_on(thread_id))
        )
        if busy and strategy == "reject":
            raise ThreadBusyRunError(
                f"thread {thread_id!r} has a run still going: its input is refused "
                "(multitask_strategy='reject'); wait for it, or send with 'enqueue'"
            )
        accepted = await self.accept(
            entry,
            _recordable(input, resume),
            cause=cause if cause in ("api", "webhook") else "api",
            resume=resume,
            thread_id=thread_id,
            key=idempotency_key,
            priority=priority,
            by=actor,
        )
        if busy and strategy == "interrupt" and thread_id is not None:
            await self._interrupt(thread_id, entry, actor)
        elif busy and strategy == "rollback" and thread_id is not None:
            why = f"rolled back: superseded by run {accepted.trigger_id}"
            await self.dispatcher.supersede(thread_id, actor, why)
        return accepted

    async def _interrupt(self, thread_id: str, entry: EntryPoint, actor: str) -> None:
        """Stop the thread's running run (a stop: the running node finishes and commits)
        so the input queued behind it continues the thread with the progress kept."""
        if thread_id not in self.dispatcher.executing:
            return
        app = self.graphs[entry.graph_id].app
        with contextlib.suppress(StoreError):
            await app.astop({"thread_id": thread_id, "user": actor}, between_nodes=True)

    async def _check_waiting(self, thread_id: str | None, entry: EntryPoint) -> None:
        """A resume goes to a paused or failed run (or queues behind the thread's run)."""
        if thread_id is None:
            raise RegistrationError("Command(resume=...) answers a paused run: name its thread_id")
        if thread_id in self.dispatcher.executing or self.dispatcher.queued_on(thread_id):
            return
        app = self.graphs[entry.graph_id].app
        meta = (await app.aget_state({"thread_id": thread_id})).execution_meta
        stopped = meta.stop_current_execution == StopRequestStatus.STOPPED
        if not (meta.is_interrupted() or stopped or meta.status == ExecutionStatus.ERROR):
            raise RunNotWaitingError(
                f"the run on thread {thread_id!r} is {meta.status.value}: a resume answers a "
                "paused or failed run; send new input instead"
            )

    async def _check_thread_graph(self, thread_id: str, entry: EntryPoint) -> None:
        """An existing thread takes runs of its own graph only."""
        graph = self.ledger.graph_of.get(thread_id)
        if graph is None and await self.store.last_seq(thread_id) > 0:
            graph = await self.listeners.graph_of_thread(thread_id)
            if graph is None:
                raise RegistrationError(
                    f"thread {thread_id!r} holds a run of no graph this runtime has: "
                    "start a new thread"
                )
        if graph is not None and graph != entry.graph_id:
            raise RegistrationError(
                f"thread {thread_id!r} runs graph {graph!r}, not {entry.graph_id!r} (entry "
                f"point {entry.id!r}): start a new thread"
            )

    async def accept(
        self,
        entry: EntryPoint,
        input: Any,
        *,
        cause: str,
        thread_id: str | None = None,
        key: str | None = None,
        priority: int | None = None,
        resume: bool = False,
        by: str | None = None,
        source_position: int | None = None,
        slot: float | None = None,
        missed: int = 0,
    ) -> TriggerAccepted:
        """Record a trigger and queue it (the one way every cause starts a run).

        A key being accepted by a concurrent call is waited for: both get its first trigger.
        """
        if key is not None:
            pair = (entry.id, key)
            while pair in self._accepting:
                await asyncio.shield(self._accepting[pair])
            seen = self.ledger.keys.get(pair)
            if seen is not None:
                return self.ledger.triggers[seen].accepted
            self._accepting[pair] = asyncio.get_running_loop().create_future()
            try:
                return await self._accept(
                    entry, input, cause=cause, thread_id=thread_id, key=key, priority=priority,
                    resume=resume, by=by, source_position=source_position, slot=slot,
                    missed=missed,
                )  # fmt: skip
            finally:
                self._accepting.pop(pair).set_result(None)
        return await self._accept(
            entry, input, cause=cause, thread_id=thread_id, key=key, priority=priority,
            resume=resume, by=by, source_position=source_position, slot=slot, missed=missed,
        )  # fmt: skip

    async def _accept(
        self,
        entry: EntryPoint,
        input: Any,
        *,
        cause: str,
        thread_id: str | None,
        key: str | None,
        priority: int | None,
        resume: bool,
        by: str | None,
        source_position: int | None,
        slot: float | None,
        missed: int,
    ) -> TriggerAccepted:
        event = TriggerAccepted(
            trigger_id=uuid.uuid4().hex,
            entry_point=entry.id,
            graph_id=entry.graph_id,
            thread_id=thread_id or f"{entry.graph_id}-{uuid.uuid4().hex}",
            new_thread=thread_id is None,
            cause=cause,  # type: ignore[arg-type]
            input=input,
            resume=resume,
            idempotency_key=key,
            priority=entry.priority if priority is None else priority,
            source_position=source_position,
            slot=slot,
            missed=missed,
            by=by,
        )
        await self.journal.record([event], by=by)
        if key is not None and self.ledger.keys.get((entry.id, key)) != event.trigger_id:
            return self.ledger.triggers[self.ledger.keys[(entry.id, key)]].accepted
        self.dispatcher.enqueue(self.ledger.triggers[event.trigger_id])
        return event

    async def listen_from(self, entry_id: str, position: int | None, slot: float | None) -> None:
        await self.journal.record(
            [TriggerListening(entry_point=entry_id, position=position, slot=slot)]
        )

    async def trigger_and_wait(
        self, entry_point_id: str, input: Any = None, *, timeout: float | None = None, **kw: Any
    ) -> dict[str, Any]:
        """`trigger`, then `wait` for that run."""
        thread = await self.trigger(entry_point_id, input, **kw)
        return await self.wait(thread, timeout=timeout)

    async def wait(self, thread_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Wait for the thread's latest triggered run to end, and return its result.

        A failed run raises its error (after its retries); a cancelled one
        `RunCancelledError`; `TimeoutError` after `timeout` seconds (the run goes on).
        """
        state = self.ledger.latest_on(thread_id)
        if state is None:
            raise UnknownRunError(f"no run of this runtime is on thread {thread_id!r}")
        return await self.wait_for(state.id, timeout)

    async def wait_for(self, trigger_id: str, timeout: float | None = None) -> dict[str, Any]:
        """`wait` for one triggered run, by its trigger id."""
        state = self.ledger.triggers.get(trigger_id)
        if state is None:
            raise UnknownRunError(f"no run {trigger_id!r} in this runtime")
        async with asyncio.timeout(timeout):
            while not state.done:
                if not self.started or self.stopping:
                    raise RuntimeNotStartedError(
                        f"the runtime stopped before run {trigger_id!r} ended; the next runtime "
                        "on this store carries it on"
                    )
                await self.dispatcher.changed(state.id)
        return await self.result_of(state)

    async def result_of(self, state: TriggerState) -> dict[str, Any]:
        """What `wait` returns for a done trigger, or the error it raises."""
        thread = state.accepted.thread_id
        if state.outcome == "cancelled":
            raise RunCancelledError(
                f"the run on thread {thread!r} was cancelled by {state.by or 'someone'}"
                + (f": {state.message}" if state.message else "")
            )
        if state.outcome == "failed":
            error = self.dispatcher.errors.get(state.id)
            if error is not None:
                raise error
            raise RuntimeRunFailedError(
                f"the run on thread {thread!r} failed after {state.attempt} attempt(s): "
                f"{state.error_type}: {state.message}",
                error_type=state.error_type or "",
            )
        kept = self.dispatcher.results.get(state.id)
        if kept is not None:
            return kept
        app = self.graphs[state.accepted.graph_id].app
        current = await app.aget_state({"thread_id": thread})
        return {
            "thread_id": thread,
            "status": current.execution_meta.status.value,
            "state": current,
        }

    # ---- steering ---------------------------------------------------------------------

    async def inject_input(self, thread_id: str, value: Any, *, actor: str = "user") -> None:
        """Answer the interrupt a run on `thread_id` is paused at with `value`, and resume it.

        Refused (`RunNotWaitingError`, nothing written) unless the run waits for input.
        """
        self._check_started()
        async with self._thread_lock(thread_id):  # two answers never both pass the check
            await self._inject(thread_id, value, actor)

    async def _inject(self, thread_id: str, value: Any, actor: str) -> None:
        state = self.ledger.latest_on(thread_id)
        if state is None:
            raise UnknownRunError(f"no run of this runtime is on thread {thread_id!r}")
        if not state.done or self.dispatcher.queued_on(thread_id):
            where = "queued" if not state.dispatched else "running"
            raise RunNotWaitingError(
                f"the run on thread {thread_id!r} is {where}: input goes to a run paused at an "
                "interrupt"
            )
        app = self.graphs[state.accepted.graph_id].app
        current = await app.aget_state({"thread_id": thread_id})
        if not current.execution_meta.is_interrupted():
            raise RunNotWaitingError(
                f"the run on thread {thread_id!r} is {current.execution_meta.status.value}, not "
                "paused at an interrupt: send new input with trigger() instead"
            )
        entry = self.entry_points.get(state.accepted.entry_point) or self._any_entry(
            state.accepted.graph_id
        )
        await self.accept(
            entry, to_builtins(value), cause="input", thread_id=thread_id, resume=True, by=actor
        )

    @contextlib.asynccontextmanager
    async def _thread_lock(self, thread_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(thread_id, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._locks.get(thread_id) is lock:
                del self._locks[thread_id]

    def _any_entry(self, graph_id: str) -> EntryPoint:
        for entry_id in self.graphs[graph_id].entry_points:
            return self.entry_points[entry_id]
        raise UnknownEntryPointError(f"graph {graph_id!r} has no entry point left")

    async def cancel(
        self, thread_id: str, *, actor: str = "user", reason: str | None = None
    ) -> None:
        """End the thread's run at once, recording who and why; it is not retried.

        A queued run never starts; a running one is cut short (a `def` node still running
        finishes on its worker thread, its result discarded); a paused or failed one ends.
        """
        self._check_started()
        state = self.ledger.latest_on(thread_id)
        if state is None:
            raise UnknownRunError(f"no run of this runtime is on thread {thread_id!r}")
        await self.dispatcher.cancel(thread_id, actor, reason)

    # ---- watching ----------------------------------------------------------------------

    async def subscribe(
        self,
        kinds: Collection[str] | None = None,
        graph_id: str | None = None,
        thread_id: str | None = None,
        node: str | None = None,
        after: int | None = None,
    ) -> AsyncIterator[EventRecord]:
        """Committed records in log order, live, from after position `after` (default: now).

        A slow subscriber reads behind from the log: it never makes memory grow or slows
        the writers. `graph_id` keeps the threads of that graph (and the runtime's own
        records about it).
        """
        if graph_id is not None and graph_id not in self.graphs:
            raise RegistrationError(f"no graph {graph_id!r} is registered")
        start = await _head(self.store) if after is None else after
        me = Subscriber(start)
        self.subscribers.append(me)
        try:
            async for record in follow(
                self.store, after=start, kinds=kinds, thread_id=thread_id, node=node
            ):
                me.position = record.position
                if graph_id is None or await self.graph_of(record) == graph_id:
                    yield record
        finally:
            self.subscribers.remove(me)

    async def graph_of(self, record: EventRecord) -> str | None:
        """The graph id of the thread a record belongs to (None: not known)."""
        if record.thread_id == self.config.runtime_thread:
            return getattr(record.event, "graph_id", None)
        return await self.listeners.graph_of_thread(record.thread_id)

    def pause_timers(self) -> None:
        """Timers stop firing (slots due meanwhile fire once on `resume_timers`)."""
        self.listeners.timers_paused = True

    def resume_timers(self) -> None:
        self.listeners.timers_paused = False
        self.listeners.poke()

    def next_fire(self, entry_point_id: str) -> float | None:
        """When the timer entry point fires next (epoch seconds), None while paused."""
        entry = self._entry(entry_point_id)
        if entry.trigger != "timer":
            raise RegistrationError(f"entry point {entry_point_id!r} is not a timer")
        if self.listeners.timers_paused:
            return None
        return self.listeners.next_fire(entry_point_id)

    def stats(self) -> dict[str, Any]:
        """Runs by graph and entry point, events appended, commit latency, queues, lag."""
        by_graph: dict[str, Counts] = {g: Counts() for g in self.graphs}
        by_entry: dict[str, Counts] = {e: Counts() for e in self.entry_points}
        running = self.dispatcher.running_ids()
        for state in self.ledger.triggers.values():
            for counts in (
                by_graph.setdefault(state.accepted.graph_id, Counts()),
                by_entry.setdefault(state.accepted.entry_point, Counts()),
            ):
                _count(counts, state, running)
        latencies = sorted(self.journal.latencies)
        head = self.listeners.head
        return {
            "graphs": {g: vars(c) for g, c in by_graph.items()},
            "entry_points": {e: vars(c) for e, c in by_entry.items()},
            "executing": len(self.dispatcher.executing),
            "queued": self.dispatcher.depth(),
            "queue_depth": self.dispatcher.depths(),
            "events_appended": max(head - self._head_at_start, 0),
            "runtime_records": self.journal.appended,
            "commit_latency_ms": {
                "p50": _pct(latencies, 0.50),
                "p99": _pct(latencies, 0.99),
            },
            "subscriber_lag": [max(head - s.position, 0) for s in self.subscribers],
        }


def _recordable(input: Any, resume: bool) -> Any:
    """The input as the builtins the trigger records; refused (typed, nothing written) when
    it is no input a run takes or cannot be recorded."""
    from ..steps import checked_input

    if not resume:
        checked_input(input)
    try:
        return to_builtins(input)
    except (TypeError, ValueError) as exc:
        raise InvalidTriggerInputError(
            f"a trigger's input is recorded in the log: {type(input).__name__} cannot be "
            f"({exc}); send text, messages or a dict of plain values"
        ) from exc


def _count(counts: Counts, state: TriggerState, running: set[str]) -> None:
    if state.id in running:
        counts.active += 1
    elif not state.done:
        counts.queued += 1
    elif state.outcome in ("completed", "failed", "interrupted", "cancelled"):
        setattr(counts, state.outcome, getattr(counts, state.outcome) + 1)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(int(q * len(values)), len(values) - 1)] * 1000, 3)


async def _head(store: EventStore) -> int:
    """The position of the last committed record (0 for an empty store)."""
    return await last_position(store)


__all__ = ["AgentRuntime", "Counts", "EntryPoint", "RetryPolicy", "RuntimeConfig"]
