"""`get_graph()` and `draw_mermaid()`: a compiled graph's nodes and edges, drawn."""

from __future__ import annotations

from typing import Any, Literal

from agentlog import END, AgentState, Command, StateGraph, ToolNode
from agentlog.actors.engine.drawing import Edge

HEAD = "---\nconfig:\n  flowchart:\n    curve: linear\n---\ngraph TD;\n"
TAIL = (
    "\tclassDef default fill:#f2f0ff,line-height:1.2\n"
    "\tclassDef first fill-opacity:0\n"
    "\tclassDef last fill:#bfb6fc\n"
)


def nothing(state: AgentState) -> None:
    return None


def lookup(city: str) -> str:
    """Look a city up."""
    return city


def test_a_line_is_drawn_with_plain_edges() -> None:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("a", nothing).add_node("b", nothing)
    graph.set_entry_point("a").add_edge("a", "b").add_edge("b", END)
    drawn = graph.compile().get_graph()
    assert list(drawn.nodes) == ["__start__", "a", "b", "__end__"]
    assert drawn.edges == [Edge("__start__", "a"), Edge("a", "b"), Edge("b", "__end__")]
    assert drawn.draw_mermaid() == (
        HEAD + "\t__start__([<p>__start__</p>]):::first\n"
        "\ta(a)\n"
        "\tb(b)\n"
        "\t__end__([<p>__end__</p>]):::last\n"
        "\t__start__ --> a;\n"
        "\ta --> b;\n"
        "\tb --> __end__;\n" + TAIL
    )


def test_an_agent_loop_draws_its_condition_dotted_and_labelled() -> None:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", nothing).add_node("tools", ToolNode([lookup]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", lambda state: "go", {"go": "tools", "done": END})
    graph.add_edge("tools", "agent")
    assert graph.compile().get_graph().draw_mermaid() == (
        HEAD + "\t__start__([<p>__start__</p>]):::first\n"
        "\tagent(agent)\n"
        "\ttools(tools)\n"
        "\t__end__([<p>__end__</p>]):::last\n"
        "\t__start__ --> agent;\n"
        "\tagent -. &nbsp;done&nbsp; .-> __end__;\n"
        "\tagent -. &nbsp;go&nbsp; .-> tools;\n"
        "\ttools --> agent;\n" + TAIL
    )


def test_a_condition_naming_nodes_itself_and_command_destinations_are_dotted() -> None:
    def router(state: AgentState) -> Command[Literal["left", "right"]]:
        return Command(goto="left")

    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("router", router).add_node("left", nothing).add_node("right", nothing)
    graph.set_entry_point("router")
    graph.add_conditional_edges("left", lambda state: END)  # no path_map: any node
    graph.add_edge("right", END)
    drawn = graph.compile().get_graph()
    dotted = {(e.source, e.target) for e in drawn.edges if e.conditional}
    assert dotted == {
        ("router", "left"),
        ("router", "right"),
        *(("left", target) for target in ("router", "left", "right", END)),
    }
    text = drawn.draw_mermaid()
    assert "\trouter -.-> left;\n" in text and "\tright --> __end__;\n" in text
    assert text.count("-.->") == 6


def test_a_name_mermaid_cannot_take_is_spelled_out() -> None:
    graph: StateGraph[Any] = StateGraph()
    graph.add_node("look up (v2)", nothing).set_entry_point("look up (v2)")
    graph.add_edge("look up (v2)", END)
    text = graph.compile().get_graph().draw_mermaid()
    assert "\tlook_20_up_20__28_v2_29_(look up #40;v2#41;)\n" in text
    assert "\t__start__ --> look_20_up_20__28_v2_29_;\n" in text
