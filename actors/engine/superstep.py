"""A superstep: the branches of one step (edges fanning out, a condition naming several
nodes, `Send`s) run concurrently, and their outputs are committed as the one step.

How the log records it, and why it keeps the guarantees of a step:

* one commit enters every branch (`branch_entered`: node, branch, step) before any of them
  runs, as `node_entered` does for one node;
* the branches run at once; what each returns is turned into events against the state
  before the step (each branch sees that state, never another branch's writes);
* their outputs, in **branch order** (never completion order), with the step's one
  `step_advanced` (after a `tasks_planned` when the next step is a superstep too), go in one
  commit through the run's commit path: the field reducers merge them as the fold applies
  them in that order, so replay and the live state agree by construction;
* two branches writing one field that has no reducer fail the step (`InvalidUpdateError`)
  before anything of it is written.

A crash before that commit leaves "branches entered, no outputs": resume enters them again
and runs them all. A tool node's calls are committed as they finish, as in a plain step, so
a finished call is answered from the log, never run again.
"""

from __future__ import annotations

import asyncio
import copy
from functools import partial
from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.actor import ActorStoppedError
from agentlog.actors.engine.callbacks import (
    INVOCATION_HOOKS,
    Invocation,
    InvocationType,
    call_hook,
    recovered,
)
from agentlog.actors.engine.context import NodeContext
from agentlog.actors.engine.errors import GraphError, GraphInterrupt
from agentlog.actors.engine.guard import Guard
from agentlog.actors.engine.nodes import RunNode, output_events, resume_values
from agentlog.actors.engine.plan import Task, check_merge, requested
from agentlog.actors.engine.view import node_view
from agentlog.actors.tools.node import is_tool_node, pending_calls
from agentlog.events import BranchEntered, EventRecord, InterruptRaised
from agentlog.events.kinds import Event
from agentlog.projections import to_builtins
from agentlog.projections.ids import monotonic
from agentlog.projections.keys import ENTERED_KEY, RESUME_KEY

if TYPE_CHECKING:
    from agentlog.actors.engine.loop import RunLoop

__all__ = ["run_superstep"]


class _Branch:
    """One branch while it runs: its task, its link to the log, what it asked of the run."""

    def __init__(self, index: int, task: Task, context: NodeContext) -> None:
        self.index, self.task, self.context = index, task, context
        self.requests: list[tuple[str, tuple[Any, ...]]] = []
        self.guard: Guard | None = None
        self.invocation: Invocation | None = None


async def run_superstep(run: RunLoop[Any], tasks: list[Task]) -> None:
    """Run the step whose `tasks` the log planned, as one step: enter, run, commit."""
    engine = run.engine
    meta = run.fold.state.execution_meta
    entered = meta.internal_data.get(ENTERED_KEY)
    step_records: list[EventRecord] = []
    names = tuple(t.node for t in tasks)
    entering = [
        BranchEntered(node=t.node, branch=i, step=meta.step + 1) for i, t in enumerate(tasks)
    ]
    if entered:
        # begun before (a crash, a pause, a failure): the branches see what they committed
        step_records = [r async for r in engine.store.read(run.thread_id, entered["seq"] + 1)]
        if not run.cut_short:
            await run.commits.commit(entering, actor=names[0], owners=names)
    else:
        await run.commits.commit(entering, actor=names[0], owners=names)
    run.cut_short = False
    data = run.fold.state.execution_meta.internal_data
    first_seq = int((data.get(ENTERED_KEY) or {}).get("seq", 0))
    pending = data.get(RESUME_KEY)
    hooks = engine.callbacks if engine.hooked & INVOCATION_HOOKS else None
    branches = [
        _Branch(
            i,
            task,
            NodeContext(
                run.thread_id,
                run.run_id,
                task.node,
                partial(run.commits.commit, actor=task.node),
                step_records,
                run.in_flight,
                run.dispatched,
                hooks,
                run.stream,
                first_seq + i,  # the branch's own `branch_entered`: the same on a re-run
                step=meta.step + 1,
                branch=i,
                log=engine.store,
            ),
        )
        for i, task in enumerate(tasks)
    ]
    began = monotonic()
    state = run.fold.state
    outputs = await asyncio.gather(
        *(_run_branch(run, b, state, resume_values(pending, b.index)) for b in branches),
        return_exceptions=True,
    )
    for branch in branches:
        if branch.guard is not None:
            branch.guard.disarm()
    recorded = [e for b in branches for e in b.context.recorded]
    for branch, output in zip(branches, outputs, strict=True):
        guard = branch.guard
        if isinstance(output, ActorStoppedError) and guard is not None and guard.fired:
            await _stop_all(run, branches)
            await run.cut(branch.task.node, guard)
            return
        if isinstance(output, GraphInterrupt):
            event = InterruptRaised(
                node=branch.task.node,
                reason=str(output.reason),
                when="before",
                data=to_builtins(output.data),
                by_node=True,
                branch=branch.index,
            )
            await run.commits.commit([*recorded, event], actor=branch.task.node)
            return
    for branch, output in zip(branches, outputs, strict=True):
        if isinstance(output, BaseException):
            await run.fail_step(branch.task.node, output, recorded)
    try:
        events, owners, ran, pause, ending = await _merged(run, branches, outputs, state)
    except Exception as exc:
        await run.fail_step(names[0], exc, recorded)
        raise  # not reached: fail_step raises
    await run.commits.commit_step(
        names[0],
        [*recorded, *events],
        None,
        pause,
        ending=ending,
        started=began,
        ran=ran,
        owners=(*(b.task.node for b in branches for _ in b.context.recorded), *owners),
    )
    run.last_node = names[0]


