"""Committing a run's events: one step's outputs in one append, fenced by the run's claim,
folded into the live state the moment they land, published to its stream, snapshotted."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Generic

import msgspec

from agentlog.actors.engine.commit import commit
from agentlog.actors.engine.durability import Held, land_held, shielded
from agentlog.actors.engine.errors import (
    GraphError,
    ThreadBusyError,
)
from agentlog.actors.engine.options import durability_of
from agentlog.actors.engine.plan import Task, is_superstep, plan
from agentlog.actors.engine.run import Engine, Run, S, _log, elapsed_ms, scratch_records
from agentlog.actors.tools.node import is_tool_node, pending_calls
from agentlog.events import (
    AgentlogError,
    ContextSummarized,
    EventRecord,
    InterruptRaised,
    MessageAppended,
    MessagesRemoved,
    MessagesReplaced,
    NodeEntered,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    Snapshot,
    StepAdvanced,
    StopRequested,
    ToolCallStarted,
)
from agentlog.events.kinds import (
    BranchEntered,
    Event,
    MessageReplaced,
    RunCancelled,
    StateUpdated,
    Stopped,
    TasksPlanned,
)
from agentlog.projections import (
    END,
    AgentState,
    BaseContextManager,
    ExecutionStatus,
    InvalidStateUpdateError,
    Message,
    MessageContextManager,
    RemoteToolCallBlock,
    StopRequestStatus,
    StreamChunk,
    StreamEvent,
    check_pairs,
    to_builtins,
)
from agentlog.projections.context import dropped
from agentlog.projections.snapshots import SnapshotWriter

TRIMMER = "runtime"
"""The actor of a context manager's trim: the engine's own record, beside a step's."""

Build = Callable[[], list[Event] | Awaitable[list[Event]]]
"""Builds a commit's events (folding them ahead), or a coroutine that does."""


