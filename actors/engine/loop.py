"""The run loop: one object per call of a run, holding that call's state as its own fields
and taking it through its steps (enter a node, run it, commit what it returns, go on), its
cut (a stop or a time limit cutting a node short) and its failures. Its life: it claims the
thread, begins the run (`agentlog.actors.engine.steps` opens it), runs its steps, records an
abandon, gives the thread back; every commit goes through the commit path
(`agentlog.actors.engine.commit`)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn

from agentlog.actors.engine.actor import ActorStoppedError
from agentlog.actors.engine.callbacks import (
    INVOCATION_HOOKS,
    HookError,
    Invocation,
    InvocationType,
    call_hook,
    recovered,
)
from agentlog.actors.engine.commit import write
from agentlog.actors.engine.committing import RunCommits
from agentlog.actors.engine.context import NodeContext
from agentlog.actors.engine.ending import answered_ids, closing_events, goes_past
from agentlog.actors.engine.errors import (
    GraphError,
    GraphInterrupt,
    NodeError,
    NodeTimeoutError,
    RecursionLimitError,
    ThreadBusyError,
)
from agentlog.actors.engine.guard import Guard
from agentlog.actors.engine.nodes import NodeActor, RunNode, output_events, resume_values
from agentlog.actors.engine.plan import planned_tasks, requested
from agentlog.actors.engine.redact import redact
from agentlog.actors.engine.retry import retry_failed
from agentlog.actors.engine.run import (
    ABANDONED_BY_CALLER,
    Engine,
    Run,
    S,
    _log,
    _timeout,
    finish,
)
from agentlog.actors.engine.steps import SNAPSHOT_AT_REST, open_run
from agentlog.actors.engine.stream import END_OF_STREAM, RunStream
from agentlog.actors.engine.superstep import run_superstep
from agentlog.actors.engine.view import node_view
from agentlog.actors.tools.node import is_tool_node, pending_calls
from agentlog.events import (
    AgentlogError,
    EventRecord,
    InterruptRaised,
    ModelCalled,
    NodeEntered,
    RunCompleted,
    RunFailed,
    Stopped,
    StopRequested,
)
from agentlog.events.claims import DEFAULT_LEASE
from agentlog.events.keystore import tag_thread
from agentlog.events.kinds import Event
from agentlog.projections import (
    END,
    ExecutionStatus,
    Fold,
    StopRequestStatus,
    StreamChunk,
    StreamEvent,
    to_builtins,
)
from agentlog.projections.fold import before_first_run
from agentlog.projections.ids import monotonic
from agentlog.projections.keys import ENTERED_KEY, RESUME_KEY


@dataclass(eq=False)
class RunLoop(Run[S]):
    """One call's run: its state (the fields of `Run`) and its whole life: claim the thread,
    begin (open or resume) the run, its steps, a cut, an abandon, and the thread given back."""

    engine: Engine[S] = field(kw_only=True, repr=False)
    """What the call runs on: the graph, its settings and its store."""
    commits: RunCommits[S] = field(init=False, repr=False)
    """The run's side of the commit path: every record of this call is committed by it."""
    begun: bool = field(default=False, kw_only=True)
    """Whether `begin` made this the run of the call (before, it only holds the claim)."""
    failures: dict[str, int] = field(default_factory=dict, kw_only=True)
    """Failed attempts of each node's current step in this call, counted by its retry
    policy (a step that goes through clears its nodes')."""

    def __post_init__(self) -> None:
        self.commits = RunCommits(self.engine, self)

    def durable_seq(self) -> int:
        held = self.commits.held
        return self.fold.seq if held is None else held.durable_seq()

    @classmethod
    def of(cls, engine: Engine[S], config: dict[str, Any], stream: RunStream | None) -> RunLoop[S]:
        """The run of a call with `config` (checked by `run_config`), not yet begun."""
        fold = Fold.new(engine.graph.state_cls)  # `begin` loads the thread's
        return cls(config["thread_id"], "", config, fold, stream, engine=engine)

    async def live(self, input: Any) -> None:
        """The call's whole run: claim the thread, begin the run with `input`, run its
        steps; however it ends, the thread is given back (and an abandon recorded)."""
        thread_id, stream = self.thread_id, self.stream
        recorded: asyncio.Future[None] | None = None
        try:
            if self.config.get("subject") is not None:  # sealed from its first record on
                await tag_thread(self.engine.store, thread_id, self.config["subject"])
            await self.claim_thread()
            opening = await self.begin(input)
            if opening:  # begun first, so a cancellation here is recorded after it
                await self.commits.commit(opening, actor=str(self.config.get("user", "user")))
            if not self.idle:
                await self.steps()
                await self.commits.land()  # at rest: whatever the mode held is durable now
                if self.fold.seq - self.last_snapshot >= SNAPSHOT_AT_REST:
                    self.commits.snapshot()  # the next load of the thread starts from here
            if stream is not None and stream.projection is None:  # a mode shows no state chunk
                await stream.tell(
                    StreamChunk(
                        event=StreamEvent.STATE,
                        state=self.fold.snapshot_state(),
                        thread_id=thread_id,
                        run_id=self.run_id,
                    )
                )
        except asyncio.CancelledError as exc:
            if self.claim is None:
                raise
            why = str(exc.args[0]) if exc.args and exc.args[0] else ABANDONED_BY_CALLER
            recorded = asyncio.ensure_future(self.abandon(why))
            with contextlib.suppress(asyncio.CancelledError):
                await finish(recorded)
            raise
        except Exception as exc:
            if isinstance(exc, HookError) and self.begun:
                await self.fail_for_hook(exc)
            if stream is not None and stream.running:
                await stream.tell(
                    StreamChunk(
                        event=StreamEvent.ERROR,
                        thread_id=thread_id,
                        data={"error": type(exc).__name__, "message": redact(str(exc))},
                    )
                )
            raise
        finally:
            # Finished whatever comes: the caller hears of the run's end only once the thread
            # is free (or handed to the sync work still holding it).
            await finish(asyncio.ensure_future(self.close(recorded)))

    async def claim_thread(self) -> None:
        """Claim the run's thread, as the config says (`lease_s`, `claim_under`)."""
        name = self.engine.graph.name
        purpose = "a run" if name is None else f"a run of graph {name!r}"
        lease = self.config.get("lease_s", DEFAULT_LEASE)
        self.claim = await self.engine.claim(
            self.thread_id, purpose, lease, self.config.get("claim_under")
        )

    async def begin(self, input: Any) -> list[Event]:
        """Open or resume the run the input makes of the thread (`open_run`); the events
        that open it, to be committed."""
        opening = await open_run(self, input)
        self.begun = True
        return opening

    async def close(self, recorded: asyncio.Future[None] | None) -> None:
        """After the run, however it ended: stop its actors and snapshots, free the thread."""
        if recorded is not None:
            with contextlib.suppress(BaseException):
                await recorded
        for actor in self.actors.values():
            await actor.stop(drain=False)
        if self.background:
            await asyncio.gather(*self.background, return_exceptions=True)
        if self.claim is not None:
            await self.engine.release(self.claim, self.in_flight)
        if self.stream is not None:
            with contextlib.suppress(ActorStoppedError):
                await self.stream.tell(END_OF_STREAM)

    async def abandon(self, why: str) -> None:
        """Record that the caller went away mid-run, and what was in flight: a stop.

        Tool calls started and not finished are closed as abandoned (their results, if they
        ever come, are discarded), so no later run starts them again.
        """
        assert self.claim is not None
        engine, in_flight = self.engine, self.in_flight
        for actor in self.actors.values():
            await actor.stop(drain=False)  # an async node is cancelled for real
        if self.committing is not None:
            with contextlib.suppress(BaseException):
                await self.committing  # a commit under way lands first: record after it
        with contextlib.suppress(Exception):
            await self.commits.land()  # and what the durability mode held
        # named before the record: whoever reads that the run stopped learns what still runs
        await engine.label_in_flight(self.claim, in_flight)

        async def record(fold: Fold[S]) -> list[Event]:
            meta = fold.state.execution_meta
            paused = (
                meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED
            )
            if fold.seq == 0 or paused or meta.status in _AT_REST or before_first_run(meta):
                return []  # nothing was written, or the run had already come to rest
            never_ran = self.never_ran()
            events = await closing_events(engine.store, fold, why, over=False, never_ran=never_ran)
            if meta.stop_current_execution == StopRequestStatus.NONE:
                events.append(StopRequested(by="runtime", reason=why))
            events.append(
                Stopped(
                    node=meta.current_node,
                    reason=f"abandoned: {why}",
                    in_flight=in_flight.running(),
                    duration_ms=self.elapsed_ms(),
                )
            )
            return events

        def run_id_of(fold: Fold[S]) -> str | None:
            if self.begun:
                return self.run_id
            return fold.state.execution_meta.internal_data.get("run_id")

        try:
            records = await write(
                engine.store,
                self.thread_id,
                record,
                state_cls=engine.graph.state_cls,
                actor="runtime",
                run_id=run_id_of,
                claim=self.claim,
                what="the record of an abandoned run",
            )
        except Exception as exc:
            _log.warning(
                "could not record that the run on %r was abandoned: %s", self.thread_id, exc
            )
            return
        try:
            await engine.lifecycle(records)  # the caller is gone: a hook's failure is logged
        except HookError as exc:
            _log.warning("a hook failed after the run on %r was abandoned: %s", self.thread_id, exc)

    async def fail_for_hook(self, error: HookError) -> None:
        """Record that a hook failed the run, if the run can still fail (a hook raising after
        the run completed or paused is reported to the caller; the log already says how the
        run came to rest)."""
        with contextlib.suppress(Exception):
            await self.commits.land()
        self.fold = await self.engine.load(self.thread_id)
        meta = self.fold.state.execution_meta
        if meta.status != ExecutionStatus.RUNNING or meta.stop_current_execution != (
            StopRequestStatus.NONE
        ):
            return
        failed = RunFailed(
            node=meta.current_node,
            error_type="HookError",
            message=redact(str(error)),
            duration_ms=self.elapsed_ms(),
        )
        with contextlib.suppress(AgentlogError):
            await self.commits.commit([failed], actor=error.hook.split(".")[0])

    async def steps(self) -> None:
        while True:
            meta = self.fold.state.execution_meta
            node = meta.current_node
            if meta.is_stopped_requested():
                await self.commits.commit([self.stop_between(node)], actor="runtime")
                return
            if node == END:
                await self.complete()
                return
            entered = meta.internal_data.get(ENTERED_KEY)
            tasks = planned_tasks(meta)
            nodes = [node] if tasks is None else [t.node for t in tasks]
            passed = self.skip_interrupt_before in nodes or (
                entered and (tasks is not None or entered["node"] == node)
            )
            waits = next((n for n in nodes if n in self.interrupt_before), None)
            if waits is not None and not passed:
                event = InterruptRaised(node=waits, reason="interrupt_before", when="before")
                await self.commits.commit([event], actor="runtime")
                return
            self.skip_interrupt_before = None
            if self.taken >= self.recursion_limit:
                message = (
                    f"run {self.run_id} on thread {self.thread_id!r} reached its recursion limit "
                    f"of {self.recursion_limit} steps before node {node!r}; raise "
                    "recursion_limit in compile() or in the call's config if the graph really "
                    "needs more"
                )
                await self.commits.commit(
                    [
                        RunFailed(
                            node=node,
                            error_type="RecursionLimitError",
                            message=message,
                            duration_ms=self.elapsed_ms(),
                        )
                    ],
                    actor="runtime",
                )
                raise RecursionLimitError(message)
            for name in nodes:
                if name not in self.engine.graph.nodes:
                    raise GraphError(
                        f"thread {self.thread_id!r} is at node {name!r}, not in this graph"
                    )
            try:
                await (self.step(node) if tasks is None else run_superstep(self, tasks))
            except NodeError as failure:
                if not await retry_failed(self, failure):  # recorded: its policy retries it
                    raise
            else:
                self.taken += 1
                for name in nodes:  # a step that went through starts its nodes' count anew
                    self.failures.pop(name, None)
            meta = self.fold.state.execution_meta
            if meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED:
                return

    def stop_between(self, node: str) -> Stopped:
        """The stop of a run between nodes: after the node this call ran last, if any."""
        if self.last_node is not None:
            return Stopped(node=self.last_node, when="after", duration_ms=self.elapsed_ms())
        return Stopped(node=node, when="before", duration_ms=self.elapsed_ms())

    async def complete(self) -> None:
        """End the run; a tool call still open gets a result saying it never ran, first."""
        why = "the graph reached its end without running this call"
        events = await closing_events(self.engine.store, self.fold, why, over=True)
        if events:
            waiting = self.fold.open_calls()
            _log.warning(
                "run %s on thread %r ended with tool call(s) %s unanswered: recorded as not run "
                "(route assistant messages with tool calls to a ToolNode)",
                self.run_id,
                self.thread_id,
                ", ".join(c.id for c in waiting),
            )
        await self.commits.commit(
            [*events, RunCompleted(duration_ms=self.elapsed_ms())], actor="runtime"
        )

    async def step(self, node: str) -> None:
        meta = self.fold.state.execution_meta
        entered = meta.internal_data.get(ENTERED_KEY)
        ahead, self.ahead = self.ahead, None
        step_records: list[EventRecord] = []
        if ahead is not None and ahead[0] == node:
            step_records = ahead[1]  # entered by the last step's commit, with its tool calls
        elif entered and entered["node"] == node:
            # The node's step began before (a crash, a pause, a failure): let the node see
            # what it committed then (a tool node's finished calls). After a crash the step
            # simply goes on; after a pause or a failure the log shows the node entered again.
            step_records = [
                r async for r in self.engine.store.read(self.thread_id, entered["seq"] + 1)
            ]
            if not self.cut_short:
                await self.commits.commit([NodeEntered(node=node)], actor=node)
        else:
            await self.commits.commit([NodeEntered(node=node)], actor=node)
        self.cut_short = False
        resume = resume_values(self.fold.state.execution_meta.internal_data.get(RESUME_KEY))
        context = NodeContext(
            self.thread_id,
            self.run_id,
            node,
            partial(self.commits.commit, actor=node),
            step_records,
            self.in_flight,
            self.dispatched,
            self.engine.callbacks if self.engine.hooked & INVOCATION_HOOKS else None,
            self.stream,
            (self.fold.state.execution_meta.internal_data.get(ENTERED_KEY) or {}).get("seq", 0),
            store=self.engine.long_term_store,
            step=meta.step + 1,
            log=self.engine.store,
        )
        actor = self.node_actor(node)
        requests: list[tuple[str, tuple[Any, ...]]] = []
        hooks = self.engine.callbacks if self.engine.hooked & INVOCATION_HOOKS else None
        changed_by: str | None = None  # the hook whose change the step's outputs carry
        try:
            view = node_view(self.fold.state, requests)
            invocation = None
            if hooks is not None and not is_tool_node(self.engine.graph.nodes[node]):
                invocation = Invocation(
                    InvocationType.NODE, node, self.thread_id, self.run_id, view
                )
                await call_hook(hooks, "before", invocation)
            guard = Guard(self.engine.store, self, node, actor, self.timeout_of(node))
            began = monotonic()  # the step's start: its node is handed its input
            try:
                output = await actor.ask(RunNode(view, self.config, context, resume))
            except GraphInterrupt as signal:
                guard.disarm()
                event = InterruptRaised(
                    node=node,
                    reason=str(signal.reason),
                    when="before",
                    data=to_builtins(signal.data),
                    by_node=True,
                )
                await self.commits.commit([*context.recorded, event], actor=node)
                return
            except ActorStoppedError:
                if guard.disarm() is None:
                    raise
                await self.cut(node, guard)
                return
            except Exception as exc:
                guard.disarm()
                if hooks is None or invocation is None or isinstance(exc, GraphError):
                    raise
                found = await call_hook(hooks, "on_error", invocation, exc)
                if found is None:
                    raise
                recovery = recovered(found, f"{hooks.name}.on_error")
                why = f"recovery by {hooks.name} after {type(exc).__name__}: {exc}"
                output = [
                    recovery.model_copy(update={"metadata": {**recovery.metadata, "recovery": why}})
                ]
                changed_by = hooks.name
            guard.disarm()
            if hooks is not None and invocation is not None:
                replaced = await call_hook(hooks, "after", invocation, output)
                if replaced is not None:
                    output, changed_by = replaced, hooks.name
            events, goto = output_events(
                node,
                output,
                self.fold.state,
                known=self.fold.message_ids,
                waiting={c.id for c in pending_calls(self.fold.state)},
                append=is_tool_node(self.engine.graph.nodes[node]),
            )
            goto, pause, ending = requested(node, requests, goto)
            events = await self.passed_calls(node, events) + events
            if context.recorded:
                events = [*context.recorded, *events]
            await self.commits.commit_step(
                node, events, goto, pause, ending=ending, started=began, changed_by=changed_by
            )
            self.last_node = node
        except (ThreadBusyError, asyncio.CancelledError, NodeTimeoutError):
            raise
        except Exception as exc:
            await self.fail_step(node, exc, context.recorded)

    async def fail_step(self, node: str, exc: BaseException, recorded: list[Event]) -> NoReturn:
        """Record that the step of `node` failed with `exc`, and raise what the caller hears."""
        if isinstance(exc, ThreadBusyError | asyncio.CancelledError | NodeTimeoutError):
            raise exc
        await self.commits.land()  # the steps before this one stay done
        self.fold = await self.engine.load(self.thread_id)
        if self.fold.state.execution_meta.status == ExecutionStatus.ERROR:
            raise exc  # a failure already recorded (a lifecycle hook raised after it)
        failed = RunFailed(
            node=node,
            error_type=type(exc).__name__,
            message=redact(str(exc)),
            duration_ms=self.elapsed_ms(),
        )
        # the model calls it made are facts; its writes and outcomes go with its retry
        facts = [e for e in recorded if isinstance(e, ModelCalled)]
        await self.commits.commit([*facts, failed], actor="runtime")
        if isinstance(exc, GraphError | HookError) or not isinstance(exc, Exception):
            raise exc  # the graph's wiring or a hook is at fault, and the error says which
        raise NodeError(node, exc) from exc

    async def passed_calls(self, node: str, events: list[Event]) -> list[Event]:
        """The answers of the open tool calls a node's output goes on past: a message it adds
        would come between them and their results, an order no model provider takes, so
        they are answered first, as not run (the graph did not route them to a tool node)."""
        if not goes_past(events) or not self.fold.open_calls():
            return []
        why = f"node {node!r} went on without running this call"
        skip = answered_ids(events)
        closing = await closing_events(self.engine.store, self.fold, why, over=True, skip=skip)
        if closing:
            _log.warning(
                "node %r of run %s on thread %r went on past unanswered tool call(s): recorded "
                "as not run (route assistant messages with tool calls to a ToolNode)",
                node,
                self.run_id,
                self.thread_id,
            )
        return closing

    def timeout_of(self, node: str) -> float | None:
        """The node's time limit: its own, else the call's `node_timeout`, else the graph's."""
        if node in self.engine.node_timeouts:
            return self.engine.node_timeouts[node]
        return _timeout(self.config.get("node_timeout", self.engine.node_timeout), "node_timeout")

    async def cut(self, node: str, guard: Guard) -> None:
        """Record a node cut short by a stop (paused before it) or by its time limit (failed).

        A commit the node had under way lands first; tool calls it had started are closed
        as abandoned, so no later run starts them again.
        """
        if self.committing is not None:
            with contextlib.suppress(BaseException):
                await self.committing
        await guard.stopped()
        await self.commits.land()
        self.fold = await self.engine.load(self.thread_id)
        if guard.fired == "stop":
            why = "a stop request cancelled the node"
            never_ran = self.never_ran()
            events = [
                *await closing_events(
                    self.engine.store, self.fold, why, over=False, never_ran=never_ran
                ),
                Stopped(
                    node=node,
                    when="before",
                    in_flight=self.in_flight.running(),
                    duration_ms=self.elapsed_ms(),
                ),
            ]
            await self.commits.commit(events, actor="runtime")
            return
        limit = guard.timeout or 0.0
        error = NodeTimeoutError(node, limit)
        why = f"node {node!r} ran past its timeout of {limit:g}s"
        failed = RunFailed(
            node=node,
            error_type="NodeTimeoutError",
            message=f"{why}; retryable",
            status="timed_out",
            duration_ms=self.elapsed_ms(),
        )
        closing = await closing_events(
            self.engine.store, self.fold, why, over=False, never_ran=self.never_ran()
        )
        await self.commits.commit([*closing, failed], actor="runtime")
        raise error

    def node_actor(self, node: str) -> NodeActor:
        """The run's actor for `node`, started on first use and stopped when the run ends.

        A node's concurrency limit holds across all runs of this graph on the event loop:
        its actors share one semaphore.
        """
        actor = self.actors.get(node)
        if actor is None:
            limit = self.engine.node_concurrency.get(node)
            slots = None
            if limit is not None:
                per_loop = self.engine.slots.setdefault(asyncio.get_running_loop(), {})
                slots = per_loop.setdefault(node, asyncio.Semaphore(limit))
            actor = NodeActor(
                node,
                self.engine.graph.nodes[node],
                self.engine.dependencies,
                slots=slots,
                ids=self.engine.ids,
            )
            self.actors[node] = actor.start()
        return actor


_AT_REST = (ExecutionStatus.COMPLETED, ExecutionStatus.ERROR, ExecutionStatus.CANCELLED)
"""A run in these has come to rest: a caller going away leaves nothing to record."""
