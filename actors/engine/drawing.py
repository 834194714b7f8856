"""A compiled graph's shape, as `get_graph()` describes it: its nodes and edges (plain, or
conditional: a condition's answers, a node's declared `Command` destinations), and that
shape drawn as a Mermaid flowchart (`draw_mermaid`), dotted where an edge is conditional, as
LangGraph draws them."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlog.projections import END, START

if TYPE_CHECKING:
    from agentlog.actors.engine.graph import StateGraph


@dataclass(frozen=True, order=True)
class Edge:
    """An edge of the drawing: `conditional` when the run may or may not take it; `data`
    is the condition's answer that takes it, when that answer is not the target's name."""

    source: str
    target: str
    data: str | None = None
    conditional: bool = False


@dataclass(frozen=True)
class Node:
    """A node of the drawing: its id and name (the same), and what it runs."""

    id: str
    name: str
    data: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DrawableGraph:
    """What `CompiledGraph.get_graph()` returns: the graph's nodes (START first, END last
    when an edge reaches it) and its edges, each once, sorted."""

    nodes: dict[str, Node]
    edges: list[Edge]

    def draw_mermaid(self) -> str:
        """The graph as a Mermaid flowchart, top to bottom: START and END drawn round,
        a conditional edge dotted and labelled with its answer when that is not the node's
        name."""
        lines = ["---", "config:", "  flowchart:", "    curve: linear", "---", "graph TD;"]
        for node in self.nodes.values():
            ident = _mermaid_id(node.id)
            if node.id == START:
                lines.append(f"\t{ident}([<p>{START}</p>]):::first")
            elif node.id == END:
                lines.append(f"\t{ident}([<p>{END}</p>]):::last")
            else:
                lines.append(f"\t{ident}({_mermaid_label(node.name)})")
        for edge in self.edges:
            source, target = _mermaid_id(edge.source), _mermaid_id(edge.target)
            if not edge.conditional:
                lines.append(f"\t{source} --> {target};")
            elif edge.data is not None:
                lines.append(f"\t{source} -. &nbsp;{_mermaid_label(edge.data)}&nbsp; .-> {target};")
            else:
                lines.append(f"\t{source} -.-> {target};")
        lines += [
            "\tclassDef default fill:#f2f0ff,line-height:1.2",
            "\tclassDef first fill-opacity:0",
            "\tclassDef last fill:#bfb6fc",
        ]
        return "\n".join(lines) + "\n"


def describe(graph: StateGraph[Any]) -> DrawableGraph:
    """The drawing of `graph`: its plain edges, its conditions' edges (to every node and
    END when a condition has no `path_map`, since it may name any), and the destinations
    nodes declared for `Command(goto=...)`."""
    names = list(graph.nodes)
    edges: set[Edge] = set()
    for source, target in graph.edges.items():
        for one in _targets(target):
            edges.add(Edge(source, one))
    for source, branch in graph.branches.items():
        if branch.path_map is None:
            edges.update(Edge(source, one, conditional=True) for one in [*names, END])
            continue
        for answer, one in branch.path_map.items():
            label = None if str(answer) == one else str(answer)
            edges.add(Edge(source, one, label, conditional=True))
    for source, targets in graph.destinations.items():
        edges.update(Edge(source, one, conditional=True) for one in targets)
    nodes = {START: Node(START, START)}
    nodes.update((name, Node(name, name, graph.nodes[name])) for name in names)
    if any(e.target == END for e in edges):
        nodes[END] = Node(END, END)
    return DrawableGraph(nodes, sorted(edges, key=_edge_order))


def _targets(target: str | Collection[str]) -> list[str]:
    """An edge's targets: one node, or several (a fan-out)."""
    return [target] if isinstance(target, str) else list(target)


def _edge_order(edge: Edge) -> tuple[str, str, str]:
    return (edge.source, edge.target, edge.data or "")


_UNSAFE = re.compile(r"[^0-9A-Za-z_]")


def _mermaid_id(name: str) -> str:
    """A node id Mermaid takes: names of letters, digits and underscores stay as they are;
    any other character is spelled by its code point."""
    return _UNSAFE.sub(lambda m: f"_{ord(m.group()):x}_", name)


def _mermaid_label(text: str) -> str:
    """A label Mermaid takes: characters its syntax reads are written as HTML entities."""
    return "".join(f"#{ord(c)};" if c in '"()[]{}<>|;#&`' else c for c in text)


__all__ = ["DrawableGraph", "Edge", "Node", "describe"]