class RunCommits(Generic[S]):
    """A run's side of the commit path: its commits (a step's outputs, the run's own
    records), each built on the run's live fold, trimmed by the context manager, appended
    under the run's claim, then folded, published, snapshotted and handed to the hooks."""

    def __init__(self, engine: Engine[S], run: Run[S]) -> None:
        self.engine, self.run = engine, run
        mode = durability_of(run.config)
        self.held: Held | None = None if mode == "sync" else Held(engine, run, mode)
        """The run's records not yet durable, in the weaker durability modes."""

    async def land(self) -> None:
        """Make every record of the run durable now (a no-op in `sync`, where all are)."""
        await land_held(self.held)

    async def commit_step(
        self,
        node: str,
        events: list[Event],
        goto: str | None,
        pause: InterruptRaised | None = None,
        *,
        ending: bool = False,
        started: float | None = None,
        changed_by: str | None = None,
        ran: Sequence[tuple[str, Any]] | None = None,
        owners: tuple[str, ...] | None = None,
    ) -> None:
        """Outputs, `step_advanced` and any pause after the node, in one commit.

        A superstep's commit names the nodes that `ran` (each with its goto), which the
        next step is planned from, and the `owners` (the node writing each of `events`).

        The pause is the node's own (`state.set_interrupt`), else a wait for the client's
        tool calls the node's messages ask for, else an `interrupt_after` breakpoint.
        `ending` (the node called `state.complete()`) sends the run to END. `started` is when
        the node was handed its input: the step's duration runs from it to the commit's build.
        """
        async with self.run.writing:
            await self._commit_step_unlocked(
                node, events, goto, pause, ending, started, changed_by, ran, owners
            )

    async def _commit_step_unlocked(
        self,
        node: str,
        events: list[Event],
        goto: str | None,
        pause: InterruptRaised | None,
        ending: bool = False,
        started: float | None = None,
        changed_by: str | None = None,
        ran: Sequence[tuple[str, Any]] | None = None,
        owners: tuple[str, ...] | None = None,
    ) -> None:
        """See `_commit_step`; the outputs a hook changed are recorded as `changed_by`'s."""
        entering: list[Event] = []
        trim: list[Event] = []
        target = END
        base = 0

        def outputs() -> None:
            nonlocal base
            base = self.run.fold.seq
            self.run.fold.apply_decided(self._scratch(events, base))  # routing sees the outputs

        async def trimmed() -> list[Event]:
            outputs()
            found = await self._trim(events)
            if found:
                self.run.fold.apply_decided(self._scratch(found, base + len(events)))
            return rest(found)

        def build() -> list[Event]:
            outputs()
            return rest([])

        def rest(found: list[Event]) -> list[Event]:
            """Route from the state the outputs (and the trim) leave; the step's tail."""
            nonlocal entering, target, trim
            trim = found
            fold = self.run.fold
            tail: list[Event] = []
            tasks: list[Task] = []
            if ending:
                target = END
            else:
                tasks, joins, recorded = plan(self.engine.graph, ran or [(node, goto)], fold.state)
                target = tasks[0].node if tasks else END
                if recorded and tasks:  # the step after the one this commit closes
                    step = fold.state.execution_meta.step + 2
                    planned = [t.record() for t in tasks]
                    tail.append(TasksPlanned(step=step, tasks=planned, joins=joins))
            remote = _remote_calls(events)
            if remote and pause is None and target == END:
                target = node  # the results come back to the node that asked for them
            took = None if started is None else elapsed_ms(started)
            tail.append(
                StepAdvanced(
                    step=fold.state.execution_meta.step + 1, next_node=target, duration_ms=took
                )
            )
            if pause is not None:
                tail.append(pause)
            elif remote:
                data = {"tool_calls": [to_builtins(c) for c in remote]}
                tail.append(
                    InterruptRaised(node=node, reason=REMOTE_TOOL_CALL, when="after", data=data)
                )
            elif self.run.interrupt_after and (
                after := [n for n, _ in ran or [(node, goto)] if n in self.run.interrupt_after]
            ):
                tail.append(InterruptRaised(node=after[0], reason="interrupt_after", when="after"))
            if not is_superstep(tasks):
                entering = self._entering(tail, target)
            tail.extend(entering)
            fold.apply_decided(self._scratch(tail, base + len(events) + len(trim)))
            return [*events, *trim, *tail]

        actors = None
        if changed_by is not None or self.engine.context_manager is not None or owners:
            writer = node if changed_by is None else changed_by

            def actors(batch: list[Event]) -> tuple[str, ...]:
                others = len(batch) - len(events) - len(trim)
                mine = owners or (writer,) * len(events)
                return mine + (TRIMMER,) * len(trim) + (node,) * others

        chosen: Build = build if self.engine.context_manager is None else trimmed
        records = await self._commit_built(chosen, actor=node, actors=actors)
        if entering:
            self.run.ahead = (target, records[len(records) - len(entering) + 1 :])
            self.run.started_ahead.update(
                e.call_id for e in entering if isinstance(e, ToolCallStarted)
            )

    async def commit(
        self, events: Sequence[Event], *, actor: str, owners: tuple[str, ...] | None = None
    ) -> list[EventRecord]:
        """Decide, append and fold `events`; a concurrent stop request is folded in first.
        `owners` names the writer of each event when they are not all `actor`."""
        async with self.run.writing:
            return await self._commit_unlocked(events, actor=actor, owners=owners)

    async def _commit_unlocked(
        self, events: Sequence[Event], *, actor: str, owners: tuple[str, ...] | None = None
    ) -> list[EventRecord]:
        def build() -> list[Event]:
            self.run.fold.apply_decided(self._scratch(events, self.run.fold.seq))
            return list(events)

        if self.engine.context_manager is None:
            if owners is None:
                return await self._commit_built(build, actor=actor)
            return await self._commit_built(build, actor=actor, actors=lambda batch: owners)

        async def trimmed() -> list[Event]:
            base = self.run.fold.seq
            self.run.fold.apply_decided(self._scratch(events, base))
            trim = await self._trim(events)
            if trim:
                self.run.fold.apply_decided(self._scratch(trim, base + len(events)))
            return [*events, *trim]

        def actors(batch: list[Event]) -> tuple[str, ...]:
            mine = owners or (actor,) * len(events)
            return mine + (TRIMMER,) * (len(batch) - len(events))

        return await self._commit_built(trimmed, actor=actor, actors=actors)

    async def _trim(self, events: Sequence[Event]) -> list[Event]:
        """The events trimming the context after `events` were folded in, if it is over the
        context manager's bound: the messages it drops (`messages_removed`, the log keeps
        them), and the new summary when there is one (`context_summarized`). A manager that
        reorders or rewrites messages replaces the context (`messages_replaced`, or a
        `context_summarized` carrying it). Only a commit that adds messages, and does not
        end the run, or that starts or resumes a run or enters a node, is trimmed: a node
        never starts on a context over the bound, even after a human edit."""
        manager = self.engine.context_manager
        if manager is None or not any(isinstance(e, _GROWS_OR_STARTS) for e in events):
            return []
        if any(isinstance(e, RunCompleted | RunFailed | RunCancelled) for e in events):
            return []
        state = self.run.fold.state
        before = list(state.context)
        if isinstance(manager, MessageContextManager):
            kept = manager.trimmed(before)
            if kept is None:
                return []
            summary = await manager.summary(dropped(before, kept), state.context_summary)
        else:  # the seed's protocol: hand it a copy of the state, take the context it leaves
            try:
                after = await manager.atrim_context(state.model_copy(deep=True))
            except Exception as exc:
                raise ContextTrimError(
                    f"{type(manager).__name__}.atrim_context raised {type(exc).__name__}: "
                    f"{exc}; the commit it was trimming was not made, so running the "
                    "thread again trims again"
                ) from exc
            kept, summary = _trimmed_state(manager, after)
            if kept == before and summary == state.context_summary:
                return []
        who = (
            repr(manager) if isinstance(manager, MessageContextManager) else type(manager).__name__
        )
        try:
            check_pairs(before, kept, f"the trim by {who}")
        except InvalidStateUpdateError as exc:
            raise ContextTrimError(f"{exc}; a context manager must keep them together") from exc
        new_summary = summary is not None and summary != state.context_summary
        ids = [m.message_id for m in before]
        if _subsequence(kept, before) and len(set(ids)) == len(ids):
            staying = {m.message_id for m in kept}
            gone = [i for i in ids if i not in staying]
            out: list[Event] = []
            if gone:
                reason = f"context trimmed by {who}: {len(kept)} of {len(before)} messages kept"
                out.append(MessagesRemoved(message_ids=gone, reason=reason))
            if new_summary:
                out.append(ContextSummarized(summary=summary or ""))
            return out
        messages = [to_builtins(m) for m in kept]
        if new_summary:
            return [ContextSummarized(summary=summary or "", messages=messages)]
        return [MessagesReplaced(messages=messages)]

    async def _commit_built(
        self,
        build: Build,
        *,
        actor: str,
        actors: Callable[[list[Event]], tuple[str, ...]] | None = None,
    ) -> list[EventRecord]:
        """Commit what `build` makes through the commit path (`agentlog.actors.engine.commit`):
        `build` checks its events and folds them into the run's fold ahead of the append (so
        routing can read them); the append then lands them, or, when a stop request came in
        between, the fold catches up and `build` runs again. Anything else that goes wrong
        reloads the fold from the log, so it never holds an event the log does not."""
        writer = _RunWrite(self, build, actor, actors)
        return await commit(writer, thread_id=self.run.thread_id, what=f"a commit by {actor!r}")

    async def _append(
        self, events: Sequence[Event], expected_seq: int, actor: str | tuple[str, ...]
    ) -> list[EventRecord]:
        """Append under the run's claim; if the run is cancelled meanwhile, the append goes
        on and `self.run.committing` lets the abandon record wait for it. In the weaker
        durability modes the records may land later (`agentlog.actors.engine.durability`)."""
        if self.held is not None:
            return await self.held.append(events, expected_seq, actor)
        append = self.engine.store.append(
            self.run.thread_id,
            events,
            expected_seq=expected_seq,
            run_id=self.run.run_id,
            actor=actor,
            claim=self.run.claim,
        )
        return await shielded(self.run, append)

    async def _catch_up(self, since: int) -> None:
        """Reload after another writer appended; only a stop request may come from outside."""
        run = self.run
        async for record in self.engine.store.read(run.thread_id, since + 1):
            if not isinstance(record.event, StopRequested):
                same_run = "the same run id" if record.run_id == run.run_id else "another run id"
                raise ThreadBusyError(
                    f"thread {run.thread_id!r} was changed by another writer ({record.actor!r} "
                    f"appended {record.kind!r} at seq {record.seq}, under {same_run}) while run "
                    f"{run.run_id} expected the thread to end at seq {since}; two runs must not "
                    "share a thread at once"
                )
        run.fold = await self.engine.load(run.thread_id)

    async def _after_commit(self, records: list[EventRecord]) -> None:
        for record in records:
            if isinstance(record.event, MessageAppended):
                self.run.own.add(record.event.message.get("message_id"))  # type: ignore[arg-type]
        if self.run.stream is not None:
            await self._publish(records)
        every = self.engine.snapshot_every
        if every and self.held is None:  # a snapshot points into the log: durable records
            if self.run.snapshots is None:
                self.run.snapshots = SnapshotWriter(self.engine.store, self.run.thread_id)
                if records[0].seq == 1:  # a new thread: followed from its first record
                    self.run.snapshots.from_start(self.engine.graph.state_cls)
            self.run.snapshots.observe(records)
            if self.run.fold.seq // every > self.run.last_snapshot // every:
                self.snapshot()
        if self.engine.hooked:
            await self.engine.lifecycle(records)  # last: a hook sees what the log says

    def snapshot(self) -> None:
        """Snapshot the run's state as it stands, in the background (its references into the
        log are taken now; the run folds on meanwhile)."""
        if self.run.snapshots is None or not self.run.fold.hash:
            return
        self.run.last_snapshot = self.run.fold.seq
        try:
            building = self.run.snapshots.build(
                self.run.fold.seq, self.run.fold.state, hash=self.run.fold.hash
            )
        except AgentlogError as exc:
            _log.warning(
                "snapshot of %r at seq %d skipped: %s", self.run.thread_id, self.run.fold.seq, exc
            )
            return
        task = asyncio.ensure_future(self._save_snapshot(building))
        self.run.background.add(task)
        task.add_done_callback(partial(_snapshot_done, self.run.background))

    async def _save_snapshot(self, building: Awaitable[Snapshot]) -> None:
        """The commit path's snapshot step: store the snapshot the projection made."""
        await self.engine.store.save_snapshot(await building)

    async def _publish(self, records: list[EventRecord]) -> None:
        assert self.run.stream is not None
        projection = self.run.stream.projection
        if projection is not None:  # a consumer asked for stream modes: their parts
            for part in projection.committed(records, self.run.fold.state):
                await self.run.stream.tell(part)
            return
        for record in records:
            event = record.event
            if isinstance(event, MessageAppended):
                message = Message.model_validate(event.message)
                chunk = StreamChunk(
                    event=StreamEvent.MESSAGE,
                    message=message,
                    thread_id=self.run.thread_id,
                    run_id=self.run.run_id,
                )
            elif record.kind in _UPDATE_KINDS:
                data = {
                    "kind": record.kind,
                    "seq": record.seq,
                    "actor": record.actor,
                    **msgspec.to_builtins(event, builtin_types=(bytes, bytearray)),
                }
                chunk = StreamChunk(
                    event=StreamEvent.UPDATES,
                    data=data,
                    thread_id=self.run.thread_id,
                    run_id=self.run.run_id,
                )
            else:
                continue
            await self.run.stream.tell(chunk)

    def _scratch(self, events: Sequence[Event], base: int) -> list[EventRecord]:
        """The records `events` will be once appended by the run: same seqs, same run id."""
        return scratch_records(self.run.thread_id, events, base, self.run.run_id)

    def _entering(self, tail: Sequence[Event], target: str) -> list[Event]:
        """The events entering `target` in the same commit as the step before it, when it is
        sure to run next: its `node_entered`, and, for a tool node, the start of each call.

        Not when the run pauses, ends, stops or reaches its recursion limit first, or when
        `target` has a breakpoint before it: then the next step enters it on its own.
        """
        meta = self.run.fold.state.execution_meta
        if (
            target == END
            or target not in self.engine.graph.nodes
            or target in self.run.interrupt_before
            or meta.status != ExecutionStatus.RUNNING
            or meta.stop_current_execution != StopRequestStatus.NONE
            or self.run.taken + 1 >= self.run.recursion_limit
            or any(isinstance(e, InterruptRaised) for e in tail)
        ):
            return []
        events: list[Event] = [NodeEntered(node=target)]
        if is_tool_node(self.engine.graph.nodes[target]):
            events += [
                ToolCallStarted(call_id=c.id, name=c.name, args=to_builtins(c.args), node=target)
                for c in pending_calls(self.run.fold.state)
            ]
        return events


