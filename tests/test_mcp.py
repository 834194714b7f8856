"""MCP tools in a ToolNode: a real MCP server of the tests' own, over stdio and over HTTP.

The server (tests/workers/mcp_server.py) runs as a subprocess on the official SDK's server
side; the tools' calls are recorded in the log exactly as local tools' are: started,
finished with an output, or failed with an error (a tool that raises, arguments that do
not fit, a server that dies in the middle of a call).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest

from agentlog.actors import ToolNode
from agentlog.actors.engine.errors import BlockingCallError, GraphError, NodeError
from agentlog.actors.tools.mcp import (
    HttpServer,
    McpConnectionError,
    McpSession,
    McpSessionError,
    McpTool,
    StdioServer,
    mcp_tools,
)
from agentlog.actors.tools.node import ToolLike
from agentlog.events import MemoryEventStore, ToolCallFinished, ToolCallStarted
from agentlog.projections import AgentState, Message, ToolCallBlock, replay
from tests.helpers import ROOT, agent_with_tools


def stdio_server(**options: Any) -> StdioServer:
    """The tests' MCP server, started over stdio for each session."""
    return StdioServer(
        sys.executable,
        ["-m", "tests.workers.mcp_server", "stdio"],
        cwd=str(ROOT),
        env={"PYTHONPATH": str(ROOT)},
        name="test-tools",
        **options,
    )


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The tests' MCP server over streamable HTTP on a free port of 127.0.0.1."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workers.mcp_server", "http"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[:1] == ["port"], f"the HTTP MCP server did not start: {first}"
    try:
        yield f"http://127.0.0.1:{first[1]}/mcp"
    finally:
        proc.kill()
        proc.wait(timeout=30)


def http_server(url: str, **options: Any) -> HttpServer:
    return HttpServer(url, name="test-tools-http", **options)


def scripted_agent(*turns: list[tuple[str, dict[str, Any]]]) -> Any:
    """An agent that asks for each turn's tool calls in order, then answers in text."""
    ids = itertools.count(1)
    script = list(turns)

    def agent(state: AgentState) -> list[Message]:
        asked = sum(1 for m in state.context if m.role == "assistant")
        if asked < len(script):
            blocks = [
                ToolCallBlock(id=f"call-{next(ids)}", name=name, args=args)
                for name, args in script[asked]
            ]
            return [Message(role="assistant", content=blocks)]
        return [Message.text_message("done", role="assistant")]

    return agent


async def run_with(tools: list[Any], *turns: list[tuple[str, dict[str, Any]]]) -> Any:
    """Run the scripted agent with `tools` to its end; the store, the run's state and the
    finished calls by id."""
    store = MemoryEventStore()
    app = agent_with_tools(scripted_agent(*turns), tools).compile(checkpointer=store)
    await app.ainvoke({"messages": [Message.text_message("go")]}, config={"thread_id": "t"})
    state = await app.aget_state({"thread_id": "t"})
    records = [r async for r in store.read("t")]
    finished = {r.event.call_id: r.event for r in records if isinstance(r.event, ToolCallFinished)}
    started = [r.event for r in records if isinstance(r.event, ToolCallStarted)]
    assert replay(records).context == state.context  # the log says what the run saw
    return state, finished, started


@pytest.fixture
async def stdio_tools() -> AsyncIterator[list[McpTool]]:
    async with mcp_tools(stdio_server()) as tools:
        yield tools


def weather(city: str) -> str:
    """A local tool beside the MCP ones."""
    return f"sunny in {city}"


async def test_schemas_reach_the_tool_nodes_listing(stdio_tools: list[McpTool]) -> None:
    node = ToolNode([weather, *stdio_tools])
    schemas = {s["function"]["name"]: s["function"] for s in node.schemas()}
    assert set(schemas) == {
        "weather",
        "add",
        "greet",
        "forecast",
        "explode",
        "die",
        "nap",
        "count_calls",
    }
    add = schemas["add"]
    assert add["description"] == "Add two integers."
    assert add["parameters"]["properties"]["a"]["type"] == "integer"
    assert add["parameters"]["required"] == ["a", "b"]
    assert "punctuation" not in schemas["greet"]["parameters"]["required"]
    assert all(isinstance(t, ToolLike) for t in stdio_tools)


