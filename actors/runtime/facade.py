"""What a front end (the HTTP server) asks of a runtime, as public calls: its graphs and
entry points, a thread's graph, state, history and times, the threads a listing shows, a
thread's creation, deletion and fork, runs (submit, look up, wait, cancel) and the records
a live stream sends, and, for a front that shows a graph as its own program does (the Agent
Server API), a graph's compiled app (`compiled`), records by seq, the runtime's own stores
and a rollback. A front end holds a `RuntimeFacade` and needs nothing else of the runtime:
not its ledger, its dispatcher, its listeners nor its store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

from agentlog.actors.engine.branch import branch_thread
from agentlog.actors.engine.commit import fork_thread
from agentlog.actors.engine.longterm import LogStore
from agentlog.actors.engine.threads import STORE_THREAD, internal_threads
from agentlog.actors.runtime.ledger import TriggerState
from agentlog.actors.runtime.live import LiveParts
from agentlog.actors.runtime.rollback import roll_back
from agentlog.actors.runtime.spec import (
    EntryPoint,
    MultitaskStrategy,
    RegistrationError,
    UnknownRunError,
)
from agentlog.actors.runtime.timers import Schedule
from agentlog.actors.runtime.watching import Handler
from agentlog.events import EventRecord, VerifyReport
from agentlog.events.codec import decode_row
from agentlog.events.cursors import list_cursors
from agentlog.events.errors import StoreClosedError
from agentlog.events.follow import commit_signal, follow, last_position
from agentlog.events.keystore import open_keys
from agentlog.events.kinds import Event, ThreadCreated, ThreadHidden, WebhookSent
from agentlog.projections import AgentState
from agentlog.projections.fold import Fold
from agentlog.projections.forks import went_back_after
from agentlog.projections.keys import CREATED_KEY
from agentlog.projections.timetravel import StepEntry

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph
    from agentlog.actors.runtime.runtime import AgentRuntime

POLL_S = 0.2
"""How often a run's stream looks again when no commit through this store wakes it."""

NEVER = Schedule(interval_s=1e18)
"""The schedule of a timer being removed: its next slot is past any clock's."""

HIDDEN_KEY = "hidden"
"""Where the fold keeps a deleted thread's `thread_hidden` (who, why)."""

__all__ = [
    "RuntimeFacade",
    "StepEntry",
    "TriggerState",
    "created_metadata",
    "hidden",
    "hidden_by",
]


def hidden(state: AgentState) -> bool:
    """Whether the thread was deleted (a `thread_hidden` record)."""
    return bool(state.execution_meta.internal_data.get(HIDDEN_KEY))


def hidden_by(state: AgentState) -> Any:
    """Who deleted the thread (None when no one did, or the record does not say)."""
    mark = state.execution_meta.internal_data.get(HIDDEN_KEY)
    return mark.get("by") if isinstance(mark, dict) else None


def created_metadata(state: AgentState) -> dict[str, Any]:
    """The metadata the thread was created with (its thread_created record), or {}."""
    created = state.execution_meta.internal_data.get(CREATED_KEY)
    metadata = created.get("metadata") if isinstance(created, dict) else None
    return metadata if isinstance(metadata, dict) else {}


