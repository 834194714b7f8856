"""LangGraph's `StateGraph`, over agentlog's: the same builder calls and a compiled graph that
answers as LangGraph's does (`invoke` returns the values, `get_state` a `StateSnapshot`),
compiled to agentlog's engine and recorded in its log like any other graph."""

from __future__ import annotations

import importlib
import itertools
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from agentlog.actors.engine.compiled import CompiledGraph
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.graph import StateGraph as Builder
from agentlog.actors.engine.graph import command_destinations
from agentlog.actors.langgraph.compiled import CompiledStateGraph, refuse_options
from agentlog.actors.langgraph.nodes import Shapes, wrap_node, wrap_router
from agentlog.actors.langgraph.retry import engine_policies
from agentlog.actors.langgraph.schema import schema_of
from agentlog.actors.tools.node import is_tool_node
from agentlog.projections import END, START, AgentState, Message


class StateGraph:
    """A graph over a LangGraph state schema: a `TypedDict`, a dataclass, a pydantic model
    (keys reduced by their `Annotated` reducers) or an `AgentState` such as `MessagesState`."""

    def __init__(
        self,
        state_schema: Any,
        context_schema: Any = None,
        *,
        input_schema: Any = None,
        output_schema: Any = None,
    ) -> None:
        self.schema = schema_of(state_schema)
        self.context_schema = context_schema
        self.input_schema = input_schema
        self.output_schema = output_schema
        self.builder: Builder[Any] = Builder(self.schema.state_cls, context_schema=context_schema)
        self.shapes = Shapes(self.schema, messages_out(), _keys_of(output_schema))
        self._nodes: dict[str, Callable[..., Any]] = {}

    @property
    def nodes(self) -> dict[str, Callable[..., Any]]:
        """The nodes as the program gave them."""
        return dict(self._nodes)

    def add_node(
        self,
        node: str | Callable[..., Any],
        action: Callable[..., Any] | CompiledStateGraph | CompiledGraph[Any] | None = None,
        *,
        destinations: Sequence[str] | Mapping[str, Any] | None = None,
        retry_policy: Any = None,
        **options: Any,
    ) -> StateGraph:
        """Add a node: `add_node("name", fn)` or `add_node(fn)`, named after the function;
        `retry_policy` (LangGraph's `RetryPolicy`, agentlog's, or a list) retries it."""
        if action is None:
            if isinstance(node, str) or not callable(node):
                raise GraphError(f"add_node({node!r}) needs a callable")
            name, action = str(getattr(node, "__name__", "")), node
        elif not isinstance(node, str):
            raise GraphError(f"add_node(name, action) takes the name first, got {node!r:.60}")
        else:
            name = node
        if "retry" in options:  # LangGraph's older name, which it still takes with a warning
            warnings.warn("retry= is deprecated: use retry_policy=", DeprecationWarning, 2)
            retry = options.pop("retry")
            retry_policy = retry if retry_policy is None else retry_policy
        _refuse_unsupported(name, options)
        policies = engine_policies(name, retry_policy)
        if isinstance(action, CompiledStateGraph | CompiledGraph):  # a subgraph
            engine = action.graph_engine if isinstance(action, CompiledStateGraph) else action
            self.builder.add_node(name, engine, retry_policy=policies)
            self._nodes[name] = action  # type: ignore[assignment]
            return self
        elif is_tool_node(action) or not callable(action):
            # a ToolNode, or what the builder refuses
            self.builder.add_node(name, action, retry_policy=policies)
        else:
            if destinations is None:
                destinations, _ = command_destinations(name, action)
            wrapped = wrap_node(name, action, self.shapes)
            self.builder.add_node(name, wrapped, destinations=destinations, retry_policy=policies)
        self._nodes[name] = action
        return self

    def add_edge(self, start_key: Any, end_key: str) -> StateGraph:
        """After `start_key`, go to `end_key`."""
        self.builder.add_edge(start_key, end_key)
        return self

    def add_conditional_edges(
        self,
        source: str,
        path: Callable[..., Any],
        path_map: Mapping[Hashable, str] | Sequence[str] | None = None,
    ) -> StateGraph:
        """After `source`, go where `path(state)` says (through `path_map` if given)."""
        if path_map is not None and not isinstance(path_map, Mapping):
            path_map = {name: name for name in path_map}
        self.builder.add_conditional_edges(source, wrap_router(path, self.shapes), path_map)
        return self

    def add_sequence(
        self, nodes: Sequence[Callable[..., Any] | tuple[str, Callable[..., Any]]]
    ) -> StateGraph:
        """Add `nodes` and an edge from each to the next."""
        names = []
        for item in nodes:
            if isinstance(item, tuple):
                self.add_node(*item)
                names.append(item[0])
            else:
                self.add_node(item)
                names.append(str(getattr(item, "__name__", "")))
        for a, b in itertools.pairwise(names):
            self.add_edge(a, b)
        return self

    def set_entry_point(self, key: str) -> StateGraph:
        return self.add_edge(START, key)

    def set_finish_point(self, key: str) -> StateGraph:
        return self.add_edge(key, END)

    def set_conditional_entry_point(
        self, path: Callable[..., Any], path_map: Mapping[Hashable, str] | None = None
    ) -> StateGraph:
        return self.add_conditional_edges(START, path, path_map)

    def compile(
        self,
        checkpointer: Any = None,
        *,
        store: Any = None,
        interrupt_before: Sequence[str] | None = None,
        interrupt_after: Sequence[str] | None = None,
        debug: bool = False,
        name: str | None = None,
        **settings: Any,
    ) -> CompiledStateGraph:
        """Bind the graph to its log (`checkpointer=`: an agentlog event store, memory when
        omitted) and its long-term store (`store=`)."""
        for node in self._nodes:
            if self.builder.successors(node) == set():
                self.builder.add_edge(node, END)  # as in LangGraph: nothing follows, the run ends
        if debug:
            warnings.warn("debug=True prints nothing here: use stream_mode='debug'", stacklevel=2)
        if name is not None:
            self.builder.name = name
        compiled = self.builder.compile(
            checkpointer,
            store=store,
            interrupt_before=list(interrupt_before or ()),
            interrupt_after=list(interrupt_after or ()),
            **settings,
        )
        return CompiledStateGraph(compiled, self.shapes, checkpointed=checkpointer is not None)


def _refuse_unsupported(name: str, options: Mapping[str, Any]) -> None:
    refuse_options(f"add_node({name!r})", options, ignored=("metadata",))


def _keys_of(schema: Any) -> frozenset[str] | None:
    """The keys of an input or output schema (None: none given)."""
    if schema is None:
        return None
    return frozenset(schema_of(schema).keys) if not _is_agent_state(schema) else None


def _is_agent_state(schema: Any) -> bool:
    return isinstance(schema, type) and issubclass(schema, AgentState)


def messages_out() -> Callable[[list[Message]], Any]:
    """Messages as the program's nodes expect them: LangChain's when langchain-core is there."""
    try:
        langchain = importlib.import_module("agentlog.projections.langchain")
    except ImportError:  # langchain-core is not installed: agentlog's own messages
        return list
    convert: Callable[[list[Message]], Any] = langchain.to_langchain_messages
    return convert
