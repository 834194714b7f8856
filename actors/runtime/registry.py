"""An entry point checked against what the runtime holds (its graphs, its other entry
points) before it is registered: refused, nothing registered, when it could never run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentlog.actors.runtime.goals import Goal
from agentlog.actors.runtime.spec import EntryPoint, RegistrationError, RuntimeConfig
from agentlog.events import EventStore

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph
    from agentlog.actors.runtime.runtime import AgentRuntime


def check_against(runtime: AgentRuntime, entry: EntryPoint, app: CompiledGraph[Any]) -> None:
    """Refuse `entry` when its graph `app`, the runtime's graphs or its other entry points
    say it could never run as written."""
    if entry.entry_node is not None and entry.entry_node not in app.graph.nodes:
        known = ", ".join(sorted(app.graph.nodes))
        raise RegistrationError(
            f"entry point {entry.id!r}: {entry.entry_node!r} is not a node of graph "
            f"{entry.graph_id!r} (nodes: {known})"
        )
    if entry.from_graph is not None and entry.from_graph not in runtime.graphs:
        raise RegistrationError(
            f"entry point {entry.id!r}: from_graph {entry.from_graph!r} is not a "
            f"registered graph (graphs: {', '.join(runtime.graphs) or 'none'})"
        )
    if entry.from_graph == entry.graph_id and not entry.include_own:
        raise RegistrationError(
            f"entry point {entry.id!r} listens to its own graph {entry.graph_id!r}: set "
            "include_own=True if runs should start runs of the same graph"
        )
    if entry.trigger == "webhook":
        for other in runtime.entries.values():
            if other.trigger == "webhook" and other.path == entry.path:
                raise RegistrationError(
                    f"entry point {entry.id!r}: path {entry.path!r} is served by entry "
                    f"point {other.id!r} already"
                )
    if entry.webhook is not None:
        source = runtime.entries.get(entry.webhook)
        if source is None or source.trigger != "webhook":
            hooks = [e.id for e in runtime.entries.values() if e.trigger == "webhook"]
            raise RegistrationError(
                f"entry point {entry.id!r}: webhook {entry.webhook!r} is no registered webhook "
                f"entry point (webhooks: {', '.join(hooks) or 'none'}): register the webhook "
                "first, so its deliveries can reach this one"
            )
    fields = app.graph.state_cls.model_fields
    unknown = [k for k in entry.input_keys if k not in fields or k == "execution_meta"]
    if unknown:
        raise RegistrationError(
            f"entry point {entry.id!r}: input_keys {unknown} are not fields of graph "
            f"{entry.graph_id!r}'s state ({', '.join(sorted(fields))})"
        )


def create_agent_runtime(
    store: EventStore,
    graphs: Mapping[str, CompiledGraph[Any]],
    entry_points: Sequence[EntryPoint],
    config: RuntimeConfig | None = None,
    *,
    goal: Goal | None = None,
) -> AgentRuntime:
    """A runtime with `graphs` added and `entry_points` registered, not yet started.

    Unlike hive's (one graph and its goal), `graphs` maps graph ids to compiled graphs.
    """
    if not isinstance(graphs, Mapping):
        raise RegistrationError(
            f"create_agent_runtime takes graphs as a dict of graph id to compiled graph "
            f"({{'support': app}}), got {type(graphs).__name__}"
        )
    if isinstance(entry_points, EntryPoint) or not isinstance(entry_points, Sequence):
        raise RegistrationError(
            f"create_agent_runtime takes entry_points as a list of EntryPoint, got "
            f"{type(entry_points).__name__}"
        )
    from agentlog.actors.runtime.runtime import AgentRuntime

    runtime = AgentRuntime(store, config, goal=goal)
    for graph_id, app in graphs.items():
        runtime.add_graph(graph_id, app)
    for entry in entry_points:
        runtime.register_entry_point(entry)
    return runtime


__all__ = ["check_against", "create_agent_runtime"]
