"""Composio tools in a ToolNode, with stand-in clients of the shapes Composio's SDKs have
(no network, no Composio dependency): the current `Composio` (tools.get / tools.execute),
the older `ComposioToolSet` (get_tools / execute_action), and its LangChain provider."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.tools import StructuredTool

from agentlog import END, MessagesState, StateGraph, ToolNode, tools_condition
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.testing import ScriptedModel, ask_tool
from agentlog.actors.tools.composio import ComposioTool, composio_tools
from agentlog.events import MemoryEventStore, ToolCallFinished, ToolCallStarted
from agentlog.events.kinds import Event
from agentlog.projections import replay
from tests.test_tools import FakeLog, asking, result_of

STAR = {
    "type": "function",
    "function": {
        "name": "GITHUB_STAR_A_REPOSITORY",
        "description": "Star a repository   on GitHub.",
        "parameters": {
            "type": "object",
            "properties": {"owner": {"type": "string"}, "repo": {"type": "string"}},
            "required": ["owner", "repo"],
        },
    },
}


class FakeTools:
    """`Composio().tools`: `get` gives OpenAI function schemas, `execute` runs one."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.queries: list[dict[str, Any]] = []
        self.executed: list[tuple[str, dict[str, Any], str | None]] = []
        self.answers = answers or {}

    def get(self, user_id: str | None = None, **query: Any) -> list[Any]:
        self.queries.append({"user_id": user_id, **query})
        return [STAR]

    def execute(self, slug: str, arguments: dict[str, Any], user_id: str | None = None) -> Any:
        self.executed.append((slug, arguments, user_id))
        return self.answers.get(
            slug, {"successful": True, "data": {"starred": arguments["repo"]}, "error": None}
        )


class FakeComposio:
    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.tools = FakeTools(answers)


class FakeToolSet:
    """The older SDK's `ComposioToolSet` (its answers spelled `successfull`, as it did)."""

    def __init__(self) -> None:
        self.executed: list[tuple[str, dict[str, Any], str | None]] = []

    def get_tools(self, actions: list[str] | None = None) -> list[Any]:
        return [STAR]

    def execute_action(
        self, action: str, params: dict[str, Any], entity_id: str | None = None
    ) -> Any:
        self.executed.append((action, params, entity_id))
        return {"successfull": True, "data": {"ok": action}, "error": None}


def test_composio_tools_give_composios_schemas_to_the_tool_node() -> None:
    client = FakeComposio()
    tools = composio_tools(client, user_id="u1", toolkits=["GITHUB"])
    assert client.tools.queries == [{"user_id": "u1", "toolkits": ["GITHUB"]}]
    (schema,) = ToolNode(tools).schemas()
    assert schema["function"]["name"] == "GITHUB_STAR_A_REPOSITORY"
    assert schema["function"]["description"] == "Star a repository on GitHub."
    assert schema["function"]["parameters"] == STAR["function"]["parameters"]


async def test_a_call_is_executed_for_the_user_and_its_data_is_the_result() -> None:
    client = FakeComposio()
    node = ToolNode(composio_tools(client, user_id="u1", toolkits=["GITHUB"]))
    log = FakeLog()
    args = {"owner": "a", "repo": "b"}
    messages = await node.run(asking(("c1", "GITHUB_STAR_A_REPOSITORY", args)), log.context)
    assert isinstance(messages, list)
    assert result_of(messages[0]).output == {"starred": "b"}
    assert client.tools.executed == [("GITHUB_STAR_A_REPOSITORY", args, "u1")]
    assert log.finished()["c1"].status == "completed"


async def test_the_older_toolset_is_taken_the_same_way() -> None:
    toolset = FakeToolSet()
    node = ToolNode(composio_tools(toolset, user_id="default", actions=["X"]))
    args = {"owner": "a", "repo": "b"}
    messages = await node.run(asking(("c1", "GITHUB_STAR_A_REPOSITORY", args)), FakeLog().context)
    assert isinstance(messages, list)
    assert result_of(messages[0]).output == {"ok": "GITHUB_STAR_A_REPOSITORY"}
    assert toolset.executed == [("GITHUB_STAR_A_REPOSITORY", args, "default")]


