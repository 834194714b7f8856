"""Graphs as first-class citizens of a runtime (hive's multi-graph sessions): a primary
graph, the graph the user is looking at (`active_graph_id`), a graph added with its goal and
its own entry points, namespaced `graph::entry`, and its registration read back.

A part of `AgentRuntime`, like `Watching`: it keeps only names and ids; the graphs, entry
points and goals are the runtime's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.retention import Retention
from agentlog.actors.runtime.goals import Goal
from agentlog.actors.runtime.spec import EntryPoint, RegistrationError

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph

NAMESPACE = "::"
"""Between a secondary graph's id and its entry point's own id (hive's `graph::ep`)."""


@dataclass(frozen=True)
class GraphRegistration:
    """A graph as the runtime holds it (hive's `_GraphRegistration`)."""

    graph_id: str
    app: CompiledGraph[Any]
    goal: Goal | None
    entry_points: dict[str, EntryPoint]
    """The graph's entry points by their own (local) id; `EntryPoint.id` is the full one."""
    primary: bool

    @property
    def graph(self) -> CompiledGraph[Any]:
        return self.app


class Graphs:
    """The runtime's graph registry, by hive's names (a part of `AgentRuntime`)."""

    graphs: dict[str, Any]
    entries: dict[str, EntryPoint]
    goals: dict[str, Goal]
    add_graph: Any
    remove_graph: Any
    register_entry_point: Any
    add_goal: Any
    config: Any
    listeners: Any
    started: bool

    intro_message: str = ""
    """A greeting a client shows when it opens the runtime (set by whoever builds it)."""
    _primary: str | None = None
    _active: str | None = None
    _graph_goals: dict[str, str] | None = None
    _retention: dict[str, Retention | None] | None = None

    @property
    def graph_id(self) -> str | None:
        """The primary graph's id: the one named by `primary_graph`, else the first added."""
        if self._primary in self.graphs:
            return self._primary
        return next(iter(self.graphs), None)

    @property
    def primary_graph(self) -> str | None:
        return self.graph_id

    @primary_graph.setter
    def primary_graph(self, graph_id: str) -> None:
        self._known(graph_id)
        self._primary = graph_id

    @property
    def active_graph_id(self) -> str | None:
        """The graph the user is looking at (a client routes input there): the primary one
        until set, and again once the one set is removed."""
        return self._active if self._active in self.graphs else self.graph_id

    @active_graph_id.setter
    def active_graph_id(self, graph_id: str) -> None:
        self._known(graph_id)
        self._active = graph_id

    def graph_goal(self, graph_id: str) -> str | None:
        """The id of the goal a graph's runs count towards, when it was added with one."""
        return (self._graph_goals or {}).get(graph_id)

    def add_graph_with(
        self,
        graph_id: str,
        app: CompiledGraph[Any],
        *,
        goal: Goal | None = None,
        entry_points: Mapping[str, EntryPoint] | None = None,
    ) -> list[str]:
        """hive's `add_graph(graph_id, graph, goal, entry_points)`: add a graph with the goal
        its runs count towards and its entry points (by their local ids; every kind, while
        the runtime runs too). A secondary graph's entry points are registered as
        `graph_id::local_id`, the primary graph's under their own ids; returns the ids.
        Refused, nothing added, when any part is wrong."""
        if entry_points is not None and not isinstance(entry_points, Mapping):
            raise RegistrationError(
                "entry_points is a dict of local id to EntryPoint, got "
                f"{type(entry_points).__name__}"
            )
        if goal is not None and (not isinstance(goal, Goal) or goal.id in self.goals):
            raise RegistrationError(
                f"graph {graph_id!r}: goal must be a Goal not added already, got {goal!r}"
            )
        primary = not self.graphs
        named: list[EntryPoint] = []
        for local, entry in (entry_points or {}).items():
            if not isinstance(entry, EntryPoint) or not isinstance(local, str) or not local:
                raise RegistrationError(
                    f"graph {graph_id!r}: entry point {local!r} must be an EntryPoint under a "
                    f"non-empty id, got {entry!r}"
                )
            full = local if primary else f"{graph_id}{NAMESPACE}{local}"
            named.append(replace(entry, id=full, graph_id=graph_id))
        taken = [e.id for e in named if e.id in self.entries]
        if taken:
            raise RegistrationError(f"graph {graph_id!r}: entry points {taken} exist already")
        for entry in named:
            entry.check()
        self.add_graph(graph_id, app)
        try:
            if goal is not None:
                self.add_goal(goal)
                self._graph_goals = {**(self._graph_goals or {}), graph_id: goal.id}
            for entry in named:
                self.register_entry_point(entry)
        except BaseException:  # none of it stays: removing the graph drops its entry points
            self.remove_graph(graph_id)
            if goal is not None and self.graph_goal(graph_id) == goal.id:
                self.goals.pop(goal.id, None)
                self._graph_goals = {
                    g: i for g, i in (self._graph_goals or {}).items() if g != graph_id
                }
            raise
        return [e.id for e in named]

    def get_graph_registration(self, graph_id: str) -> GraphRegistration | None:
        """The graph, its goal and its entry points (by local id), or None."""
        graph = self.graphs.get(graph_id)
        if graph is None:
            return None
        prefix = f"{graph_id}{NAMESPACE}"
        entries = {
            (e.id[len(prefix) :] if e.id.startswith(prefix) else e.id): e
            for e in self.entries.values()
            if e.graph_id == graph_id
        }
        goal_id = self.graph_goal(graph_id)
        return GraphRegistration(
            graph_id=graph_id,
            app=graph.app,
            goal=self.goals.get(goal_id) if goal_id else None,
            entry_points=entries,
            primary=graph_id == self.graph_id,
        )

    def set_retention(self, graph_id: str, retention: Retention | None) -> None:
        """Keep `graph_id`'s threads by `retention` instead of `RuntimeConfig.retention`
        (None: keep them until pruned by hand), applied by the runtime's timer."""
        self._known(graph_id)
        if retention is not None and not isinstance(retention, Retention):
            raise RegistrationError(
                f"graph {graph_id!r}: retention is a Retention(keep_runs=N | keep_days=N | "
                f"idle_days=N) or None, got {retention!r}"
            )
        self._retention = {**(self._retention or {}), graph_id: retention}
        if self.started:
            self.listeners.keep_from_now()

    def retentions(self) -> dict[str, Retention]:
        """The retention policy of each graph that has one (its own, else the runtime's)."""
        own, default = self._retention or {}, self.config.retention
        found = {g: own.get(g, default) for g in self.graphs}
        return {g: policy for g, policy in found.items() if policy is not None}

    def _known(self, graph_id: str) -> None:
        if graph_id not in self.graphs:
            raise RegistrationError(
                f"graph {graph_id!r} is not registered (graphs: {', '.join(self.graphs) or 'none'})"
            )


__all__ = ["NAMESPACE", "GraphRegistration", "Graphs"]
