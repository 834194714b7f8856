"""Double-texting's `rollback`: the running run is cancelled and superseded, and the thread's
state is set back to what it was before that run began.

The whole rollback is one commit on the thread: the results of the open tool calls (as
`agentlog.actors.engine.ending` decides: committed, abandoned or not run), `run_cancelled` (unless
the run
was cancelled already), `run_superseded` naming the run, then `messages_replaced` and
`state_updated(replace=True)` carrying the state as it was (decided when the rollback is
committed, so the fold stays pure). Steps keep counting, the superseded run stays in the log
and in `history`, and its tools' side effects are not undone.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.ending import closing_events
from agentlog.events import EventStore, ThreadBusyError, ThreadNotFoundError
from agentlog.events.kinds import (
    Event,
    MessagesReplaced,
    RunCancelled,
    RunCompleted,
    RunSuperseded,
    StateUpdated,
)
from agentlog.projections import ExecutionStatus, Fold
from agentlog.projections.edge import to_builtins

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph

RETRY_S = 0.02
"""How often a rollback looks again for a thread still held by a worker finishing its call."""


async def roll_back(
    app: CompiledGraph[Any], thread_id: str, to_seq: int, *, by: str, reason: str | None
) -> bool:
    """Supersede the run after `to_seq` on `thread_id`, setting the state back to `to_seq`.

    Waits while a `def` node cut short still holds the thread. False, writing nothing, when
    the run completed before the rollback landed, was rolled back already, or is no longer
    the thread's current run (a restart finishing a rollback whose run had completed, with
    later runs on the thread since: those are never set back).
    """
    store = app.store
    run_id = await _run_after(store, thread_id, to_seq)
    if run_id is None:
        return False  # nothing of that run was recorded: there is nothing to undo
    before = await app.aget_state({"thread_id": thread_id}, at_seq=to_seq) if to_seq else None
    plan_fields = [
        name
        for name in app.graph.state_cls.model_fields
        if name not in ("context", "execution_meta")
    ]

    async def supersede(fold: Fold[Any]) -> list[Event]:
        meta = fold.state.execution_meta
        if run_id in meta.internal_data.get("superseded", ()):
            return []
        if meta.status == ExecutionStatus.COMPLETED:
            return []  # it ended before the rollback reached it: its outcome stands
        if meta.internal_data.get("run_id", run_id) != run_id:
            return []  # a later run is the thread's now: that run ended before the rollback
        events: list[Event] = []
        if meta.status != ExecutionStatus.CANCELLED:
            why = f"the run was rolled back by {by!r}" + (f" ({reason})" if reason else "")
            events += await closing_events(store, fold, why, over=True)
            events.append(RunCancelled(by=by, reason=reason, node=meta.current_node))
        old = before if before is not None else type(fold.state)()
        events += [
            RunSuperseded(run_id=run_id, by=by, reason=reason, started_seq=to_seq + 1),
            MessagesReplaced(messages=[to_builtins(m) for m in old.context]),
            StateUpdated(
                values={name: to_builtins(getattr(old, name)) for name in plan_fields},
                source="rollback",
                reason=f"rolled back to seq {to_seq}",
                replace=True,
            ),
        ]
        return events

    while True:
        try:
            written = await app.awrite_claimed(
                thread_id, supersede, actor=by, what="a rollback", run_id=run_id
            )
        except ThreadBusyError:
            await asyncio.sleep(RETRY_S)
            continue
        return bool(written)


async def rolled_back(store: EventStore, thread_id: str, to_seq: int) -> bool:
    """Whether the thread records the rollback of the run after `to_seq` (a restart that
    finds it missing finishes the rollback); a thread with nothing after `to_seq` has
    nothing left to roll back, which counts as done."""
    if await store.last_seq(thread_id) <= to_seq:
        return True
    async for record in store.read(thread_id, to_seq + 1):
        if isinstance(record.event, RunSuperseded) and record.event.started_seq == to_seq + 1:
            return True
    return False


async def outran(store: EventStore, thread_id: str, to_seq: int) -> bool:
    """Whether the run after `to_seq` completed before its rollback could land: its
    `run_completed` is in the log and no `run_superseded` names it (the rollback wrote
    nothing, so the run's completion is its true end)."""
    if await store.last_seq(thread_id) <= to_seq:
        return False
    run_id, completed = None, False
    async for record in store.read(thread_id, to_seq + 1):
        if isinstance(record.event, RunSuperseded) and record.event.started_seq == to_seq + 1:
            return False
        run_id = run_id or record.run_id
        ended = isinstance(record.event, RunCompleted) and record.run_id == run_id
        completed = completed or ended
    return completed


async def _run_after(store: EventStore, thread_id: str, seq: int) -> str | None:
    """The run id of the first record after `seq` (None: nothing was recorded after it,
    or nothing at all yet: a run cut short before it wrote its first record)."""
    try:
        async for record in store.read(thread_id, seq + 1, seq + 1):
            return record.run_id
    except ThreadNotFoundError:
        return None
    return None