async def _run_branch(run: RunLoop[Any], branch: _Branch, state: Any, resume: list[Any]) -> Any:
    """Run one branch's node on its input: the state (a copy of its own), or its `Send` arg."""
    engine, node = run.engine, branch.task.node
    # a Send's input is a copy: the recorded one stays as the log has it, whatever the node does
    view = copy.deepcopy(branch.task.arg) if branch.task.sent else node_view(state, branch.requests)
    hooks = engine.callbacks if engine.hooked & INVOCATION_HOOKS else None
    if hooks is not None and not is_tool_node(engine.graph.nodes[node]):
        branch.invocation = Invocation(InvocationType.NODE, node, run.thread_id, run.run_id, view)
        await call_hook(hooks, "before", branch.invocation)
    actor = run.node_actor(node)
    branch.guard = Guard(engine.store, run, node, actor, run.timeout_of(node))
    try:
        output = await actor.ask(RunNode(view, run.config, branch.context, resume))
    except (GraphInterrupt, ActorStoppedError, GraphError):
        raise
    except Exception as exc:
        if hooks is None or branch.invocation is None:
            raise
        found = await call_hook(hooks, "on_error", branch.invocation, exc)
        if found is None:
            raise
        recovery = recovered(found, f"{hooks.name}.on_error")
        why = f"recovery by {hooks.name} after {type(exc).__name__}: {exc}"
        metadata = {**recovery.metadata, "recovery": why}
        return [recovery.model_copy(update={"metadata": metadata})]
    finally:
        branch.guard.disarm()
    if hooks is not None and branch.invocation is not None:
        replaced = await call_hook(hooks, "after", branch.invocation, output)
        if replaced is not None:
            output = replaced
    return output


async def _stop_all(run: RunLoop[Any], branches: list[_Branch]) -> None:
    """A stop or a time limit cut one branch short: the others stop with it."""
    for branch in branches:
        actor = run.actors.pop(branch.task.node, None)
        if actor is not None:
            await actor.stop(drain=False)


async def _merged(
    run: RunLoop[Any], branches: list[_Branch], outputs: list[Any], state: Any
) -> tuple[list[Event], tuple[str, ...], list[tuple[str, Any]], InterruptRaised | None, bool]:
    """The branches' outputs as one step's events, in branch order, with the writer of each,
    the nodes that ran (with their gotos), any pause a branch asked for, and whether one
    ended the run; `InvalidUpdateError` when two write a field without a reducer."""
    graph = run.engine.graph
    per_branch: list[tuple[str, list[Event]]] = []
    ran: list[tuple[str, Any]] = []
    pause: InterruptRaised | None = None
    ending = False
    waiting = {c.id for c in pending_calls(state)}
    for branch, output in zip(branches, outputs, strict=True):
        node = branch.task.node
        events, goto = output_events(
            node,
            output,
            state,
            known=run.fold.message_ids,
            waiting=waiting,
            append=is_tool_node(graph.nodes[node]),
        )
        goto, asked, ends = requested(node, branch.requests, goto)
        pause = pause or asked
        ending = ending or ends
        per_branch.append((node, events))
        ran.append((node, goto))
    check_merge(graph.state_cls, per_branch)
    events = [e for _, evs in per_branch for e in evs]
    owners = tuple(node for node, evs in per_branch for _ in evs)
    passed = await run.passed_calls(per_branch[0][0], events)
    return [*passed, *events], (per_branch[0][0],) * len(passed) + owners, ran, pause, ending
