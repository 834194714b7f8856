"""A branch of a thread back to a point of its own past, on the thread itself: LangGraph's
run or edit at a past `checkpoint_id`. The log only grows, so the branch is a record at the
head (`forked`, naming the thread itself and the point) that sets the whole state back to
what it was there, written through the one commit path under the thread's claim
(`awrite_claimed`). What followed that point stays in the log, in the history and in
`verify`; steps keep counting from the head's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.ending import closing_events
from agentlog.events import EventRecord
from agentlog.events.kinds import Event
from agentlog.projections import ExecutionStatus, Fold
from agentlog.projections.errors import IllegalTransitionError
from agentlog.projections.fold import before_first_run
from agentlog.projections.forks import branched, fork_event
from agentlog.projections.state import StopRequestStatus

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph


class ThreadRunningError(IllegalTransitionError):
    """A branch asked of a thread whose run is going (nothing was written): wait for the
    run to end or pause, or cancel it, then branch."""


def running(fold: Fold[Any]) -> bool:
    """Whether a run is going on the thread (not paused, stopped, ended, or not begun)."""
    meta = fold.state.execution_meta
    paused = meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED
    return meta.status == ExecutionStatus.RUNNING and not paused and not before_first_run(meta)


async def branch_thread(
    app: CompiledGraph[Any], thread_id: str, *, at_seq: int, actor: str
) -> list[EventRecord]:
    """Set `thread_id` back to the state right after its record `at_seq`, appending the
    branch at its head; the records written (none when `at_seq` is the head already).

    The point must be one the thread stood at (`ForkPointInCommitError` otherwise, as a
    fork's); a thread whose run is going refuses with `ThreadRunningError`. Tool calls the
    head's paused run had started are closed first (abandoned), as a rollback closes them.
    """
    store = app.store
    _, event = await fork_event(
        store, thread_id, at_seq=at_seq, new_thread_id=thread_id, state_cls=app.graph.state_cls
    )

    async def build(fold: Fold[Any]) -> list[Event]:
        if fold.seq <= event.source_seq:
            return []  # the point is the head: the thread stands there already
        if running(fold):
            raise ThreadRunningError(
                event.KIND,
                f"thread {thread_id!r} has a run going: it cannot go back to seq "
                f"{event.source_seq} under it; wait for the run to end, or cancel it, then "
                "run or edit at that checkpoint",
            )
        why = f"the thread went back to seq {event.source_seq} by {actor!r}"
        closing = await closing_events(store, fold, why, over=False)
        return [*closing, branched(event, fold.state.execution_meta.step)]

    return await app.awrite_claimed(thread_id, build, actor=actor, what="a branch")
