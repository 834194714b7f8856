"""`CompiledGraph`: a `StateGraph` run on the log, one committed step at a time.

A step: append `node_entered` (committed before the node runs), run the node, turn its
output into events, route, and append the outputs with `step_advanced` in one commit. The
live state is the fold of exactly those events, so `replay(log) == live state` after every
step; a crash before the commit re-runs the node, a crash after it loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
    Sequence,
)
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from agentlog.actors.engine.errors import (
    GraphError,
    ThreadStillBusyError,
)
from agentlog.actors.engine.fingerprint import CODE_CHANGE_KEY, CodeChangePolicy, check_policy
from agentlog.actors.engine.tasks import BackgroundTaskManager
from agentlog.events import (
    EventRecord,
    EventStore,
    StopRequested,
    StoreError,
    ThreadNotFoundError,
    VerifyReport,
    verify_tree,
)
from agentlog.events.kinds import Event, RunCancelled
from agentlog.projections import (
    AgentState,
    BaseContextManager,
    EventRow,
    ExecutionStatus,
    Fold,
    StateDiff,
    StepEntry,
    StopRequestStatus,
    diff,
    edit_events,
    event_history,
    state_at_point,
    state_history,
)
from agentlog.projections.fold import before_first_run
from agentlog.projections.ids import monotonic

if TYPE_CHECKING:
    from agentlog.actors.engine.graph import StateGraph
    from agentlog.actors.engine.longterm import BaseStore
from agentlog.actors.engine.callbacks import Callbacks
from agentlog.actors.engine.commit import fork_thread, write
from agentlog.actors.engine.drawing import DrawableGraph, describe
from agentlog.actors.engine.edits import as_node_edit, check_order
from agentlog.actors.engine.ending import closing_events
from agentlog.actors.engine.loop import RunLoop
from agentlog.actors.engine.offload import InFlight
from agentlog.actors.engine.options import Durability, call_config
from agentlog.actors.engine.portal import BlockingCalls, Portal
from agentlog.actors.engine.results import ResponseGranularity, granularity, run_result
from agentlog.actors.engine.run import (
    Engine,
    S,
    _log,
    _thread_of,
    _timeout,
    check_tracing,
    run_config,
)
from agentlog.actors.engine.steps import check_resume_value
from agentlog.actors.engine.stream import RunStream
from agentlog.actors.engine.streaming import Streaming
from agentlog.actors.engine.subgraph import (
    SEPARATOR,
    blocking_in_node,
    fork_nested,
    parent_of,
    run_nested,
    state_class_of,
    target_thread,
)

T = TypeVar("T")


class CompiledGraph(BlockingCalls, Streaming, Generic[S]):
    """Run, stream, stop, resume and inspect threads of a graph, on an event store.

    The public face of the engine it holds (`engine`: the graph, its store, its settings);
    each call's run is a `RunLoop` of its own, every write goes through the commit path."""

    BLOCKING_WHAT = "graph"
    ASYNC_FORMS = "ainvoke, astream, aget_state, astop"

    def __init__(self, engine: Engine[S]) -> None:
        """Built by `StateGraph.compile`, which checks the graph and its settings."""
        self.engine = engine
        self._portal: Portal | None = None

    @property
    def graph(self) -> StateGraph[S]:
        """The graph compiled."""
        return self.engine.graph

    @property
    def store(self) -> EventStore:
        """The event store the graph's threads are written to (its `checkpointer`)."""
        return self.engine.store

    @property
    def checkpointer(self) -> EventStore:
        """The event log the graph's threads are written to (`compile(checkpointer=...)`):
        the same as `store`, by LangGraph's name."""
        return self.engine.store

    @property
    def task_manager(self) -> BackgroundTaskManager:
        """The background tasks its nodes start: running here, cancellable, recoverable."""
        return self.engine.tasks

    @property
    def long_term_store(self) -> BaseStore | None:
        """The long-term store its nodes reach (`compile(store=...)`), or None."""
        return self.engine.long_term_store

    @property
    def callbacks(self) -> Callbacks | None:
        """The hooks given to `compile(callbacks=...)`."""
        return self.engine.callbacks

    @property
    def context_manager(self) -> BaseContextManager[Any] | None:
        """The bound on the context the nodes see (`compile(context_manager=...)`)."""
        return self.engine.context_manager

    @property
    def interrupt_before(self) -> frozenset[str]:
        """The nodes a run pauses before."""
        return self.engine.interrupt_before

    @property
    def interrupt_after(self) -> frozenset[str]:
        """The nodes a run pauses after."""
        return self.engine.interrupt_after

    @property
    def recursion_limit(self) -> int:
        """The steps a call may take, unless its config says otherwise."""
        return self.engine.recursion_limit

    @property
    def snapshot_every(self) -> int | None:
        """How many records apart a run snapshots its thread (None: never on its own)."""
        return self.engine.snapshot_every

    @property
    def node_concurrency(self) -> dict[str, int]:
        """The nodes that run at most so many at once, across the graph's runs."""
        return self.engine.node_concurrency

    @property
    def node_timeout(self) -> float | None:
        """The time limit of a node, in seconds, unless its own or the call's says otherwise."""
        return self.engine.node_timeout

    @property
    def node_timeouts(self) -> dict[str, float | None]:
        """The nodes with a time limit of their own."""
        return self.engine.node_timeouts

    @property
    def hooked(self) -> frozenset[str]:
        """The hooks `callbacks` overrides: the only ones the engine calls."""
        return self.engine.hooked

    async def ainvoke(
        self,
        input: Any = None,
        config: Mapping[str, Any] | None = None,
        response_granularity: ResponseGranularity | str = ResponseGranularity.LOW,
        *,
        include_state: bool = False,
        context: Any = None,
        durability: Durability | None = None,
        on_code_change: CodeChangePolicy | None = None,
    ) -> dict[str, Any]:
        """Run (or resume) the thread until it ends, pauses or fails.

        Returns Agentflow's shape for `response_granularity`: LOW `messages` (this call's)
        and `token_usage`; PARTIAL adds `context` and `summary`; FULL adds `state`
        (`include_state=True` adds it to any shape). Every shape also has `status` and,
        when the run paused, `__interrupt__`.

        `context` is handed to the nodes that take a `runtime` parameter (`runtime.context`),
        checked first against the graph's `context_schema`, and never recorded: a resume
        passes it again. `durability` says when each step's records become durable
        ("sync", the default: before the next step starts; "async"; "exit"; see the
        guarantees page for what a crash keeps in each). `on_code_change` ("warn", the
        default; "refuse"; "allow") says what a resume of a run begun under other code does
        (`agentlog.actors.engine.fingerprint`); the config key of that name sets it too.
        """
        shape = granularity(response_granularity)
        config = self.call_config(config, context, durability)
        if on_code_change is not None:
            config = {**(config or {}), CODE_CHANGE_KEY: check_policy(on_code_change)}
        result, _ = await self.ainvoke_to(input, config, shape, include_state=include_state)
        return result

    def call_config(
        self, config: Mapping[str, Any] | None, context: Any, durability: str | None
    ) -> dict[str, Any] | None:
        """The call's config with its `context` (checked against the graph's
        `context_schema`) and `durability` (checked): errors before anything is written."""
        return call_config(
            config, self.graph.context_schema, context=context, durability=durability
        )

    async def ainvoke_to(
        self,
        input: Any,
        config: Mapping[str, Any] | None,
        shape: ResponseGranularity = ResponseGranularity.LOW,
        *,
        include_state: bool = True,
        stream: RunStream | None = None,
    ) -> tuple[dict[str, Any], int]:
        """`ainvoke`'s result, and the thread's seq where this call left it (the runtime
        records where each of its runs ends); `stream` hears what the run says as it runs."""
        run = await self._run(input, config, stream=stream)
        return run_result(run.fold.state, run.own, shape, include_state=include_state), run.fold.seq

    async def _run(
        self, input: Any, config: Mapping[str, Any] | None, stream: RunStream | None
    ) -> RunLoop[S]:
        """Live one call's run, from its claim to the thread given back (`RunLoop.live`);
        called from inside a running node, the run is a subgraph's, on a thread of the
        parent's log (`agentlog.actors.engine.subgraph`)."""
        parent = parent_of(config)
        if parent is not None and stream is None:
            return await run_nested(self, input, config, parent)
        checked = run_config(config)
        check_tracing(checked)  # a run's config only: reads take any config LangGraph takes
        await self.engine.tasks.recover_once(checked["thread_id"])
        run = RunLoop.of(self.engine, checked, stream)
        await run.live(input)
        return run

    def get_graph(
        self, config: Mapping[str, Any] | None = None, *, xray: bool | int = False
    ) -> DrawableGraph:
        """The graph's nodes and edges, conditional ones marked, to look at or draw
        (`get_graph().draw_mermaid()`). `config` and `xray` are LangGraph's parameters: the
        drawing does not depend on a call's config, and `xray` (drawing subgraphs inside
        their nodes) has nothing to expand, a node being one function."""
        return describe(self.graph)

    async def aget_state(
        self,
        config: Mapping[str, Any],
        at_step: int | None = None,
        at_seq: int | None = None,
    ) -> S:
        """The thread's state, now or at a past step or seq, read from the log; a subgraph
        run's, with the config's `checkpoint_ns` (or its thread, `parent|node:seq`).

        An unknown thread raises `ThreadNotFoundError`.
        """
        thread_id, state_cls = await self._target(config)
        return await state_at_point(
            self.store, thread_id, state_cls, at_step=at_step, at_seq=at_seq
        )

    async def aget_state_history(self, config: Mapping[str, Any]) -> list[StepEntry]:
        """One entry per step, oldest first (`await entry.state()` loads its state); a
        subgraph run's with the config's `checkpoint_ns`."""
        return await state_history(self.store, *await self._target(config))

    async def _target(self, config: Mapping[str, Any]) -> tuple[str, type[Any]]:
        """The thread a reading call names (a subgraph run's too) and its state class."""
        thread_id = target_thread(config, _thread_of(config))
        if thread_id == _thread_of(config) and SEPARATOR not in thread_id:
            return thread_id, self.graph.state_cls
        return thread_id, await state_class_of(self, thread_id)

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

    async def averify(self, config: Mapping[str, Any]) -> list[VerifyReport]:
        """Verify the thread's hash chain and those of the subgraph runs it links to (one
        report per thread, the thread's first): see `agentlog.events.verify_tree`."""
        return await verify_tree(self.store, _thread_of(config))

    async def afork(
        self,
        config: Mapping[str, Any],
        *,
        at_step: int | None = None,
        at_seq: int | None = None,
        new_thread_id: str | None = None,
    ) -> str:
        """Branch the thread at a past point into a new thread; return the new thread id.

        A point inside a subgraph run (the config's `checkpoint_ns`, or the run's thread)
        forks the parent before the step that ran it, and the run at the point under the
        fork (`agentlog.actors.engine.subgraph.fork_nested`): the id is the parent's fork,
        and running it carries the subgraph run on from the point."""
        target = target_thread(config, _thread_of(config))
        if SEPARATOR in target:
            return await fork_nested(
                self, target, at_step=at_step, at_seq=at_seq, new_thread_id=new_thread_id
            )
        return await fork_thread(
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

        async def edit(fold: Fold[S]) -> list[Event]:
            if fold.seq == 0:
                raise ThreadNotFoundError(thread_id)
            events = edit_events(fold.state, values, source=as_node or actor, reason=reason)
            if as_node is not None:
                events = await as_node_edit(self.engine, fold, as_node, events, actor)
            check_order(fold, events)
            return events

        return await self.awrite_claimed(thread_id, edit, actor=actor, what="a state edit")

    async def awrite_claimed(
        self,
        thread_id: str,
        decide: Callable[[Fold[S]], list[Event] | Awaitable[list[Event]]],
        *,
        actor: str,
        what: str,
        run_id: str | Callable[[Fold[S]], str | None] | None = None,
    ) -> list[EventRecord]:
        """Append what `decide` makes of the thread as the log has it, holding the thread's
        claim meanwhile, so it never lands under a run in flight (`ThreadBusyError` while
        one runs). The one path of edits, cancels and deletions; `run_id` names the run the
        records belong to (a cancel's, the run it ends)."""
        claim = await self.engine.claim(thread_id, f"{what} by {actor!r}")
        try:
            return await write(
                self.store,
                thread_id,
                decide,
                state_cls=self.graph.state_cls,
                actor=actor,
                run_id=run_id,
                claim=claim,
                what=what,
            )
        finally:
            with contextlib.suppress(StoreError):
                await self.store.release(claim)

    def check_resume_value(self, thread_id: str, state: AgentState, value: Any) -> None:
        """Refuse a resume value nothing would read (`UnreadResumeValueError`): only a node
        paused in `interrupt()` receives one."""
        check_resume_value(self.graph, thread_id, state, value)

    async def astop(self, config: Mapping[str, Any], *, between_nodes: bool = False) -> bool:
        """Ask the thread's run to pause; the request is recorded at once.

        Between nodes the run pauses after the node that ran; a node still running when the
        run looks (within a quarter second) is cancelled, or abandoned if it is a `def`, and
        runs again on resume, unless `between_nodes`: then it finishes and commits first.
        Works from any process sharing the store. Returns False, recording nothing, when
        there is nothing to stop: the run has completed, failed or was cancelled, is paused
        at an interrupt, is already stopped or stopping, or the thread has no run yet.
        """
        thread_id = _thread_of(config)
        by = str(config.get("user", "user"))

        def stop(fold: Fold[S]) -> list[Event]:
            meta = fold.state.execution_meta
            if fold.seq == 0:
                raise ThreadNotFoundError(thread_id)
            if (
                meta.status
                in (ExecutionStatus.COMPLETED, ExecutionStatus.ERROR, ExecutionStatus.CANCELLED)
                or meta.is_interrupted()
                or meta.stop_current_execution != StopRequestStatus.NONE
                or before_first_run(meta)
            ):
                return []  # nothing to stop
            return [StopRequested(by=by, between_nodes=between_nodes)]

        records = await write(
            self.store,
            thread_id,
            stop,
            state_cls=self.graph.state_cls,
            actor=by,
            what="a stop request",
        )
        return bool(records)

    async def acancel(
        self, config: Mapping[str, Any], *, by: str = "user", reason: str | None = None
    ) -> bool:
        """End the thread's run on purpose, recording who and why: it is over and not
        retried; new input starts a new run, and `ainvoke(None)` says there is nothing to
        resume. Tool calls left without a result are answered as `agentlog.actors.engine.ending`
        decides: a
        committed result is kept, a call that had started is abandoned, others did not run.

        The thread must be free: a run executing on it is cut short first (an agent
        runtime's `cancel` does both), else `ThreadBusyError`. Returns False, recording
        nothing, when the run has completed or was cancelled already.
        """
        thread_id = _thread_of(config)

        async def cancel(fold: Fold[S]) -> list[Event]:
            if fold.seq == 0:
                raise ThreadNotFoundError(thread_id)
            meta = fold.state.execution_meta
            if meta.status in (ExecutionStatus.COMPLETED, ExecutionStatus.CANCELLED):
                return []
            why = f"the run was cancelled by {by!r}" + (f" ({reason})" if reason else "")
            events = await closing_events(self.store, fold, why, over=True)
            events.append(RunCancelled(by=by, reason=reason, node=meta.current_node))
            return events

        def ended(fold: Fold[S]) -> str | None:
            run_id = fold.state.execution_meta.internal_data.get("run_id")
            return str(run_id) if run_id else None  # the run the cancel ends

        written = await self.awrite_claimed(
            thread_id, cancel, actor=by, what="a cancel", run_id=ended
        )
        return bool(written)

    def invoke(
        self,
        input: Any = None,
        config: Mapping[str, Any] | None = None,
        response_granularity: ResponseGranularity | str = ResponseGranularity.LOW,
        *,
        include_state: bool = False,
        context: Any = None,
        durability: Durability | None = None,
    ) -> dict[str, Any]:
        """Blocking `ainvoke`, for code without an event loop."""
        granularity(response_granularity)  # a bad value fails here, not on the portal
        config = self.call_config(config, context, durability)
        result: dict[str, Any] = self._blocking(
            self.ainvoke(input, config, response_granularity, include_state=include_state)
        )
        return result

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

    async def await_idle(self, config: Mapping[str, Any], *, timeout: float | None = None) -> None:
        """Wait until nothing owns the thread: no run or edit, and no `def` node or tool an
        earlier run left running (after `astop`, a cancel or Ctrl-C), in this process or any
        other sharing the store. `ThreadStillBusyError` (naming the owner) after `timeout`
        seconds; None waits as long as it takes."""
        thread_id = _thread_of(config)
        limit = _timeout(timeout, "timeout")
        deadline = None if limit is None else monotonic() + limit
        while True:
            holder = await self.store.holder(thread_id)
            now = time.time()
            if holder is None or not holder.alive(now):
                return
            left = None if deadline is None else deadline - monotonic()
            if left is not None and left <= 0:
                busy = holder.busy_error(thread_id, now)
                raise ThreadStillBusyError(f"still busy after {limit:g}s: {busy}")
            await asyncio.sleep(IDLE_POLL_S if left is None else min(IDLE_POLL_S, left))

    def wait_idle(self, config: Mapping[str, Any], *, timeout: float | None = None) -> None:
        """Blocking `await_idle`."""
        self._blocking(self.await_idle(config, timeout=timeout))

    async def aclose(self) -> None:
        """Close what the graph owns: wait for the `def` work its runs left running to
        return (each keeps its thread claimed until then), then stop the private event loop
        of the blocking methods. The store is the caller's to close."""
        left = list(self.engine.left)
        if left:
            _log.warning("closing graph: waiting for %s to return", _describe(left))
            await asyncio.gather(*(work.done() for work in left))
        await asyncio.to_thread(self._close_portal)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        nested = blocking_in_node(coro)
        if nested is not None:  # a sync node calling a subgraph: it runs on the run's loop
            result: T = nested.result()
            return result
        return super()._blocking(coro)

    def close(self) -> None:
        """Blocking `aclose`: stop the private event loop of the blocking methods, if they
        started one, once the `def` work the graph's runs left running has returned."""
        self._close_portal()  # first: a run cut short by it leaves its work here
        left = list(self.engine.left)
        if left:
            _log.warning("closing graph: waiting for %s to return", _describe(left))
            for work in left:
                work.wait_done()


IDLE_POLL_S = 0.02
"""How often `await_idle` looks at the thread's owner (it may be another process)."""


def _describe(left: list[InFlight]) -> str:
    return "; ".join(label for work in left for label in work.running()) or "work of ended runs"


__all__ = ["CompiledGraph", "run_config"]
