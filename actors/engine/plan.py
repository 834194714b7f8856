"""Planning steps: which tasks the next step runs after the nodes of this one (edges fanning
out, a condition naming several nodes, `Send`s, joins), and whether a superstep's branches
may be merged.

A step is one node, as before supersteps, unless its planner finds more: then the step's
commit carries a `tasks_planned` record just before its `step_advanced`, and the next step runs
those tasks as the branches of one superstep (`agentlog.actors.engine.superstep`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.command import Send
from agentlog.actors.engine.errors import GraphError, InvalidUpdateError, NodeReportedError
from agentlog.actors.engine.view import node_view
from agentlog.actors.tools.node import is_tool_node
from agentlog.events import ContextSummarized, InterruptRaised, StateUpdated
from agentlog.events.kinds import Event
from agentlog.projections import END, AgentState, ExecutionState, ExecutionStatus, to_builtins
from agentlog.projections.fold import field_plan
from agentlog.projections.keys import JOINS_KEY, TASKS_KEY

if TYPE_CHECKING:
    from agentlog.actors.engine.graph import StateGraph

__all__ = ["Task", "check_merge", "is_superstep", "plan", "planned_tasks", "requested"]


@dataclass(frozen=True)
class Task:
    """One branch of a step: a node, and for a `Send` the input it runs on."""

    node: str
    arg: Any = None
    sent: bool = False

    def record(self) -> dict[str, Any]:
        """The task as `tasks_planned` records it."""
        return {"node": self.node, "arg": self.arg} if self.sent else {"node": self.node}

    @classmethod
    def of(cls, recorded: Mapping[str, Any]) -> Task:
        return cls(str(recorded["node"]), recorded.get("arg"), "arg" in recorded)


def planned_tasks(meta: ExecutionState) -> list[Task] | None:
    """The tasks of the step the fold stands before, when it is a superstep (several tasks,
    or a `Send`); None for a plain one-node step."""
    planned = meta.internal_data.get(TASKS_KEY)
    if not planned or planned.get("step") != meta.step + 1:
        return None
    tasks = [Task.of(t) for t in planned["tasks"]]
    return tasks if is_superstep(tasks) else None


def is_superstep(tasks: Sequence[Task]) -> bool:
    """Whether a step of `tasks` runs as branches (more than one, or a `Send`)."""
    return len(tasks) > 1 or any(t.sent for t in tasks)


def plan(
    graph: StateGraph[Any],
    ran: Sequence[tuple[str, Any]],
    state: AgentState,
) -> tuple[list[Task], dict[str, list[str]], bool]:
    """The tasks after the nodes `ran` (each with the `goto` it returned, or None) on `state`
    (their outputs folded in), the joins still waiting, and whether that must be recorded
    (`tasks_planned`): anything but one plain next node with the joins unchanged.

    Plain targets run once however many branches lead to them, in the order first named;
    `Send`s each run, in the order given, after them. No task at all is END.
    """
    plain: dict[str, None] = {}
    sends: list[Task] = []
    for node, goto in ran:
        for target in _targets(graph, node, goto, state):
            if isinstance(target, Send):
                _check_target(graph, node, target.node, sent=True)
                sends.append(Task(target.node, to_builtins(target.arg), sent=True))
            elif target != END:
                _check_target(graph, node, target)
                plain[target] = None
    before: dict[str, list[str]] = dict(state.execution_meta.internal_data.get(JOINS_KEY) or {})
    waiting = dict(before)
    done = {node for node, _ in ran}
    for target, sources in graph.joins.items():
        if not done & set(sources):
            continue
        seen = [s for s in sources if s in done or s in waiting.get(target, ())]
        if len(seen) == len(sources):
            plain[target] = None
            waiting.pop(target, None)
        else:
            waiting[target] = seen
    tasks = [Task(n) for n in plain] + sends
    recorded = len(tasks) > 1 or bool(sends) or waiting != before
    return tasks, waiting, recorded


def _targets(graph: StateGraph[Any], node: str, goto: Any, state: AgentState) -> list[Any]:
    """Where `node` leads: its `Command(goto=...)` when it returned one, else its edges and
    its condition's answer."""
    if goto is not None:
        chosen = list(goto) if isinstance(goto, list | tuple) else [goto]
        for target in chosen:
            if not isinstance(target, str | Send):
                raise GraphError(
                    f"node {node!r} returned Command(goto={goto!r}): goto takes a node name, "
                    "a Send(node, arg), or a list of them"
                )
            graph.check_goto(node, target if isinstance(target, str) else target.node)
        return chosen
    found: list[Any] = []
    if node in graph.edges:
        found += [graph.edges[node], *graph.fanout.get(node, ())]
    branch = graph.branches.get(node)
    if branch is not None:
        for target in branch.resolve_all(branch.condition(node_view(state)), node):
            name = target.node if isinstance(target, Send) else target
            if name != END and name not in graph.nodes:
                raise GraphError(f"the condition after {node!r} chose {name!r}, which is no node")
            found.append(target)
    return found


def _check_target(graph: StateGraph[Any], source: str, target: str, *, sent: bool = False) -> None:
    if target not in graph.nodes:
        what = f"Send({target!r}, ...)" if sent else repr(target)
        raise GraphError(f"node {source!r} chose to go to {what}, which is no node")
    if sent and is_tool_node(graph.nodes[target]):
        raise GraphError(
            f"node {source!r} sent an input to tool node {target!r}: a ToolNode runs the "
            "tool calls of the context, route to it with its name instead of Send"
        )


def check_merge(state_cls: type[AgentState], branches: Sequence[tuple[str, list[Event]]]) -> None:
    """Refuse a superstep whose branches (node, outputs) write one field that has no reducer
    to merge them: `InvalidUpdateError`, naming the field and the branches."""
    plan_of = field_plan(state_cls)
    writers: dict[str, list[str]] = {}
    for node, events in branches:
        written: set[str] = set()
        for event in events:
            if isinstance(event, StateUpdated):
                written.update(event.values)
            elif isinstance(event, ContextSummarized):
                written.add("context_summary")
        for name in written:
            writers.setdefault(name, []).append(node)
    for name, nodes in writers.items():
        known = plan_of.get(name)
        if len(nodes) > 1 and (known is None or known[1] is None):
            raise InvalidUpdateError(
                f"nodes {', '.join(map(repr, nodes))} each wrote field {name!r} in the same "
                f"step, and {state_cls.__name__}.{name} has no reducer to merge them: give it "
                f"one (`{name}: Annotated[list[...], operator.add]`), or let one branch write it"
            )


def requested(
    node: str, requests: Sequence[tuple[str, tuple[Any, ...]]], goto: str | None
) -> tuple[str | None, InterruptRaised | None, bool]:
    """What a node asked of the run through its state's methods: failing, a pause, the end."""
    pause: InterruptRaised | None = None
    ending = False
    for method, args in requests:
        if method == "error":
            raise NodeReportedError(str(args[0]))
        if method == "complete":
            if goto is not None and goto != END:
                raise GraphError(
                    f"node {node!r} called state.complete() and returned Command(goto="
                    f"{goto!r}): do one or the other"
                )
            ending = True
        elif method == "set_interrupt":
            at, reason, status, data = args
            after = status == ExecutionStatus.INTERRUPTED_AFTER
            pause = InterruptRaised(
                node=at, reason=reason, when="after" if after else "before", data=to_builtins(data)
            )
    return goto, pause, ending
