"""Forks: where a thread may be branched (never inside a commit) and the record that starts
the branch. Pure reads of the log; the fork is written through the engine's commit path
(`agentlog.actors.engine.commit.fork_thread`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from agentlog.events import (
    EventRecord,
    EventStore,
    Forked,
)
from agentlog.events.kinds import (
    Event,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.projections.commits import COMMIT_OPENERS, COMMIT_PARTS, inside_commits
from agentlog.projections.edge import state_data
from agentlog.projections.errors import (
    ForkPointInCommitError,
    IllegalTransitionError,
)
from agentlog.projections.fold import Fold, before_first_run
from agentlog.projections.generic import state_fields
from agentlog.projections.ids import new_run_id
from agentlog.projections.keys import (
    AWAITING_KEY,
    ENTERED_KEY,
    RESUME_KEY,
    STOP_KEY,
    TOOL_CALLS_KEY,
)
from agentlog.projections.state import (
    END,
    AgentState,
    ExecutionStatus,
    StopRequestStatus,
)
from agentlog.projections.timetravel import point_seq
from agentlog.projections.views import PointOutOfRangeError, fold_at

S = TypeVar("S", bound=AgentState)


_AROUND = 512
"""How many records before a fork point are read to tell its commit (more when it is longer)."""


async def _records_around(store: EventStore, thread_id: str, seq: int) -> list[EventRecord]:
    """The records from `_AROUND` before `seq` to the first after it that is a fork point
    whatever follows it (no output, opener or tool call start)."""
    records = [r async for r in store.read(thread_id, max(1, seq - _AROUND), seq)]
    async for record in store.read(thread_id, seq + 1):
        records.append(record)
        if record.kind not in COMMIT_PARTS | COMMIT_OPENERS | {ToolCallStarted.KIND}:
            break
    return records


def _unstarted(records: Sequence[EventRecord]) -> bool:
    """Whether a tool call's result in `records` has its start before them (then whether
    it was a commit of its own is known from earlier records only)."""
    started = {r.event.call_id for r in records if isinstance(r.event, ToolCallStarted)}
    return any(
        isinstance(r.event, ToolCallFinished) and r.event.call_id not in started for r in records
    )


async def check_fork_point(store: EventStore, thread_id: str, seq: int) -> None:
    """Refuse a fork at `seq` when it lies inside a commit (see `inside_commits`), naming
    the nearest fork points before and after it; nothing is written."""
    records = await _records_around(store, thread_id, seq)
    inside = inside_commits(records)
    if records and records[0].seq > 1 and (records[0].seq in inside or _unstarted(records)):
        records = [r async for r in store.read(thread_id)]  # the commits reach further back
        inside = inside_commits(records)
    if seq not in inside:
        return
    seqs = [r.seq for r in records if r.seq not in inside]
    before = max((s for s in seqs if s < seq), default=None)
    after = min((s for s in seqs if s > seq), default=None)
    kind = next(r.kind for r in records if r.seq == seq)
    ends = next((r for r in records if r.seq > seq and r.seq not in inside), None)
    closed = f" (the commit ends with {ends.kind} at seq {ends.seq})" if ends else ""
    points = " or ".join(f"seq {s}" for s in (before, after) if s is not None)
    nearest = "the nearest fork points before and after it" if before and after else "the nearest"
    raise ForkPointInCommitError(
        f"cannot fork thread {thread_id!r} at seq {seq} ({kind}): it lies inside a commit"
        f"{closed}, a point the thread never stood at; fork at {points}, {nearest}",
        seq=seq,
        before=before,
        after=after,
    )


def fork_state(state: S, thread_id: str, seq: int) -> S:
    """The state a fork of `thread_id` at `seq` starts from: the source's there, with a run
    that was going paused before the node it was at (so the fork reads as what it is, takes
    an edit `as_node=`, and `ainvoke(None)` goes on from there), under a run id of its own.

    A step in flight starts over on the fork; a run whose last step was taken (its end not
    yet recorded) reads as completed; a thread created and not yet run stays so. A
    node paused in `interrupt()` keeps the answers it had (its next value answers the
    question it waits on, as on the source).
    """
    state = state.model_copy(deep=True)
    meta = state.execution_meta
    internal = meta.internal_data
    had_run = not before_first_run(meta)
    dropped = (ENTERED_KEY, TOOL_CALLS_KEY, "run_id")
    for key in dropped if internal.get(AWAITING_KEY) else (*dropped, RESUME_KEY):
        internal.pop(key, None)
    if not had_run:
        return state
    internal["run_id"] = new_run_id()  # the run the fork goes on with: never the source's
    if meta.status == ExecutionStatus.RUNNING:
        internal.pop(STOP_KEY, None)  # a stop asked of the source's run is not the fork's
        meta.stop_current_execution = StopRequestStatus.NONE
        if meta.current_node == END:  # its last step taken, its end not yet recorded
            meta.status = ExecutionStatus.COMPLETED  # nothing is left to run: a new input
            return state  # starts a new run, as at a checkpoint whose next is empty
        meta.status = ExecutionStatus.INTERRUPTED_BEFORE
        meta.interrupted_node = meta.current_node
        meta.interrupt_reason = "forked"
        meta.interrupt_data = {"source": "fork", "thread_id": thread_id, "seq": seq}
    return state


async def fork_event(
    store: EventStore,
    thread_id: str,
    *,
    at_step: int | None = None,
    at_seq: int | None = None,
    new_thread_id: str | None = None,
    state_cls: type[AgentState] = AgentState,
) -> tuple[str, Forked]:
    """What a fork of `thread_id` at a point writes (reading only): the new thread's id and
    its first record, `forked`. `fork_build` makes the write of it."""
    seq = await point_seq(store, thread_id, at_step=at_step, at_seq=at_seq)
    if seq is not None and seq < 1:
        raise PointOutOfRangeError(
            f"a fork of thread {thread_id!r} needs a point after its first record (at_seq >= 1, "
            "or a step): before it there is no state to continue from"
        )
    if at_seq is not None and seq is not None:
        await check_fork_point(store, thread_id, seq)
    fold = await fold_at(store, thread_id, seq, state_cls)
    state = fork_state(fold.state, thread_id, fold.seq)
    new_id = new_thread_id or f"{thread_id}-fork-{uuid.uuid4().hex[:8]}"
    event = Forked(
        source_thread=thread_id,
        source_seq=fold.seq,
        state=state_data(state),
        fields=state_fields(state_cls),
    )
    return new_id, event


def fork_build(new_id: str, event: Forked) -> Callable[[Fold[S]], list[Event]]:
    """The build of a fork's write: its `forked` record, on a thread that must not exist."""

    def start(target: Fold[S]) -> list[Event]:
        if target.seq:
            raise _exists(new_id)
        return [event]

    return start


def branched(event: Forked, step: int) -> Forked:
    """`event` (a fork of a thread at a past point) as a branch of that thread itself, at
    its head: steps keep counting from `step`, the head's, so no step number is reused."""
    meta = event.state.get("execution_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    return msgspec.structs.replace(
        event, state={**event.state, "execution_meta": meta | {"step": step}}
    )


async def went_back_after(store: EventStore, thread_id: str, seq: int) -> bool:
    """Whether the thread went back to a point of its past (a `forked` record) after `seq`:
    then its head is not the state `seq`'s step left, and a history shows both."""
    return any(s > seq for s in await store.seqs_of_kind(thread_id, Forked.KIND))


def _exists(new_id: str) -> IllegalTransitionError:
    return IllegalTransitionError(Forked.KIND, f"thread {new_id!r} already exists; pick a new id")
