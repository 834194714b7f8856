"""Which accepted trigger runs next, running it, and what happens when it ends.

Triggers wait in priority then arrival order. One starts when fewer than `max_concurrent_runs`
execute, its entry point is under its `max_concurrent`, no run of its thread executes (a
thread never has two), and its retry time, if any, has come. A run's end is recorded before
anyone waiting for it hears of it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.command import Command
from agentlog.actors.engine.commit import RETRY
from agentlog.actors.engine.redact import redact
from agentlog.actors.engine.steps import TRIGGER_KEY
from agentlog.actors.runtime.inputs import with_session_keys
from agentlog.actors.runtime.ledger import TriggerState
from agentlog.actors.runtime.live import live_tap
from agentlog.actors.runtime.rollback import roll_back, rolled_back
from agentlog.actors.runtime.shared import RunScope, _scope
from agentlog.actors.runtime.spec import retry_can_fix
from agentlog.actors.runtime.workers import (
    check_no_workers_running,
    give_lease,
    take_lease,
    take_worker_id,
)
from agentlog.events import Claim, EventRecord
from agentlog.events.errors import AgentlogError, ClaimLostError, StoreError, ThreadBusyError
from agentlog.events.kinds import Resumed, RunStarted, TriggerDispatched, TriggerFinished
from agentlog.projections import ExecutionStatus, IllegalTransitionError, StopRequestStatus

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph
    from agentlog.actors.runtime.runtime import AgentRuntime
    from agentlog.actors.runtime.spec import EntryPoint

_log = logging.getLogger(__name__)

STORE_RETRY_S = 1.0
"""How long a trigger whose dispatch the store failed waits before it is tried again."""


@dataclass
class Execution:
    """A trigger being run: its task, and who cancelled it (if anyone did)."""

    state: TriggerState
    task: asyncio.Task[None]
    cancelled_by: tuple[str, str | None] | None = None
    ending: bool = False
    """The run has returned: its outcome is being recorded, a cancel comes too late."""
    running: bool = False
    """Its graph run has begun here: a stop request now reaches it (before, maybe not ours)."""
    lease: Claim | None = None
    """A worker's lease on the trigger, while it runs it."""

    @property
    def graph_id(self) -> str:
        return self.state.accepted.graph_id

    @property
    def entry_point(self) -> str:
        return self.state.accepted.entry_point