class _RunWrite(Generic[S]):
    """A run's side of one commit: its live fold, folded ahead by the build, caught up when
    a stop request won the race, reloaded from the log when anything else failed."""

    __slots__ = ("actor", "actors", "batch", "commits", "make")

    def __init__(
        self,
        commits: RunCommits[S],
        make: Build,
        actor: str,
        actors: Callable[[list[Event]], tuple[str, ...]] | None,
    ) -> None:
        self.commits, self.make, self.actor, self.actors = commits, make, actor, actors
        self.batch: list[Event] = []

    async def base(self) -> int:
        return self.commits.run.fold.seq

    async def build(self, base: int) -> list[Event]:
        made = self.make()
        self.batch = await made if inspect.isawaitable(made) else made
        return self.batch

    async def append(self, events: Sequence[Event], base: int) -> list[EventRecord]:
        who = self.actor if self.actors is None else self.actors(self.batch)
        return await self.commits._append(events, base, who)

    async def landed(self, records: list[EventRecord]) -> None:
        commits = self.commits
        run = commits.run
        fold = run.fold
        fold.seq, fold.hash = records[-1].seq, records[-1].hash
        held = commits.held
        if held is not None and held.moved and records[-1].hash:
            held.drop()  # landed after a stop request: the log's seqs and state are the run's
            run.fold, run.snapshots = await commits.engine.load(run.thread_id), None
        elif [r.event for r in records] != self.batch:
            run.fold = await commits.engine.load(run.thread_id)  # the canonical decoded values
        await commits._after_commit(records)

    async def lost(self, base: int) -> None:
        held = self.commits.held
        if held is not None and held.moved:
            held.drop()  # its records landed after a stop request: read the log again
            run = self.commits.run
            run.fold, run.snapshots = await self.commits.engine.load(run.thread_id), None
            return
        await self.commits._catch_up(base)

    async def failed(self) -> None:
        run, held = self.commits.run, self.commits.held
        if held is not None:
            try:  # what the run held before this commit stays its progress
                await held.flush()
            except Exception:
                held.drop()
        run.fold = await self.commits.engine.load(run.thread_id)


