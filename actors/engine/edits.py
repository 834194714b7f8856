"""A human edit of a thread's state, checked before it is written: taken as a node's output
(`update_state(..., as_node=)`), and refused when a model provider would refuse the
transcript it leaves."""

from __future__ import annotations

from agentlog.actors.engine.ending import closing_events, goes_past
from agentlog.actors.engine.plan import plan
from agentlog.actors.engine.run import Engine, S, scratch_records
from agentlog.events import InterruptRaised, Resumed, RunCompleted, StepAdvanced, TasksPlanned
from agentlog.events.kinds import Event, StateUpdated
from agentlog.projections import (
    END,
    ExecutionStatus,
    Fold,
    IllegalTransitionError,
    InvalidStateUpdateError,
    StopRequestStatus,
    open_calls,
    order_problems,
)
from agentlog.projections.fold import decide


async def as_node_edit(
    engine: Engine[S], fold: Fold[S], node: str, edit: list[Event], actor: str
) -> list[Event]:
    """The edit as `node`'s output: the step advances to where `node` routes, and pauses.

    The calls the paused step had started are closed first, and, when the edit ends the
    run, every call still open is answered right after the message that made it, before
    the edit's own messages (the order every model provider demands).
    """
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
            StateUpdated.KIND,
            f"as_node={node!r} applies to a paused or failed run; thread "
            f"{meta.thread_id!r} is {meta.status.value}: send it new input instead",
        )
    paused_at = meta.interrupted_node or meta.current_node
    resumed: list[Event] = [Resumed(value=None, by=actor, node=paused_at)]
    scratch = Fold(fold.state, seq=fold.seq)
    scratch.apply_all(scratch_records(meta.thread_id, [*resumed, *edit], fold.seq))
    tasks, joins, recorded = plan(engine.graph, [(node, None)], scratch.state)
    target = tasks[0].node if tasks else END
    ending = target == END
    why = f"{actor!r} edited the state as {node!r} instead"
    # the calls the edit answers or removes itself are left to it; the others are
    # answered when the run ends, or when a message of the edit would come after them
    still = {c.id for c in open_calls(scratch.state.context)}
    handled = {c.id for c in open_calls(fold.state.context)} - still
    passed = ending or goes_past(edit)
    closing = await closing_events(engine.store, fold, why, over=passed, skip=handled)
    events: list[Event] = [*resumed, *closing, *edit]
    if recorded and tasks:  # the node fans out: the next step is all of its branches
        planned = [t.record() for t in tasks]
        events.append(TasksPlanned(step=meta.step + 2, tasks=planned, joins=joins))
    events.append(StepAdvanced(step=meta.step + 1, next_node=target))
    if ending:
        # calls the edit itself made follow its own message: they never run
        after = Fold(fold.state, seq=fold.seq)
        after.apply_all(scratch_records(meta.thread_id, events, fold.seq))
        events += await closing_events(engine.store, after, why, over=True)
        events.append(RunCompleted())
    else:
        reason = f"update_state as {node!r} by {actor!r}"
        events.append(InterruptRaised(node=target, reason=reason, when="before"))
    return events


def check_order(fold: Fold[S], events: list[Event]) -> None:
    """Refuse an edit after which a model provider would refuse the transcript: a message
    between an assistant message's tool calls and their results."""
    decide(fold.state, events, seq=fold.seq)  # a refusal of the gate's says it first
    thread_id = fold.state.execution_meta.thread_id
    scratch = Fold(fold.state, seq=fold.seq)
    scratch.apply_all(scratch_records(thread_id, events, fold.seq))
    problems = order_problems(scratch.state.context)
    if len(problems) > len(order_problems(fold.state.context)):
        raise InvalidStateUpdateError(
            f"the edit would break the transcript: {problems[-1]}; answer the open tool "
            "calls first (tool messages with their tool_call_id), or edit as_node=... to "
            "end or redirect the run (its open calls are then answered as not run)"
        )