async def test_results_and_errors_are_recorded_like_local_tools(
    stdio_tools: list[McpTool],
) -> None:
    state, finished, started = await run_with(
        [weather, *stdio_tools],
        [("add", {"a": 2, "b": 40}), ("forecast", {"city": "Oslo"}), ("weather", {"city": "Rome"})],
        [("explode", {"reason": "boom"}), ("add", {"a": "two", "b": 1}), ("nope", {})],
    )
    assert [s.name for s in started] == ["add", "forecast", "weather", "explode", "add", "nope"]
    assert finished["call-1"].status == "completed"
    assert finished["call-1"].output == {"result": 42}
    assert finished["call-2"].output == {"city": "Oslo", "celsius": 21.5, "sky": "clear"}
    assert finished["call-3"].output == "sunny in Rome"
    explode = finished["call-4"]
    assert explode.status == "failed"
    assert explode.error is not None and explode.error.startswith("McpToolError: ")
    assert "exploded: boom" in explode.error
    bad = finished["call-5"]
    assert bad.status == "failed" and bad.error is not None
    assert bad.error.startswith("ToolArgumentsError: invalid arguments for 'add': a:")
    assert finished["call-6"].error is not None and "UnknownToolError" in finished["call-6"].error
    assert state.execution_meta.status.value == "completed"
    results = [m for m in state.context if m.role == "tool"]
    assert len(results) == 6  # every call answered exactly once


async def test_a_tool_over_http(http_url: str) -> None:
    async with mcp_tools(http_server(http_url, prefix="remote_")) as tools:
        assert {t.name for t in tools} >= {"remote_add", "remote_greet"}
        assert {t.remote_name for t in tools} >= {"add", "greet"}
        state, finished, _ = await run_with(
            tools,
            [("remote_greet", {"name": "Ada"}), ("remote_add", {"a": 1, "b": 2})],
            [("remote_explode", {"reason": "over http"})],
        )
    assert finished["call-1"].output == {"result": "hello Ada!"}
    assert finished["call-2"].output == {"result": 3}
    assert finished["call-3"].status == "failed"
    assert "exploded: over http" in (finished["call-3"].error or "")
    assert state.execution_meta.status.value == "completed"


async def test_a_server_over_http_with_headers(http_url: str) -> None:
    """Headers (an API key) take the transport over our own HTTP client, closed with it."""
    server = http_server(http_url, headers={"Authorization": "Bearer k"}, call_timeout=30)
    async with mcp_tools(server) as tools:
        add = next(t for t in tools if t.name == "add")
        assert await add.session.call("add", {"a": 2, "b": 2}) == {"result": 4}


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_server_dying_mid_call_fails_that_call_only(transport: str, http_url: str) -> None:
    if transport == "stdio":
        server: StdioServer | HttpServer = stdio_server()
    else:  # a server of its own, since this one dies
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.workers.mcp_server", "http"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        server = http_server(f"http://127.0.0.1:{proc.stdout.readline().split()[1]}/mcp")
    try:
        async with mcp_tools(server) as tools:
            turns = [[("add", {"a": 1, "b": 1})], [("die", {})]]
            if transport == "stdio":  # the next call starts the server again
                turns.append([("count_calls", {})])
            state, finished, _ = await run_with(tools, *turns)
    finally:
        if transport == "http":
            proc.kill()
            proc.wait(timeout=30)
    assert finished["call-1"].output == {"result": 2}
    died = finished["call-2"]
    assert died.status == "failed"
    assert died.error is not None and died.error.startswith("McpConnectionError: ")
    assert "may or may not have taken effect" in died.error
    if transport == "stdio":
        assert finished["call-3"].output == {"result": 1}  # a fresh server process
    assert state.execution_meta.status.value == "completed"
    assert [m.text() for m in state.context][-1] == "done"


async def test_tools_refuse_to_run_after_their_session_closed() -> None:
    async with mcp_tools(stdio_server()) as tools:
        add = next(t for t in tools if t.name == "add")
    with pytest.raises(McpSessionError, match="is closed"):
        await add.session.call("add", {"a": 1, "b": 2})