class Dispatcher:
    """The queue of accepted triggers and the runs executing them."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime
        self.queue: list[TriggerState] = []
        self._queued: set[str] = set()
        """The ids in `queue`: a trigger is queued once, found without a scan (1,000 triggers
        accepted at once would otherwise cost a million comparisons)."""
        self.resume: set[str] = set()
        """Triggers to run from the log (input None): retries and runs cut short."""
        self.holding: set[str] = set()
        """Threads a rollback is setting back: nothing starts on them until it is done."""
        self.executing: dict[str, Execution] = {}
        """Thread id -> its run executing now."""
        self._starting: dict[str, str] = {}
        """Thread id -> entry point id, for triggers whose acceptance and dispatch are being
        recorded together: their slots are taken, as if they were executing."""
        self._to_queue = 0
        """Acceptances being recorded that will then be queued: nothing may start ahead of
        them (a thread's triggers, and equal priorities, run in arrival order)."""
        self.results: OrderedDict[str, dict[str, Any]] = OrderedDict()
        """Results of ended runs for the callers waiting at their end (each taken by the
        first; a later `wait` rebuilds it from the log): a result holds the thread's state,
        input included, so none is kept for nobody."""
        self.errors: OrderedDict[str, BaseException] = OrderedDict()
        """The errors of runs that failed for good (what `wait` raises), the last
        `keep_results`."""
        self._waiting: dict[str, asyncio.Event] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._worker_id: Claim | None = None
        """A worker's claim on its id, held from `recover` to `stop`."""

    # ---- the queue ----------------------------------------------------------------------

    def enqueue(self, state: TriggerState, *, resume: bool = False) -> None:
        """Queue a trigger (in priority, then arrival order) and wake the dispatcher."""
        if state.id in self._queued:
            return
        key = (-state.accepted.priority, state.position)
        index = len(self.queue)
        while (
            index
            and (-self.queue[index - 1].accepted.priority, self.queue[index - 1].position) > key
        ):
            index -= 1
        self.queue.insert(index, state)
        self._queued.add(state.id)
        if resume:
            self.resume.add(state.id)
        self._wake.set()

    def _unqueue(self, states: list[TriggerState]) -> list[tuple[TriggerState, bool]]:
        """Take `states` off the queue; what `_requeue` needs to put them back."""
        taken = [(state, state.id in self.resume) for state in states]
        for state in states:
            self.queue.remove(state)
            self._queued.discard(state.id)
            self.resume.discard(state.id)
        return taken

    def _requeue(self, taken: list[tuple[TriggerState, bool]]) -> None:
        """Put back what `_unqueue` took when its ends could not be recorded: a trigger
        neither queued, running nor ended would hold its thread until a restart."""
        for state, resume in taken:
            if not state.done:
                self.enqueue(state, resume=resume)

    def reserve(self, entry: EntryPoint, thread_id: str, *, new_thread: bool) -> bool:
        """Whether a trigger being accepted may start the moment its acceptance commits:
        it starts a new thread, nothing is queued ahead of it, both limits leave room and its
        graph is here. If so its slot is held, and its dispatch is recorded in the same
        commit as its acceptance (one commit fewer before the run starts). Not for a named
        thread (its dispatch needs the thread's head, and a trigger waiting on that read
        would be overtaken in the log by the ones sent after it), nor for workers, whose
        runs first take a lease."""
        runtime = self.runtime
        if (
            not new_thread
            or runtime.config.worker_id is not None
            or self._task is None
            or runtime.stopping
            or self.queue
            or self._to_queue
            or entry.graph_id not in runtime.graphs
            or len(self.executing) + len(self._starting) >= runtime.config.max_concurrent_runs
            or self._entry_full(entry)
        ):
            self._to_queue += 1  # `accepted` (called whatever the commit's outcome) counts it off
            return False
        self._starting[thread_id] = entry.id
        return True

    def _entry_full(self, entry: EntryPoint) -> bool:
        if entry.max_concurrent is None:
            return False
        running = sum(1 for e in self.executing.values() if e.entry_point == entry.id)
        starting = sum(1 for entry_id in self._starting.values() if entry_id == entry.id)
        return running + starting >= entry.max_concurrent

    def accepted(
        self, trigger_id: str, reserved: str | None, records: list[EventRecord] | None
    ) -> None:
        """After a trigger's acceptance is recorded (`records`; None: it was not): start it
        when its dispatch was recorded with it (its thread `reserved`), else queue it."""
        if reserved is not None:
            del self._starting[reserved]
            self._wake.set()
        else:
            self._to_queue -= 1
        state = self.runtime.ledger.triggers.get(trigger_id)
        if records is None or state is None or state.done:
            return  # not recorded, or a duplicate of its key's first trigger
        if (
            reserved is None
            or not state.dispatched
            or state.accepted.graph_id not in self.runtime.graphs  # removed meanwhile: it waits
        ):
            self.enqueue(state)
        elif not self.runtime.stopping:  # else it is in flight: the next runtime resumes it
            self._begin(state, dispatched=True)

    def queued_on(self, thread_id: str) -> list[TriggerState]:
        return [t for t in self.queue if t.accepted.thread_id == thread_id]

    def depth(self) -> int:
        return len(self.queue)

    def depths(self) -> dict[str, int]:
        """Queued triggers per entry point."""
        depths: dict[str, int] = {}
        for state in self.queue:
            depths[state.accepted.entry_point] = depths.get(state.accepted.entry_point, 0) + 1
        return depths

    def running_ids(self) -> set[str]:
        return {e.state.id for e in self.executing.values()}

    async def changed(self, trigger_id: str) -> None:
        """Wait until something happens to the trigger (it ends, is retried or cancelled, or
        the runtime stops)."""
        event = self._waiting.setdefault(trigger_id, asyncio.Event())
        await event.wait()

    def _notify(self, trigger_id: str) -> None:
        event = self._waiting.pop(trigger_id, None)
        if event is not None:
            event.set()

    notify = _notify

    def sweep(self) -> None:
        """Queue every unfinished trigger not queued or running here (a worker's look for
        runs whose worker died: their lease decides who takes them)."""
        running = self.running_ids()
        queued = {state.id for state in self.queue}
        for state in self.runtime.ledger.pending():
            if state.id not in running and state.id not in queued:
                self.enqueue(state, resume=state.outcome == "failed")

    # ---- running ------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())
        self._wake.set()

    async def _loop(self) -> None:
        while not self.runtime.stopping:
            await self._wake.wait()
            self._wake.clear()
            if self.runtime.stopping:
                return
            self._dispatch_ready()

    def _dispatch_ready(self) -> None:
        limit = self.runtime.config.max_concurrent_runs
        now = self.runtime.clock()
        per_entry: dict[str, int] = {}
        for execution in self.executing.values():
            per_entry[execution.entry_point] = per_entry.get(execution.entry_point, 0) + 1
        for entry_id in self._starting.values():
            per_entry[entry_id] = per_entry.get(entry_id, 0) + 1
        earliest: float | None = None
        kept: list[TriggerState] = []
        for index, state in enumerate(self.queue):
            if state.done:
                continue  # ended while queued (another worker's cancel): it never runs
            if len(self.executing) + len(self._starting) >= limit:
                kept.extend(self.queue[index:])
                break
            accepted = state.accepted
            entry = self.runtime.entries.get(accepted.entry_point)
            cap = entry.max_concurrent if entry is not None else None
            if state.retry_at is not None and state.retry_at > now:
                earliest = state.retry_at if earliest is None else min(earliest, state.retry_at)
                kept.append(state)
            elif (
                accepted.thread_id in self.executing
                or accepted.thread_id in self.holding
                or accepted.thread_id in self._starting
                or (cap is not None and per_entry.get(accepted.entry_point, 0) >= cap)
                or self._waits_for_earlier(state)
            ):
                kept.append(state)
            elif accepted.graph_id not in self.runtime.graphs:
                kept.append(state)  # its graph is not registered (yet): it waits
            else:
                per_entry[accepted.entry_point] = per_entry.get(accepted.entry_point, 0) + 1
                self._begin(state)
        if len(kept) != len(self.queue):
            self._queued = {state.id for state in kept}
        self.queue = kept
        if earliest is not None:
            self._wake_at(earliest)

    def _waits_for_earlier(self, state: TriggerState) -> bool:
        """Another unfinished trigger of the same thread goes first.

        With workers, any earlier one: a thread's triggers run in arrival order, one at a
        time, whoever runs them. In a lone runtime a higher priority may overtake input that
        has not begun, but a run that has begun (one waiting to be retried, or cut short)
        goes first, before anything that has not, and so does an earlier input of equal or
        higher priority. Each rule only ever waits for an earlier trigger or a begun one
        for one not begun, so no two triggers wait for each other."""
        ledger = self.runtime.ledger
        lone = self.runtime.config.worker_id is None
        begun = state.first_seq is not None
        for trigger_id in ledger.unfinished.get(state.accepted.thread_id, ()):
            if trigger_id == state.id:
                if lone:
                    continue
                return False
            if not lone:
                return True
            other = ledger.triggers[trigger_id]
            other_begun = other.first_seq is not None
            if other_begun and not begun:
                return True
            if begun and not other_begun:
                continue
            earlier = other.position < state.position
            if earlier and (begun or other.accepted.priority >= state.accepted.priority):
                return True
        return False

    def unfinished_on(self, thread_id: str) -> bool:
        """Whether an accepted trigger of the thread has not ended (a retry waiting for its
        time, one put back after a store error, or one queued or running)."""
        return bool(self.runtime.ledger.unfinished.get(thread_id))

    def _wake_at(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        delay = max(when - self.runtime.clock(), 0.0)
        self._timer = asyncio.get_running_loop().call_later(min(delay, 1.0), self._wake.set)

    def poke(self) -> None:
        """Look at the queue again (the clock moved, a graph was added)."""
        self._wake.set()

    def _begin(self, state: TriggerState, *, dispatched: bool = False) -> None:
        """Run a trigger; `dispatched`: its dispatch is recorded already."""
        thread_id = state.accepted.thread_id
        resume = state.id in self.resume
        self.resume.discard(state.id)
        task = asyncio.ensure_future(self._execute(state, resume, dispatched))
        self.executing[thread_id] = Execution(state, task)

    async def _execute(self, state: TriggerState, resume: bool, dispatched: bool = False) -> None:
        """Run one trigger; a store failure before its end is recorded (the server restarting,
        a lone runtime holding the runtime thread) leaves it accepted: it is queued again
        after `STORE_RETRY_S`, and the failure is logged, never lost in a dead task."""
        try:
            if self.runtime.config.worker_id is None:
                await self._run_trigger(state, resume, dispatched)
            else:
                await self._run_leased(state, resume)
        except StoreError as exc:
            self._forget(state)  # a failure before `_run_trigger` left it marked as running
            _log.warning(
                "trigger %s (entry point %r, thread %r) could not be run: %s; trying again "
                "in %g s", state.id, state.accepted.entry_point, state.accepted.thread_id,
                redact(str(exc)), STORE_RETRY_S,
            )  # fmt: skip
            if not self.runtime.stopping:
                loop = asyncio.get_running_loop()
                loop.call_later(STORE_RETRY_S, self._retry_after_store_error, state)

    def _retry_after_store_error(self, state: TriggerState) -> None:
        if self.runtime.stopping or state.done or state.id in self.running_ids():
            return
        self.enqueue(state, resume=state.in_flight)

    async def _run_leased(self, state: TriggerState, resume: bool) -> None:
        """A worker's run of a trigger: under its lease, unless another worker holds it."""
        lease = await take_lease(self.runtime, state.id)
        if lease is None:  # another worker runs it; if it dies, a later sweep takes it over
            self._forget(state)
            return
        try:
            execution = self.executing.get(state.accepted.thread_id)
            if execution is not None and execution.state is state:
                execution.lease = lease
            await self.runtime.journal.catch_up()
            if state.done or (state.in_flight and await self._recover_one(state)):
                self._forget(state)
                return
            await self._run_trigger(state, resume or state.in_flight)
        finally:
            await give_lease(self.runtime, lease)

    def _forget(self, state: TriggerState) -> None:
        thread_id = state.accepted.thread_id
        execution = self.executing.get(thread_id)
        if execution is not None and execution.state is state:
            del self.executing[thread_id]
        self._wake.set()

    async def _run_trigger(
        self, state: TriggerState, resume: bool, dispatched: bool = False
    ) -> None:
        """Record the trigger's dispatch (unless `dispatched`), run it, record its end."""
        accepted, thread_id = state.accepted, state.accepted.thread_id
        app = self.runtime.graphs[accepted.graph_id].app
        attempt = state.attempt + (0 if state.in_flight else 1)
        config: dict[str, Any] = {
            "thread_id": thread_id,
            "user": accepted.by or "runtime",
            "run_id": state.id,  # a run this trigger starts is named by it in the log
            TRIGGER_KEY: state.id,  # the run's opening names it: see `_opened`
            "on_code_change": self.runtime.config.on_code_change,  # a resume under new code
            "traceparent": accepted.traceparent,  # the caller's, recorded at acceptance
            "subject": accepted.subject,  # its records sealed as its trigger's input is
            **self.runtime.contexts.config_of(accepted),  # what its request asked of it
        }
        if self.runtime.config.worker_id is not None:
            config["lease_s"] = self.runtime.config.lease_s  # its thread's claim, as its lease
        try:
            if dispatched:
                resume = False  # dispatched as it was accepted: nothing of it ran yet
            else:
                first = accepted.new_thread and attempt == 1 and not state.in_flight
                seq = 0 if first else await self.runtime.store.last_seq(thread_id)
                execution = self.executing.get(thread_id)
                cancelling = execution is not None and execution.cancelled_by is not None
                if state.done or cancelling:  # cancelled during that read: no dispatch after
                    return
                # resume from the log when this trigger's run opened since its first dispatch;
                # else its input was never recorded (whatever else was, an edit): send it
                resume = (
                    state.first_seq is not None
                    and seq > state.first_seq
                    and await self._opened(state, state.first_seq)
                )
                await self.runtime.journal.record(
                    [
                        TriggerDispatched(
                            trigger_id=state.id, attempt=attempt, thread_seq=seq, resumed=resume
                        )
                    ]
                )
            if not await self._still_ours(state):
                return  # cancelled while its dispatch was being recorded, or taken over
            entry = self.runtime.entries.get(accepted.entry_point)
            if resume:
                run_input: Any = None
            else:
                if entry is not None and entry.entry_node is not None:
                    config["entry_node"] = entry.entry_node
                run_input = Command(resume=accepted.input) if accepted.resume else accepted.input
                if entry is not None and entry.input_keys and not accepted.resume:
                    run_input = await with_session_keys(self.runtime, entry, thread_id, run_input)
            if entry is not None:
                _scope.set(RunScope(self.runtime, entry, asyncio.get_running_loop()))
                if entry.isolation != "isolated":
                    await self.runtime.catch_up()  # the run reads shared keys as of its start
            execution = self.executing.get(thread_id)
            if execution is not None and execution.state is state:
                execution.running = True
                if execution.lease is not None:  # the run starts only while its lease holds
                    config["claim_under"] = execution.lease

            async def still_ours() -> bool:
                return await self._still_ours(state)

            try:
                # busy (a def node cut short, an edit): retried while the trigger is ours
                ran = await RETRY.while_busy(
                    lambda: app.ainvoke_to(run_input, config, stream=live_tap(self, state)),
                    still=still_ours,
                )
            except ClaimLostError as exc:
                # its claim was taken over (it looked dead): what it wrote stands and the
                # run may be another's now, so its input is never sent again
                await self._fenced(state, exc)
                return
            except AgentlogError as exc:
                self._mark_ending(thread_id, state)
                await self._failed(state, attempt, exc)
                return
            if ran is None:  # the trigger is no longer ours
                return
            result, end_seq = ran
            self._mark_ending(thread_id, state)
            await self._ended(state, attempt, result, end_seq)
        except asyncio.CancelledError:
            raise  # a cancel (recorded by `cancel`) or the runtime stopping (resumed later)
        finally:
            if (
                self.executing.get(thread_id) is not None
                and self.executing[thread_id].state is state
            ):
                del self.executing[thread_id]
            self._notify(state.id)
            self._wake.set()

    async def _still_ours(self, state: TriggerState) -> bool:
        """Whether a worker waiting for its trigger's thread may still run it: the trigger
        has not ended (the ledger read first) and its lease is still this worker's."""
        if self.runtime.config.worker_id is None:
            return not state.done
        await self.runtime.journal.catch_up()
        execution = self.executing.get(state.accepted.thread_id)
        lease = execution.lease if execution is not None and execution.state is state else None
        if state.done or lease is None:
            return False
        holder = await self.runtime.store.holder(lease.thread_id)
        return holder is not None and holder.token == lease.token

    async def _fenced(self, state: TriggerState, error: ClaimLostError) -> None:
        """The run was fenced: another took its thread over. The trigger is given up here and
        the ledger read before anything else; a worker leaves it to whoever leases it now (a
        sweep finds it again if nobody does), a lone runtime settles it from the log or
        resumes it from there, never from its input."""
        _log.warning(
            "trigger %s (thread %r) gave up: %s", state.id, state.accepted.thread_id, error
        )
        await self.runtime.journal.catch_up()
        lone = self.runtime.config.worker_id is None
        if lone and not state.done and not await self._recover_one(state):
            self.enqueue(state, resume=True)

    def _mark_ending(self, thread_id: str, state: TriggerState) -> None:
        execution = self.executing.get(thread_id)
        if execution is not None and execution.state is state:
            execution.ending = True

    async def _ended(
        self, state: TriggerState, attempt: int, result: dict[str, Any], end_seq: int
    ) -> None:
        meta = result["state"].execution_meta
        stopped = meta.stop_current_execution == StopRequestStatus.STOPPED
        if stopped and self.runtime.stopping:
            return  # paused by the runtime's own stop: the next runtime resumes it
        outcome = "completed" if meta.status == ExecutionStatus.COMPLETED else "interrupted"
        if state.id in self._waiting:
            self._keep(self.results, state.id, {"thread_id": state.accepted.thread_id, **result})
        if self.runtime.config.worker_id is not None:
            await self.runtime.journal.catch_up()  # another worker's word on it comes first
        if state.done:
            return  # a cancel recorded its end first
        await self.runtime.journal.record(
            [
                TriggerFinished(
                    trigger_id=state.id, outcome=outcome, attempt=attempt, thread_seq=end_seq
                )
            ]
        )

    async def _failed(self, state: TriggerState, attempt: int, error: AgentlogError) -> None:
        if state.done:
            return  # a cancel recorded its end first
        cause = error.__cause__ or error
        await self._record_failure(
            state, attempt, type(error).__name__, type(cause).__name__, str(error), error
        )

    async def _record_failure(
        self,
        state: TriggerState,
        attempt: int,
        error_type: str,
        cause_type: str,
        message: str,
        error: BaseException | None,
    ) -> None:
        """Record a failed attempt, and queue a retry when the policy allows one."""
        entry = self.runtime.entries.get(state.accepted.entry_point)
        policy = entry.retry if entry is not None else None
        fatal = (
            policy is None
            or not retry_can_fix(error)
            or policy.is_fatal(error_type)
            or policy.is_fatal(cause_type)
        )
        retry_at = None
        if not fatal and policy is not None and attempt < policy.max_attempts:
            retry_at = self.runtime.clock() + policy.delay(attempt)
        elif error is not None:
            self._keep(self.errors, state.id, error)
        await self.runtime.journal.record(
            [
                TriggerFinished(
                    trigger_id=state.id,
                    outcome="failed",
                    attempt=attempt,
                    error_type=error_type,
                    message=redact(message)[:2000],
                    retry_at=retry_at,
                )
            ]
        )
        if retry_at is not None:
            self.enqueue(state, resume=True)

    def _keep(self, kept: OrderedDict[str, Any], key: str, value: Any) -> None:
        kept[key] = value
        while len(kept) > self.runtime.config.keep_results:
            kept.popitem(last=False)

    # ---- after a restart ------------------------------------------------------------------

    async def recover(self) -> None:
        """Queue what the log says is unfinished: accepted triggers not yet run, retries,
        and runs a crash or a stop cut short (resumed from their log); finish rollbacks.

        A worker sharing the store queues them all: each one's lease says who takes it; it
        first takes its id, and a live worker already holding it stops this runtime
        (`ThreadBusyError`); so does, for a lone runtime, a live worker running a run."""
        try:
            if self.runtime.config.worker_id is None:
                await check_no_workers_running(self.runtime)
            elif self._worker_id is None:
                self._worker_id = await take_worker_id(self.runtime)
        except ThreadBusyError:
            await self.runtime.stop(cancel=True)
            raise
        await self.finish_rollbacks()
        for state in self.runtime.ledger.pending():
            if self.runtime.config.worker_id is not None or not state.in_flight:
                self.enqueue(state, resume=state.outcome == "failed")
            elif not await self._recover_one(state):
                self.enqueue(state, resume=True)

    async def _recover_one(self, state: TriggerState) -> bool:
        """Settle a trigger dispatched before (by a runtime or worker now gone) from its
        thread's log: record its end when the run ended (True), else leave it to be run on
        from its log (False)."""
        thread_id = state.accepted.thread_id
        head = await self.runtime.store.last_seq(thread_id)
        since = state.first_seq if state.first_seq is not None else state.thread_seq
        if head == state.thread_seq or since is None or not await self._opened(state, since):
            return False  # its run never opened: it runs (again), from its input
        graph = self.runtime.graphs.get(state.accepted.graph_id)
        if graph is None:
            return False  # waits for its graph to be added
        current = await graph.app.aget_state({"thread_id": thread_id})
        meta = current.execution_meta
        stopped = meta.stop_current_execution == StopRequestStatus.STOPPED
        if meta.status == ExecutionStatus.CANCELLED:
            cancelled = meta.internal_data.get("cancelled") or {}
            await self.runtime.journal.record(
                [
                    TriggerFinished(
                        trigger_id=state.id, outcome="cancelled", attempt=state.attempt,
                        message=cancelled.get("reason"), by=cancelled.get("by"),
                    )
                ]
            )  # fmt: skip
        elif meta.status == ExecutionStatus.ERROR:
            error = str(meta.internal_data.get("error") or "RunFailed: the run failed")
            error_type, _, message = error.partition(": ")
            await self._record_failure(state, state.attempt, error_type, error_type, message, None)
        elif meta.status == ExecutionStatus.COMPLETED or (meta.is_interrupted() and not stopped):
            outcome = "completed" if meta.status == ExecutionStatus.COMPLETED else "interrupted"
            finished = TriggerFinished(
                trigger_id=state.id, outcome=outcome, attempt=state.attempt, thread_seq=head
            )
            await self.runtime.journal.record([finished])
        else:
            return False
        self._notify(state.id)
        return True

    async def _opened(self, state: TriggerState, since: int) -> bool:
        """Whether the trigger's run opened on its thread after `since`: a `run_started` or
        `resumed` naming the trigger. Other records there (a person's edit, a stop request,
        a run started elsewhere) are not its run's progress."""
        async for record in self.runtime.store.read(state.accepted.thread_id, since + 1):
            event = record.event
            if isinstance(event, RunStarted | Resumed) and event.trigger_id == state.id:
                return True
        return False

    # ---- cancelling and stopping ----------------------------------------------------------

    async def cancel(self, thread_id: str, actor: str, reason: str | None) -> None:
        """End the thread's queued and running runs, and its paused or failed one.

        A running run is cut short first, and its end is then decided from what its thread
        says, so each trigger records one end: a run whose completion committed before the
        cut keeps it (the cancel came too late), any other is cancelled. The ends are
        recorded before the thread's `run_cancelled`, so a crash between the two leaves
        them cancelled (a restart finishes the thread's part); a crash before them leaves
        the run stopped, and a restart resumes it (the cancel never returned).
        """
        cut: TriggerState | None = None
        """The trigger whose run this cancel cut short: its end is decided below."""
        while True:
            latest = self.runtime.ledger.latest_on(thread_id)
            assert latest is not None
            app = self.runtime.graphs[latest.accepted.graph_id].app
            status = None  # a thread whose first run has not started has no state yet
            head = await self.runtime.store.last_seq(thread_id)
            if head > 0:
                status = (await app.aget_state({"thread_id": thread_id})).execution_meta.status
            # from here to the ends' record, no await: the queue and the runs are as read
            latest = self.runtime.ledger.latest_on(thread_id) or latest
            queued = self.queued_on(thread_id)
            execution = self.executing.get(thread_id)
            if execution is None or execution.task.done():
                break
            returning = execution.ending or (
                status == ExecutionStatus.COMPLETED and self._wrote(execution, head)
            )
            if not returning:
                # cut it short first: whatever it committed meanwhile is in the log when
                # its end is decided (a completion racing the cancel is never called both)
                cut, execution.cancelled_by = execution.state, (actor, reason)
                execution.task.cancel(f"cancelled by {actor}" + (f": {reason}" if reason else ""))
            # else it has returned (or its completion is in the log) and records its own
            # end: that end decides what is left to cancel (a pause still is)
            await asyncio.wait([execution.task])
        ending = [s.id for s in queued]
        completed: TriggerState | None = None
        if cut is not None and not cut.done:
            if status == ExecutionStatus.COMPLETED and self._wrote_since(cut, head):
                completed = cut  # its completion committed before the cut: it stands
            else:
                ending.append(cut.id)
        ended = latest.outcome if latest.done else None
        if not ending and completed is None:
            if (
                status in (ExecutionStatus.COMPLETED, ExecutionStatus.CANCELLED)
                or ended in ("completed", "cancelled", "rejected")
                or status is None
            ):
                raise self._nothing_to_cancel(thread_id, status, ended)
            ending.append(latest.id)  # the paused or failed run
        taken = self._unqueue(queued)
        ends = [
            TriggerFinished(
                trigger_id=trigger_id,
                outcome="cancelled",
                attempt=self.runtime.ledger.triggers[trigger_id].attempt,
                message=reason,
                by=actor,
            )
            for trigger_id in dict.fromkeys(ending)
        ]
        if completed is not None:
            ends.append(
                TriggerFinished(
                    trigger_id=completed.id,
                    outcome="completed",
                    attempt=completed.attempt,
                    message="it completed before the cancel reached it",
                    thread_seq=head,
                )
            )
        try:
            await self.runtime.journal.record(ends, by=actor)
        except BaseException:
            if cut is not None:  # not cancelled after all: its run goes on from the log
                taken.append((cut, True))
            self._requeue(taken)
            raise
        if ending:
            await self._end_thread_run(app, thread_id, actor, reason)
        for trigger_id in (*ending, *([completed.id] if completed else [])):
            self._notify(trigger_id)
        self._wake.set()
        if completed is not None and not ending:
            raise self._nothing_to_cancel(thread_id, ExecutionStatus.COMPLETED, None)

    @staticmethod
    def _nothing_to_cancel(
        thread_id: str, status: ExecutionStatus | None, ended: str | None
    ) -> Exception:
        from agentlog.actors.runtime.spec import UnknownRunError

        return UnknownRunError(
            f"the run on thread {thread_id!r} has ended "
            f"({status.value if status is not None else ended}): nothing to cancel"
        )

    @staticmethod
    def _wrote(execution: Execution, head: int) -> bool:
        """Whether the thread holds records of `execution`'s own run (its head is past
        where the thread stood when the trigger was dispatched)."""
        return Dispatcher._wrote_since(execution.state, head)

    @staticmethod
    def _wrote_since(state: TriggerState, head: int) -> bool:
        since = state.thread_seq
        return since is not None and state.dispatched and head > since

    async def supersede(
        self, thread_id: str, actor: str, reason: str | None, keep: str | None = None
    ) -> bool:
        """Double-texting's rollback: cancel the thread's running run and the input queued
        behind it (all but `keep`, the input that supersedes them), and set the thread back
        to the state before the running run. False when no run was executing.

        The running run is cut short first; a completion it committed before the cut stands
        (its one end, nothing is set back). Then the ends are recorded, the running one
        naming the seq to return to, before the thread is set back: a crash between the two
        leaves it to `recover` to finish the rollback.
        """
        queued = [state for state in self.queued_on(thread_id) if state.id != keep]
        taken = self._unqueue(queued)
        ends = [
            TriggerFinished(
                trigger_id=state.id, outcome="cancelled", attempt=state.attempt,
                message=reason, by=actor,
            )
            for state in queued
        ]  # fmt: skip
        execution = self.executing.get(thread_id)
        if execution is not None and execution.state.id == keep:
            execution = None  # the input superseding the run is running: a cancel ended it
        if execution is None or execution.ending or execution.task.done():
            if ends:
                try:
                    await self.runtime.journal.record(ends, by=actor)
                except BaseException:
                    self._requeue(taken)
                    raise
                for state in queued:
                    self._notify(state.id)
            return False
        state = execution.state
        # a run whose dispatch is not recorded yet wrote nothing: there is nothing to set back
        to_seq = state.thread_seq if state.dispatched else None
        app = self.runtime.graphs[state.accepted.graph_id].app
        execution.cancelled_by = (actor, reason)
        self.holding.add(thread_id)
        try:
            # cut it short first, as a cancel does: a completion it committed meanwhile
            # stands, and is its one end (it is not set back)
            execution.task.cancel(f"rolled back by {actor}" + (f": {reason}" if reason else ""))
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await execution.task
            head = await self.runtime.store.last_seq(thread_id)
            completed = (
                to_seq is not None
                and head > to_seq
                and (await app.aget_state({"thread_id": thread_id})).execution_meta.status
                == ExecutionStatus.COMPLETED
            )
            if completed:
                ends.append(
                    TriggerFinished(
                        trigger_id=state.id, outcome="completed", attempt=state.attempt,
                        message="it completed before the rollback reached it", thread_seq=head,
                    )
                )  # fmt: skip
            else:
                ends.append(
                    TriggerFinished(
                        trigger_id=state.id, outcome="cancelled", attempt=state.attempt,
                        message=reason, by=actor, rolled_back_to=to_seq,
                    )
                )  # fmt: skip
            try:
                await self.runtime.journal.record(ends, by=actor)
            except BaseException:
                self._requeue([*taken, (state, True)])  # not rolled back: it goes on
                execution.cancelled_by = None
                raise
            if to_seq is not None and not completed:
                await roll_back(app, thread_id, to_seq, by=actor, reason=reason)
        finally:
            self.holding.discard(thread_id)
            for ended in (*queued, state):
                self._notify(ended.id)
            self._wake.set()
        return True

    async def finish_rollbacks(self) -> None:
        """After a restart: finish each rollback whose run was cancelled but whose thread
        does not yet record it (the crash came between the two)."""
        ledger = self.runtime.ledger
        for thread_id, ids in ledger.by_thread.items():
            state = ledger.triggers[ids[-1]]
            for trigger_id in reversed(ids):  # the latest rollback on the thread, if any
                if ledger.triggers[trigger_id].rolled_back_to is not None:
                    state = ledger.triggers[trigger_id]
                    break
            to_seq = state.rolled_back_to
            graph = self.runtime.graphs.get(state.accepted.graph_id)
            if to_seq is None or graph is None:
                continue
            if not await rolled_back(self.runtime.store, thread_id, to_seq):
                await roll_back(graph.app, thread_id, to_seq, by=state.by or "runtime",
                                reason=state.message)  # fmt: skip

    async def _end_thread_run(
        self, app: CompiledGraph[Any], thread_id: str, actor: str, reason: str | None
    ) -> bool:
        """Record the thread's run as cancelled, once the thread is free (a `def` node cut
        short keeps it until its worker returns). False: there was no run to end."""
        if await self.runtime.store.last_seq(thread_id) == 0:
            return False

        async def cancel() -> bool:
            return await app.acancel({"thread_id": thread_id}, by=actor, reason=reason)

        return bool(await RETRY.while_busy(cancel))

    async def stop(self, *, abandon: bool) -> None:
        """Stop dispatching; pause running runs between nodes (or abandon them at once).

        What was queued stays in the log only: a later `start` queues it again from there.
        """
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None  # no run starts with its acceptance until `start`, after recovery
        if self._timer is not None:
            self._timer.cancel()
        executions = list(self.executing.values())
        for execution in executions:
            if abandon or not execution.running:
                # not begun here yet: nothing of it to pause, and (for a worker) no stop
                # request may reach a run another worker owns
                execution.task.cancel("the runtime stopped")
            else:
                app = self.runtime.graphs[execution.graph_id].app
                with contextlib.suppress(StoreError, IllegalTransitionError):
                    await app.astop(
                        {"thread_id": execution.state.accepted.thread_id, "user": "runtime"},
                        between_nodes=True,
                    )
        await asyncio.gather(*(e.task for e in executions), return_exceptions=True)
        self.queue.clear()
        self._queued.clear()
        self.resume.clear()
        self.executing.clear()
        held, self._worker_id = self._worker_id, None
        if held is not None:
            await give_lease(self.runtime, held)
        for trigger_id in list(self._waiting):
            self._notify(trigger_id)
