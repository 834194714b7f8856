"""`CompiledGraph`: a `StateGraph` run on the log, one committed step at a time.

A step: append `node_entered` (committed before the node runs), run the node, turn its
output into events, route, and append the outputs with `step_advanced` in one commit. The
live state is the fold of exactly those events, so `replay(log) == live state` after every
step; a crash before the commit re-runs the node, a crash after it loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import threading
import uuid
import weakref
from collections.abc import AsyncGenerator, Container, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, TypeVar

import msgspec

from events import (
    Claim,
    ConcurrencyError,
    EventRecord,
    EventStore,
    InterruptRaised,
    MemoryEventStore,
    MessageAppended,
    NodeEntered,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepAdvanced,
    Stopped,
    StopRequested,
    StoreError,
    ThreadNotFoundError,
    ToolCallFinished,
    ToolCallStarted,
)
from events.kinds import Event
from events.store import check_thread_id
from projections import (
    END,
    START,
    AgentState,
    EventRow,
    ExecutionStatus,
    Fold,
    IllegalTransitionError,
    Message,
    RemoteToolCallBlock,
    StateDiff,
    StepEntry,
    StopRequestStatus,
    StreamChunk,
    StreamEvent,
    ToolCallBlock,
    decide,
    diff,
    edit_events,
    event_history,
    fold_at,
    fork,
    message_appended,
    open_calls,
    snapshot_of,
    state_at_point,
    state_history,
    to_builtins,
)
from projections.fold import (
    ENTERED_KEY,
    RESUME_KEY,
    TOOL_CALLS_KEY,
    copy_meta,
    uncommitted_record,
)
from projections.generic import state_fields
from projections.messages import normalize_input
from projections.transcript import unique_id

from ._actor import ActorStoppedError
from .context import NodeContext
from .errors import (
    GraphError,
    GraphInterrupt,
    MissingThreadIdError,
    NodeError,
    NodeReportedError,
    NodeTimeoutError,
    RecursionLimitError,
    ThreadBusyError,
)
from .graph import Command, StateGraph, is_tool_node
from .journal import Journal, journal_for
from .nodes import NodeActor, RunNode, output_events, resume_values
from .offload import InFlight
from .results import ResponseGranularity, granularity, run_result
from .stream import END_OF_STREAM, RunStream
from .tools import pending_calls, rejected_message, tool_message

S = TypeVar("S", bound=AgentState)
_log = logging.getLogger("agentlog.runtime")
DEFAULT_RECURSION_LIMIT = 25
COMMIT_ATTEMPTS = 5
CANCEL_GRACE_S = 10.0
"""How long Ctrl-C on a blocking call waits for the run to record that it was abandoned."""


@dataclass
class _Run(Generic[S]):
    thread_id: str
    run_id: str
    config: dict[str, Any]
    fold: Fold[S]
    journal: Journal
    stream: RunStream | None
    skip_interrupt_before: str | None = None
    idle: bool = False
    cut_short: bool = False
    last_snapshot: int = 0
    background: set[asyncio.Task[None]] = field(default_factory=set)
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

    def never_ran(self) -> set[str]:
        """Calls recorded as started that no tool has run: only this call could have."""
        return self.started_ahead - self.dispatched


class CompiledGraph(Generic[S]):
    """Run, stream, stop, resume and inspect threads of a graph, on an event store."""

    def __init__(
        self,
        graph: StateGraph[S],
        *,
        store: EventStore | None = None,
        interrupt_before: Sequence[str] = (),
        interrupt_after: Sequence[str] = (),
        recursion_limit: int = DEFAULT_RECURSION_LIMIT,
        snapshot_every: int | None = 5000,
        node_concurrency: Mapping[str, int] | None = None,
        node_timeout: float | None = None,
        node_timeouts: Mapping[str, float | None] | None = None,
    ) -> None:
        graph.check()
        names = (*interrupt_before, *interrupt_after, *(node_concurrency or {}))
        for name in (*names, *(node_timeouts or {})):
            if name not in graph.nodes:
                raise GraphError(f"{name!r} is named in compile() but is not a node of the graph")
        if recursion_limit < 1:
            raise GraphError(f"recursion_limit must be >= 1, got {recursion_limit}")
        self.graph = graph
        self.store: EventStore = store if store is not None else MemoryEventStore()
        self.interrupt_before = frozenset(interrupt_before)
        self.interrupt_after = frozenset(interrupt_after)
        self.recursion_limit = recursion_limit
        self.snapshot_every = snapshot_every
        self.node_concurrency = dict(node_concurrency or {})
        self.node_timeout = _timeout(node_timeout, "node_timeout")
        self.node_timeouts = {
            name: _timeout(limit, f"node_timeouts[{name!r}]")
            for name, limit in (node_timeouts or {}).items()
        }
        self._slots: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]
        ] = weakref.WeakKeyDictionary()
        self._portal: _Portal | None = None

    # ---- the async API ---------------------------------------------------------------

    async def ainvoke(
        self,
        input: Any = None,
        config: Mapping[str, Any] | None = None,
        response_granularity: ResponseGranularity | str = ResponseGranularity.LOW,
        *,
        include_state: bool = False,
    ) -> dict[str, Any]:
        """Run (or resume) the thread until it ends, pauses or fails.

        Returns Agentflow's shape for `response_granularity`: LOW `messages` (this call's)
        and `token_usage`; PARTIAL adds `context` and `summary`; FULL adds `state`
        (`include_state=True` adds it to any shape). Every shape also has `status` and,
        when the run paused, `__interrupt__`.
        """
        shape = granularity(response_granularity)
        run = await self._run(input, config, stream=None)
        return run_result(run.fold.state, run.own, shape, include_state=include_state)

    async def astream(
        self, input: Any = None, config: Mapping[str, Any] | None = None
    ) -> AsyncGenerator[StreamChunk, None]:
        """Run like `ainvoke`, yielding message, update and state chunks as they commit.

        A consumer that stops reading early abandons the run: it is recorded as stopped, and
        `ainvoke(None, config)` resumes it.
        """
        config = run_config(config)
        stream = RunStream(config["thread_id"]).start()
        chunks = stream.subscribe()
        task = asyncio.ensure_future(self._run(input, config, stream=stream))
        why = "the astream consumer stopped reading before the run ended"
        try:
            while True:
                chunk = await chunks.get()
                if chunk is END_OF_STREAM:
                    break
                yield chunk
            await task
        except asyncio.CancelledError as exc:
            if exc.args and exc.args[0]:
                why = str(exc.args[0])  # the consumer itself was cancelled: say by what
            raise
        finally:
            if not task.done():
                task.cancel(why)
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await stream.stop(drain=False)

    async def aget_state(
        self,
        config: Mapping[str, Any],
        at_step: int | None = None,
        at_seq: int | None = None,
    ) -> S:
        """The thread's state, now or at a past step or seq, read from the log.

        An unknown thread raises `ThreadNotFoundError`.
        """
        return await state_at_point(
            self.store, _thread_of(config), self.graph.state_cls, at_step=at_step, at_seq=at_seq
        )

    async def aget_state_history(self, config: Mapping[str, Any]) -> list[StepEntry]:
        """One entry per step, oldest first (`await entry.state()` loads its state)."""
        return await state_history(self.store, _thread_of(config), self.graph.state_cls)

    async def ahistory(
        self, config: Mapping[str, Any], kinds: Sequence[str] | None = None
    ) -> list[EventRow]:
        """One row per event of the thread: seq, time, kind, actor, node and a summary."""
        return await event_history(self.store, _thread_of(config), kinds)

    async def adiff(
        self, config: Mapping[str, Any], a: int, b: int, *, by: str = "step"
    ) -> StateDiff:
        """What changed between two points (steps, or seqs with by="seq")."""
        return await diff(
            self.store, _thread_of(config), a, b, by=by, state_cls=self.graph.state_cls
        )

    async def afork(
        self,
        config: Mapping[str, Any],
        *,
        at_step: int | None = None,
        at_seq: int | None = None,
        new_thread_id: str | None = None,
    ) -> str:
        """Branch the thread at a past point into a new thread; return the new thread id."""
        return await fork(
            self.store,
            _thread_of(config),
            at_step=at_step,
            at_seq=at_seq,
            new_thread_id=new_thread_id,
            state_cls=self.graph.state_cls,
        )

    async def aupdate_state(
        self,
        config: Mapping[str, Any],
        values: Mapping[str, Any],
        as_node: str | None = None,
        actor: str = "user",
        reason: str | None = None,
    ) -> list[EventRecord]:
        """A human edit of the thread's state, recorded as who changed what and why.

        A message whose `message_id` is already in the context replaces it (so a corrected
        tool call is the one the tool node runs); others are appended. With `as_node`, the
        edit is taken as that node's output: the run moves on to where that node routes and
        pauses there, as LangGraph's `update_state(..., as_node=)` does. The thread is
        claimed for the edit, so it never lands under a run in flight.
        """
        thread_id = _thread_of(config)
        if as_node is not None and as_node not in self.graph.nodes:
            known = ", ".join(sorted(self.graph.nodes))
            raise GraphError(f"as_node={as_node!r} is not a node of the graph (nodes: {known})")
        claim = await self._claim(thread_id, f"a state edit by {actor!r}")
        try:
            fold = await fold_at(self.store, thread_id, None, self.graph.state_cls)
            events = edit_events(fold.state, values, source=as_node or actor, reason=reason)
            if as_node is not None:
                events = self._as_node(fold, as_node, events, actor)
            decide(fold.state, events, seq=fold.seq)
            return await journal_for(self.store).append(
                thread_id, events, expected_seq=fold.seq, actor=actor, claim=claim
            )
        finally:
            with contextlib.suppress(StoreError):
                await self.store.release(claim)

    def _as_node(self, fold: Fold[S], node: str, edit: list[Event], actor: str) -> list[Event]:
        """The edit as `node`'s output: the step advances to where `node` routes, and pauses."""
        meta = fold.state.execution_meta
        if (
            meta.status
            not in (
                ExecutionStatus.INTERRUPTED_BEFORE,
                ExecutionStatus.INTERRUPTED_AFTER,
                ExecutionStatus.ERROR,
            )
            and meta.stop_current_execution != StopRequestStatus.STOPPED
        ):
            raise IllegalTransitionError(
                "state_updated",
                f"as_node={node!r} applies to a paused or failed run; thread "
                f"{meta.thread_id!r} is {meta.status.value}: send it new input instead",
            )
        events: list[Event] = [Resumed(value=None, by=actor), *edit]
        scratch = Fold(fold.state, seq=fold.seq)
        scratch.apply_all(self._scratch_records(meta.thread_id, events, fold.seq))
        target = self._route(node, scratch.state)
        events.append(StepAdvanced(step=meta.step + 1, next_node=target))
        if target == END:
            why = f"not run: the run was ended by {actor!r} editing the state as {node!r}"
            known = scratch.message_ids
            events += [_not_run(c, why, known) for c in open_calls(scratch.state.context)]
            events.append(RunCompleted())
        else:
            reason = f"update_state as {node!r} by {actor!r}"
            events.append(InterruptRaised(node=target, reason=reason, when="before"))
        return events

    async def astop(self, config: Mapping[str, Any]) -> bool:
        """Ask the thread's run to stop at the next node boundary; recorded at once.

        Returns False, recording nothing, when there is nothing to stop: the run has
        completed, failed, is paused at an interrupt, or is already stopped or stopping.
        """
        thread_id = _thread_of(config)
        journal = journal_for(self.store)
        for _ in range(COMMIT_ATTEMPTS * 4):
            fold = await fold_at(self.store, thread_id, None, self.graph.state_cls)
            meta = fold.state.execution_meta
            if (
                meta.status in (ExecutionStatus.COMPLETED, ExecutionStatus.ERROR)
                or meta.is_interrupted()
                or meta.stop_current_execution != StopRequestStatus.NONE
            ):
                return False
            event = StopRequested(by=str(config.get("user", "user")))
            decide(fold.state, [event], seq=fold.seq)
            try:
                await journal.append(thread_id, [event], expected_seq=fold.seq, actor="user")
                return True
            except ConcurrencyError:
                await asyncio.sleep(0)
        raise ThreadBusyError(f"could not record a stop on thread {thread_id!r}: it kept moving")

    # ---- the blocking API ------------------------------------------------------------

    def invoke(
        self,
        input: Any = None,
        config: Mapping[str, Any] | None = None,
        response_granularity: ResponseGranularity | str = ResponseGranularity.LOW,
        *,
        include_state: bool = False,
    ) -> dict[str, Any]:
        """Blocking `ainvoke`, for code without an event loop."""
        granularity(response_granularity)  # a bad value fails here, not on the portal
        result: dict[str, Any] = self._blocking(
            self.ainvoke(input, config, response_granularity, include_state=include_state)
        )
        return result

    def stream(
        self, input: Any = None, config: Mapping[str, Any] | None = None
    ) -> Iterator[StreamChunk]:
        """Blocking `astream`."""
        portal = self._get_portal()
        yield from portal.iterate(self.astream(input, config))

    def get_state(
        self, config: Mapping[str, Any], at_step: int | None = None, at_seq: int | None = None
    ) -> S:
        """Blocking `aget_state`."""
        state: S = self._blocking(self.aget_state(config, at_step, at_seq))
        return state

    def get_state_history(self, config: Mapping[str, Any]) -> list[StepEntry]:
        """Blocking `aget_state_history`."""
        entries: list[StepEntry] = self._blocking(self.aget_state_history(config))
        return entries

    def fork(self, config: Mapping[str, Any], **point: Any) -> str:
        """Blocking `afork`."""
        return str(self._blocking(self.afork(config, **point)))

    def update_state(
        self, config: Mapping[str, Any], values: Mapping[str, Any], **how: Any
    ) -> None:
        """Blocking `aupdate_state`."""
        self._blocking(self.aupdate_state(config, values, **how))

    def stop(self, config: Mapping[str, Any]) -> bool:
        """Blocking `astop`."""
        return bool(self._blocking(self.astop(config)))

    def _blocking(self, coro: Coroutine[Any, Any, Any]) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._get_portal().call(coro)
        coro.close()
        raise RuntimeError(
            "the blocking graph methods cannot run inside an event loop: await the a-prefixed "
            "form (ainvoke, astream, aget_state, astop) instead"
        )

    def _get_portal(self) -> _Portal:
        if self._portal is None:
            self._portal = _Portal()
            weakref.finalize(self, self._portal.close)
        return self._portal

    def close(self) -> None:
        """Stop the private event loop of the blocking methods, if they started one."""
        if self._portal is not None:
            self._portal.close()
            self._portal = None

    # ---- a run -------------------------------------------------------------------------

    async def _run(
        self, input: Any, config: Mapping[str, Any] | None, stream: RunStream | None
    ) -> _Run[S]:
        config = run_config(config)
        thread_id = config["thread_id"]
        claim: Claim | None = None
        run: _Run[S] | None = None
        in_flight = InFlight()
        recorded: asyncio.Future[None] | None = None
        try:
            purpose = "a run" if self.graph.name is None else f"a run of graph {self.graph.name!r}"
            claim = await self._claim(thread_id, purpose)
            run, opening = await self._begin(input, config, stream, claim, in_flight)
            if opening:  # `run` is known first, so a cancellation here is recorded after it
                await self._commit(run, opening, actor=str(config.get("user", "user")))
            if not run.idle:
                await self._steps(run)
            if stream is not None:
                await stream.tell(
                    StreamChunk(
                        event=StreamEvent.STATE,
                        state=run.fold.snapshot_state(),
                        thread_id=thread_id,
                        run_id=run.run_id,
                    )
                )
            return run
        except asyncio.CancelledError as exc:
            if claim is None:
                raise
            why = str(exc.args[0]) if exc.args and exc.args[0] else ABANDONED_BY_CALLER
            recorded = asyncio.ensure_future(self._abandon(thread_id, run, claim, in_flight, why))
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(recorded)
            raise
        except Exception as exc:
            if stream is not None and stream.running:
                await stream.tell(
                    StreamChunk(
                        event=StreamEvent.ERROR,
                        thread_id=thread_id,
                        data={"error": type(exc).__name__, "message": str(exc)},
                    )
                )
            raise
        finally:
            # Shielded: a cancellation arriving now must not leave the thread claimed.
            closing = asyncio.ensure_future(
                self._close_run(run, claim, in_flight, stream, recorded)
            )
            await asyncio.shield(closing)

    async def _claim(self, thread_id: str, purpose: str) -> Claim:
        """Claim the thread; a cancellation mid-claim still gives back a claim it obtained."""
        claiming = asyncio.ensure_future(self.store.claim(thread_id, purpose=purpose))
        try:
            return await asyncio.shield(claiming)
        except asyncio.CancelledError:
            claiming.add_done_callback(self._give_back)
            raise

    def _give_back(self, claiming: asyncio.Future[Claim]) -> None:
        if not claiming.cancelled() and claiming.exception() is None:
            task = asyncio.ensure_future(self.store.release(claiming.result()))
            task.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def _close_run(
        self,
        run: _Run[S] | None,
        claim: Claim | None,
        in_flight: InFlight,
        stream: RunStream | None,
        recorded: asyncio.Future[None] | None,
    ) -> None:
        """After a run, however it ended: stop its actors and snapshots, free the thread."""
        if recorded is not None:
            with contextlib.suppress(BaseException):
                await recorded
        if run is not None:
            for actor in run.actors.values():
                await actor.stop(drain=False)
            if run.background:
                await asyncio.gather(*run.background, return_exceptions=True)
        if claim is not None:
            await self._release(claim, in_flight)
        if stream is not None:
            with contextlib.suppress(ActorStoppedError):
                await stream.tell(END_OF_STREAM)

    async def _release(self, claim: Claim, in_flight: InFlight) -> None:
        """Give the thread up, or, while sync work of the run still runs, once it returns."""
        running = in_flight.running()
        if running:
            with contextlib.suppress(StoreError):
                await self.store.relabel(
                    claim,
                    f"{', '.join(running)} of an earlier run, still running on a worker thread",
                )
            in_flight.when_idle(partial(self.store.release_threadsafe, claim))
            return
        with contextlib.suppress(StoreError):
            await self.store.release(claim)

    async def _abandon(
        self,
        thread_id: str,
        run: _Run[S] | None,
        claim: Claim,
        in_flight: InFlight,
        why: str,
    ) -> None:
        """Record that the caller went away mid-run, and what was in flight: a stop.

        Tool calls started and not finished are closed as abandoned (their results, if they
        ever come, are discarded), so no later run starts them again.
        """
        if run is not None:
            for actor in run.actors.values():
                await actor.stop(drain=False)  # an async node is cancelled for real
            if run.committing is not None:
                with contextlib.suppress(BaseException):
                    await run.committing  # a commit under way lands first: record after it
        for _ in range(COMMIT_ATTEMPTS):
            if await self.store.last_seq(thread_id) == 0:
                return  # nothing was written: there is no run to record
            fold = await self._load(thread_id)
            meta = fold.state.execution_meta
            paused = (
                meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED
            )
            if paused or meta.status in (ExecutionStatus.COMPLETED, ExecutionStatus.ERROR):
                return  # the run had already come to rest
            never_ran = run.never_ran() if run is not None else set()
            events: list[Event] = list(_abandoned_calls(meta, why, never_ran))
            if meta.stop_current_execution == StopRequestStatus.NONE:
                events.append(StopRequested(by="runtime", reason=why))
            events.append(
                Stopped(
                    node=meta.current_node,
                    reason=f"abandoned: {why}",
                    in_flight=in_flight.running(),
                )
            )
            run_id = run.run_id if run is not None else meta.internal_data.get("run_id")
            try:
                decide(fold.state, events, seq=fold.seq)
                await journal_for(self.store).append(
                    thread_id,
                    events,
                    expected_seq=fold.seq,
                    run_id=run_id,
                    actor="runtime",
                    claim=claim,
                )
                return
            except ConcurrencyError:
                continue  # a commit of the run landed after all: look again
            except Exception as exc:
                _log.warning(
                    "could not record that the run on %r was abandoned: %s", thread_id, exc
                )
                return

    async def _begin(
        self,
        input: Any,
        config: dict[str, Any],
        stream: RunStream | None,
        claim: Claim,
        in_flight: InFlight,
    ) -> tuple[_Run[S], list[Event]]:
        """The run to make of this call, and the events that open it (to be committed)."""
        thread_id = config["thread_id"]
        command = input if isinstance(input, Command) else None
        if command is not None and command.goto is not None:
            raise GraphError("Command(goto=...) is for nodes to return, not an input to invoke")
        values = normalize_input(command.update if command is not None else input)
        if values is not None and not isinstance(values, Mapping | AgentState | list):
            raise GraphError(
                f"ainvoke's input must be a message (a str, a Message, an OpenAI-style dict), "
                f"a list of messages, a dict of state fields, or None to resume; got "
                f"{type(values).__name__} {values!r:.60}"
            )
        fold = await self._load(thread_id)
        if fold.seq == 0 and values is None:
            raise ThreadNotFoundError(thread_id)
        meta = fold.state.execution_meta
        user = str(config.get("user", "user"))
        run = _Run(
            thread_id,
            str(meta.internal_data.get("run_id") or ""),
            config,
            fold,
            journal_for(self.store),
            stream,
            claim=claim,
            in_flight=in_flight,
            recursion_limit=_recursion_limit(config, self.recursion_limit),
        )
        resume = command.resume if command is not None else None
        paused = meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED
        if meta.status == ExecutionStatus.COMPLETED and values is None and resume is None:
            run.idle = True  # nothing new to do: a finished thread stays as it is
            return run, []
        resuming = paused or meta.status == ExecutionStatus.ERROR
        if resume is not None and not resuming:
            raise IllegalTransitionError(
                "resumed",
                f"thread {thread_id!r} is not paused or failed: there is nothing to resume",
            )
        inputs = (
            output_events("user", values, fold.state, known=fold.message_ids)[0]
            if values is not None
            else []
        )
        waiting = _waiting_remote(fold.state) if paused else []
        if waiting and _answers_any(inputs, waiting):
            # The client ran its tool calls: their results resume the run where it paused.
            run.own.update(_appended_ids(inputs))
            answered = _answered_ids(inputs)
            resumed: list[Event] = [Resumed(value=None, by=user), *inputs]
            why = "not run: the client answered other calls of this message but not this one"
            known = fold.message_ids
            resumed += [_not_run(c, why, known) for c in waiting if c.id not in answered]
            return run, resumed
        if waiting and not inputs:
            names = ", ".join(f"{c.name} ({c.id})" for c in waiting)
            raise GraphError(
                f"thread {thread_id!r} waits for the results of client tool call(s) {names}: "
                "invoke it with tool messages answering them, such as {'role': 'tool', "
                "'tool_call_id': <id>, 'content': <result>}; other input rejects them and "
                "starts a new run"
            )
        answers = await self._answer_pending(fold) if resume is None and inputs else []
        events: list[Event] = []
        if fold.seq == 0 or meta.status == ExecutionStatus.COMPLETED or answers:
            run.run_id = f"run-{uuid.uuid4().hex[:12]}"
            events.extend(answers)
            events.append(
                RunStarted(
                    entry_node=self.graph.edges[START],
                    graph=self.graph.name,
                    fields=state_fields(self.graph.state_cls),
                )
            )
        elif resuming:
            events.append(Resumed(value=to_builtins(resume), by=user))
            if meta.status == ExecutionStatus.INTERRUPTED_BEFORE:
                run.skip_interrupt_before = meta.interrupted_node
        else:
            run.cut_short = True  # a run that was cut short: carry on where the log stops
        events.extend(inputs)
        if not run.run_id:
            run.run_id = f"run-{uuid.uuid4().hex[:12]}"
        return run, events

    async def _answer_pending(self, fold: Fold[S]) -> list[Event]:
        """Results for the tool calls a paused, stopped or failed run still owes.

        New input while a run waits at its tool node means the person answered instead of
        letting the calls run: each call that finished gets its recorded result, each one
        that never ran a result saying so, so the transcript stays valid for every model
        provider; then a new run starts from the entry node with the new input.
        """
        meta = fold.state.execution_meta
        resting = (
            meta.is_interrupted()
            or meta.stop_current_execution == StopRequestStatus.STOPPED
            or meta.status == ExecutionStatus.ERROR
        )
        if not resting:
            return []
        remote = _waiting_remote(fold.state) if meta.is_interrupted() else []
        if remote:
            why = "not run: the user replied instead of the client answering this call"
            return [_not_run(c, why, fold.message_ids) for c in remote]
        before = meta.status == ExecutionStatus.INTERRUPTED_BEFORE
        node = meta.interrupted_node if before else meta.current_node  # where it would go on
        if node not in self.graph.nodes or not is_tool_node(self.graph.nodes[node]):
            return []
        calls = pending_calls(fold.state)
        if not calls:
            return []
        finished: dict[str, ToolCallFinished] = {}
        entered = meta.internal_data.get(ENTERED_KEY)
        if entered and entered["node"] == node:
            async for record in self.store.read(meta.thread_id or "", entered["seq"] + 1):
                if isinstance(record.event, ToolCallFinished):
                    finished[record.event.call_id] = record.event
        why = "not run: the user replied before it was approved"
        return [
            _result_appended(
                tool_message(finished[c.id]) if c.id in finished else rejected_message(c, why),
                fold.message_ids,
            )
            for c in calls
        ]

    async def _steps(self, run: _Run[S]) -> None:
        while True:
            meta = run.fold.state.execution_meta
            node = meta.current_node
            if meta.is_stopped_requested():
                await self._commit(run, [self._stop_between(run, node)], actor="runtime")
                return
            if node == END:
                await self._complete(run)
                return
            entered = meta.internal_data.get(ENTERED_KEY)
            passed = node == run.skip_interrupt_before or (entered and entered["node"] == node)
            if node in self.interrupt_before and not passed:
                event = InterruptRaised(node=node, reason="interrupt_before", when="before")
                await self._commit(run, [event], actor="runtime")
                return
            run.skip_interrupt_before = None
            if run.taken >= run.recursion_limit:
                message = (
                    f"run {run.run_id} on thread {run.thread_id!r} reached its recursion limit "
                    f"of {run.recursion_limit} steps before node {node!r}; raise "
                    "recursion_limit in compile() or in the call's config if the graph really "
                    "needs more"
                )
                await self._commit(
                    run,
                    [RunFailed(node=node, error_type="RecursionLimitError", message=message)],
                    actor="runtime",
                )
                raise RecursionLimitError(message)
            if node not in self.graph.nodes:
                raise GraphError(f"thread {run.thread_id!r} is at node {node!r}, not in this graph")
            await self._step(run, node)
            run.taken += 1
            meta = run.fold.state.execution_meta
            if meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED:
                return

    def _entering(self, run: _Run[S], tail: Sequence[Event], target: str) -> list[Event]:
        """The events entering `target` in the same commit as the step before it, when it is
        sure to run next: its `node_entered`, and, for a tool node, the start of each call.

        Not when the run pauses, ends, stops or reaches its recursion limit first, or when
        `target` has a breakpoint before it: then the next step enters it on its own.
        """
        meta = run.fold.state.execution_meta
        if (
            target == END
            or target not in self.graph.nodes
            or target in self.interrupt_before
            or meta.status != ExecutionStatus.RUNNING
            or meta.stop_current_execution != StopRequestStatus.NONE
            or run.taken + 1 >= run.recursion_limit
            or any(isinstance(e, InterruptRaised) for e in tail)
        ):
            return []
        events: list[Event] = [NodeEntered(node=target)]
        if is_tool_node(self.graph.nodes[target]):
            events += [
                ToolCallStarted(call_id=c.id, name=c.name, args=to_builtins(c.args), node=target)
                for c in pending_calls(run.fold.state)
            ]
        return events

    @staticmethod
    def _stop_between(run: _Run[S], node: str) -> Stopped:
        """The stop of a run between nodes: after the node this call ran last, if any."""
        if run.last_node is not None:
            return Stopped(node=run.last_node, when="after")
        return Stopped(node=node, when="before")

    async def _complete(self, run: _Run[S]) -> None:
        """End the run; a tool call still open gets a result saying it never ran, first."""
        waiting = open_calls(run.fold.state.context)
        why = "not run: the graph reached its end without running this call"
        known = run.fold.message_ids
        events: list[Event] = [_not_run(c, why, known) for c in waiting]
        if waiting:
            _log.warning(
                "run %s on thread %r ended with tool call(s) %s unanswered: recorded as not run "
                "(route assistant messages with tool calls to a ToolNode)",
                run.run_id,
                run.thread_id,
                ", ".join(c.id for c in waiting),
            )
        await self._commit(run, [*events, RunCompleted()], actor="runtime")

    async def _step(self, run: _Run[S], node: str) -> None:
        meta = run.fold.state.execution_meta
        entered = meta.internal_data.get(ENTERED_KEY)
        ahead, run.ahead = run.ahead, None
        step_records: list[EventRecord] = []
        if ahead is not None and ahead[0] == node:
            step_records = ahead[1]  # entered by the last step's commit, with its tool calls
        elif entered and entered["node"] == node:
            # The node's step began before (a crash, a pause, a failure): let the node see
            # what it committed then (a tool node's finished calls). After a crash the step
            # simply goes on; after a pause or a failure the log shows the node entered again.
            step_records = [r async for r in self.store.read(run.thread_id, entered["seq"] + 1)]
            if not run.cut_short:
                await self._commit(run, [NodeEntered(node=node)], actor=node)
        else:
            await self._commit(run, [NodeEntered(node=node)], actor=node)
        run.cut_short = False
        resume = resume_values(run.fold.state.execution_meta.internal_data.get(RESUME_KEY))
        context = NodeContext(
            run.thread_id,
            run.run_id,
            node,
            partial(self._commit, run, actor=node),
            step_records,
            run.in_flight,
            run.dispatched,
        )
        actor = self._node_actor(run, node)
        requests: list[tuple[str, tuple[Any, ...]]] = []
        try:
            guard = _Guard(self.store, run, node, actor, self._timeout_of(run, node))
            try:
                output = await actor.ask(
                    RunNode(self._view(run.fold.state, requests), run.config, context, resume)
                )
            except GraphInterrupt as signal:
                guard.disarm()
                event = InterruptRaised(
                    node=node,
                    reason=str(signal.reason),
                    when="before",
                    data=to_builtins(signal.data),
                    by_node=True,
                )
                await self._commit(run, [event], actor=node)
                return
            except ActorStoppedError:
                if guard.disarm() is None:
                    raise
                await self._cut(run, node, guard)
                return
            guard.disarm()
            events, goto = output_events(
                node,
                output,
                run.fold.state,
                known=run.fold.message_ids,
                waiting={c.id for c in pending_calls(run.fold.state)},
                append=is_tool_node(self.graph.nodes[node]),
            )
            goto, pause, ending = _requested(node, requests, goto)
            await self._commit_step(run, node, events, goto, pause, ending=ending)
            run.last_node = node
        except (ThreadBusyError, asyncio.CancelledError, NodeTimeoutError):
            raise
        except Exception as exc:
            run.fold = await self._load(run.thread_id)
            failed = RunFailed(node=node, error_type=type(exc).__name__, message=str(exc))
            await self._commit(run, [failed], actor="runtime")
            if isinstance(exc, GraphError):
                raise  # the graph's wiring is at fault (a condition, a goto), and says where
            raise NodeError(node, exc) from exc

    def _timeout_of(self, run: _Run[S], node: str) -> float | None:
        """The node's time limit: its own, else the call's `node_timeout`, else the graph's."""
        if node in self.node_timeouts:
            return self.node_timeouts[node]
        return _timeout(run.config.get("node_timeout", self.node_timeout), "node_timeout")

    async def _cut(self, run: _Run[S], node: str, guard: _Guard) -> None:
        """Record a node cut short by a stop (paused before it) or by its time limit (failed).

        A commit the node had under way lands first; tool calls it had started are closed
        as abandoned, so no later run starts them again.
        """
        if run.committing is not None:
            with contextlib.suppress(BaseException):
                await run.committing
        await guard.stopped()
        run.fold = await self._load(run.thread_id)
        meta = run.fold.state.execution_meta
        if guard.fired == "stop":
            why = "a stop request cancelled the node"
            events: list[Event] = [
                *_abandoned_calls(meta, why, run.never_ran()),
                Stopped(node=node, when="before", in_flight=run.in_flight.running()),
            ]
            await self._commit(run, events, actor="runtime")
            return
        limit = guard.timeout or 0.0
        error = NodeTimeoutError(node, limit)
        why = f"node {node!r} ran past its timeout of {limit:g}s"
        failed = RunFailed(node=node, error_type="NodeTimeoutError", message=f"{why}; retryable")
        closing = _abandoned_calls(meta, why, run.never_ran())
        await self._commit(run, [*closing, failed], actor="runtime")
        raise error

    async def _commit_step(
        self,
        run: _Run[S],
        node: str,
        events: list[Event],
        goto: str | None,
        pause: InterruptRaised | None = None,
        *,
        ending: bool = False,
    ) -> None:
        """Outputs, `step_advanced` and any pause after the node, in one commit.

        The pause is the node's own (`state.set_interrupt`), else a wait for the client's
        tool calls the node's messages ask for, else an `interrupt_after` breakpoint.
        `ending` (the node called `state.complete()`) sends the run to END.
        """
        async with run.writing:
            await self._commit_step_unlocked(run, node, events, goto, pause, ending)

    async def _commit_step_unlocked(
        self,
        run: _Run[S],
        node: str,
        events: list[Event],
        goto: str | None,
        pause: InterruptRaised | None,
        ending: bool = False,
    ) -> None:
        for _ in range(COMMIT_ATTEMPTS):
            fold = run.fold
            base = fold.seq
            decide(fold.state, events, seq=base)
            fold.apply_all(self._scratch(run, events, base))  # routing sees the updated state
            if ending:
                target = END
            else:
                target = goto if goto is not None else self._route(node, fold.state)
                if goto is not None:
                    self.graph.check_goto(node, goto)
            if target != END and target not in self.graph.nodes:
                run.fold = await self._load(run.thread_id)
                raise GraphError(f"node {node!r} chose to go to {target!r}, which is no node")
            remote = _remote_calls(events)
            if remote and pause is None and target == END:
                target = node  # the results come back to the node that asked for them
            tail: list[Event] = [
                StepAdvanced(step=fold.state.execution_meta.step + 1, next_node=target)
            ]
            if pause is not None:
                tail.append(pause)
            elif remote:
                data = {"tool_calls": [to_builtins(c) for c in remote]}
                tail.append(
                    InterruptRaised(node=node, reason=REMOTE_TOOL_CALL, when="after", data=data)
                )
            elif node in self.interrupt_after:
                tail.append(InterruptRaised(node=node, reason="interrupt_after", when="after"))
            decide(fold.state, tail, seq=base + len(events))
            fold.apply_all(self._scratch(run, tail, base + len(events)))
            entering = self._entering(run, tail, target)
            if entering:
                at = base + len(events) + len(tail)
                decide(fold.state, entering, seq=at)
                fold.apply_all(self._scratch(run, entering, at))
                tail.extend(entering)
            batch = [*events, *tail]
            try:
                records = await self._append(run, batch, base, node)
            except ConcurrencyError:
                await self._catch_up(run, base)
                continue
            except BaseException:
                run.fold = await self._load(run.thread_id)
                raise
            fold.seq, fold.hash = records[-1].seq, records[-1].hash
            if any(r.event != e for r, e in zip(records, batch, strict=True)):
                run.fold = await self._load(run.thread_id)  # keep the canonical decoded values
            if entering:
                run.ahead = (target, records[len(records) - len(entering) + 1 :])
                run.started_ahead.update(
                    e.call_id for e in entering if isinstance(e, ToolCallStarted)
                )
            await self._after_commit(run, records)
            return
        raise ThreadBusyError(f"thread {run.thread_id!r} kept moving under node {node!r}")

    async def _commit(
        self, run: _Run[S], events: Sequence[Event], *, actor: str
    ) -> list[EventRecord]:
        """Decide, append and fold `events`; a concurrent stop request is folded in first."""
        async with run.writing:
            return await self._commit_unlocked(run, events, actor=actor)

    async def _commit_unlocked(
        self, run: _Run[S], events: Sequence[Event], *, actor: str
    ) -> list[EventRecord]:
        for _ in range(COMMIT_ATTEMPTS):
            decide(run.fold.state, events, seq=run.fold.seq)
            try:
                records = await self._append(run, events, run.fold.seq, actor)
            except ConcurrencyError:
                await self._catch_up(run, run.fold.seq)
                continue
            run.fold.apply_all(records)
            await self._after_commit(run, records)
            return records
        raise ThreadBusyError(f"thread {run.thread_id!r} kept moving while {actor!r} wrote to it")

    @staticmethod
    async def _append(
        run: _Run[S], events: Sequence[Event], expected_seq: int, actor: str
    ) -> list[EventRecord]:
        """Append under the run's claim; if the run is cancelled meanwhile, the append goes
        on and `run.committing` lets the abandon record wait for it."""
        run.committing = asyncio.ensure_future(
            run.journal.append(
                run.thread_id,
                events,
                expected_seq=expected_seq,
                run_id=run.run_id,
                actor=actor,
                claim=run.claim,
            )
        )
        return await asyncio.shield(run.committing)

    async def _catch_up(self, run: _Run[S], since: int) -> None:
        """Reload after another writer appended; only a stop request may come from outside."""
        async for record in self.store.read(run.thread_id, since + 1):
            if not isinstance(record.event, StopRequested):
                same_run = "the same run id" if record.run_id == run.run_id else "another run id"
                raise ThreadBusyError(
                    f"thread {run.thread_id!r} was changed by another writer ({record.actor!r} "
                    f"appended {record.kind!r} at seq {record.seq}, under {same_run}) while run "
                    f"{run.run_id} expected the thread to end at seq {since}; two runs must not "
                    "share a thread at once"
                )
        run.fold = await self._load(run.thread_id)

    async def _after_commit(self, run: _Run[S], records: list[EventRecord]) -> None:
        for record in records:
            if isinstance(record.event, MessageAppended):
                run.own.add(record.event.message.get("message_id"))  # type: ignore[arg-type]
        if run.stream is not None:
            await self._publish(run, records)
        every = self.snapshot_every
        if every and run.fold.seq // every > run.last_snapshot // every:
            run.last_snapshot = run.fold.seq
            snapshot = snapshot_of(run.thread_id, run.fold.seq, run.fold.state, hash=run.fold.hash)
            task = asyncio.ensure_future(self.store.save_snapshot(snapshot))
            run.background.add(task)
            task.add_done_callback(partial(_snapshot_done, run.background))

    async def _publish(self, run: _Run[S], records: list[EventRecord]) -> None:
        assert run.stream is not None
        for record in records:
            event = record.event
            if record.kind == "message_appended":
                message = Message.model_validate(event.message)  # type: ignore[union-attr]
                chunk = StreamChunk(
                    event=StreamEvent.MESSAGE,
                    message=message,
                    thread_id=run.thread_id,
                    run_id=run.run_id,
                )
            elif record.kind in (
                "step_advanced",
                "state_updated",
                "messages_removed",
                "messages_replaced",
                "message_replaced",
                "context_summarized",
                "interrupt_raised",
                "run_completed",
                "stopped",
                "run_failed",
            ):
                data = {
                    "kind": record.kind,
                    "seq": record.seq,
                    "actor": record.actor,
                    **msgspec.to_builtins(event, builtin_types=(bytes, bytearray)),
                }
                chunk = StreamChunk(
                    event=StreamEvent.UPDATES, data=data, thread_id=run.thread_id, run_id=run.run_id
                )
            else:
                continue
            await run.stream.tell(chunk)

    # ---- helpers -----------------------------------------------------------------------

    def _route(self, node: str, state: S) -> str:
        if node in self.graph.edges:
            return self.graph.edges[node]
        branch = self.graph.branches.get(node)
        if branch is None:
            return END
        target = branch.resolve(branch.condition(self._view(state)), node)
        if target != END and target not in self.graph.nodes:
            raise GraphError(f"the condition after {node!r} chose {target!r}, which is no node")
        return target

    @staticmethod
    def _scratch(run: _Run[S], events: Sequence[Event], base: int) -> list[EventRecord]:
        return CompiledGraph._scratch_records(run.thread_id, events, base)

    @staticmethod
    def _scratch_records(
        thread_id: str | None, events: Sequence[Event], base: int
    ) -> list[EventRecord]:
        return [uncommitted_record(e, base + i + 1, thread_id) for i, e in enumerate(events)]

    @staticmethod
    def _view(state: S, requests: list[tuple[str, tuple[Any, ...]]] | None = None) -> S:
        """What a node or condition sees: a copy it may change without touching the log's state.

        With `requests`, the copy's state methods note what the node asks of the run there.
        """
        view = state.model_copy()
        view.context = CopyOnRead(state.context)
        view.execution_meta = copy_meta(state.execution_meta)
        view.execution_meta._requests = requests
        for name in type(state).model_fields:
            if name not in ("context", "execution_meta", "context_summary"):
                setattr(view, name, copy.deepcopy(getattr(state, name)))
        return view

    def _node_actor(self, run: _Run[S], node: str) -> NodeActor:
        """The run's actor for `node`, started on first use and stopped when the run ends.

        A node's concurrency limit holds across all runs of this graph on the event loop:
        its actors share one semaphore.
        """
        actor = run.actors.get(node)
        if actor is None:
            limit = self.node_concurrency.get(node)
            slots = None
            if limit is not None:
                per_loop = self._slots.setdefault(asyncio.get_running_loop(), {})
                slots = per_loop.setdefault(node, asyncio.Semaphore(limit))
            actor = NodeActor(node, self.graph.nodes[node], self.graph.dependencies, slots=slots)
            run.actors[node] = actor.start()
        return actor

    async def _load(self, thread_id: str) -> Fold[S]:
        if await self.store.last_seq(thread_id) == 0:
            return Fold.new(self.graph.state_cls)
        return await fold_at(self.store, thread_id, state_cls=self.graph.state_cls)


