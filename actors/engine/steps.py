"""The step loop: a call claims its thread, opens or resumes the run, runs one node per
committed step until the run ends, pauses, stops or fails, and gives the thread back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.actor import ActorStoppedError
from agentlog.actors.engine.command import Command
from agentlog.actors.engine.errors import (
    GraphError,
    NothingToResumeError,
    UnreadResumeValueError,
)
from agentlog.actors.tools.node import is_tool_node
from agentlog.events import (
    Claim,
    Forked,
    InterruptRaised,
    MessageAppended,
    Resumed,
    RunStarted,
    Stopped,
    StopRequested,
    StoreError,
    ThreadNotFoundError,
)
from agentlog.events.claims import DEFAULT_LEASE
from agentlog.events.kinds import ContextSummarized, Event, StateUpdated
from agentlog.projections import (
    START,
    AgentState,
    ExecutionState,
    ExecutionStatus,
    Fold,
    IllegalTransitionError,
    RemoteToolCallBlock,
    StopRequestStatus,
    StreamChunk,
    StreamEvent,
    open_calls,
    to_builtins,
)
from agentlog.projections.fold import (
    AWAITING_KEY,
    before_first_run,
    decide,
)
from agentlog.projections.generic import state_fields
from agentlog.projections.messages import monotonic, new_run_id, normalize_input

if TYPE_CHECKING:
    pass
from agentlog.actors.engine.callbacks import (
    HookError,
    call_hook,
)
from agentlog.actors.engine.commit import write
from agentlog.actors.engine.committing import Committing
from agentlog.actors.engine.ending import closing_events, goes_past
from agentlog.actors.engine.loop import RunLoop, _answered_ids
from agentlog.actors.engine.nodes import output_events
from agentlog.actors.engine.offload import InFlight
from agentlog.actors.engine.redact import redact
from agentlog.actors.engine.run import (
    ABANDONED_BY_CALLER,
    S,
    _log,
    _recursion_limit,
    elapsed_ms,
    finish,
    run_config,
)
from agentlog.actors.engine.stream import END_OF_STREAM, RunStream
from agentlog.actors.tools.node import pending_calls

TRIGGER_KEY = "trigger_id"
"""The config key by which an agent runtime names the trigger a call carries out."""

SNAPSHOT_AT_REST = 64
"""A run that comes to rest this many records or more after its last snapshot takes one
(a fresh process then loads the thread from it instead of folding from the start)."""


_OVER = (ExecutionStatus.COMPLETED, ExecutionStatus.CANCELLED)
"""A run in these is over: new input starts a new run."""
_AT_REST = (ExecutionStatus.COMPLETED, ExecutionStatus.ERROR, ExecutionStatus.CANCELLED)


def checked_input(input: Any) -> Any:
    """A call's input, normalized; `GraphError` when it is no input a run takes."""
    values = normalize_input(input)
    if values is not None and not isinstance(values, Mapping | AgentState | list):
        raise GraphError(
            f"ainvoke's input must be a message (a str, a Message, an OpenAI-style dict), "
            f"a list of messages, a dict of state fields, or None to resume; got "
            f"{type(values).__name__} {values!r:.60}"
        )
    return values


def _paused_at(meta: ExecutionState) -> str:
    """The node a paused or failed run stopped at, which a `resumed` record names."""
    failed = meta.internal_data.get("failed_node")
    return meta.interrupted_node or (failed if isinstance(failed, str) else meta.current_node)


def _run_id(config: Mapping[str, Any]) -> str:
    """The id of a run this call starts: the config's `run_id` (an agent runtime passes its
    trigger's id, so the log and the HTTP API name a run alike), else a fresh one."""
    given = config.get("run_id")
    if given is None:
        return new_run_id()
    if not isinstance(given, str) or not 1 <= len(given) <= 200 or not given.isprintable():
        raise GraphError(
            f"config['run_id'] names the run this call starts: printable text of 1 to 200 "
            f"characters, got {given!r:.60}"
        )
    return given


