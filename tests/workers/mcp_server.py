"""An MCP server of the tests' own, on the official SDK's server side.

usage: python -m tests.workers.mcp_server stdio
       python -m tests.workers.mcp_server http
       python -m tests.workers.mcp_server noisy   (stdio, after a log line on stdout)
       python -m tests.workers.mcp_server clashing   (stdio, with a tool named count.calls)

Over HTTP it listens on a free port of 127.0.0.1 and prints "port N" once connections to it
are queued.

Its tools: `add` (typed arguments, a number back), `greet` (a default argument, text
back), `forecast` (structured output), `explode` (raises), `die` (the process exits in the
middle of the call, as a crashed server does), `nap` (answers late) and `count_calls` (how
many calls this process has served, so a test can tell whether a call ran again).
"""

from __future__ import annotations

import logging
import os
import socket
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

server = MCPServer("agentlog-test-tools")
_calls = {"n": 0}


def _served() -> None:
    _calls["n"] += 1


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _served()
    return a + b


@server.tool()
def greet(name: str, punctuation: str = "!") -> str:
    """Greet someone by name."""
    _served()
    return f"hello {name}{punctuation}"


class Forecast(BaseModel):
    """A city's weather."""

    city: str
    celsius: float
    sky: str


@server.tool()
def forecast(city: str) -> Forecast:
    """The weather in a city, as structured data."""
    _served()
    return Forecast(city=city, celsius=21.5, sky="clear")


@server.tool()
def explode(reason: str) -> str:
    """Always fails, saying why."""
    _served()
    raise ToolError(f"exploded: {reason}")


@server.tool()
def die(code: int = 3) -> str:
    """The server process exits while answering (a crash mid-call)."""
    sys.stdout.flush()
    os._exit(code)


@server.tool()
async def nap(seconds: float) -> str:
    """Answers after `seconds` (a slow tool)."""
    import anyio

    await anyio.sleep(seconds)
    _served()
    return f"slept {seconds}"


@server.tool()
def count_calls() -> int:
    """How many calls this server process has answered so far."""
    _served()
    return _calls["n"]


def serve_http() -> None:
    """Serve streamable HTTP on a port the system picks, and say which."""
    import anyio
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until the server accepts them
    print(f"port {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))


def main(argv: list[str]) -> None:
    logging.disable(logging.CRITICAL)  # a failing tool is expected here: keep stderr quiet
    if argv[-2:-1] == ["--token"]:  # a credential on the command line, as real servers take
        argv = argv[:-2]
    if argv == ["http"]:
        serve_http()
    elif argv == ["stdio"] or not argv:
        server.run("stdio")
    elif argv == ["clashing"]:  # "count.calls" is "count_calls" to a model provider
        server.tool(name="count.calls")(count_calls)
        server.run("stdio")
    elif argv == ["noisy"]:  # a server that logs to stdout, breaking the protocol
        print("starting agentlog-test-tools...", flush=True)
        server.run("stdio")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