async def test_a_run_using_tools_after_their_block_fails_and_resumes_inside_a_new_one() -> None:
    """Using a closed session is the program's mistake: the run fails naming it (the model
    is not told), and no result is recorded, so the call runs on resume."""
    store = MemoryEventStore()
    config = {"thread_id": "t"}
    async with mcp_tools(stdio_server()) as tools:
        pass
    app = agent_with_tools(scripted_agent([("add", {"a": 2, "b": 3})]), tools).compile(store)
    with pytest.raises(NodeError, match=r"McpSessionError: .*'test-tools' is closed"):
        await app.ainvoke({"messages": [Message.text_message("go")]}, config=config)
    records = [r async for r in store.read("t")]
    assert not any(isinstance(r.event, ToolCallFinished) for r in records)
    async with mcp_tools(stdio_server()) as tools:
        again = agent_with_tools(scripted_agent([("add", {"a": 2, "b": 3})]), tools)
        await again.compile(store).ainvoke(None, config=config)
    records = [r async for r in store.read("t")]
    finished = [r.event for r in records if isinstance(r.event, ToolCallFinished)]
    assert [(f.status, f.output) for f in finished] == [("completed", {"result": 5})]


async def test_the_blocking_invoke_fails_the_run_saying_to_use_ainvoke(
    stdio_tools: list[McpTool],
) -> None:
    app = agent_with_tools(scripted_agent([("add", {"a": 1, "b": 1})]), stdio_tools)
    app = app.compile(MemoryEventStore())
    go = {"messages": [Message.text_message("go")]}
    with pytest.raises(BlockingCallError):  # inside the loop: refused before it starts
        app.invoke(go, config={"thread_id": "t"})
    with pytest.raises(NodeError, match=r"McpSessionError: .*with ainvoke/astream"):
        await asyncio.to_thread(app.invoke, go, {"thread_id": "t"})  # from a thread: runs
    state = await app.aget_state({"thread_id": "t"})
    assert state.execution_meta.status.value == "error"
    assert [m.role for m in state.context] == ["user", "assistant"]  # no result to the model


async def test_a_server_that_cannot_start_or_be_reached_is_named() -> None:
    missing = StdioServer("/nonexistent/mcp-server", name="ghost")
    with pytest.raises(McpConnectionError, match="'ghost'") as caught:
        async with McpSession(missing):
            pass
    assert "cut short" not in str(caught.value)  # no call was made: nothing to be unsure of
    with pytest.raises(McpConnectionError, match=r"127\.0\.0\.1:9/"):
        async with mcp_tools(HttpServer("http://127.0.0.1:9/mcp")):
            pass


async def test_a_server_printing_other_things_on_stdout_fails_at_once_saying_so() -> None:
    noisy = StdioServer(
        sys.executable,
        ["-m", "tests.workers.mcp_server", "noisy"],
        cwd=str(ROOT),
        env={"PYTHONPATH": str(ROOT)},
        name="noisy",
        errlog=open(os.devnull, "w"),  # noqa: SIM115 - the SDK logs the bad line there too
        connect_timeout=60,
    )
    with pytest.raises(McpConnectionError) as caught:
        async with asyncio.timeout(30):  # well before connect_timeout: it did not wait for it
            async with mcp_tools(noisy):
                pass
    said = str(caught.value)
    assert "'noisy' sent something that is not an MCP message on its stdout" in said
    assert "'starting agentlog-test-tools...'" in said and "logs to stderr" in said


async def test_a_server_that_never_answers_the_handshake_times_out_naming_the_limit() -> None:
    silent = StdioServer(sys.executable, ["-c", "import sys; sys.stdin.read()"], name="mute")
    with pytest.raises(McpConnectionError, match=r"'mute' did not complete .* within 0\.5 s"):
        async with mcp_tools(replace(silent, connect_timeout=0.5)):
            pass


GIVE_UP = """
import asyncio, sys
from agentlog.actors.tools.mcp import StdioServer, mcp_tools

async def main():
    silent = StdioServer(sys.executable, ["-c", "import sys; sys.stdin.read()"])
    try:
        async with asyncio.timeout(0.5):  # the caller gives up during the handshake
            async with mcp_tools(silent):
                pass
    except TimeoutError:
        print("gave up")

asyncio.run(main())
"""