async def test_an_unsuccessful_answer_and_bad_arguments_are_failed_calls() -> None:
    failing = {"successful": False, "data": {}, "error": "repository not found"}
    client = FakeComposio({"GITHUB_STAR_A_REPOSITORY": failing})
    node = ToolNode(composio_tools(client, user_id="u1"))
    log = FakeLog()
    state = asking(
        ("c1", "GITHUB_STAR_A_REPOSITORY", {"owner": "a", "repo": "gone"}),
        ("c2", "GITHUB_STAR_A_REPOSITORY", {"owner": "a"}),
    )
    messages = await node.run(state, log.context)
    assert isinstance(messages, list)
    first, second = (result_of(m) for m in messages)
    assert first.is_error and "repository not found" in first.output
    assert second.is_error and "'repo' is a required property" in second.output
    assert len(client.tools.executed) == 1  # bad arguments never reach Composio
    assert {e.status for e in log.finished().values()} == {"failed"}


async def test_a_committed_composio_result_is_never_executed_again() -> None:
    client = FakeComposio()
    node = ToolNode(composio_tools(client, user_id="u1"))
    args = {"owner": "a", "repo": "b"}
    recorded: list[Event] = [
        ToolCallStarted(call_id="c1", name="GITHUB_STAR_A_REPOSITORY", args=args, node="tools"),
        ToolCallFinished(call_id="c1", name="GITHUB_STAR_A_REPOSITORY", output={"starred": "b"}),
    ]
    log = FakeLog(recorded)
    messages = await node.run(asking(("c1", "GITHUB_STAR_A_REPOSITORY", args)), log.context)
    assert isinstance(messages, list)
    assert result_of(messages[0]).output == {"starred": "b"}
    assert client.tools.executed == []
    assert log.commits == []


def test_the_langchain_providers_tools_pass_through_as_langchain_tools() -> None:
    def star(owner: str, repo: str) -> str:
        return f"starred {owner}/{repo}"

    lc_tool = StructuredTool.from_function(star, name="GITHUB_STAR", description="Star it.")

    class LangchainProvided(FakeTools):
        def get(self, user_id: str | None = None, **query: Any) -> list[Any]:
            return [lc_tool]

    client = FakeComposio()
    client.tools = LangchainProvided()
    (tool,) = composio_tools(client, user_id="u1")
    assert not isinstance(tool, ComposioTool)
    assert tool.name == "GITHUB_STAR"


def test_what_is_not_a_composio_client_or_tool_is_refused_naming_the_shapes() -> None:
    with pytest.raises(GraphError, match="takes a Composio client"):
        composio_tools(object())

    class Odd(FakeTools):
        def get(self, user_id: str | None = None, **query: Any) -> list[Any]:
            return [{"name": "no function key"}]

    client = FakeComposio()
    client.tools = Odd()
    with pytest.raises(GraphError, match="not a tool agentlog reads"):
        composio_tools(client)


async def test_a_graph_runs_composio_tools_and_replays_to_the_same_state() -> None:
    client = FakeComposio()
    graph = StateGraph(MessagesState)
    graph.add_node(
        "agent",
        ScriptedModel(
            [ask_tool("GITHUB_STAR_A_REPOSITORY", call_id="c1", owner="a", repo="b"), "Starred."]
        ),
    )
    graph.add_node("tools", ToolNode(composio_tools(client, user_id="u1")))
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    store = MemoryEventStore()
    app = graph.compile(store)
    config = {"configurable": {"thread_id": "t1"}}
    result = await app.ainvoke("star a/b", config)
    assert [m.role for m in result["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert len(client.tools.executed) == 1
    live = await app.aget_state(config)
    assert replay([r async for r in store.read("t1")], MessagesState) == live
    await app.aclose()
