"""`StateGraph`: the graph a user builds, checked before it ever runs.

Nodes are named callables; edges are fixed (`add_edge`) or decided by a condition on the
state (`add_conditional_edges`), or a node routes itself by returning `Command(goto=...)` and
declares where it may go (`-> Command[Literal["a", "b"]]` or `destinations=`). The state class,
node names and the shape of the graph are checked here, before anything runs, so a mistake is
named where it was made rather than surfacing as a failed run.
"""

from __future__ import annotations

import functools
import inspect
import types
import unicodedata
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import (
    Any,
    Generic,
    Literal,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from pydantic import ValidationError

from agentlog.actors.engine.callbacks import Callbacks
from agentlog.actors.engine.command import (
    Command as Command,  # re-exported: nodes import it from here
)
from agentlog.actors.engine.command import Send
from agentlog.actors.engine.compiled import CompiledGraph
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.longterm import BaseStore
from agentlog.actors.engine.options import check_context_schema
from agentlog.actors.engine.persistence import persistence
from agentlog.actors.engine.retry import RetryPolicy, node_policies
from agentlog.actors.engine.run import Engine
from agentlog.actors.engine.subgraph import SubgraphNode
from agentlog.actors.engine.tasks import task_name
from agentlog.actors.tools.node import ToolNode, is_tool_node
from agentlog.events import EventStore
from agentlog.projections import END, START, AgentState, BaseContextManager
from agentlog.projections.snapshots import DEFAULT_SNAPSHOT_EVERY

S = TypeVar("S", bound=AgentState)
N = TypeVar("N", bound=str)

RESERVED_NAMES = frozenset({START, END, "user", "runtime"})
"""Names the log already uses for someone other than a node: the graph's ends, the caller
whose input starts a run (`user`), and the engine's own events (`runtime`)."""

NodeFn = Callable[..., Any]
"""A node: a function (sync or async) or a `ToolNode`."""
Condition = Callable[..., Any]
"""A condition on the state: it names the next node, several, or `Send`s (a list)."""


@dataclass(frozen=True)
class ConditionalEdge:
    """A condition on the state and how its answers map to nodes."""

    condition: Condition
    path_map: Mapping[Hashable, str] | None = None

    def targets(self) -> set[str] | None:
        """The nodes it can lead to, or None when any node could be named."""
        return None if self.path_map is None else set(self.path_map.values())

    def resolve_all(self, answer: Any, source: str) -> list[str | Send]:
        """The nodes (and `Send`s) an answer names: one answer, or a list of them."""
        answers = answer if isinstance(answer, list | tuple) else [answer]
        return [a if isinstance(a, Send) else self.resolve(a, source) for a in answers]

    def resolve(self, answer: Hashable, source: str) -> str:
        """The node an answer of the condition names."""
        if self.path_map is None:
            if not isinstance(answer, str):
                raise GraphError(
                    f"the condition after {source!r} returned {answer!r}; without a path_map "
                    "it must return a node name, a list of them, or Send(node, arg)s"
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
    destinations: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Where a node routing by `Command(goto=...)` declared it may go."""
    unread_annotations: dict[str, str] = field(default_factory=dict)
    """Nodes whose `Command[...]` return annotation could not be resolved, and why."""
    fanout: dict[str, list[str]] = field(default_factory=dict)
    """A node's further edges beyond its first (`edges`): all run in the next step."""
    joins: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Nodes that run once each of several others has run (`add_edge([a, b], node)`)."""
    retry_policies: dict[str, tuple[RetryPolicy, ...]] = field(default_factory=dict)
    """The nodes run again after they raise, and by which policies (`add_node`)."""
    tasks: dict[str, Any] = field(default_factory=dict)
    """The background tasks its nodes may start, by name (`add_task`)."""
    context_schema: Any = field(default=None, kw_only=True)
    """The class of a call's run-time `context=` (a dataclass, a TypedDict, a pydantic
    model), which nodes read as `runtime.context`; None: any context, unchecked."""

    def __post_init__(self) -> None:
        check_state_class(self.state_cls)
        check_context_schema(self.context_schema)

    def add_node(
        self,
        name_or_fn: str | NodeFn,
        fn: NodeFn | ToolNode | CompiledGraph[Any] | None = None,
        *,
        destinations: Sequence[str] | Mapping[str, Any] | None = None,
        retry_policy: RetryPolicy | Sequence[RetryPolicy] | None = None,
    ) -> StateGraph[S]:
        """Add a node: `add_node("name", fn)` or `add_node(fn)`, named after the function.

        `destinations` names where a node that returns `Command(goto=...)` may go; without it
        they are read from a `-> Command[Literal["a", "b"]]` return annotation. A compiled
        graph as `fn` is a subgraph (`agentlog.actors.engine.subgraph`): the fields its state
        shares with this graph's, by name, go in and its final values of them come back.
        `retry_policy` (a `RetryPolicy`, or several: the first that retries an error decides)
        runs the node again after it raised, each failed attempt and its retry recorded.
        """
        if fn is None:
            if isinstance(name_or_fn, str) or not callable(name_or_fn):
                raise GraphError(f"add_node({name_or_fn!r}) needs a callable")
            fn, name = name_or_fn, getattr(name_or_fn, "__name__", "")
        else:
            name = name_or_fn
        name = check_node_name(name)
        if name in self.nodes:
            raise GraphError(f"node {name!r} is already in the graph")
        if isinstance(fn, CompiledGraph):  # a subgraph: the state fields it shares go in
            fn = SubgraphNode(name, fn, self.state_cls)
        if not callable(fn) and not is_tool_node(fn):
            raise GraphError(f"node {name!r} must be callable, got {type(fn).__name__}")
        if destinations is not None:
            declared: tuple[str, ...] | None = _given_destinations(name, destinations)
            unread = None
        elif is_tool_node(fn):
            declared, unread = None, None
        else:
            declared, unread = command_destinations(name, fn)
        policies = node_policies(name, retry_policy)
        self.nodes[name] = fn
        if policies:
            self.retry_policies[name] = policies
        if declared is not None:
            self.destinations[name] = declared
        if unread is not None:
            self.unread_annotations[name] = unread
        return self

    def add_edge(self, source: str | Sequence[str], target: str) -> StateGraph[S]:
        """After `source`, always go to `target`; a second edge from `source` fans out (both
        targets run in the next step, concurrently). With a list of sources, `target` runs
        once every one of them has run (a join)."""
        if not isinstance(source, str):
            sources = tuple(dict.fromkeys(source))
            if not sources or not all(isinstance(n, str) for n in sources):
                raise GraphError(f"add_edge({source!r}, {target!r}) needs node names to join")
            if target == END:  # nothing runs at END: each source simply ends its branch
                for name in sources:
                    self.add_edge(name, END)
                return self
            if target in self.joins:
                raise GraphError(
                    f"node {target!r} already waits for {list(self.joins[target])}: give one "
                    "add_edge([...], target) with every node it waits for"
                )
            self.joins[target] = sources
            return self
        if source not in self.edges:
            self.edges[source] = target
        elif target == self.edges[source] or target in self.fanout.get(source, ()):
            raise GraphError(f"there is already an edge from {source!r} to {target!r}")
        else:
            self.fanout.setdefault(source, []).append(target)
        return self

    def set_entry_point(self, node: str) -> StateGraph[S]:
        """Start runs at `node` (the same as `add_edge(START, node)`)."""
        return self.add_edge(START, node)

    def add_conditional_edges(
        self,
        source: str,
        condition: Condition,
        path_map: Mapping[Hashable, str] | Sequence[str] | None = None,
    ) -> StateGraph[S]:
        """After `source`, go where `condition(state)` says (through `path_map` if given): a
        node, a list of nodes, or `Send(node, arg)`s, all run in the next step. A list as
        `path_map` names the nodes the condition may return."""
        if source in self.branches:
            raise GraphError(f"node {source!r} already has a conditional edge")
        if not callable(condition):
            raise GraphError(f"the condition after {source!r} must be callable")
        mapping: dict[Hashable, str] | None = None
        if isinstance(path_map, Mapping):
            mapping = dict(path_map)
        elif path_map:
            mapping = {name: name for name in path_map}
        self.branches[source] = ConditionalEdge(condition, mapping or None)
        return self

    def add_task(self, fn: Any, name: str | None = None) -> StateGraph[S]:
        """Declare the async function `fn` a background task its nodes may start (through
        the `task_manager` they take), under `name` (its own name unless given)."""
        named = task_name(fn, name)
        if named in self.tasks and self.tasks[named] is not fn:
            raise GraphError(f"two background tasks are named {named!r}: pass name= to one")
        self.tasks[named] = fn
        return self

    def register(self, name: str, value: Any) -> StateGraph[S]:
        """Make `value` available to node functions with a parameter called `name`."""
        if name in ("state", "config", "context", "task_manager"):
            raise GraphError(f"{name!r} is injected by the runtime and cannot be registered")
        self.dependencies[name] = value
        return self

    def successors(self, node: str) -> set[str] | None:
        """The nodes that may follow `node`; None when a condition may name any node."""
        declared = set(self.destinations.get(node, ()))
        if node in self.branches and self.branches[node].targets() is None:
            return None
        return declared | self._edge_targets(node)

    def _edge_targets(self, source: str) -> set[str]:
        """Where the edges (not the declared destinations) of `source` lead."""
        found = {t for t, sources in self.joins.items() if source in sources}
        if source in self.edges:
            found |= {self.edges[source], *self.fanout.get(source, ())}
        if source in self.branches:
            found |= self.branches[source].targets() or set()
        return found

    def check(self, injected: Collection[str] = ()) -> None:
        """Refuse a graph that could never run to END, naming what is wrong; `injected`
        names the parameters compile hands the nodes beside state, config and the
        registered dependencies (`store`, with a long-term store)."""
        if START not in self.edges and START not in self.branches:
            raise GraphError("the graph has no entry point: call set_entry_point(node)")
        known = set(self.nodes) | {END}
        for target, sources in self.joins.items():
            for name in (target, *sources):
                if name not in self.nodes:
                    raise GraphError(
                        f"add_edge({list(sources)}, {target!r}) names {name!r}, no node"
                    )
        for source in [*self.edges, *self.branches]:
            if source != START and source not in self.nodes:
                raise GraphError(f"an edge leaves {source!r}, which is not a node of the graph")
            for target in self._edge_targets(source):
                if target not in known:
                    raise GraphError(f"an edge from {source!r} leads to unknown node {target!r}")
        for source, targets in self.destinations.items():
            for target in targets:
                if target not in known:
                    raise GraphError(
                        f"node {source!r} declares destination {target!r}, which is not a node "
                        f"of the graph: add_node({target!r}, ...) or correct the declaration"
                    )
        for name, fn in self.nodes.items():
            if not is_tool_node(fn):
                _check_parameters(name, fn, [*self.dependencies, *injected])  # type: ignore[arg-type]
        for name in self.nodes:
            joined = any(name in sources for sources in self.joins.values())
            if not (name in self.edges or name in self.branches or joined) and not (
                self.destinations.get(name)
            ):
                raise GraphError(self._no_way_out(name))
        reaches_end = self._reaching_end()
        for name in self.nodes:
            if name not in reaches_end:
                raise GraphError(
                    f"node {name!r} cannot reach END: give it an edge (add_edge or "
                    "add_conditional_edges) on a path that ends"
                )

    def check_goto(self, node: str, target: str) -> None:
        """Refuse a `Command(goto=target)` from `node` outside the destinations it declared."""
        declared = self.destinations.get(node)
        if declared is not None and target not in declared:
            named = ", ".join(map(repr, sorted(declared)))  # the same words whatever the hash seed
            raise GraphError(
                f"node {node!r} chose to go to {target!r}, but it declared it goes only to "
                f"{named}: add {target!r} to its Command[Literal[...]] annotation or its "
                "destinations"
            )

    def _no_way_out(self, name: str) -> str:
        """Why `name` is a dead end and the three ways to give it an exit."""
        message = (
            f"node {name!r} has no way out: give it an edge with add_edge({name!r}, target) or "
            f"add_conditional_edges({name!r}, condition, path_map), or, if it routes by "
            "returning Command(goto=...), declare where it may go: annotate it "
            f"`-> Command[Literal['a', 'b']]` or use add_node({name!r}, fn, "
            "destinations=('a', 'b'))"
        )
        unread = self.unread_annotations.get(name)
        if unread is not None:
            message += f"; its return annotation could not be read ({unread})"
        return message

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
        checkpointer: EventStore | None = None,
        interrupt_before: Sequence[str] = (),
        interrupt_after: Sequence[str] = (),
        recursion_limit: int = 25,
        *,
        store: BaseStore | EventStore | None = None,
        snapshot_every: int | None = DEFAULT_SNAPSHOT_EVERY,
        node_concurrency: Mapping[str, int] | None = None,
        node_timeout: float | None = None,
        node_timeouts: Mapping[str, float | None] | None = None,
        callbacks: Callbacks | None = None,
        context_manager: BaseContextManager[Any] | None = None,
    ) -> CompiledGraph[S]:
        """Check the graph and bind it to its event log, `checkpointer` (in memory when none
        is given), and to the long-term store its nodes reach, `store` (`get_store()`, or a
        node parameter named `store`; see `agentlog.actors.engine.persistence`).

        `node_timeout` (seconds) bounds every node's step, `node_timeouts` one node's (None:
        no limit for it); a call's config may set `node_timeout` too, as in Agentflow. A node
        that runs past its limit fails with `NodeTimeoutError`, recorded and retryable.

        `context_manager` (say `MessageContextManager(max_messages=20)`) bounds the context
        the nodes see: a commit that leaves it over the bound also records the trim (the
        messages dropped, the new summary), and the log keeps every message.
        """
        log, long_term = persistence(checkpointer, store)
        return CompiledGraph(
            Engine(
                self,
                store=log,
                long_term_store=long_term,
                interrupt_before=interrupt_before,
                interrupt_after=interrupt_after,
                recursion_limit=recursion_limit,
                snapshot_every=snapshot_every,
                node_concurrency=node_concurrency,
                node_timeout=node_timeout,
                node_timeouts=node_timeouts,
                callbacks=callbacks,
                context_manager=context_manager,
            )
        )


def check_state_class(state_cls: object) -> None:
    """A run starts from `state_cls()`: it must be an `AgentState` subclass that builds bare."""
    if not (isinstance(state_cls, type) and issubclass(state_cls, AgentState)):
        if isinstance(state_cls, AgentState):
            what = f"an instance of {type(state_cls).__name__} (pass the class itself)"
        elif isinstance(state_cls, type):
            kind = "a TypedDict" if is_typeddict(state_cls) else f"a {type(state_cls).__name__}"
            what = f"{state_cls.__name__}, {kind}"
        else:
            what = f"{state_cls!r}"
        raise GraphError(
            f"the state of a StateGraph must be an AgentState subclass, got {what}: write "
            "`class MyState(AgentState):` with each field given a default (say `notes: "
            "list[str] = Field(default_factory=list)`) and build StateGraph(MyState)"
        )
    missing = [n for n, f in state_cls.model_fields.items() if f.is_required()]
    if missing:
        fields = ", ".join(map(repr, missing))
        raise GraphError(
            f"state {state_cls.__name__} has field(s) {fields} without a default, but a run "
            f"starts from {state_cls.__name__}(): give each a default (`name: str = ''`, "
            "`items: list[str] = Field(default_factory=list)`) or make it optional (`= None`)"
        )
    try:
        state_cls()
    except ValidationError as exc:
        raise GraphError(
            f"state {state_cls.__name__}() cannot be built, but every run starts from it: {exc}"
        ) from exc


def check_node_name(name: object) -> str:
    """A node name is written to the log as an actor: it must be text the log can hold and
    not a name the engine already writes for someone else."""
    if not isinstance(name, str):
        raise GraphError(f"a node name must be a str, got {type(name).__name__} {name!r}")
    if not name:
        raise GraphError("a node name cannot be empty: pass a name such as 'agent'")
    for index, char in enumerate(name):
        category = unicodedata.category(char)
        if category == "Cs":
            raise GraphError(
                f"node name {name!r} holds a lone surrogate at index {index}, which cannot be "
                "encoded as UTF-8 to be logged: use plain text"
            )
        if category == "Cc":
            raise GraphError(
                f"node name {name!r} holds a control character ({char!r}) at index {index}: "
                "node names are logged and shown, so use printable text"
            )
    if name in RESERVED_NAMES:
        raise GraphError(
            f"{name!r} cannot name a node, it is reserved: the log uses "
            f"{sorted(RESERVED_NAMES)} for the graph's ends, the caller's input and the "
            "engine's own events; pick another node name"
        )
    return name


def command_destinations(name: str, fn: object) -> tuple[tuple[str, ...] | None, str | None]:
    """Where `fn` may go by its `-> Command[Literal[...]]` annotation, and why it could not
    be read if it could not (None, None when it declares nothing)."""
    target = _annotated_callable(fn)
    raw = getattr(target, "__annotations__", {}).get("return") if target is not None else None
    if raw is None:
        return None, None
    try:
        # Resolve only the return annotation: another parameter's unresolvable hint
        # (a state class local to a test, say) must not hide it.
        holder = types.SimpleNamespace(__annotations__={"return": raw})
        hint = _return_hint(holder, getattr(target, "__globals__", {}))
    except Exception as exc:
        if "Command" in str(raw):
            return None, f"{raw!r}: {type(exc).__name__}: {exc}"
        return None, None
    found = _literal_targets(name, hint)
    return (tuple(dict.fromkeys(found)) if found else None), None


def _return_hint(holder: object, globalns: dict[str, Any]) -> Any:
    """The resolved return hint of an annotations holder, against a function's globals."""
    scope = {"Command": Command, "Literal": Literal, **globalns}
    return get_type_hints(holder, globalns=scope)["return"]


def _annotated_callable(fn: object) -> Any:
    """The function whose annotations describe `fn` (through partials, wrappers, __call__)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isfunction(fn) or inspect.ismethod(fn):
        return inspect.unwrap(fn)
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - a callable object's method
    return inspect.unwrap(call) if inspect.isfunction(call) else None


def _literal_targets(name: str, hint: Any) -> list[str]:
    """The node names in `Command[Literal[...]]`, also inside a union (`... | None`)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return [t for arg in get_args(hint) for t in _literal_targets(name, arg)]
    if origin is not Command:
        return []
    args = get_args(hint)
    if not args or get_origin(args[0]) is not Literal:
        return []
    values = get_args(args[0])
    for value in values:
        if not isinstance(value, str):
            raise GraphError(
                f"node {name!r} is annotated to go to {value!r}, which is not a node name: "
                "write Command[Literal['a', 'b']] with node names"
            )
    return list(values)


def _given_destinations(name: str, given: Sequence[str] | Mapping[str, Any]) -> tuple[str, ...]:
    """`destinations=` as a tuple of node names (a mapping gives its keys, as LangGraph's)."""
    values = list(given) if isinstance(given, Mapping | Sequence) else None
    if isinstance(given, str) or values is None or not all(isinstance(v, str) for v in values):
        raise GraphError(
            f"destinations of node {name!r} must be a sequence of node names, such as "
            f"('a', 'b'), got {given!r}"
        )
    return tuple(dict.fromkeys(values))


def _check_parameters(name: str, fn: NodeFn, dependencies: Collection[str]) -> None:
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
            "context",
            "runtime",
            *dependencies,
        ):
            fix = (
                "compile the graph with a long-term store: compile(store=InMemoryStore())"
                if param.name == "store"
                else f"graph.register({param.name!r}, value)"
            )
            raise GraphError(
                f"node {name!r} needs parameter {param.name!r}, which is neither state, "
                f"config, context, runtime nor a registered dependency: {fix}"
            )