async def test_giving_up_on_a_connect_leaves_no_unretrieved_error_behind() -> None:
    """Run in a process of its own: asyncio reports an unretrieved error when it exits."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        GIVE_UP,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert out.decode().strip() == "gave up"
    assert "never retrieved" not in err.decode(), err.decode()


def test_stdio_args_from_a_generator_are_kept() -> None:
    server = StdioServer("python", (a for a in ["-m", "srv"]))
    assert server.args == ("-m", "srv") and server.args == ("-m", "srv")  # read twice


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: StdioServer("python", "server.py"), "args are a list of strings"),  # type: ignore[arg-type]
        (lambda: StdioServer("python", ["s.py", 3]), "args are a list of strings"),  # type: ignore[list-item]
        (lambda: StdioServer(""), "needs the command"),
        (lambda: StdioServer("x", env={"PORT": 8000}), r"env=\{'PORT': '8000'\}"),  # type: ignore[dict-item]
        (lambda: HttpServer("127.0.0.1:8000/mcp"), "http:// or https:// URL"),
        (lambda: HttpServer("ftp://host/mcp"), "http:// or https:// URL"),
        (lambda: HttpServer("http://h/mcp", call_timeout=0), "call_timeout is seconds"),
        (lambda: StdioServer("x", connect_timeout=-1), "connect_timeout is seconds"),
        (lambda: StdioServer("x", call_timeout="5"), "call_timeout is seconds"),  # type: ignore[arg-type]
    ],
)
def test_a_server_address_that_cannot_work_is_refused_when_made(make: Any, said: str) -> None:
    with pytest.raises(GraphError, match=said):
        make()


async def test_an_mcp_setup_handed_where_tools_belong_says_how_to_open_it() -> None:
    server = stdio_server()
    hint = r"async with mcp_tools\(server\) as tools:`, then ToolNode\(\[\*tools\]\)"
    with pytest.raises(GraphError, match=rf"got StdioServer, not a tool: .*{hint}"):
        ToolNode([weather, server])  # type: ignore[list-item]
    with pytest.raises(GraphError, match=rf"takes a list of tools, .*{hint}"):
        ToolNode(mcp_tools(server))  # type: ignore[arg-type]
    with pytest.raises(GraphError, match=r"takes a list of tools, got function .*ToolNode\(\["):
        ToolNode(weather)  # type: ignore[arg-type]
    with pytest.raises(GraphError, match=r"mcp_tools\(\*servers\)"):
        async with mcp_tools([server]):  # type: ignore[arg-type]
            pass


def add(a: int, b: int) -> int:
    """A local tool named like one of the server's."""
    return a + b


async def test_a_local_tool_named_like_an_mcp_tool_is_refused_naming_both(
    stdio_tools: list[McpTool],
) -> None:
    with pytest.raises(GraphError) as caught:
        ToolNode([add, *stdio_tools])
    said = str(caught.value)
    assert "two tools are named 'add' (function 'add' and tool 'add' of MCP server" in said
    assert "'test-tools'" in said and "prefix=" in said
    with pytest.raises(GraphError, match=r"function 'add' and function 'add'\): .*rename one$"):
        ToolNode([add, add])


async def test_a_server_whose_tool_names_collide_once_made_safe_is_refused() -> None:
    clashing = replace(stdio_server(), args=["-m", "tests.workers.mcp_server", "clashing"])
    with pytest.raises(GraphError) as caught:
        async with mcp_tools(clashing):
            pass
    said = str(caught.value)
    assert "has tools 'count_calls' and 'count.calls', both called 'count_calls'" in said
    assert "rename one of them on the server" in said


async def test_a_call_past_its_timeout_fails_naming_the_limit_and_the_session_goes_on() -> None:
    async with mcp_tools(stdio_server(call_timeout=0.3)) as tools:
        nap = next(t for t in tools if t.name == "nap")
        with pytest.raises(McpConnectionError) as caught:
            await nap.session.call("nap", {"seconds": 5}, "c1")
        said = str(caught.value)
        assert "did not answer call 'c1' of tool 'nap' within 0.3 s (its call_timeout)" in said
        assert "unknown" in said
        assert await nap.session.call("nap", {"seconds": 0}) == {"result": "slept 0.0"}


