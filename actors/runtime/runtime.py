"""The agent runtime: many runs of many graphs on one log, started by API calls, by events
and by timers, watched and steered while they run.

The log is the event bus: every trigger the runtime accepts, every dispatch and every outcome
is a record of its own thread (`RuntimeConfig.runtime_thread`), written before the caller
hears of it. A runtime started on the same store folds that thread and carries on: queued
triggers run, runs cut short resume from their log, no event or timer slot fires twice."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Self

from agentlog.actors.engine.command import Command
from agentlog.actors.engine.errors import NothingToResumeError, UnreadResumeValueError
from agentlog.actors.engine.results import ResponseGranularity, run_result
from agentlog.actors.runtime.asked import Contexts, recorded
from agentlog.actors.runtime.dispatch import Dispatcher
from agentlog.actors.runtime.facts import Facts
from agentlog.actors.runtime.goals import Goal
from agentlog.actors.runtime.graphs import Graphs
from agentlog.actors.runtime.inputs import (
    check_request,
    check_trigger_subject,
    recordable_input,
    with_session_state,
)
from agentlog.actors.runtime.journal import RuntimeJournal
from agentlog.actors.runtime.keys import same_request
from agentlog.actors.runtime.ledger import WORKER_PREFIX, Ledger, TriggerState
from agentlog.actors.runtime.listeners import Listeners
from agentlog.actors.runtime.manager import (
    StateManager,
    count_into,
    ended_as_logged,
    percentile,
)
from agentlog.actors.runtime.parts import Parts
from agentlog.actors.runtime.registry import check_against, create_agent_runtime
from agentlog.actors.runtime.resources import Resources, record_names
from agentlog.actors.runtime.spec import (
    MULTITASK_STRATEGIES,
    EntryPoint,
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
    check_position,
    check_timeout,
)
from agentlog.actors.runtime.timers import Schedule
from agentlog.actors.runtime.tracing import caller_traceparent
from agentlog.actors.runtime.watching import Handler, Subscriber, Watching, _deliver
from agentlog.actors.runtime.workers import Follower
from agentlog.events import EventRecord, EventStore
from agentlog.events.errors import InvalidAppendError, StoreError, ThreadBusyError
from agentlog.events.follow import last_position
from agentlog.events.kinds import (
    Event,
    MessageAppended,
    TriggerAccepted,
    TriggerDispatched,
    TriggerFinished,
)
from agentlog.events.store import check_thread_id
from agentlog.projections import ExecutionStatus, IllegalTransitionError, StopRequestStatus
from agentlog.projections.edge import to_builtins
from agentlog.projections.fold import before_first_run

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph

_log = logging.getLogger(__name__)


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


class AgentRuntime(Watching, Graphs):
    """Runs graphs on one store: `add_graph`, `register_entry_point`, then
    `async with runtime:` (or `await start()` / `await stop()`)."""

    def __init__(
        self,
        store: EventStore,
        config: RuntimeConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        goal: Goal | None = None,
        resources: Resources | None = None,
    ) -> None:
        if not isinstance(store, EventStore):
            raise RegistrationError(
                f"AgentRuntime takes an opened event store (SQLiteEventStore('app.db'), "
                f"open_store(url)), got {type(store).__name__}"
            )
        if config is not None and not isinstance(config, RuntimeConfig):
            raise RegistrationError(
                f"config is a RuntimeConfig(...), got {type(config).__name__}: write "
                "RuntimeConfig(**your_dict)"
            )
        self.store = store
        self.config = config or RuntimeConfig()
        self.clock = clock
        self.goals: dict[str, Goal] = {}
        if goal is not None:
            self.add_goal(goal)
        self.resources = resources or Resources()
        self.facts = Facts()
        """Shared keys and goal outcomes, folded from the log (`catch_up`)."""
        self.active_thread: str | None = None
        """The user's active thread (hive's primary session): the thread of the latest
        run a person started (an API call, a webhook, an answer), unless set by hand."""
        self._last_user_input: float | None = None
        self._handlers: dict[str, asyncio.Task[None]] = {}
        self._pending_handlers: dict[
            str, tuple[Callable[[int], AsyncIterator[EventRecord]], Handler]
        ] = {}
        """Handler subscriptions made before `start`: each feed begins at the log's head
        as `start` finds it, before anything is resumed, so none of the runtime's own
        records is missed."""
        self.ledger = Ledger(keep=self.config.keep_results, ttl_s=self.config.keep_results_ttl_s)
        self.journal = RuntimeJournal(store, self.config.runtime_thread, self.ledger)
        self.contexts = Contexts()  # what requests asked of their runs (`asked`)
        self.graphs: dict[str, _Graph] = {}
        self.entries: dict[str, EntryPoint] = {}
        self.schedules: dict[str, Schedule] = {}
        self.dispatcher = Dispatcher(self)
        self.listeners = Listeners(self)
        self.follower = Follower(self)
        self.parts = Parts()
        self.subscribers: list[Subscriber] = []
        self.started = self.stopping = False
        self._starting = asyncio.Lock()
        self._head_at_start = 0
        self._accepting: dict[tuple[str, str | None, str], asyncio.Future[None]] = {}
        self._recording_on: collections.Counter[str] = collections.Counter()
        self._locks: dict[str, asyncio.Lock] = {}
        self._lock_users: collections.Counter[str] = collections.Counter()

    # ---- graphs and entry points ---------------------------------------------------------

    def add_graph(self, graph_id: str, app: CompiledGraph[Any]) -> None:
        """Register a compiled graph under `graph_id`; it must be compiled on this store."""
        from agentlog.actors.engine.compiled import CompiledGraph

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
        """Unregister a graph and its entry points; refused while its runs execute or wait
        in the queue (they would wait for the graph to come back)."""
        graph = self._graph(graph_id)
        busy = [e for e in self.dispatcher.executing.values() if e.graph_id == graph_id]
        queued = [t for t in self.dispatcher.queue if t.accepted.graph_id == graph_id]
        if busy or queued:
            raise RegistrationError(
                f"graph {graph_id!r} has {len(busy)} run(s) executing and {len(queued)} "
                "queued: cancel or wait for them before removing it"
            )
        for entry_id in list(graph.entry_points):
            self.entries.pop(entry_id, None)
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
        if entry.id in self.entries:
            raise RegistrationError(f"entry point {entry.id!r} is registered already")
        graph = self._graph(entry.graph_id, f"entry point {entry.id!r}")
        check_against(self, entry, graph.app)
        zone = self.config.zone
        schedule = Schedule.of(entry, self.clock(), zone) if entry.trigger == "timer" else None
        if self.started and entry.trigger == "webhook":
            raise RegistrationError(
                f"entry point {entry.id!r}: a webhook is registered before the runtime starts "
                "(the HTTP app serves the routes it finds when it is created)"
            )
        self.entries[entry.id] = entry
        graph.entry_points.add(entry.id)
        if schedule is not None:
            self.schedules[entry.id] = schedule
        if self.started:  # an event or timer entry point begins from now
            self.listeners.adopt(entry)

    def unregister_entry_point(self, entry_id: str) -> bool:
        """Remove an entry point and return True (hive's `if runtime.unregister_entry_point(...)`
        holds); refused while its runs execute or are queued, and an unknown id raises
        `UnknownEntryPointError` naming the registered ones (hive returned False)."""
        entry = self._entry(entry_id)
        if any(e.entry_point == entry_id for e in self.dispatcher.executing.values()) or any(
            t.accepted.entry_point == entry_id for t in self.dispatcher.queue
        ):
            raise RegistrationError(
                f"entry point {entry_id!r} has runs executing or queued: cancel or wait for "
                "them first"
            )
        self.graphs[entry.graph_id].entry_points.discard(entry_id)
        del self.entries[entry_id]
        self.schedules.pop(entry_id, None)
        return True

    def entry_points(self) -> list[EntryPoint]:
        """The registered entry points, in registration order (hive: `get_entry_points`)."""
        return list(self.entries.values())

    get_entry_points = entry_points

    def add_goal(self, goal: Goal) -> None:
        """Measure runs against `goal` (see `goal_progress`); refused when malformed."""
        if not isinstance(goal, Goal):
            raise RegistrationError(f"add_goal takes a Goal, got {goal!r}")
        goal.check()
        if goal.id in self.goals:
            raise RegistrationError(f"goal {goal.id!r} is added already")
        self.goals[goal.id] = goal

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
        entry = self.entries.get(entry_id)
        if entry is None:
            known = ", ".join(self.entries) or "none"
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
        async with self._starting:  # a second call while one starts waits for it
            if not self.started:
                await self._start()

    async def _start(self) -> None:
        if self.config.worker_id is None:
            try:
                self.journal.claim = await self.store.claim(
                    self.config.runtime_thread, purpose="an agent runtime"
                )
            except ThreadBusyError as exc:
                raise ThreadBusyError(
                    f"another runtime runs on this store ({exc}): one runtime per store, or "
                    "run each as a worker (RuntimeConfig(worker_id=...), `agentlog worker`)"
                ) from exc
        else:
            holder = await self.store.holder(self.config.runtime_thread)
            if holder is not None and holder.alive(time.time()):
                raise ThreadBusyError(
                    "a lone runtime (no worker_id) runs on this store: workers share a store "
                    "only with other workers"
                )
            self.journal.on_applied = self.follower.seen
            self.journal.writer = f"{WORKER_PREFIX}{self.config.worker_id}"
        await self.journal.catch_up()
        await record_names(self.resources, self.journal, lone=self.config.worker_id is None)
        self._head_at_start = await last_position(self.store)
        self.started, self.stopping = True, False
        for subscription, (feed, handler) in self._pending_handlers.items():
            deliver = _deliver(feed(self._head_at_start), handler)
            self._handlers[subscription] = asyncio.ensure_future(deliver)
        self._pending_handlers.clear()
        await self.listeners.start()
        await self.dispatcher.recover()
        self.dispatcher.start()
        if self.config.worker_id is not None:
            self.follower.start()
        await self.parts.start()

    async def attach(self, part: contextlib.AbstractAsyncContextManager[Any]) -> None:
        """Run `part` (a `Relay`, `otel.follow(...)`) while the runtime runs (see `Parts`)."""
        await self.parts.attach(part, running=self.started)

    async def stop(self, cancel: bool = False) -> None:
        """Stop: running steps commit, then runs pause (stopped, resumed by the next runtime
        on this store); with `cancel`, runs are abandoned at once instead. Nothing accepted
        is lost either way."""
        if not self.started:
            return
        self.stopping = True
        for task in self._handlers.values():
            task.cancel()
        await asyncio.gather(*self._handlers.values(), return_exceptions=True)
        self._handlers.clear()
        await self.follower.stop()
        await self.listeners.stop()
        await self.dispatcher.stop(abandon=cancel)
        await self.journal.drain()
        await self.parts.stop()
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

    @property
    def is_running(self) -> bool:
        """Started and not stopping."""
        return self.started and not self.stopping

    @property
    def user_idle_seconds(self) -> float:
        """Seconds since a person last started or answered a run here (inf: never)."""
        if self._last_user_input is None:
            return float("inf")
        return max(self.clock() - self._last_user_input, 0.0)

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
        correlation_id: str | None = None,
        session_state: Mapping[str, Any] | None = None,
        subject: str | None = None,
    ) -> str:
        """Accept a run of the entry point's graph and return its thread id at once.

        `cause` says what the log records as the trigger's cause (a webhook delivery is one);
        hive's `session_state` names the thread (`resume_session_id`) and fields (`memory`).
        The acceptance is recorded first; a key seen before returns the first run's thread
        and starts nothing (across restarts too). `subject`: the data subject whose personal
        data the input is; sealed under its key here and in the run's thread (erasable)."""
        input, thread_id = with_session_state(session_state, input, thread_id)
        accepted = await self.submit(
            entry_point_id, input, thread_id=thread_id, idempotency_key=idempotency_key,
            priority=priority, actor=actor, cause=cause, multitask_strategy=multitask_strategy,
            correlation_id=correlation_id, subject=subject,
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
        correlation_id: str | None = None,
        subject: str | None = None,
        due_at: float | None = None,
        webhook: str | None = None,
    ) -> TriggerAccepted:
        """`trigger`, returning the accepted trigger itself (its id names the run); `due_at`:
        dispatched no earlier (epoch seconds), `webhook`: recorded where its result goes.

        New input for a thread whose run is still going follows `multitask_strategy` (else
        the entry point's): "reject" raises `ThreadBusyRunError` writing nothing, "enqueue"
        waits, "interrupt" stops the running run and then continues with this input."""
        self._check_started()
        entry = self._entry(entry_point_id)
        asked = input
        if idempotency_key is not None:
            if not isinstance(idempotency_key, str) or not idempotency_key:
                raise RegistrationError(
                    f"idempotency_key must be a non-empty string, got {idempotency_key!r}"
                )
            seen = self.ledger.keys.get((entry.id, actor, idempotency_key))
            if seen is not None:
                return same_request(
                    self.ledger.requests, self.ledger.accepted_of(seen), thread_id, asked
                )
        check_request(self.config, thread_id, priority, correlation_id)
        if subject is not None:
            await check_trigger_subject(self.store, subject, thread_id)
        if thread_id is not None:
            try:
                check_thread_id(thread_id)  # what the run's first append would refuse
            except InvalidAppendError as exc:
                raise RegistrationError(str(exc)) from None
            await self._check_thread_graph(thread_id, entry)
        resume = isinstance(input, Command)
        if resume:
            if input.goto is not None or input.update is not None:
                raise RegistrationError(
                    "trigger takes Command(resume=...) to answer an interrupt; update and goto "
                    "are for nodes to return"
                )
            await self._check_waiting(thread_id, entry, input.resume)
            input = input.resume
        elif input is None and (thread_id is None or await self.store.last_seq(thread_id) == 0):
            raise RegistrationError(
                f"a run of entry point {entry.id!r} on a new thread needs input to start from "
                "(a message, or a dict of fields); None only goes on with an existing thread"
            )
        elif input is None and thread_id is not None:
            await self._check_resumable(thread_id, entry)
        strategy = multitask_strategy or entry.multitask_strategy
        if strategy not in MULTITASK_STRATEGIES:
            raise RegistrationError(
                f"multitask_strategy is one of {', '.join(MULTITASK_STRATEGIES)}, got {strategy!r}"
            )
        graph = self.graphs.get(entry.graph_id)
        recordable = recordable_input(
            entry, input, resume, graph.app.graph.state_cls if graph else None
        )
        self._check_started()  # again: the runtime may have stopped during the reads above
        busy = thread_id is not None and self._busy(thread_id)
        if busy and strategy == "reject":
            raise ThreadBusyRunError(
                f"thread {thread_id!r} has a run still going: its input is refused "
                "(multitask_strategy='reject'); wait for it, or send with 'enqueue'"
            )
        if busy and resume and strategy == "interrupt" and input is not None:
            raise UnreadResumeValueError(
                f"thread {thread_id!r} has a run still going: multitask_strategy='interrupt' "
                "would stop it where no node asked for a value, so the resume value "
                f"{input!r:.80} would be read by nothing; nothing was written. To answer the "
                "node the run pauses in, send it with multitask_strategy='enqueue'"
            )
        accepted = await self.accept(
            entry,
            recordable,
            cause=cause if cause in ("api", "webhook") else "api",
            resume=resume,
            thread_id=thread_id,
            key=idempotency_key,
            priority=priority,
            by=actor,
            correlation_id=correlation_id,
            subject=subject,
            due_at=due_at,
            webhook=webhook,
        )
        if idempotency_key is not None:  # a concurrent call with the key may have come first
            accepted = same_request(self.ledger.requests, accepted, thread_id, asked)
        self._last_user_input = self.clock()
        self.active_thread = accepted.thread_id
        if busy and strategy == "interrupt" and thread_id is not None:
            await self._interrupt(thread_id, entry, actor)
        elif busy and strategy == "rollback" and thread_id is not None:
            why = f"rolled back: superseded by run {accepted.trigger_id}"
            async with self._thread_lock(thread_id):  # one end: never beside a cancel
                running = self.dispatcher.executing.get(thread_id)
                await self.dispatcher.supersede(thread_id, actor, why, keep=accepted.trigger_id)
                if running is not None:
                    await self._settle_rollback(running.state)
        return accepted

    async def _settle_rollback(self, state: TriggerState) -> None:
        """A run that completed just before its rollback landed keeps its completion: the
        rollback wrote nothing on the thread, so the trigger's recorded end is set right
        (completed, not cancelled), and a restart has no rollback left to finish."""
        from agentlog.actors.runtime.rollback import outran

        to_seq = state.rolled_back_to
        if state.outcome != "cancelled" or to_seq is None:
            return
        if await outran(self.store, state.accepted.thread_id, to_seq):
            await self.journal.record(
                [
                    TriggerFinished(
                        trigger_id=state.id,
                        outcome="completed",
                        attempt=state.attempt,
                        message="it completed before the rollback reached it",
                        by=state.by,
                    )
                ],
                by=state.by,
            )

    async def _interrupt(self, thread_id: str, entry: EntryPoint, actor: str) -> None:
        """Stop the thread's running run (a stop: the running node finishes and commits)
        so the input queued behind it continues the thread with the progress kept."""
        if thread_id not in self.dispatcher.executing:
            return
        app = self.graphs[entry.graph_id].app
        # nothing to stop (the run ended or has not begun) is no error of the new input's
        with contextlib.suppress(StoreError, IllegalTransitionError):
            await app.astop({"thread_id": thread_id, "user": actor}, between_nodes=True)

    def _busy(self, thread_id: str) -> bool:
        """Whether a run of the thread is going, queued, waiting to be retried, or having its
        acceptance recorded (it runs first: new input meanwhile is double-texting too)."""
        return (
            self._recording_on[thread_id] > 0
            or self.dispatcher.unfinished_on(thread_id)  # queued, running, retrying
            or thread_id in self.dispatcher.executing  # a cancelled run winding down
        )

    async def _check_waiting(self, thread_id: str | None, entry: EntryPoint, value: Any) -> None:
        """A resume goes to a paused or failed run (or queues behind the thread's run), and
        a value only to a node that asked for one (`UnreadResumeValueError` otherwise)."""
        if thread_id is None:
            raise RegistrationError("Command(resume=...) answers a paused run: name its thread_id")
        if self._busy(thread_id):
            return  # where the run will stand is not known yet: the run itself checks
        app = self.graphs[entry.graph_id].app
        state = await app.aget_state({"thread_id": thread_id})
        meta = state.execution_meta
        stopped = meta.stop_current_execution == StopRequestStatus.STOPPED
        if not (meta.is_interrupted() or stopped or meta.status == ExecutionStatus.ERROR):
            raise RunNotWaitingError(
                f"the run on thread {thread_id!r} is {meta.status.value}: a resume answers a "
                "paused or failed run; send new input instead"
            )
        app.check_resume_value(thread_id, state, value)

    async def _check_resumable(self, thread_id: str, entry: EntryPoint) -> None:
        """No input goes on with the thread's run: refused when that run was cancelled (it
        would fail on every attempt), unless a run of the thread is still going."""
        if self._busy(thread_id) or entry.graph_id not in self.graphs:
            return
        app = self.graphs[entry.graph_id].app
        meta = (await app.aget_state({"thread_id": thread_id})).execution_meta
        if before_first_run(meta):
            raise NothingToResumeError(
                f"thread {thread_id!r} was created and has not run yet: there is nothing to "
                "go on with; send input to start its first run"
            )
        if meta.status == ExecutionStatus.CANCELLED:
            cancelled = meta.internal_data.get("cancelled") or {}
            raise NothingToResumeError(
                f"the run on thread {thread_id!r} was cancelled by "
                f"{cancelled.get('by') or 'someone'}: there is nothing to go on with; send "
                "new input to start a new run"
            )

    async def _check_thread_graph(self, thread_id: str, entry: EntryPoint) -> None:
        """An existing thread takes runs of its own graph only."""
        graph = self.ledger.graph_of.get(thread_id)
        if graph is None and await self.store.last_seq(thread_id) > 0:
            graph = await self.listeners.graph_of_thread(thread_id)
            if graph is None and await self.store.last_seq(thread_id) > 1:  # 1: made, no graph
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
        correlation_id: str | None = None,
        subject: str | None = None,
        due_at: float | None = None,
        webhook: str | None = None,
    ) -> TriggerAccepted:
        """Record a trigger and queue it (the one way every cause starts a run).

        A key being accepted by a concurrent call is waited for: both get its first trigger."""
        release: Callable[[], None] | None = None
        if key is not None:
            pair = (entry.id, by, key)
            while pair in self._accepting:
                await asyncio.shield(self._accepting[pair])
            seen = self.ledger.keys.get(pair)
            if seen is not None:
                return self.ledger.accepted_of(seen)
            settled = self._accepting[pair] = asyncio.get_running_loop().create_future()

            def release() -> None:
                if self._accepting.get(pair) is settled:
                    del self._accepting[pair]
                    settled.set_result(None)

        return await self._accept(
            entry, input, cause=cause, thread_id=thread_id, key=key, priority=priority,
            resume=resume, by=by, source_position=source_position, slot=slot, missed=missed,
            correlation_id=correlation_id, settled=release, subject=subject, due_at=due_at,
            webhook=webhook,
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
        correlation_id: str | None = None,
        settled: Callable[[], None] | None = None,
        subject: str | None = None,
        due_at: float | None = None,
        webhook: str | None = None,
    ) -> TriggerAccepted:
        """Record the acceptance; `settled` is called once it has committed or failed.

        What marks the acceptance as in flight (the thread's count, the key's slot) ends
        with the commit, not with this call: a caller cancelled meanwhile (a client that
        hung up) must not let a second input or a second use of its key slip in."""
        trigger_id = uuid.uuid4().hex
        thread = thread_id or f"{entry.graph_id}-{trigger_id}"
        try:
            event = TriggerAccepted(
                trigger_id=trigger_id,
                entry_point=entry.id,
                graph_id=entry.graph_id,
                thread_id=thread,
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
                correlation_id=correlation_id,
                traceparent=caller_traceparent(),
                subject=subject,
                due_at=due_at,
                webhook=webhook,
                **recorded(),
            )
        except BaseException:
            if settled is not None:
                settled()
            raise
        events: list[Event] = [event]
        self.contexts.keep(trigger_id)
        fresh = thread_id is None and due_at is None  # one due later waits in the queue
        start_now = self.dispatcher.reserve(entry, thread, new_thread=fresh)
        if start_now:  # nothing awaited from here to the record: the log keeps arrival order
            events.append(TriggerDispatched(trigger_id=trigger_id, attempt=1, thread_seq=0))
        accepted = partial(self.dispatcher.accepted, trigger_id, thread if start_now else None)

        def then(records: list[EventRecord] | None) -> None:
            self._recording_on[thread] -= 1
            if not self._recording_on[thread]:
                del self._recording_on[thread]
            if settled is not None:
                settled()
            accepted(records)

        writers = [by] + [None] * (len(events) - 1)  # a dispatch is the runtime's own act
        self._recording_on[thread] += 1
        # the journal calls `then` once the records commit or fail, whoever still waits
        await self.journal.record(events, by=writers, then=then)
        if key is not None and self.ledger.keys.get((entry.id, by, key)) != event.trigger_id:
            return self.ledger.accepted_of(self.ledger.keys[(entry.id, by, key)])
        return event

    async def trigger_and_wait(
        self, entry_point_id: str, input: Any = None, *, timeout: float | None = None, **kw: Any
    ) -> dict[str, Any]:
        """`trigger`, then `wait` for that run."""
        thread = await self.trigger(entry_point_id, input, **kw)
        return await self.wait(thread, timeout=timeout)

    async def wait(self, thread_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Wait for the thread's latest triggered run to end, and return its result: the
        keys of `ainvoke(..., include_state=True)` and `thread_id`.

        A failed run raises its error (after its retries); a cancelled one
        `RunCancelledError`; `TimeoutError` after `timeout` seconds (the run goes on).
        """
        check_timeout(timeout)
        state = self.ledger.latest_on(thread_id)
        if state is None and self.config.worker_id is not None:
            await self.journal.catch_up()  # another worker may have accepted it just now
            state = self.ledger.latest_on(thread_id)
        if state is None:
            raise UnknownRunError(
                f"no run of this runtime is on thread {thread_id!r} (or it ended before the "
                f"last {self.config.keep_results} ended runs, the ones kept): read the "
                "thread's state from its graph (aget_state)"
            )
        return await self.wait_for(state.id, timeout)

    async def wait_for(self, trigger_id: str, timeout: float | None = None) -> dict[str, Any]:
        """`wait` for one triggered run, by its trigger id."""
        check_timeout(timeout)
        state = self.ledger.triggers.get(trigger_id)
        if state is None and self.config.worker_id is not None:
            await self.journal.catch_up()
            state = self.ledger.triggers.get(trigger_id)
        if state is None:
            raise UnknownRunError(
                f"no run {trigger_id!r} in this runtime (or it ended before the last "
                f"{self.config.keep_results} ended runs, the ones kept)"
            )
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                while not state.done:
                    if not self.started or self.stopping:
                        raise RuntimeNotStartedError(
                            f"the runtime stopped before run {trigger_id!r} ended; the next "
                            "runtime on this store carries it on"
                        )
                    await self.dispatcher.changed(state.id)
        except TimeoutError:
            if not deadline.expired():
                raise
            where = "queued" if not state.dispatched else "running"
            raise TimeoutError(
                f"the run on thread {state.accepted.thread_id!r} is still {where} after "
                f"{timeout:g} s: it goes on; wait again, or cancel it"
            ) from None
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
        kept = self.dispatcher.results.pop(state.id, None)
        if kept is not None:
            return kept
        # Not kept (an earlier process ran it, nobody waited at its end, or a waiter took
        # it): the same result, rebuilt from the log as the run left the thread.
        app = self.graphs[state.accepted.graph_id].app
        own, end = await self._run_span(state)
        ended = await app.aget_state({"thread_id": thread}, at_seq=end)
        return {"thread_id": thread, **run_result(ended, own, ResponseGranularity.LOW,
                                                 include_state=True)}  # fmt: skip

    async def _run_span(self, state: TriggerState) -> tuple[set[str | int], int | None]:
        """The ids of the messages a trigger's last attempt appended, and the thread seq it
        left the thread at (None: the head).

        The attempt's records lie after its dispatch's `thread_seq` up to the `thread_seq`
        its end recorded. A log written before ends were recorded bounds it by the next
        dispatch of another trigger of the thread, and counts only what runs wrote there.
        """
        thread_id = state.accepted.thread_id
        start = state.thread_seq
        own: set[str | int] = set()
        if start is None:
            return own, state.end_seq
        end = state.end_seq
        if end is None:
            later = [
                seq
                for i in self.ledger.by_thread.get(thread_id, [])
                if i != state.id
                for seq in (self.ledger.triggers[i].first_seq, self.ledger.triggers[i].thread_seq)
                if seq is not None and seq > start
            ]
            end = min(later, default=None)
        async for record in self.store.read(thread_id, start + 1, end):
            if isinstance(record.event, MessageAppended) and record.run_id is not None:
                own.add(record.event.message.get("message_id"))  # type: ignore[arg-type]
        return own, end

    # ---- steering ---------------------------------------------------------------------

    async def inject_input(self, thread_id: str, value: Any, *, actor: str = "user") -> None:
        """Answer the interrupt a run on `thread_id` is paused at with `value`, and resume it.

        A node paused in `interrupt()` receives `value`; at a breakpoint or a stop, where no
        node asked, only None (approve) is taken. Refused (`RunNotWaitingError`, or
        `UnreadResumeValueError` for a value nothing would read; nothing written) otherwise.
        """
        self._check_started()
        async with self._thread_lock(thread_id):  # two answers never both pass the check
            await self._inject(thread_id, value, actor)

    async def _inject(self, thread_id: str, value: Any, actor: str) -> None:
        state = self.ledger.latest_on(thread_id)
        if state is None:
            nodes = {n for g in self.graphs.values() for n in g.app.graph.nodes}
            hint = (
                f": {thread_id!r} is a node; inject_input takes the thread id trigger() "
                "returned (unlike hive's inject_input(node_id, ...), the paused run knows "
                "its node)"
                if thread_id in nodes
                else ""
            )
            raise UnknownRunError(f"no run of this runtime is on thread {thread_id!r}{hint}")
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
        app.check_resume_value(thread_id, current, value)
        entry = self.entries.get(state.accepted.entry_point) or self._any_entry(
            state.accepted.graph_id
        )
        await self.accept(
            entry, to_builtins(value), cause="input", thread_id=thread_id, resume=True, by=actor
        )
        self._last_user_input = self.clock()
        self.active_thread = thread_id

    @contextlib.asynccontextmanager
    async def _thread_lock(self, thread_id: str) -> AsyncIterator[None]:
        """One at a time per thread: answers to a pause, cancels and rollbacks. The lock is
        dropped once nobody holds or awaits it (a waiter just woken counts: it still will)."""
        lock = self._locks.setdefault(thread_id, asyncio.Lock())
        self._lock_users[thread_id] += 1
        try:
            async with lock:
                yield
        finally:
            self._lock_users[thread_id] -= 1
            if not self._lock_users[thread_id]:
                del self._lock_users[thread_id]
                del self._locks[thread_id]

    def _any_entry(self, graph_id: str) -> EntryPoint:
        for entry_id in self.graphs[graph_id].entry_points:
            return self.entries[entry_id]
        raise UnknownEntryPointError(f"graph {graph_id!r} has no entry point left")

    async def cancel(
        self, thread_id: str, *, actor: str = "user", reason: str | None = None
    ) -> None:
        """End the thread's run at once, recording who and why; it is not retried.

        A queued run never starts; a running one is cut short (a `def` node still running
        finishes on its worker thread, its result discarded); a paused or failed one ends.
        """
        self._check_started()
        if not isinstance(actor, str) or not actor:
            raise RegistrationError(f"actor names who cancels, a non-empty string; got {actor!r}")
        if reason is not None and not isinstance(reason, str):
            raise RegistrationError(f"reason is text (or None), got {reason!r}")
        state = self.ledger.latest_on(thread_id)
        if state is None:
            raise UnknownRunError(f"no run of this runtime is on thread {thread_id!r}")
        # one at a time per thread: a second cancel (or a rollback) sees the first one's end
        async with self._thread_lock(thread_id):
            await self.dispatcher.cancel(thread_id, actor, reason)

    # ---- shared state and goals ---------------------------------------------------------

    @property
    def state_manager(self) -> StateManager:
        """hive's `state_manager`: the shared keys and their `get_stats()`."""
        return StateManager(self)

    def shared_key(self, graph_id: str, key: str) -> str:
        """A shared key's name in the log: `graph/key`, or `*/key` when declared global."""
        return f"*/{key}" if key in self.config.global_keys else f"{graph_id}/{key}"

    async def catch_up(self) -> None:
        """Fold every shared write and outcome committed so far into `facts`."""
        await self.facts.catch_up(self.store)

    async def shared_values(
        self, graph_id: str | None = None, *, at_position: int | None = None
    ) -> dict[str, Any]:
        """The shared keys' values (all, or one graph's and the global ones), now or as of
        a past position of the log."""
        if graph_id is not None:
            self._graph(graph_id)
        check_position(at_position)
        if at_position is None:
            await self.catch_up()
            values = dict(self.facts.values)
        else:
            values = (await Facts.as_of(self.store, at_position)).values
        if graph_id is None:
            return values
        prefixes = (f"{graph_id}/", "*/")
        return {k.split("/", 1)[1]: v for k, v in values.items() if k.startswith(prefixes)}

    async def goal_progress(
        self, goal_id: str | None = None, *, at_position: int | None = None
    ) -> dict[str, Any]:
        """Progress towards a goal (the only one when there is one) from the outcomes in
        the log: overall, per criterion, constraint violations and metrics; now or as of
        a past position (hive: `get_goal_progress`)."""
        from agentlog.actors.runtime.goals import progress

        if not self.goals:
            raise RegistrationError("no goal is added: AgentRuntime(..., goal=Goal(...))")
        check_position(at_position)
        if goal_id is None:
            if len(self.goals) > 1:
                raise RegistrationError(
                    f"goal_progress: name one of the goals ({', '.join(self.goals)})"
                )
            goal_id = next(iter(self.goals))
        goal = self.goals.get(goal_id)
        if goal is None:
            raise RegistrationError(f"no goal {goal_id!r} (goals: {', '.join(self.goals)})")
        if at_position is None:
            await self.catch_up()
            return progress(goal, self.facts)
        return progress(goal, await Facts.as_of(self.store, at_position))

    get_goal_progress = goal_progress

    # ---- hive's names ------------------------------------------------------------------

    async def cancel_execution(self, entry_point_id: str, execution_id: str) -> bool:
        """hive's: cancel the run on thread `execution_id`; False when there is none."""
        self._entry(entry_point_id)
        try:
            await self.cancel(execution_id, actor="api")
        except UnknownRunError:
            return False
        return True

    def get_execution_result(self, entry_point_id: str, execution_id: str) -> dict[str, Any] | None:
        """hive's `get_execution_result`: how the run on thread `execution_id` ended, None
        while it has not (or no run is there). A run this process finished gives what `wait`
        returned (with its state); any other ended run, a failed or cancelled one, or one
        finished before a restart, gives its end as the log records it:
        `{"thread_id", "status", "success", "attempt", "error"}` (read the state with
        `await runtime.wait(thread)` or the graph's `aget_state`)."""
        self._entry(entry_point_id)
        state = self.ledger.latest_on(execution_id)
        if state is None or not state.done:
            return None
        kept = self.dispatcher.results.get(state.id)
        return {**kept, "success": True} if kept is not None else ended_as_logged(state)

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
        by_entry: dict[str, Counts] = {e: Counts() for e in self.entries}
        running = self.dispatcher.running_ids()
        for state in self.ledger.triggers.values():
            for counts in (
                by_graph.setdefault(state.accepted.graph_id, Counts()),
                by_entry.setdefault(state.accepted.entry_point, Counts()),
            ):
                count_into(counts, state, running)
        for (graph_id, entry_id, outcome), count in self.ledger.forgotten.items():
            for counts in (
                by_graph.setdefault(graph_id, Counts()),
                by_entry.setdefault(entry_id, Counts()),
            ):
                if outcome in ("completed", "failed", "interrupted", "cancelled"):
                    setattr(counts, outcome, getattr(counts, outcome) + count)
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
                "p50": percentile(latencies, 0.50),
                "p99": percentile(latencies, 0.99),
            },
            "subscriber_lag": [max(head - s.position, 0) for s in self.subscribers],
        }

    get_stats = stats


__all__ = [
    "AgentRuntime",
    "Counts",
    "EntryPoint",
    "RetryPolicy",
    "RuntimeConfig",
    "create_agent_runtime",
]
