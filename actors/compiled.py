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
from collections.abc import AsyncGenerator, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, TypeVar

import msgspec

from events import (
    ConcurrencyError,
    EventRecord,
    EventStore,
    InterruptRaised,
    MemoryEventStore,
    NodeEntered,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    StepAdvanced,
    Stopped,
    StopRequested,
    ThreadNotFoundError,
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
    StateDiff,
    StepEntry,
    StopRequestStatus,
    StreamChunk,
    StreamEvent,
    decide,
    diff,
    event_history,
    fold_at,
    fork,
    snapshot_of,
    state_at_point,
    state_history,
    to_builtins,
    update_state,
)
from projections.fold import ENTERED_KEY, RESUME_KEY, copy_meta, uncommitted_record

from ._actor import ActorStoppedError
from .context import NodeContext
from .errors import GraphError, GraphInterrupt, NodeError, RecursionLimitError, ThreadBusyError
from .graph import Command, StateGraph
from .journal import Journal, journal_for
from .nodes import NodeActor, RunNode, output_events, resume_marker
from .stream import END_OF_STREAM, RunStream

S = TypeVar("S", bound=AgentState)
_log = logging.getLogger("agentlog.runtime")
_NO_RESUME = resume_marker()
DEFAULT_RECURSION_LIMIT = 25
COMMIT_ATTEMPTS = 5


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
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Commits of one run go one at a time (a tool node's calls finish concurrently)."""


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
    ) -> None:
        graph.check()
        for name in (*interrupt_before, *interrupt_after, *(node_concurrency or {})):
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
        self._slots: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]
        ] = weakref.WeakKeyDictionary()
        self._portal: _Portal | None = None

    # ---- the async API ---------------------------------------------------------------

    async def ainvoke(
        self,
        input: Any = None,
        config: Mapping[str, Any] | None = None,
        *,
        include_state: bool = False,
    ) -> dict[str, Any]:
        """Run (or resume) the thread until it ends, pauses or fails; return its messages."""
        run = await self._run(input, config, stream=None)
        return self._result(run.fold.state, include_state)

    async def astream(
        self, input: Any = None, config: Mapping[str, Any] | None = None
    ) -> AsyncGenerator[StreamChunk, None]:
        """Run like `ainvoke`, yielding message, update and state chunks as they commit."""
        stream = RunStream(str((config or {}).get("thread_id", "new"))).start()
        chunks = stream.subscribe()
        task = asyncio.ensure_future(self._run(input, config, stream=stream))
        try:
            while True:
                chunk = await chunks.get()
                if chunk is END_OF_STREAM:
                    break
                yield chunk
            await task
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await stream.stop(drain=False)

    async def aget_state(
        self,
        config: Mapping[str, Any],
        at_step: int | None = None,
        at_seq: int | None = None,
    ) -> S:
        """The thread's state, now or at a past step or seq, read from the log."""
        thread_id = _thread_of(config)
        if at_step is None and at_seq is None:
            fold = await self._load(thread_id)
            return fold.state
        return await state_at_point(
            self.store, thread_id, self.graph.state_cls, at_step=at_step, at_seq=at_seq
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
        """A human edit of the thread's state, recorded as who changed what and why."""
        thread_id = _thread_of(config)
        if thread_id in _busy_threads(self.store):
            raise ThreadBusyError(f"thread {thread_id!r} is running: edit it once it pauses")
        if as_node is not None and as_node not in self.graph.nodes:
            raise GraphError(f"as_node={as_node!r} is not a node of the graph")
        return await update_state(
            self.store,
            thread_id,
            values,
            as_node=as_node,
            actor=actor,
            reason=reason,
            state_cls=self.graph.state_cls,
        )

    async def astop(self, config: Mapping[str, Any]) -> None:
        """Ask the thread's run to stop at the next node boundary; recorded at once."""
        thread_id = _thread_of(config)
        journal = journal_for(self.store)
        for _ in range(COMMIT_ATTEMPTS * 4):
            fold = await self._load(thread_id)
            if fold.seq == 0:
                raise ThreadNotFoundError(thread_id)
            event = StopRequested(by=str(config.get("user", "user")))
            decide(fold.state, [event], seq=fold.seq)
            try:
                await journal.append(thread_id, [event], expected_seq=fold.seq, actor="user")
                return
            except ConcurrencyError:
                await asyncio.sleep(0)
        raise ThreadBusyError(f"could not record a stop on thread {thread_id!r}: it kept moving")

    # ---- the blocking API ------------------------------------------------------------

    def invoke(
        self,
        input: Any = None,
        config: Mapping[str, Any] | None = None,
        *,
        include_state: bool = False,
    ) -> dict[str, Any]:
        """Blocking `ainvoke`, for code without an event loop."""
        result: dict[str, Any] = self._blocking(
            self.ainvoke(input, config, include_state=include_state)
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

    def stop(self, config: Mapping[str, Any]) -> None:
        """Blocking `astop`."""
        self._blocking(self.astop(config))

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
        config = dict(config or {})
        thread_id = str(config.setdefault("thread_id", f"thread-{uuid.uuid4().hex}"))
        busy = _busy_threads(self.store)
        claimed = False
        run: _Run[S] | None = None
        try:
            check_thread_id(config["thread_id"])
            if thread_id in busy:
                raise ThreadBusyError(
                    f"thread {thread_id!r} is already running in this process: wait for that "
                    "run to finish, or stop it with astop()"
                )
            busy.add(thread_id)
            claimed = True
            run = await self._begin(input, config, stream)
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
            if claimed:
                busy.discard(thread_id)
            if run is not None:
                for actor in run.actors.values():
                    await actor.stop(drain=False)
            if run is not None and run.background:
                await asyncio.gather(*run.background, return_exceptions=True)
            if stream is not None:
                with contextlib.suppress(ActorStoppedError):
                    await stream.tell(END_OF_STREAM)

    async def _begin(self, input: Any, config: dict[str, Any], stream: RunStream | None) -> _Run[S]:
        thread_id = config["thread_id"]
        fold = await self._load(thread_id)
        meta = fold.state.execution_meta
        command = input if isinstance(input, Command) else None
        values = command.update if command is not None else input
        user = str(config.get("user", "user"))
        run = _Run(
            thread_id,
            str(meta.internal_data.get("run_id") or ""),
            config,
            fold,
            journal_for(self.store),
            stream,
        )
        events: list[Event] = []
        paused = meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED
        if meta.status == ExecutionStatus.COMPLETED and input is None:
            run.idle = True  # nothing new to do: a finished thread stays as it is
            return run
        resuming = paused or meta.status == ExecutionStatus.ERROR
        if command is not None and command.goto is not None:
            raise GraphError("Command(goto=...) is for nodes to return, not an input to invoke")
        if command is not None and command.resume is not None and not resuming:
            raise IllegalTransitionError(
                "resumed",
                f"thread {thread_id!r} is not paused or failed: there is nothing to resume",
            )
        if fold.seq == 0 or meta.status == ExecutionStatus.COMPLETED:
            run.run_id = f"run-{uuid.uuid4().hex[:12]}"
            events.append(RunStarted(entry_node=self.graph.edges[START], graph=self.graph.name))
        elif resuming:
            resume = command.resume if command is not None else None
            events.append(Resumed(value=to_builtins(resume), by=user))
            if meta.status == ExecutionStatus.INTERRUPTED_BEFORE:
                run.skip_interrupt_before = meta.interrupted_node
        else:
            run.cut_short = True  # a run that was cut short: carry on where the log stops
        events.extend(output_events("user", values, fold.state)[0] if values is not None else [])
        if not run.run_id:
            run.run_id = f"run-{uuid.uuid4().hex[:12]}"
        if events:
            await self._commit(run, events, actor=user)
        return run

    async def _steps(self, run: _Run[S]) -> None:
        taken = 0
        while True:
            meta = run.fold.state.execution_meta
            node = meta.current_node
            if meta.is_stopped_requested():
                await self._commit(run, [Stopped(node=node)], actor="runtime")
                return
            if node == END:
                await self._commit(run, [RunCompleted()], actor="runtime")
                return
            entered = meta.internal_data.get(ENTERED_KEY)
            passed = node == run.skip_interrupt_before or (entered and entered["node"] == node)
            if node in self.interrupt_before and not passed:
                event = InterruptRaised(node=node, reason="interrupt_before", when="before")
                await self._commit(run, [event], actor="runtime")
                return
            run.skip_interrupt_before = None
            if taken >= self.recursion_limit:
                message = (
                    f"run {run.run_id} on thread {run.thread_id!r} reached its recursion limit "
                    f"of {self.recursion_limit} steps before node {node!r}; raise "
                    "recursion_limit in compile() if the graph really needs more"
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
            taken += 1
            if run.fold.state.execution_meta.is_interrupted():
                return

    async def _step(self, run: _Run[S], node: str) -> None:
        meta = run.fold.state.execution_meta
        entered = meta.internal_data.get(ENTERED_KEY)
        step_records: list[EventRecord] = []
        if entered and entered["node"] == node:
            # The node's step began before (a crash, a pause, a failure): let the node see
            # what it committed then (a tool node's finished calls). After a crash the step
            # simply goes on; after a pause or a failure the log shows the node entered again.
            step_records = [r async for r in self.store.read(run.thread_id, entered["seq"] + 1)]
        if not (run.cut_short and entered and entered["node"] == node):
            await self._commit(run, [NodeEntered(node=node)], actor=node)
        run.cut_short = False
        pending = run.fold.state.execution_meta.internal_data.get(RESUME_KEY)
        resume = pending["value"] if pending else _NO_RESUME
        context = NodeContext(
            run.thread_id, run.run_id, node, partial(self._commit, run, actor=node), step_records
        )
        actor = self._node_actor(run, node)
        try:
            try:
                output = await actor.ask(
                    RunNode(self._view(run.fold.state), run.config, context, resume)
                )
            except GraphInterrupt as signal:
                event = InterruptRaised(
                    node=node,
                    reason=str(signal.reason),
                    when="before",
                    data=to_builtins(signal.data),
                    by_node=True,
                )
                await self._commit(run, [event], actor=node)
                return
            events, goto = output_events(node, output, run.fold.state)
            await self._commit_step(run, node, events, goto)
        except (ThreadBusyError, asyncio.CancelledError):
            raise
        except Exception as exc:
            run.fold = await self._load(run.thread_id)
            failed = RunFailed(node=node, error_type=type(exc).__name__, message=str(exc))
            await self._commit(run, [failed], actor="runtime")
            raise NodeError(node, exc) from exc

    async def _commit_step(
        self, run: _Run[S], node: str, events: list[Event], goto: str | None
    ) -> None:
        """Outputs, `step_advanced` and any after-interrupt in one commit."""
        async with run.writing:
            await self._commit_step_unlocked(run, node, events, goto)

    async def _commit_step_unlocked(
        self, run: _Run[S], node: str, events: list[Event], goto: str | None
    ) -> None:
        for _ in range(COMMIT_ATTEMPTS):
            fold = run.fold
            base = fold.seq
            decide(fold.state, events, seq=base)
            fold.apply_all(self._scratch(run, events, base))  # routing sees the updated state
            target = goto if goto is not None else self._route(node, fold.state)
            if target != END and target not in self.graph.nodes:
                run.fold = await self._load(run.thread_id)
                raise GraphError(f"node {node!r} chose to go to {target!r}, which is no node")
            tail: list[Event] = [
                StepAdvanced(step=fold.state.execution_meta.step + 1, next_node=target)
            ]
            if node in self.interrupt_after:
                tail.append(InterruptRaised(node=node, reason="interrupt_after", when="after"))
            decide(fold.state, tail, seq=base + len(events))
            fold.apply_all(self._scratch(run, tail, base + len(events)))
            batch = [*events, *tail]
            try:
                records = await run.journal.append(
                    run.thread_id, batch, expected_seq=base, run_id=run.run_id, actor=node
                )
            except ConcurrencyError:
                await self._catch_up(run, base)
                continue
            except BaseException:
                run.fold = await self._load(run.thread_id)
                raise
            fold.seq = records[-1].seq
            if any(r.event != e for r, e in zip(records, batch, strict=True)):
                run.fold = await self._load(run.thread_id)  # keep the canonical decoded values
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
                records = await run.journal.append(
                    run.thread_id, events, expected_seq=run.fold.seq, run_id=run.run_id, actor=actor
                )
            except ConcurrencyError:
                await self._catch_up(run, run.fold.seq)
                continue
            run.fold.apply_all(records)
            await self._after_commit(run, records)
            return records
        raise ThreadBusyError(f"thread {run.thread_id!r} kept moving while {actor!r} wrote to it")

    async def _catch_up(self, run: _Run[S], since: int) -> None:
        """Reload after another writer appended; only a stop request may come from outside."""
        async for record in self.store.read(run.thread_id, since + 1):
            if not isinstance(record.event, StopRequested):
                raise ThreadBusyError(
                    f"thread {run.thread_id!r} was changed by another writer ({record.actor!r} "
                    f"appended {record.kind!r} at seq {record.seq}) while run {run.run_id} was "
                    "on it; two runs must not share a thread at once"
                )
        run.fold = await self._load(run.thread_id)

    async def _after_commit(self, run: _Run[S], records: list[EventRecord]) -> None:
        if run.stream is not None:
            await self._publish(run, records)
        every = self.snapshot_every
        if every and run.fold.seq // every > run.last_snapshot // every:
            run.last_snapshot = run.fold.seq
            snapshot = snapshot_of(run.thread_id, run.fold.seq, run.fold.state)
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
                "interrupt_raised",
                "run_completed",
                "stopped",
                "run_failed",
            ):
                data = {
                    "kind": record.kind,
                    "seq": record.seq,
                    "actor": record.actor,
                    **msgspec.to_builtins(event),
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
        return [uncommitted_record(e, base + i + 1, run.thread_id) for i, e in enumerate(events)]

    @staticmethod
    def _view(state: S) -> S:
        """What a node or condition sees: a copy it may change without touching the log's state."""
        view = state.model_copy()
        view.context = CopyOnRead(state.context)
        view.execution_meta = copy_meta(state.execution_meta)
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

    @staticmethod
    def _result(state: AgentState, include_state: bool) -> dict[str, Any]:
        result: dict[str, Any] = {"messages": list(state.context)}
        if include_state:
            result["state"] = state
        return result


_busy_by_store: weakref.WeakKeyDictionary[EventStore, set[str]] = weakref.WeakKeyDictionary()


def _busy_threads(store: EventStore) -> set[str]:
    """Threads with a run in progress in this process, per store (shared by every app)."""
    return _busy_by_store.setdefault(store, set())


def _thread_of(config: Mapping[str, Any] | None) -> str:
    if not config or "thread_id" not in config:
        raise GraphError("this call needs config={'thread_id': ...} naming the thread")
    return check_thread_id(config["thread_id"])


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
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C in the caller ends the run instead of orphaning it
            raise

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