async def test_calls_run_concurrently_on_one_session(stdio_tools: list[McpTool]) -> None:
    calls = [("add", {"a": i, "b": i}) for i in range(8)]
    _, finished, _ = await run_with(stdio_tools, calls)
    assert [finished[f"call-{i + 1}"].output for i in range(8)] == [
        {"result": 2 * i} for i in range(8)
    ]


async def test_a_step_run_again_answers_a_finished_mcp_call_from_the_log() -> None:
    """After a crash, a call whose result was committed is not sent to the server again."""
    from agentlog.actors.engine.context import NodeContext
    from agentlog.events import EventRecord
    from agentlog.projections.fold import uncommitted_record

    def record(event: Any, seq: int) -> EventRecord:
        return uncommitted_record(event, seq, "t", "r")

    before = [
        ToolCallStarted(call_id="a", name="add", args={"a": 1, "b": 2}, node="tools"),
        ToolCallFinished(call_id="a", name="add", output={"result": 3}),
        ToolCallStarted(call_id="n", name="count_calls", args={}, node="tools"),
    ]
    committed: list[Any] = []

    async def commit(events: Any, actor: str | None = None) -> list[EventRecord]:
        committed.extend(events)
        return [record(e, 10 + i) for i, e in enumerate(events)]

    context = NodeContext(
        "t", "r", "tools", commit, [record(e, i + 1) for i, e in enumerate(before)]
    )
    asking = Message(
        role="assistant",
        content=[
            ToolCallBlock(id="a", name="add", args={"a": 1, "b": 2}),
            ToolCallBlock(id="n", name="count_calls", args={}),
        ],
    )
    state = AgentState(context=[Message.text_message("go"), asking])
    async with mcp_tools(stdio_server()) as tools:
        out = await ToolNode(tools).run(state, context)
    assert isinstance(out, list)
    assert [m.content[0].output for m in out] == [{"result": 3}, {"result": 1}]  # type: ignore[union-attr]
    assert [e.call_id for e in committed] == ["n"]  # only the unfinished call ran, and once


async def test_hooks_run_around_mcp_calls_as_around_local_ones() -> None:
    from agentlog.actors import Callbacks, Invocation

    seen: list[str] = []

    class Recover(Callbacks):
        name = "recover"

        def before(self, invocation: Invocation) -> None:
            if invocation.type == "tool":
                seen.append(f"before {invocation.name}")

        def on_error(self, invocation: Invocation, error: Exception) -> Message:
            seen.append(f"error {type(error).__name__}")
            return Message.text_message("the tool is down; try later", role="assistant")

    store = MemoryEventStore()
    async with mcp_tools(stdio_server()) as tools:
        app = agent_with_tools(scripted_agent([("explode", {"reason": "x"})]), tools).compile(
            checkpointer=store, callbacks=Recover()
        )
        await app.ainvoke({"messages": [Message.text_message("go")]}, {"thread_id": "t"})
    assert seen == ["before explode", "error McpToolError"]
    finished = [r.event async for r in store.read("t") if isinstance(r.event, ToolCallFinished)]
    assert finished[0].status == "completed"
    assert finished[0].error is not None and "(recovered by recover)" in finished[0].error


def test_a_missing_sdk_is_named_with_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if it were not installed
    with pytest.raises(McpSessionError, match=r"pip install 'agentlog\[mcp\]'"):
        McpSession(stdio_server())


async def test_the_blocking_invoke_is_refused_with_what_to_do_instead(
    stdio_tools: list[McpTool],
) -> None:
    import threading

    add = next(t for t in stdio_tools if t.name == "add")
    failures: list[BaseException] = []

    def elsewhere() -> None:  # another thread, another event loop: as `invoke` runs
        import asyncio

        try:
            asyncio.run(add.session.call("add", {"a": 1, "b": 1}))
        except BaseException as exc:
            failures.append(exc)

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join(30)
    assert len(failures) == 1 and isinstance(failures[0], McpSessionError)
    assert "another event loop" in str(failures[0])