def _snapshot_done(tasks: set[asyncio.Task[Any]], task: asyncio.Task[Any]) -> None:
    tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        _log.warning("snapshot failed: %s", task.exception())


_UPDATE_KINDS = frozenset(
    kind.KIND
    for kind in (
        StepAdvanced,
        StateUpdated,
        MessagesRemoved,
        MessagesReplaced,
        MessageReplaced,
        ContextSummarized,
        InterruptRaised,
        RunCompleted,
        Stopped,
        RunFailed,
    )
)
"""The kinds a run's stream publishes as updates (an appended message is a message chunk):
a step, a change to the state, and the run coming to rest."""

_GROWS_OR_STARTS = (MessageAppended, RunStarted, Resumed, NodeEntered, BranchEntered)
"""The events after which a commit is trimmed: the context grew, or a node is about to run."""


class ContextTrimError(GraphError):
    """A context manager's trim would break a tool call from its result, or a custom
    manager returned something other than the state it was handed."""


def _trimmed_state(manager: BaseContextManager[Any], after: object) -> tuple[list[Message], Any]:
    """The context and summary a custom manager's `atrim_context` left, or a
    `ContextTrimError` naming the manager when it returned anything but such a state."""
    who = f"{type(manager).__name__}.atrim_context"
    context = getattr(after, "context", None)
    if not isinstance(after, AgentState) or not isinstance(context, list):
        raise ContextTrimError(
            f"{who} returned {type(after).__name__} {after!r:.60}, not the state it was "
            "given: set state.context to the messages to keep, and return the state"
        )
    odd = next((m for m in context if not isinstance(m, Message)), None)
    if odd is not None:
        raise ContextTrimError(
            f"{who} left {type(odd).__name__} {odd!r:.60} in state.context: the context "
            "holds Message objects only (keep some of those it was given)"
        )
    summary = after.context_summary
    if summary is not None and not isinstance(summary, str):
        raise ContextTrimError(
            f"{who} set state.context_summary to {type(summary).__name__} {summary!r:.60}: "
            "a summary is text (or None)"
        )
    return list(context), summary


def _subsequence(part: list[Message], whole: list[Message]) -> bool:
    """True when `part` is `whole` with some messages left out, order kept, none changed."""
    items = iter(whole)
    return all(any(x is y or x == y for y in items) for x in part)


REMOTE_TOOL_CALL = "remote_tool_call"
"""The interrupt reason of a run waiting for the results of its client's tool calls."""


def _remote_calls(events: Sequence[Event]) -> list[RemoteToolCallBlock]:
    """The client's tool calls that the messages of `events` ask for and do not answer."""
    calls: list[RemoteToolCallBlock] = []
    answered: set[Any] = set()
    for event in events:
        if isinstance(event, MessageAppended):
            assistant = event.message.get("role") == "assistant"
            for block in event.message.get("content") or ():
                kind = block.get("type") if isinstance(block, dict) else None
                if kind == "remote_tool_call" and assistant:
                    calls.append(RemoteToolCallBlock.model_validate(block))
                elif kind == "tool_result" and calls:  # only a call before it is answered
                    answered.add(block.get("call_id"))
    return [c for c in calls if c.id not in answered] if calls else calls
