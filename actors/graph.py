"""`StateGraph`: the graph a user builds, checked before it ever runs.

Nodes are named callables; edges are fixed (`add_edge`) or decided by a condition on the
state (`add_conditional_edges`). `check()` refuses a graph with an unknown node, no entry
point, or a node from which END cannot be reached, naming the node.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from events import EventStore
from projections import END, START, AgentState

from .errors import GraphError

if TYPE_CHECKING:
    from .compiled import CompiledGraph
    from .tools import ToolNode

S = TypeVar("S", bound=AgentState)

NodeFn = Callable[..., Any]
"""A node: a function (sync or async) or a `ToolNode`."""
Condition = Callable[..., Hashable]


@dataclass(frozen=True)
class Command:
    """What a node may return to update the state and choose where to go next.

    `resume` is the value handed to an interrupted node when a run is resumed with it.
    """

    update: Any = None
    goto: str | None = None
    resume: Any = None


@dataclass(frozen=True)
class ConditionalEdge:
    """A condition on the state and how its answers map to nodes."""

    condition: Condition
    path_map: Mapping[Hashable, str] | None = None

    def targets(self) -> set[str] | None:
        """The nodes it can lead to, or None when any node could be named."""
        return None if self.path_map is None else set(self.path_map.values())

    def resolve(self, answer: Hashable, source: str) -> str:
        """The node an answer of the condition names."""
        if self.path_map is None:
            if not isinstance(answer, str):
                raise GraphError(
                    f"the condition after {source!r} returned {answer!r}; without a path_map "
                    "it must return a node name"
                )
            return answer
        if answer not in self.path_map:
            raise GraphError(
                f"the condition after {source!r} returned {answer!r}, which its path_map "
                f"does not name (it knows {sorted(map(str, self.path_map))})"
            )
        return self.path_map[answer]


@dataclass
class StateGraph(Generic[S]):
    """A graph of named nodes over a state class (`AgentState` unless given)."""

    state_cls: type[S] = AgentState  # type: ignore[assignment]
    nodes: dict[str, NodeFn | ToolNode] = field(default_factory=dict)
    edges: dict[str, str] = field(default_factory=dict)
    branches: dict[str, ConditionalEdge] = field(default_factory=dict)
    dependencies: dict[str, Any] = field(default_factory=dict)
    name: str | None = None

    def add_node(
        self, name_or_fn: str | NodeFn, fn: NodeFn | ToolNode | None = None
    ) -> StateGraph[S]:
        """Add a node: `add_node("name", fn)` or `add_node(fn)`, named after the function."""
        if fn is None:
            if isinstance(name_or_fn, str) or not callable(name_or_fn):
                raise GraphError(f"add_node({name_or_fn!r}) needs a callable")
            fn, name = name_or_fn, getattr(name_or_fn, "__name__", "")
        else:
            name = name_or_fn
        if not isinstance(name, str) or not name or name in (START, END):
            raise GraphError(f"{name!r} cannot name a node: use a non-empty, non-reserved name")
        if name in self.nodes:
            raise GraphError(f"node {name!r} is already in the graph")
        if not callable(fn) and not is_tool_node(fn):
            raise GraphError(f"node {name!r} must be callable, got {type(fn).__name__}")
        self.nodes[name] = fn
        return self

    def add_edge(self, source: str, target: str) -> StateGraph[S]:
        """After `source`, always go to `target`."""
        if source in self.edges or source in self.branches:
            raise GraphError(f"node {source!r} already has an outgoing edge")
        self.edges[source] = target
        return self

    def set_entry_point(self, node: str) -> StateGraph[S]:
        """Start runs at `node` (the same as `add_edge(START, node)`)."""
        return self.add_edge(START, node)

    def add_conditional_edges(
        self,
        source: str,
        condition: Condition,
        path_map: Mapping[Hashable, str] | None = None,
    ) -> StateGraph[S]:
        """After `source`, go where `condition(state)` says (through `path_map` if given)."""
        if source in self.edges or source in self.branches:
            raise GraphError(f"node {source!r} already has an outgoing edge")
        if not callable(condition):
            raise GraphError(f"the condition after {source!r} must be callable")
        self.branches[source] = ConditionalEdge(condition, dict(path_map) if path_map else None)
        return self

    def register(self, name: str, value: Any) -> StateGraph[S]:
        """Make `value` available to node functions with a parameter called `name`."""
        if name in ("state", "config"):
            raise GraphError(f"{name!r} is injected by the runtime and cannot be registered")
        self.dependencies[name] = value
        return self

    def successors(self, node: str) -> set[str] | None:
        """The nodes that may follow `node`; None when a condition may name any node."""
        if node in self.edges:
            return {self.edges[node]}
        if node in self.branches:
            return self.branches[node].targets()
        return set()

    def check(self) -> None:
        """Refuse a graph that could never run to END, naming what is wrong."""
        if START not in self.edges:
            raise GraphError("the graph has no entry point: call set_entry_point(node)")
        known = set(self.nodes) | {END}
        for source in [*self.edges, *self.branches]:
            if source != START and source not in self.nodes:
                raise GraphError(f"an edge leaves {source!r}, which is not a node of the graph")
            for target in self.successors(source) or ():
                if target not in known:
                    raise GraphError(f"an edge from {source!r} leads to unknown node {target!r}")
        for name, fn in self.nodes.items():
            if not is_tool_node(fn):
                _check_parameters(name, fn, self.dependencies)  # type: ignore[arg-type]
        reaches_end = self._reaching_end()
        for name in self.nodes:
            if name not in reaches_end:
                raise GraphError(
                    f"node {name!r} cannot reach END: give it an edge (add_edge or "
                    "add_conditional_edges) on a path that ends"
                )

    def _reaching_end(self) -> set[str]:
        """Nodes with a path to END (a condition without a path_map may lead anywhere)."""
        reaching = {END}
        changed = True
        while changed:
            changed = False
            for name in self.nodes:
                if name in reaching:
                    continue
                following = self.successors(name)
                if following is None or following & reaching:
                    reaching.add(name)
                    changed = True
        return reaching

    def compile(
        self,
        store: EventStore | None = None,
        interrupt_before: Sequence[str] = (),
        interrupt_after: Sequence[str] = (),
        recursion_limit: int = 25,
        *,
        snapshot_every: int | None = 5000,
        node_concurrency: Mapping[str, int] | None = None,
    ) -> CompiledGraph[S]:
        """Check the graph and bind it to a store (in memory when none is given)."""
        from .compiled import CompiledGraph

        return CompiledGraph(
            self,
            store=store,
            interrupt_before=interrupt_before,
            interrupt_after=interrupt_after,
            recursion_limit=recursion_limit,
            snapshot_every=snapshot_every,
            node_concurrency=node_concurrency,
        )


def is_tool_node(fn: object) -> bool:
    """True for a `ToolNode` (imported late: tools import the graph's errors)."""
    from .tools import ToolNode

    return isinstance(fn, ToolNode)


def _check_parameters(name: str, fn: NodeFn, dependencies: Mapping[str, Any]) -> None:
    """Every required parameter of a node must be injectable."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return
    for param in params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.default is param.empty and param.name not in (
            "state",
            "config",
            *dependencies,
        ):
            raise GraphError(
                f"node {name!r} needs parameter {param.name!r}, which is neither state, "
                f"config nor a registered dependency: graph.register({param.name!r}, value)"
            )
