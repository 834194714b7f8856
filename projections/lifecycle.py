"""A run's lifecycle, decided in one place: the status each kind that ends or pauses a run
leaves it in. The fold (`agentlog.projections.fold`) sets a thread's status from here, and
readers that scan records without folding them ask here too."""

from __future__ import annotations

from agentlog.events.kinds import (
    BaseEvent,
    InterruptRaised,
    RunCancelled,
    RunCompleted,
    RunFailed,
    Stopped,
)
from agentlog.projections.state import ExecutionStatus


def status_after(event: BaseEvent) -> ExecutionStatus | None:
    """The status a run stands in once `event` is folded, for the kinds that end or pause a
    run (`ENDS_RUN`); None for every other kind. The fold sets a thread's status from here,
    and a reader that scans records without folding them (a step's status in
    `state_history`) asks here too, so a run's lifecycle is decided in one place."""
    if isinstance(event, InterruptRaised | Stopped):
        before = event.when == "before"
        return ExecutionStatus.INTERRUPTED_BEFORE if before else ExecutionStatus.INTERRUPTED_AFTER
    if isinstance(event, RunCompleted):
        return ExecutionStatus.COMPLETED
    if isinstance(event, RunFailed):
        return ExecutionStatus.ERROR
    if isinstance(event, RunCancelled):
        return ExecutionStatus.CANCELLED
    return None


def ended(event: BaseEvent) -> ExecutionStatus:
    """The status of a kind that ends or pauses a run (the fold's handlers of those)."""
    status = status_after(event)
    assert status is not None, type(event).KIND
    return status