def check_input_fields(state_cls: type[AgentState], input: Any) -> None:
    """Refuse input no run of `state_cls` can take (a field the state lacks, a value its
    field refuses, a message that does not parse), so it is refused before it is recorded,
    not by every attempt of a run that can never succeed."""
    values = checked_input(input)
    if values is None:
        return
    state = state_cls()
    events = output_events("user", values, state, known=set())[0]
    # messages are checked against the thread as it stands when the run begins (a tool
    # result answers a call in it); fields against the state class alone
    decide(state, [e for e in events if isinstance(e, StateUpdated | ContextSummarized)], seq=0)


class StepLoop(Committing[S]):
    """The run loop of the engine."""

    async def _run(
        self, input: Any, config: Mapping[str, Any] | None, stream: RunStream | None
    ) -> RunLoop[S]:
        started = monotonic()  # the call's start: run records measure from here
        config = run_config(config)
        thread_id = config["thread_id"]
        claim: Claim | None = None
        run: RunLoop[S] | None = None
        in_flight = InFlight()
        recorded: asyncio.Future[None] | None = None
        try:
            purpose = "a run" if self.graph.name is None else f"a run of graph {self.graph.name!r}"
            claim = await self._claim(
                thread_id, purpose, config.get("lease_s", DEFAULT_LEASE), config.get("claim_under")
            )
            run, opening = await self._begin(input, config, stream, claim, in_flight, started)
            if opening:  # `run` is known first, so a cancellation here is recorded after it
                await run.commits.commit(opening, actor=str(config.get("user", "user")))
            if not run.idle:
                await run.steps()
                if run.fold.seq - run.last_snapshot >= SNAPSHOT_AT_REST:
                    run.commits.snapshot()  # the next load of the thread starts from here
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
            recorded = asyncio.ensure_future(
                self._abandon(thread_id, run, claim, in_flight, why, started)
            )
            with contextlib.suppress(asyncio.CancelledError):
                await finish(recorded)
            raise
        except Exception as exc:
            if isinstance(exc, HookError) and run is not None:
                await run.fail_for_hook(exc)
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
            closing = asyncio.ensure_future(
                self._close_run(run, claim, in_flight, stream, recorded)
            )
            await finish(closing)

    async def _claim(
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

    async def _close_run(
        self,
        run: RunLoop[S] | None,
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
        if await self._label_in_flight(claim, in_flight):
            self._left.add(in_flight)  # `aclose` waits for it

            def release() -> None:
                self._left.discard(in_flight)
                self.store.release_threadsafe(claim)

            in_flight.leave(claim.thread_id, release)
            return
        with contextlib.suppress(StoreError):
            await self.store.release(claim)

    async def _label_in_flight(self, claim: Claim, in_flight: InFlight) -> bool:
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

    async def _abandon(
        self,
        thread_id: str,
        run: RunLoop[S] | None,
        claim: Claim,
        in_flight: InFlight,
        why: str,
        started: float,
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
        # named before the record: whoever reads that the run stopped learns what still runs
        await self._label_in_flight(claim, in_flight)

        async def record(fold: Fold[S]) -> list[Event]:
            meta = fold.state.execution_meta
            paused = (
                meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED
            )
            if fold.seq == 0 or paused or meta.status in _AT_REST or before_first_run(meta):
                return []  # nothing was written, or the run had already come to rest
            never_ran = run.never_ran() if run is not None else set()
            events = await closing_events(self.store, fold, why, over=False, never_ran=never_ran)
            if meta.stop_current_execution == StopRequestStatus.NONE:
                events.append(StopRequested(by="runtime", reason=why))
            events.append(
                Stopped(
                    node=meta.current_node,
                    reason=f"abandoned: {why}",
                    in_flight=in_flight.running(),
                    duration_ms=elapsed_ms(started),
                )
            )
            return events

        def run_id_of(fold: Fold[S]) -> str | None:
            return (
                run.run_id
                if run is not None
                else fold.state.execution_meta.internal_data.get("run_id")
            )

        try:
            records = await write(
                self.store,
                thread_id,
                record,
                state_cls=self.graph.state_cls,
                actor="runtime",
                run_id=run_id_of,
                claim=claim,
                what="the record of an abandoned run",
            )
        except Exception as exc:
            _log.warning("could not record that the run on %r was abandoned: %s", thread_id, exc)
            return
        try:
            await self._lifecycle(records)  # the caller is gone: a hook's failure is logged
        except HookError as exc:
            _log.warning("a hook failed after the run on %r was abandoned: %s", thread_id, exc)

    async def _begin(
        self,
        input: Any,
        config: dict[str, Any],
        stream: RunStream | None,
        claim: Claim,
        in_flight: InFlight,
        started: float,
    ) -> tuple[RunLoop[S], list[Event]]:
        """The run to make of this call, and the events that open it (to be committed)."""
        thread_id = config["thread_id"]
        command = input if isinstance(input, Command) else None
        if command is not None and command.goto is not None:
            raise GraphError("Command(goto=...) is for nodes to return, not an input to invoke")
        values = checked_input(command.update if command is not None else input)
        hooks = self.callbacks
        if values is not None and hooks is not None and "validate_input" in self.hooked:
            await call_hook(hooks, "validate_input", thread_id, values)  # before any write
        fold = await self._load(thread_id)
        if fold.seq == 0 and values is None:
            raise ThreadNotFoundError(thread_id)
        meta = fold.state.execution_meta
        user = str(config.get("user", "user"))
        trigger = config.get(TRIGGER_KEY)  # the runtime's trigger: its opening names it
        run = RunLoop(
            thread_id,
            str(meta.internal_data.get("run_id") or ""),
            config,
            fold,
            stream,
            claim=claim,
            in_flight=in_flight,
            recursion_limit=_recursion_limit(config, self.recursion_limit),
            started=started,
            last_snapshot=fold.snapshot_seq,  # the thread's latest, not 0 for every run
            engine=self,
        )
        resume = command.resume if command is not None else None
        paused = meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED
        if meta.status == ExecutionStatus.CANCELLED and values is None and resume is None:
            cancelled = meta.internal_data.get("cancelled") or {}
            why = f": {cancelled['reason']}" if cancelled.get("reason") else ""
            raise NothingToResumeError(
                f"the run on thread {thread_id!r} was cancelled by "
                f"{cancelled.get('by') or 'someone'}{why}; there is nothing to resume: send "
                "new input to start a new run"
            )
        if before_first_run(meta) and values is None and resume is None:
            raise NothingToResumeError(
                f"thread {thread_id!r} was created and has not run yet: there is nothing to "
                "resume; send input to start its first run"
            )
        if meta.status == ExecutionStatus.COMPLETED and values is None and resume is None:
            run.idle = True  # nothing new to do: a finished thread stays as it is
            return run, []
        resuming = paused or meta.status == ExecutionStatus.ERROR
        if resume is not None and not resuming:
            raise IllegalTransitionError(
                "resumed",
                f"thread {thread_id!r} is not paused or failed: there is nothing to resume",
            )
        self.check_resume_value(thread_id, fold.state, resume)
        inputs = (
            output_events("user", values, fold.state, known=fold.message_ids)[0]
            if values is not None
            else []
        )
        waiting = _waiting_remote(fold.state) if paused else []
        if waiting and _answers_any(inputs, waiting):
            # The client ran its tool calls: their results resume the run where it paused.
            run.own.update(_appended_ids(inputs))
            # the calls it left unanswered are not run, answered right after its results
            # and before any other message it sends (`closing_events`, as every early end)
            remote = {c.id for c in waiting}
            skip = _answered_ids(inputs) | {c.id for c in open_calls(fold.state.context)} - remote
            why = "the client answered other calls of this message but not this one"
            closing = await closing_events(self.store, fold, why, over=True, skip=skip)
            cut = next((i for i, e in enumerate(inputs) if goes_past([e])), len(inputs))
            resumed: list[Event] = [
                Resumed(value=None, by=user, node=_paused_at(meta), trigger_id=trigger),
                *inputs[:cut],
                *closing,
                *inputs[cut:],
            ]
            return run, resumed
        if waiting and not inputs:
            names = ", ".join(f"{c.name} ({c.id})" for c in waiting)
            raise GraphError(
                f"thread {thread_id!r} waits for the results of client tool call(s) {names}: "
                "invoke it with tool messages answering them, such as {'role': 'tool', "
                "'tool_call_id': <id>, 'content': <result>}; other input rejects them and "
                "starts a new run"
            )
        answers = await self._answer_pending(fold, inputs) if resume is None and inputs else []
        # plain input on a run whose node asked a person (`interrupt()`) is a new request,
        # never the answer: resuming with it would let the node go on as if approved (its
        # `interrupt()` returning None). A breakpoint's pause takes new input and goes on.
        superseded = (
            command is None
            and bool(inputs)
            and meta.is_interrupted()
            and bool(meta.internal_data.get(AWAITING_KEY))
        )
        events: list[Event] = []
        # the answers supersede a paused or failed run; a run cut short goes on after them
        superseded = superseded or (bool(answers) and resuming)
        if fold.seq == 0 or meta.status in _OVER or superseded or before_first_run(meta):
            run.run_id = _run_id(config)
            events.extend(answers)
            events.append(
                RunStarted(
                    entry_node=self._entry_node(config),
                    graph=self.graph.name,
                    fields=state_fields(self.graph.state_cls),
                    trigger_id=trigger,
                )
            )
        elif resuming:
            events.append(
                Resumed(
                    value=to_builtins(resume), by=user, node=_paused_at(meta), trigger_id=trigger
                )
            )
            if meta.status == ExecutionStatus.INTERRUPTED_BEFORE:
                run.skip_interrupt_before = meta.interrupted_node
        else:
            run.cut_short = True  # a run that was cut short: carry on where the log stops
            run.skip_interrupt_before = await self._released_breakpoint(fold)
            events.extend(answers)  # its open calls answered before the input's message
        events.extend(inputs)
        if not run.run_id:
            run.run_id = _run_id(config)
        return run, events

    def check_resume_value(self, thread_id: str, state: AgentState, value: Any) -> None:
        """Refuse a resume value that nothing would read: only a node paused in `interrupt()`
        receives one. At a breakpoint, a stop or a failure the run would go on as if
        approved, so `UnreadResumeValueError` says what works instead (nothing is written)."""
        meta = state.execution_meta
        if value is None or meta.internal_data.get(AWAITING_KEY):
            return
        before = meta.status == ExecutionStatus.INTERRUPTED_BEFORE
        if meta.status == ExecutionStatus.ERROR:
            where = f"failed at node {meta.internal_data.get('failed_node')!r}"
        elif meta.stop_current_execution == StopRequestStatus.STOPPED:
            side = "before" if before else "after"
            where = f"stopped {side} node {meta.interrupted_node!r}"
        else:
            side = "before" if before else "after"
            why = f" ({meta.interrupt_reason})" if meta.interrupt_reason else ""
            where = f"paused {side} node {meta.interrupted_node!r}{why}"
        # new input answers calls the run owes or that its message would pass (`_answer_pending`)
        waiting = self._owes_calls(state) or bool(open_calls(state.context))
        reject = (
            "send new input instead: the pending tool calls are answered as not run and a "
            "new run starts with it"
            if waiting
            else "cancel the run (acancel, or the runtime's cancel: new input here would go "
            "on into the node with it)"
        )
        raise UnreadResumeValueError(
            f"thread {thread_id!r} is {where}, where no node asked for a value: the resume "
            f"value {value!r:.80} would be read by nothing and the run would go on as if "
            "approved, so nothing was written. To approve, resume with None (ainvoke(None, "
            'config), Command(resume=None), a run with command {"resume": null}); to reject, '
            f"{reject}; for a node to receive a value, call interrupt() inside it and answer "
            "that with Command(resume=value)"
        )

    def _entry_node(self, config: Mapping[str, Any]) -> str:
        """Where a new run starts: the graph's entry, or the node the config names
        (`entry_node`, as an agent runtime's entry point asks)."""
        node = config.get("entry_node")
        if node is None:
            return str(self.graph.edges[START])
        if node not in self.graph.nodes:
            known = ", ".join(sorted(self.graph.nodes))
            raise GraphError(f"entry_node {node!r} is not a node of the graph (nodes: {known})")
        return str(node)

    async def _released_breakpoint(self, fold: Fold[S]) -> str | None:
        """The node a resume let past its `interrupt_before`, when the run that resumed was
        cut short (a crash) right after recording it: the log says that pause was answered,
        so carrying on must not pause there again."""
        if fold.seq < 2:
            return None
        thread_id = fold.state.execution_meta.thread_id or ""
        last = [r.event async for r in self.store.read(thread_id, fold.seq - 1, fold.seq)]
        match last:
            case [InterruptRaised(when="before", by_node=False, node=node), Resumed()]:
                return node
            case [
                Forked(state={"execution_meta": {"status": "interrupted_before"} as at}),
                Resumed(),
            ]:
                return str(at.get("interrupted_node"))  # a fork's pause, answered
        return None

    async def _answer_pending(self, fold: Fold[S], inputs: Sequence[Event]) -> list[Event]:
        """Results for the tool calls a paused, stopped, failed or crashed run still owes,
        when new input (`inputs`) supersedes it.

        New input while a run waits at its tool node means the person answered instead of
        letting the calls run; new input whose message would come after calls still open at
        any other pause, or in a run a crash cut short, would split them from their results,
        an order no provider takes. Either way each call is answered as `closing_events`
        decides (a committed result kept, a started one abandoned, else "not run", naming
        the new input) before the input's message, and a new run starts from the entry node
        with it (a run cut short goes on after them, as it does with any input): the
        transcript stays valid for every model provider. Calls the input answers itself are
        left to it.
        """
        meta = fold.state.execution_meta
        resting = (
            meta.is_interrupted()
            or meta.stop_current_execution == StopRequestStatus.STOPPED
            or meta.status == ExecutionStatus.ERROR
        )
        # this call holds the claim: a run the log shows running was cut short by a crash
        crashed = meta.status == ExecutionStatus.RUNNING and not before_first_run(meta)
        if not resting and not crashed:
            return []
        skip = _answered_ids(inputs)
        if meta.is_interrupted() and _waiting_remote(fold.state):
            why = "the user replied instead of the client answering this call"
            return await closing_events(self.store, fold, why, over=True, skip=skip)
        if resting and self._owes_calls(fold.state):
            why = "the user replied before it was approved"
            return await closing_events(self.store, fold, why, over=True, skip=skip)
        if goes_past(inputs) and open_calls(fold.state.context):
            why = "the user sent new input instead of letting the run go on"
            return await closing_events(self.store, fold, why, over=True, skip=skip)
        return []

    def _owes_calls(self, state: AgentState) -> bool:
        """Whether the paused run would go on into its tool node with calls to run."""
        meta = state.execution_meta
        before = meta.status == ExecutionStatus.INTERRUPTED_BEFORE
        node = meta.interrupted_node if before else meta.current_node  # where it would go on
        return (
            node in self.graph.nodes
            and is_tool_node(self.graph.nodes[node])
            and bool(pending_calls(state))
        )


def _waiting_remote(state: AgentState) -> list[RemoteToolCallBlock]:
    """The client's tool calls the context still waits for."""
    return [c for c in open_calls(state.context) if isinstance(c, RemoteToolCallBlock)]


def _answers_any(events: Sequence[Event], calls: Sequence[RemoteToolCallBlock]) -> bool:
    return bool(_answered_ids(events) & {c.id for c in calls})


def _appended_ids(events: Sequence[Event]) -> list[Any]:
    return [e.message.get("message_id") for e in events if isinstance(e, MessageAppended)]