class RuntimeFacade:
    """The calls a front end makes on `runtime`."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime

    # ---- the runtime -----------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self.runtime.started

    @property
    def ready(self) -> bool:
        """Running, and not stopping."""
        return self.runtime.started and not self.runtime.stopping

    async def start(self) -> None:
        await self.runtime.start()

    async def stop(self) -> None:
        await self.runtime.stop()

    def clock(self) -> float:
        return self.runtime.clock()

    # ---- graphs, entry points, thread names ---------------------------------------------

    def graph_ids(self) -> list[str]:
        """The registered graphs, in registration order."""
        return list(self.runtime.graphs)

    def has_graph(self, graph_id: str | None) -> bool:
        return graph_id is not None and graph_id in self.runtime.graphs

    def entry(self, entry_id: str) -> EntryPoint | None:
        return self.runtime.entries.get(entry_id)

    def entry_points(self) -> list[EntryPoint]:
        return list(self.runtime.entries.values())

    def webhook_entries(self) -> list[EntryPoint]:
        return [e for e in self.runtime.entries.values() if e.trigger == "webhook"]

    @property
    def runtime_thread(self) -> str:
        """The runtime's own thread (its ledger)."""
        return self.runtime.config.runtime_thread

    def is_internal(self, thread_id: str) -> bool:
        """One of the runtime's own threads (its ledger, its shared state)."""
        return self.runtime.config.is_internal(thread_id)

    # ---- threads ----------------------------------------------------------------------

    async def has_records(self, thread_id: str) -> bool:
        """Whether the thread is in the log (a run accepted for it may not have begun)."""
        return await self.runtime.store.last_seq(thread_id) > 0

    def has_runs(self, thread_id: str) -> bool:
        """Whether a run was accepted for the thread (it may not be in the log yet)."""
        return thread_id in self.runtime.ledger.graph_of

    def accepted_graph(self, thread_id: str) -> str | None:
        """The graph the runs accepted for the thread run, or None when none was."""
        return self.runtime.ledger.graph_of.get(thread_id)

    async def graph_of(self, thread_id: str) -> str | None:
        """The graph a thread runs: its accepted runs', else the one its log names."""
        graph = self.runtime.ledger.graph_of.get(thread_id)
        return graph or await self.runtime.listeners.graph_of_thread(thread_id)

    async def state(
        self, thread_id: str, graph_id: str | None, at_step: int | None = None
    ) -> AgentState:
        """The thread's state, now or right after `at_step`, as the graph reads it (a thread
        that runs no graph yet: as any reads it)."""
        app = self._writer(graph_id)
        if at_step is None:
            state: AgentState = await app.aget_state({"thread_id": thread_id})
        else:
            state = await app.aget_state({"thread_id": thread_id}, at_step=at_step)
        return state

    async def history(self, thread_id: str, graph_id: str) -> list[StepEntry]:
        """One entry per step, oldest first."""
        app = self.runtime.graphs[graph_id].app
        return await app.aget_state_history({"thread_id": thread_id})

    async def thread_times(self, thread_id: str) -> tuple[float | None, float | None]:
        """When the thread's first and latest records were written (None: no record)."""
        store = self.runtime.store
        last = await store.last_seq(thread_id)
        first = [r.at async for r in store.read(thread_id, 1, 1)]
        latest = [r.at async for r in store.read(thread_id, last, last)] if last else []
        return (first[0] if first else None, latest[0] if latest else None)

    async def listed_threads(self) -> list[str]:
        """The threads of the log a listing shows, newest first: not the runtime's own."""
        store = self.runtime.store
        stored = await store.threads()
        own = await internal_threads(store, stored, self.runtime.config.runtime_thread)
        return [t for t in reversed(stored) if t not in own]

    async def create_thread(
        self, thread_id: str, graph_id: str | None, *, by: str, metadata: dict[str, Any]
    ) -> bool:
        """Record the thread's creation (`thread_created`); False, writing nothing, when the
        thread was created (or run) since it was looked at. With no graph, the thread's first
        run names it (a server of several graphs, a client that names none)."""
        existed = False

        def create(fold: Fold[AgentState]) -> list[Event]:
            nonlocal existed
            existed = fold.seq > 0
            if existed:
                return []
            return [ThreadCreated(by=by, graph_id=graph_id, metadata=metadata)]

        await self._writer(graph_id).awrite_claimed(
            thread_id, create, actor=by, what="a thread's creation"
        )
        return not existed

    async def hide_thread(
        self, thread_id: str, graph_id: str | None, *, by: str, reason: str | None
    ) -> None:
        """Record the thread's deletion (`thread_hidden`), unless it is hidden already."""
        await self._writer(graph_id).awrite_claimed(
            thread_id,
            lambda fold: [] if hidden(fold.state) else [ThreadHidden(by=by, reason=reason)],
            actor=by,
            what="a thread deletion",
        )

    def _writer(self, graph_id: str | None) -> Any:
        """The compiled graph that writes a thread's own records (any, for a thread that
        runs no graph yet: they change no value of its state)."""
        return self.runtime.graphs[graph_id or next(iter(self.runtime.graphs))].app

    async def fork_thread(
        self,
        thread_id: str,
        graph_id: str,
        *,
        at_step: int | None,
        new_thread_id: str | None,
        actor: str,
    ) -> str:
        """A new thread from the state at `at_step` (default: now); its id."""
        app = self.runtime.graphs[graph_id].app
        store = self.runtime.store
        return await fork_thread(
            store,
            thread_id,
            at_step=at_step,
            new_thread_id=new_thread_id,
            state_cls=app.graph.state_cls,
            actor=actor,
        )

    # ---- runs -------------------------------------------------------------------------

    def run(self, run_id: str) -> TriggerState | None:
        """The run (trigger) of that id, if the runtime keeps it."""
        return self.runtime.ledger.triggers.get(run_id)

    def run_now(self, run: TriggerState) -> TriggerState:
        """The run as the runtime has it now (`run` itself once no longer kept)."""
        return self.runtime.ledger.triggers.get(run.id, run)

    def runs_on(self, thread_id: str) -> list[TriggerState]:
        """The thread's runs, oldest first."""
        ledger = self.runtime.ledger
        return [ledger.triggers[t] for t in ledger.by_thread.get(thread_id, [])]

    def latest_run_on(self, thread_id: str) -> TriggerState | None:
        return self.runtime.ledger.latest_on(thread_id)

    def is_running(self, run_id: str) -> bool:
        """Whether the run executes now (not queued, not ended)."""
        return run_id in self.runtime.dispatcher.running_ids()

    def runs_holding(self, thread_id: str) -> set[str]:
        """The ids of the thread's run executing now and of those queued behind it."""
        dispatcher = self.runtime.dispatcher
        held = {s.id for s in dispatcher.queued_on(thread_id)}
        running = dispatcher.executing.get(thread_id)
        if running is not None:
            held.add(running.state.id)
        return held

    def knows_key(self, entry_id: str, caller: str, key: str) -> bool:
        """Whether `caller` sent idempotency `key` to the entry point before."""
        return (entry_id, caller, key) in self.runtime.ledger.keys

    async def find_run(self, thread_id: str, run_id: str) -> TriggerState:
        """The run a run id names on the thread: a trigger id (the run ids a server answers
        with), or the run id the thread's records carry (`run-...` in logs written before
        runs were named by their trigger), mapped to the trigger whose dispatch began that
        run. `UnknownRunError` when neither."""
        trigger = self.run(run_id)
        if trigger is None:
            trigger = await self._run_of_log_run(thread_id, run_id)
        if trigger is None or trigger.accepted.thread_id != thread_id:
            raise UnknownRunError(f"no run {run_id!r} on thread {thread_id!r}")
        return trigger

    async def _run_of_log_run(self, thread_id: str, run_id: str) -> TriggerState | None:
        """The trigger that began the log run `run_id` of the thread: the one its first
        record belongs to (`run_at`). Reads the thread up to that record; only an id the
        ledger does not know comes here."""
        if not run_id or not self.runtime.ledger.by_thread.get(thread_id):
            return None
        async for record in self.runtime.store.read(thread_id):
            if record.run_id == run_id:
                trigger_id = self.run_at(thread_id, record.seq)
                return None if trigger_id is None else self.run(trigger_id)
        return None

    async def submit(
        self,
        entry_id: str,
        input: Any,
        *,
        thread_id: str,
        idempotency_key: str | None,
        actor: str,
        multitask_strategy: MultitaskStrategy | None,
        correlation_id: str | None,
        due_at: float | None = None,
        webhook: str | None = None,
    ) -> TriggerState:
        """Accept a run (`AgentRuntime.submit`); the run as the runtime keeps it."""
        accepted = await self.runtime.submit(
            entry_id,
            input,
            thread_id=thread_id,
            idempotency_key=idempotency_key,
            actor=actor,
            multitask_strategy=multitask_strategy,
            correlation_id=correlation_id,
            due_at=due_at,
            webhook=webhook,
        )
        return self.runtime.ledger.triggers[accepted.trigger_id]

    # ---- timers made while the runtime runs (the Agent Server's crons) --------------------

    def add_timer(self, entry: EntryPoint) -> None:
        """Register a timer entry point now: it fires the slots after now (or after the last
        one the log says it fired, when it was registered before)."""
        self.runtime.register_entry_point(entry)

    async def remove_timer(self, entry_id: str) -> None:
        """Unregister a timer entry point: it fires no more from now, and is gone once the
        runs it started (queued or going) end."""
        runtime = self.runtime
        if entry_id not in runtime.entries:
            return
        runtime.schedules[entry_id] = NEVER
        while True:
            try:
                runtime.unregister_entry_point(entry_id)
                return
            except RegistrationError:
                for run in runtime.ledger.pending():
                    if run.accepted.entry_point == entry_id:
                        with contextlib.suppress(Exception):
                            await runtime.wait_for(run.id)

    def next_fire(self, entry_id: str) -> float | None:
        """When a registered timer fires next (None: not registered, or paused)."""
        if entry_id not in self.runtime.entries:
            return None
        return self.runtime.next_fire(entry_id)

    def follow_runtime(self, kinds: list[str], handler: Handler) -> str:
        """Call `handler` with each record of those kinds the runtime writes to its own
        thread from now on; the subscription's id."""
        thread = self.runtime.config.runtime_thread
        return self.runtime.subscribe_to_events(kinds, handler, thread_id=thread)

    def unsubscribe(self, subscription: str) -> None:
        self.runtime.unsubscribe_from_events(subscription)

    # ---- runs' webhooks ------------------------------------------------------------------

    def outbox(self) -> dict[str, str]:
        """Run id -> the webhook its result goes to, for each not yet delivered nor given up
        (the ledger's fold of `trigger_accepted` and `webhook_sent`)."""
        return dict(self.runtime.ledger.outbox)

    def known_run(self, run_id: str) -> TriggerState | None:
        """A run the ledger still keeps (None: unknown, or done long ago and forgotten)."""
        return self.runtime.ledger.triggers.get(run_id)

    async def record_sent(self, sent: WebhookSent) -> None:
        """Record one webhook delivery attempt on the runtime's thread."""
        await self.runtime.journal.record([sent], by=[f"webhook:{sent.run_id}"])

    async def trigger(
        self,
        entry_id: str,
        input: Any,
        *,
        idempotency_key: str,
        actor: str,
        cause: Literal["api", "webhook"],
    ) -> str:
        """Accept a run (`AgentRuntime.trigger`); its thread id."""
        return await self.runtime.trigger(
            entry_id, input, idempotency_key=idempotency_key, actor=actor, cause=cause
        )

    async def wait_for(self, run_id: str, timeout: float) -> dict[str, Any]:
        """The run's result once it ends (`AgentRuntime.wait_for`)."""
        return await self.runtime.wait_for(run_id, timeout=timeout)

    async def cancel(self, thread_id: str, *, actor: str, reason: str | None) -> None:
        """End the thread's runs (`AgentRuntime.cancel`)."""
        await self.runtime.cancel(thread_id, actor=actor, reason=reason)

    # ---- what a front speaking the graphs' own shapes reads ------------------------------

    def live_parts(self) -> LiveParts:
        """What the runs executing here say while they run (`custom`, token deltas), turned
        on for this runtime: a front that streams runs subscribes to them by run."""
        return LiveParts.of(self.runtime)

    def compiled(self, graph_id: str) -> CompiledGraph[Any]:
        """The graph's compiled app: a front that shows a graph as its own program does (the
        Agent Server API) reads its values, drawing, schemas and stream projection there."""
        app: CompiledGraph[Any] = self.runtime.graphs[graph_id].app
        return app

    async def head(self, thread_id: str) -> int:
        """The seq of the thread's last record (0: none)."""
        return await self.runtime.store.last_seq(thread_id)

    async def record_at(self, thread_id: str, seq: int) -> EventRecord | None:
        """The thread's record `seq`, or None."""
        async for record in self.runtime.store.read(thread_id, seq, seq):
            return record
        return None

    async def readers(self) -> list[dict[str, Any]]:
        """The log's durable readers (relays, span followers): each cursor's name, position
        and last save (epoch s), with the log's head and how far behind it the reader is."""
        head = await last_position(self.runtime.store)
        return [
            {"name": c.name, "position": c.position, "updated_at": c.updated_at,
             "head": head, "lag": max(head - c.position, 0)}
            for c in await list_cursors(self.runtime.store)
        ]  # fmt: skip

    async def records(self, thread_id: str, after: int, limit: int) -> list[EventRecord]:
        """The thread's records after seq `after`, at most `limit` of them, oldest first."""
        return [r async for r in self.runtime.store.read(thread_id, after + 1, after + limit)]

    async def verify(self, thread_id: str) -> VerifyReport:
        """The thread's hash chain recomputed: intact, or where it first breaks."""
        return await self.runtime.store.verify(thread_id)

    def own_store(self, name: str | None = None) -> LogStore:
        """A long-term store on the runtime's log: the default one (`__store__`), or, named,
        one of the runtime's own (`__store__/<name>`, never listed as a user's thread)."""
        thread = STORE_THREAD if name is None else f"{STORE_THREAD}/{name}"
        return LogStore(self.runtime.store, thread=thread)

    async def branch_thread(self, thread_id: str, graph_id: str, at_seq: int, *, by: str) -> None:
        """Set the thread back to its record `at_seq`, a record at its head (`branch`)."""
        await branch_thread(self.compiled(graph_id), thread_id, at_seq=at_seq, actor=by)

    async def went_back_after(self, thread_id: str, seq: int) -> bool:
        """Whether the thread went back to a past checkpoint after `seq` (`branch`)."""
        return await went_back_after(self.runtime.store, thread_id, seq)

    async def roll_back(
        self, thread_id: str, graph_id: str, to_seq: int, *, by: str, reason: str | None
    ) -> bool:
        """Supersede the run after `to_seq`, setting the thread back (`rollback.roll_back`)."""
        return await roll_back(self.compiled(graph_id), thread_id, to_seq, by=by, reason=reason)

    # ---- records, as streams send them -----------------------------------------------

    def follow_thread(self, thread_id: str, after: int) -> AsyncIterator[EventRecord]:
        """The thread's records after position `after`, then each one as it commits."""
        return follow(self.runtime.store, after=after, thread_id=thread_id)

    def run_at(self, thread_id: str, seq: int) -> str | None:
        """The run (trigger id) a thread's record at `seq` belongs to: the last one
        dispatched before it, unless that one had ended before it; None for a record of no
        run (the thread's creation, a fork, an edit between runs)."""
        ledger = self.runtime.ledger
        for trigger_id in reversed(ledger.by_thread.get(thread_id, ())):
            trigger = ledger.triggers.get(trigger_id)
            if trigger is None or trigger.first_seq is None or trigger.first_seq >= seq:
                continue
            ended = trigger.done and trigger.end_seq is not None and seq > trigger.end_seq
            return None if ended else trigger.id
        return None

    async def run_records(
        self, trigger: TriggerState, after: int, poll_s: float = POLL_S
    ) -> AsyncIterator[EventRecord]:
        """The records of one run with `position > after`: its thread's records from its
        first dispatch up to its end (an earlier run's records on the thread are not in it,
        even when it was queued behind that run), then its last `trigger_finished`.

        Reads the thread by its index from the run's first seq, so its cost does not grow
        with the rest of the log."""
        store = self.runtime.store
        signal = commit_signal(store)
        thread_id = trigger.accepted.thread_id

        async def wake(seen: int) -> None:
            if signal is None:
                await asyncio.sleep(poll_s)
                return
            await signal.wait(seen, poll_s)
            if signal.closed:
                raise StoreClosedError("the store was closed while a run's stream followed it")

        def now() -> TriggerState:  # as the ledger has it now
            return self.run_now(trigger)

        while now().first_seq is None and not now().done:  # queued: nothing of it yet
            await wake(signal.position if signal is not None else 0)
        seq = (now().first_seq or 0) + 1
        while True:
            seen = signal.position if signal is not None else 0
            trigger = now()
            done = trigger.done  # read first: what it ended after is committed when it is read
            finished = trigger.finished_position if done else None
            if trigger.first_seq is not None:
                last = trigger.end_seq if done else None
                async with contextlib.aclosing(store.read_rows(thread_id, seq, last)) as rows:  # type: ignore[type-var]
                    async for row in rows:
                        if finished is not None and row.position > finished:
                            break  # written after its end: not its own
                        seq = row.seq + 1
                        if row.position > after:
                            yield decode_row(row, await open_keys(store, (row,)))
            if done:
                if finished is not None and finished > after:
                    ledger_thread = self.runtime.config.runtime_thread
                    ends = follow(store, after=finished - 1, thread_id=ledger_thread)
                    async with contextlib.aclosing(ends):
                        record = await anext(ends)  # by the index: the ledger's record there
                    if record.position == finished:
                        yield record
                return
            await wake(seen)
