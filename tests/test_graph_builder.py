"""Building a StateGraph and the checks that refuse a graph that could never finish."""

from __future__ import annotations

import pytest

from agentlog.actors.engine.graph import Command, GraphError, StateGraph
from agentlog.projections import END, START, AgentState


def agent(state: AgentState, config: dict) -> None:  # type: ignore[type-arg]
    return None


def tools(state: AgentState) -> None:
    return None


def route(state: AgentState) -> str:
    return END


def loop_graph() -> StateGraph[AgentState]:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_node(tools)
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph


def test_a_well_formed_graph_passes() -> None:
    graph = loop_graph()
    graph.check()
    assert set(graph.nodes) == {"agent", "tools"}
    assert graph.edges == {START: "agent", "tools": "agent"}
    assert graph.successors("agent") == {"tools", END}
    assert graph.state_cls is AgentState


def test_conditional_edges_resolve_through_the_path_map() -> None:
    branch = loop_graph().branches["agent"]
    assert branch.resolve("tools", "agent") == "tools"
    assert branch.resolve(END, "agent") == END
    with pytest.raises(GraphError, match="'nowhere'"):
        branch.resolve("nowhere", "agent")


def test_no_entry_point_is_refused() -> None:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", agent)
    graph.add_edge("agent", END)
    with pytest.raises(GraphError, match="no entry point"):
        graph.check()


def test_an_unknown_node_is_named() -> None:
    graph = StateGraph().add_node("agent", agent).set_entry_point("agent")
    graph.add_edge("agent", "ghost")
    with pytest.raises(GraphError, match="unknown node 'ghost'"):
        graph.check()
    other = StateGraph().add_node("agent", agent).set_entry_point("agent")
    other.add_edge("agent", END).add_edge("phantom", "agent")
    with pytest.raises(GraphError, match="'phantom', which is not a node"):
        other.check()


def test_a_node_that_cannot_reach_end_is_named() -> None:
    graph = StateGraph().add_node("a", agent).add_node("b", tools).set_entry_point("a")
    graph.add_edge("a", END)
    with pytest.raises(GraphError, match="node 'b' has no way out: give it an edge"):
        graph.check()
    cycle = StateGraph().add_node("a", agent).add_node("b", tools).set_entry_point("a")
    cycle.add_edge("a", "b").add_edge("b", "a")
    with pytest.raises(GraphError, match="cannot reach END"):
        cycle.check()


def test_a_condition_without_path_map_may_lead_anywhere() -> None:
    graph = StateGraph().add_node("a", agent).set_entry_point("a")
    graph.add_conditional_edges("a", route)
    graph.check()
    assert graph.branches["a"].resolve("a", "a") == "a"
    with pytest.raises(GraphError, match="node name"):
        graph.branches["a"].resolve(3, "a")


def test_bad_nodes_and_edges_are_refused_when_added() -> None:
    graph = StateGraph().add_node("a", agent)
    with pytest.raises(GraphError, match="already in the graph"):
        graph.add_node("a", agent)
    with pytest.raises(GraphError, match="cannot name a node"):
        graph.add_node(END, agent)
    with pytest.raises(GraphError, match="must be callable"):
        graph.add_node("x", 42)  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="needs a callable"):
        graph.add_node("lonely")
    graph.add_edge("a", END)
    with pytest.raises(GraphError, match="already an edge from 'a' to '__end__'"):
        graph.add_edge("a", END)
    graph.add_conditional_edges("a", route)  # an edge and a condition: both are followed
    with pytest.raises(GraphError, match="already has a conditional edge"):
        graph.add_conditional_edges("a", route)


def test_node_parameters_must_be_injectable() -> None:
    def needs_db(state: AgentState, db: object) -> None:
        return None

    graph = StateGraph().add_node("a", needs_db).set_entry_point("a").add_edge("a", END)
    with pytest.raises(GraphError, match="parameter 'db'"):
        graph.check()
    graph.register("db", object())
    graph.check()
    with pytest.raises(GraphError, match="injected by the runtime"):
        graph.register("state", 1)


def test_command_defaults() -> None:
    assert Command() == Command(update=None, goto=None, resume=None)
    assert Command(goto="tools").goto == "tools"