ABANDONED_BY_CALLER = (
    "the caller stopped waiting (task.cancel(), a timeout around ainvoke, or a server dropping "
    "the request)"
)


REMOTE_TOOL_CALL = "remote_tool_call"
"""The interrupt reason of a run waiting for the results of its client's tool calls."""

STOP_POLL_S = 0.25
"""How often a running node's run looks in the log for a stop request (after this long)."""


class _Guard:
    """Watches a running node: its time limit, and a stop request landing in the log.

    Either cuts the node short by stopping its actor: an async node is cancelled, a sync
    one abandoned on its worker thread. Nodes quicker than `STOP_POLL_S` cost one timer.
    """

    def __init__(
        self,
        store: EventStore,
        run: _Run[Any],
        node: str,
        actor: NodeActor,
        timeout: float | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.store, self.run, self.node, self.actor, self.timeout = store, run, node, actor, timeout
        self.fired: str | None = None
        self.armed = True
        self._stopping: asyncio.Future[None] | None = None
        self._poll: asyncio.Task[None] | None = None
        self._timers = [loop.call_later(STOP_POLL_S, self._start_polling)]
        if timeout is not None:
            self._timers.append(loop.call_later(timeout, self._fire, "timeout"))

    def disarm(self) -> str | None:
        """Stop watching; say what cut the node short, if anything did."""
        self.armed = False
        for timer in self._timers:
            timer.cancel()
        if self._poll is not None and not self._poll.done():
            self._poll.cancel()
        return self.fired

    async def stopped(self) -> None:
        """Wait until the node's actor has stopped (its async work is cancelled)."""
        if self._stopping is not None:
            with contextlib.suppress(BaseException):
                await self._stopping

    def _fire(self, why: str) -> None:
        if self.armed and self.fired is None:
            self.fired = why
            self.run.actors.pop(self.node, None)  # a later step of the node gets a new one
            self._stopping = asyncio.ensure_future(self.actor.stop(drain=False))

    def _start_polling(self) -> None:
        if self.armed:
            self._poll = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        try:
            while self.armed:
                async for record in self.store.read(self.run.thread_id, self.run.fold.seq + 1):
                    if isinstance(record.event, StopRequested):
                        self._fire("stop")
                        return
                await asyncio.sleep(STOP_POLL_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the step's own commit will meet the same trouble
            _log.warning("stop watch on thread %r ended: %s", self.run.thread_id, exc)


def _requested(
    node: str, requests: Sequence[tuple[str, tuple[Any, ...]]], goto: str | None
) -> tuple[str | None, InterruptRaised | None, bool]:
    """What a node asked of the run through its state's methods: failing, a pause, the end."""
    pause: InterruptRaised | None = None
    ending = False
    for method, args in requests:
        if method == "error":
            raise NodeReportedError(str(args[0]))
        if method == "complete":
            if goto is not None and goto != END:
                raise GraphError(
                    f"node {node!r} called state.complete() and returned Command(goto="
                    f"{goto!r}): do one or the other"
                )
            ending = True
        elif method == "set_interrupt":
            at, reason, status, data = args
            after = status == ExecutionStatus.INTERRUPTED_AFTER
            pause = InterruptRaised(
                node=at, reason=reason, when="after" if after else "before", data=to_builtins(data)
            )
    return goto, pause, ending


def _abandoned_calls(meta: Any, why: str, never_ran: set[str]) -> list[ToolCallFinished]:
    """Results closing the tool calls started and not finished: abandoned, never rerun.

    A call in `never_ran` (recorded as started with the step before its tool node, and
    never handed to its tool) is said not to have run.
    """
    closing = []
    for call_id, name in meta.internal_data.get(TOOL_CALLS_KEY, {}).items():
        if call_id in never_ran:
            error = f"abandoned: {why}, before its tool node ran it; the call never started"
        else:
            error = (
                f"abandoned: {why}; the call had started and any result it returns is "
                "discarded, so whether it took effect is unknown"
            )
        closing.append(
            ToolCallFinished(call_id=call_id, name=str(name), status="abandoned", error=error)
        )
    return closing


def _remote_calls(events: Sequence[Event]) -> list[RemoteToolCallBlock]:
    """The client's tool calls that the messages of `events` ask for and do not answer."""
    calls: list[RemoteToolCallBlock] = []
    answered: set[Any] = set()
    for event in events:
        if isinstance(event, MessageAppended):
            for block in event.message.get("content") or ():
                kind = block.get("type") if isinstance(block, dict) else None
                if kind == "remote_tool_call" and event.message.get("role") == "assistant":
                    calls.append(RemoteToolCallBlock.model_validate(block))
                elif kind == "tool_result":
                    answered.add(block.get("call_id"))
    return [c for c in calls if c.id not in answered]


def _not_run(
    call: ToolCallBlock | RemoteToolCallBlock, why: str, known: Container[str | int]
) -> MessageAppended:
    """The result of a call that never ran, `why` telling the model so."""
    block = ToolCallBlock(id=call.id, name=call.name, args=call.args)
    return _result_appended(rejected_message(block, why), known)


def _result_appended(message: Message, known: Container[str | int]) -> MessageAppended:
    """A tool result joining the context, under an id of its own (a model may reuse a call
    id in a later turn, and the derived id of its earlier result is taken)."""
    fresh = unique_id(message.message_id, known)
    if fresh != message.message_id:
        message = message.model_copy(update={"message_id": fresh})
    return message_appended(message)


def _waiting_remote(state: AgentState) -> list[RemoteToolCallBlock]:
    """The client's tool calls the context still waits for."""
    return [c for c in open_calls(state.context) if isinstance(c, RemoteToolCallBlock)]


def _answered_ids(events: Sequence[Event]) -> set[Any]:
    return {
        block.get("call_id")
        for event in events
        if isinstance(event, MessageAppended)
        for block in event.message.get("content") or ()
        if isinstance(block, dict) and block.get("type") == "tool_result"
    }


def _answers_any(events: Sequence[Event], calls: Sequence[RemoteToolCallBlock]) -> bool:
    return bool(_answered_ids(events) & {c.id for c in calls})


def _appended_ids(events: Sequence[Event]) -> list[Any]:
    return [e.message.get("message_id") for e in events if isinstance(e, MessageAppended)]


def _timeout(value: Any, what: str) -> float | None:
    """A time limit in seconds, or None for none; anything else is refused by name."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise GraphError(f"{what} must be a number of seconds > 0, or None; got {value!r}")
    return float(value)


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
                    f"the config names two threads ({thread_id!r} and configurable "
                    f"{other!r}): pass the thread id once"
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


def _snapshot_done(tasks: set[asyncio.Task[None]], task: asyncio.Task[None]) -> None:
    tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        _log.warning("snapshot failed: %s", task.exception())


class CopyOnRead(list[Message]):
    """The context as a node sees it: each message it reads is its own copy.

    Copying only what is read keeps a step's cost flat as the conversation grows, and a
    node that edits a message in place cannot reach the log's state.
    """

    def __getitem__(self, index: Any) -> Any:
        item = super().__getitem__(index)
        if isinstance(index, slice):
            return CopyOnRead(item)
        return item.model_copy(deep=True)

    def __iter__(self) -> Iterator[Message]:
        for item in super().__iter__():
            yield item.model_copy(deep=True)

    def __reversed__(self) -> Iterator[Message]:
        for item in super().__reversed__():
            yield item.model_copy(deep=True)

    def copy(self) -> list[Message]:
        return list(self)

    def pop(self, index: Any = -1) -> Message:
        return super().pop(index).model_copy(deep=True)

    def originals(self) -> Iterator[Message]:
        """The messages themselves, for the runtime's own read-only passes."""
        return super().__iter__()


class _Portal:
    """A private event loop in a daemon thread, serving the blocking methods."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="agentlog-portal", daemon=True
        )
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run `coro` on the portal's loop and wait; Ctrl-C abandons it, recorded as such.

        On Ctrl-C (or any exception in the waiting thread) the task is cancelled with the
        cause as its reason, and given a moment to record how the run ended before the
        exception goes on; a second Ctrl-C skips that wait.
        """
        done = threading.Event()
        tasks: list[asyncio.Task[Any]] = []

        def start() -> None:
            task = self.loop.create_task(coro)
            task.add_done_callback(lambda _: done.set())
            tasks.append(task)

        self.loop.call_soon_threadsafe(start)
        try:
            done.wait()
        except BaseException as exc:
            cause = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else type(exc).__name__
            why = f"{cause} interrupted the blocking call waiting for the run"
            self.loop.call_soon_threadsafe(lambda: tasks[0].cancel(why))
            done.wait(CANCEL_GRACE_S)
            raise
        return tasks[0].result()

    def iterate(self, agen: AsyncGenerator[StreamChunk, None]) -> Iterator[StreamChunk]:
        try:
            while True:
                try:
                    yield self.call(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self.call(agen.aclose())

    def close(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
