"""Tools from MCP servers, for a `ToolNode`: over stdio (a subprocess) or streamable HTTP.

```python
async with mcp_tools(StdioServer("python", ["server.py"]), HttpServer("http://h/mcp")) as tools:
    graph.add_node("tools", ToolNode([get_weather, *tools]))
    await graph.compile(store).ainvoke(...)
```

Each server's session lives in a task of its own, opened by `async with` and closed when it
ends, so a transport that breaks (a server process that dies, an HTTP connection dropped)
fails only the calls it was carrying, never the run's task. A call whose server died is a
failed result in the log (`McpConnectionError`), like a local tool that raised; the next call
connects again. A result the server marks as an error is a failed result too
(`McpToolError`). Nothing here writes the log: the tool node records every call, as for
local tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlsplit

from agentlog.actors.engine.context import NodeContext
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.redact import MASK, Secret, known_secret, names_a_secret, redact
from agentlog.actors.tools.described import SchemaTool, schema_validator
from agentlog.actors.tools.node import ToolUnusableError
from agentlog.events.errors import AgentlogError

__all__ = [
    "HttpServer",
    "McpConnectionError",
    "McpSession",
    "McpSessionError",
    "McpTool",
    "McpToolError",
    "Secret",
    "StdioServer",
    "mcp_tools",
]

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_NAME_LIMIT = 64
"""What model providers accept as a tool name: letters, digits, _ and -, at most 64."""

CONNECT_TIMEOUT = 30.0
"""Seconds a server has, by default, to start and complete the MCP handshake."""

CLOSE_TIMEOUT = 10.0
"""Seconds a session's close may take (the SDK bounds a stdio server's own shutdown)."""


class McpToolError(AgentlogError, RuntimeError):
    """The MCP server answered the call with an error result (the tool failed there)."""


class McpConnectionError(AgentlogError, ConnectionError):
    """The MCP server could not be reached, or went away while a call was in flight: whether
    that call took effect on the server is unknown."""


class McpSessionError(ToolUnusableError):
    """An MCP tool was used outside the session that lists it (closed, or on another event
    loop), or the MCP SDK is missing: the program's mistake, so a run fails with it rather
    than handing it to the model as a tool's result."""


@dataclass(frozen=True)
class StdioServer:
    """An MCP server run as a subprocess, spoken to over its stdin and stdout.

    `name` labels it in errors (default: the command); `prefix` is put before each of its
    tool names (two servers with a tool of the same name); `call_timeout` bounds each call
    (seconds, None: no limit); `errlog` takes the server's stderr (default: ours).
    """

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    cwd: str | os.PathLike[str] | None = None
    name: str | None = None
    prefix: str = ""
    call_timeout: float | None = None
    errlog: TextIO | None = None
    connect_timeout: float = CONNECT_TIMEOUT

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command.strip():
            raise GraphError(
                f"StdioServer needs the command that starts the server, got {self.command!r:.60}"
                ": StdioServer('python', ['server.py'])"
            )
        if not isinstance(self.args, str | bytes) and isinstance(self.args, Iterable):
            object.__setattr__(self, "args", tuple(self.args))  # a generator is read once
        if not isinstance(self.args, tuple) or not all(isinstance(a, str) for a in self.args):
            raise GraphError(
                f"StdioServer args are a list of strings, got {self.args!r:.60}: "
                f"StdioServer({self.command!r}, [{self.args!r:.40}]) passes one argument"
            )
        env = dict(self.env) if self.env is not None else {}
        odd = {k: v for k, v in env.items() if not (isinstance(k, str) and isinstance(v, str))}
        if odd:
            raise GraphError(
                f"StdioServer env holds names and values that are strings, got {odd!r:.60}: "
                "write numbers as text (env={'PORT': '8000'})"
            )
        _check_timeouts(self.label, self.call_timeout, self.connect_timeout)
        known_secret(*(a for a in self.args if isinstance(a, Secret)))
        known_secret(*(v for v in env.values() if isinstance(v, Secret)))

    @property
    def label(self) -> str:
        """How errors name this server (arguments marked `Secret`, or following a flag that
        names a secret, shown as `***`)."""
        if self.name:
            return self.name
        args = [MASK if isinstance(a, Secret) else a for a in self.args]
        return redact(" ".join([os.path.basename(self.command), *args]))


@dataclass(frozen=True)
class HttpServer:
    """An MCP server over streamable HTTP at `url` (e.g. "http://127.0.0.1:8000/mcp").

    `headers` go with every request (an API key); `name`, `prefix` and `call_timeout` are as
    for `StdioServer`.
    """

    url: str
    headers: Mapping[str, str] | None = None
    name: str | None = None
    prefix: str = ""
    call_timeout: float | None = None
    connect_timeout: float = CONNECT_TIMEOUT

    def __post_init__(self) -> None:
        url = self.url if isinstance(self.url, str) else ""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise GraphError(
                f"HttpServer needs the server's http:// or https:// URL, got {self.url!r:.80}"
                ": HttpServer('http://127.0.0.1:8000/mcp')"
            )
        _check_timeouts(self.label, self.call_timeout, self.connect_timeout)
        known_secret(parts.password, *_query_secrets(parts.query))
        known_secret(*(v for k, v in (self.headers or {}).items() if _secret_header(k, v)))

    @property
    def label(self) -> str:
        """How errors name this server (its URL without user-info or query secrets)."""
        return self.name or redact(self.url)


Server = StdioServer | HttpServer
"""An MCP server's address, by transport."""


def _query_secrets(query: str) -> list[str]:
    """The values of a URL query's parameters whose names say they are secret."""
    return [v for k, v in parse_qsl(query) if names_a_secret(k)]


def _secret_header(name: object, value: object) -> bool:
    """A header whose value is a credential: marked `Secret`, or named for one."""
    return isinstance(value, Secret) or names_a_secret(str(name)) or str(name).lower() == "cookie"


def _check_timeouts(label: str, call: float | None, connect: float) -> None:
    """Refuse a timeout that is not a positive number of seconds (None: no call limit)."""
    for what, value in (("call_timeout", call), ("connect_timeout", connect)):
        if value is None and what == "call_timeout":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise GraphError(
                f"MCP server {label!r}: {what} is seconds, a number > 0, got {value!r:.40}"
            )


class McpSession:
    """A live connection to one MCP server, owned by a task of its own.

    `async with McpSession(server) as session:` connects (raising `McpConnectionError` when
    the server cannot be started or reached); `await session.tools()` lists its tools as
    `McpTool`s. A call finding the connection gone connects again first.
    """

    def __init__(self, server: Server) -> None:
        if not isinstance(server, StdioServer | HttpServer):
            raise GraphError(
                f"an MCP server is a StdioServer(command, args) or an HttpServer(url), got "
                f"{type(server).__name__} {server!r:.60}"
            )
        _require_sdk()
        self.server = server
        self._client: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting = asyncio.Lock()
        self._closed = False
        self._lost: BaseException | None = None

    async def __aenter__(self) -> McpSession:
        self._loop = asyncio.get_running_loop()
        await self._connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closed = True
        await self._disconnect()

    async def tools(self) -> list[McpTool]:
        """The server's tools, every page of its listing, as tools a `ToolNode` takes."""
        client = await self._live()
        found: list[McpTool] = []
        cursor: str | None = None
        try:
            while True:
                page = await client.list_tools(cursor=cursor)
                found.extend(McpTool.of(self, tool) for tool in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except (GraphError, McpSessionError):
            raise
        except Exception as exc:
            raise self._connection_error("listing its tools", exc) from exc
        _distinct(self.server, found)
        return found

    async def call(self, name: str, arguments: dict[str, Any], call_id: str = "") -> Any:
        """Call tool `name` (the server's own name for it) and return the result's output."""
        client = await self._live()
        what = f"call {call_id!r} of tool {name!r}" if call_id else f"a call of tool {name!r}"
        try:
            result = await client.call_tool(
                name, arguments, read_timeout_seconds=self.server.call_timeout
            )
        except Exception as exc:
            if _closed(exc) and self._client is client:
                self._client = None  # the next call connects again
            if _timed_out(exc):
                raise McpConnectionError(
                    f"MCP server {self.server.label!r} did not answer {what} within "
                    f"{self.server.call_timeout:g} s (its call_timeout): whether the call "
                    "took effect there is unknown; give it longer if the tool is slow"
                ) from exc
            raise self._connection_error(f"running {what}", exc, call=True) from exc
        if result.is_error:
            text = _text_of(result) or "the server gave no message"
            raise McpToolError(f"MCP server {self.server.label!r}, tool {name!r}: {text}")
        return output_of(result)

    async def _live(self) -> Any:
        """The connected client, connecting again when the connection was lost."""
        if self._closed:
            raise McpSessionError(
                f"the session of MCP server {self.server.label!r} is closed: use its tools "
                "inside `async with mcp_tools(...)` (run the graph within that block)"
            )
        if asyncio.get_running_loop() is not self._loop:
            raise McpSessionError(
                f"the session of MCP server {self.server.label!r} was opened on another event "
                "loop: run the graph with ainvoke/astream in the task that opened it, not "
                "with the blocking invoke"
            )
        if self._client is None:
            async with self._connecting:
                if self._client is None:
                    await self._disconnect()
                    await self._connect()
        return self._client

    async def _connect(self) -> None:
        """Start the owner task and wait until it is connected (or failed to)."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._lost = None
        self._owner = asyncio.create_task(self._own(ready, self._closing))
        limit = self.server.connect_timeout
        try:
            await asyncio.wait_for(asyncio.shield(ready), limit)
        except asyncio.CancelledError:
            await self._disconnect(handshake=True)
            raise
        except TimeoutError as exc:
            await self._disconnect(handshake=True)
            raise McpConnectionError(
                f"MCP server {self.server.label!r} did not complete the MCP handshake within "
                f"{limit:g} s: check that the command or URL is an MCP server's, or give it "
                "longer (connect_timeout=)"
            ) from exc
        except McpConnectionError:
            await self._disconnect(handshake=True)
            raise
        except Exception as exc:
            await self._disconnect(handshake=True)
            raise self._connection_error("connecting", exc) from exc

    async def _own(self, ready: asyncio.Future[None], closing: asyncio.Event) -> None:
        """The owner task: it alone enters and leaves the SDK's client (anyio's scopes must
        be left by the task that entered them), so a broken transport cancels it, not the
        caller of a tool."""
        from mcp import Client

        async def on_message(message: Any) -> None:
            """A line that is not MCP before the handshake ends fails the connect at once
            (the SDK would log it and wait for an answer that never comes)."""
            if isinstance(message, Exception) and not ready.done():
                ready.set_exception(self._not_mcp(message))

        try:
            async with Client(self._transport(), message_handler=on_message) as client:
                self._client = client
                if not ready.done():
                    ready.set_result(None)
                await closing.wait()
        except BaseException as exc:  # the transport broke, or the server could not start
            self._lost = exc
            if not ready.done():
                if isinstance(exc, Exception):
                    ready.set_exception(exc)
                else:  # stopped while connecting: a caller still waiting hears so, and
                    # one that has gone (it gave up first) leaves no unretrieved error behind
                    ready.set_exception(McpConnectionError(_stopped(self.server, exc)))
                    ready.exception()
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None

    def _transport(self) -> Any:
        server = self.server
        if isinstance(server, StdioServer):
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            params = StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=dict(server.env) if server.env is not None else None,
                cwd=server.cwd,
            )
            return stdio_client(params, errlog=server.errlog or sys.stderr)
        from mcp.client.streamable_http import streamable_http_client

        if not server.headers:
            return streamable_http_client(server.url)
        import httpx2

        http = httpx2.AsyncClient(
            headers=dict(server.headers), timeout=httpx2.Timeout(30.0, read=300.0)
        )
        return _closing_http(server.url, http)

    async def _disconnect(self, *, handshake: bool = False) -> None:
        """Ask the owner task to leave its client, and wait for it (bounded); one still in
        the `handshake` is cancelled at once (it would never see the request)."""
        owner, closing = self._owner, self._closing
        self._owner = None
        if owner is None:
            return
        if closing is not None:
            closing.set()
        done, _ = await asyncio.wait({owner}, timeout=0 if handshake else CLOSE_TIMEOUT)
        if not done:
            owner.cancel()
            with contextlib.suppress(BaseException):
                await owner
        elif not owner.cancelled():
            owner.exception()  # retrieved: its failure was recorded in `_lost`

    def _connection_error(
        self, what: str, exc: BaseException, *, call: bool = False
    ) -> McpConnectionError:
        cause = self._lost if self._lost is not None else exc
        unknown = ", and note that a call cut short may or may not have taken effect there"
        return McpConnectionError(
            f"MCP server {self.server.label!r} failed while {what}: {_describe(cause)}; "
            f"check that it runs (its command, or its URL){unknown if call else ''}"
        )

    def _not_mcp(self, exc: Exception) -> McpConnectionError:
        """The error of a server whose first output is not an MCP message."""
        seen = getattr(exc, "errors", None)
        said = ""
        if callable(seen):
            with contextlib.suppress(Exception):
                said = f" ({str(seen()[0].get('input', ''))!r:.80})"
        where = " on its stdout" if isinstance(self.server, StdioServer) else ""
        return McpConnectionError(
            f"MCP server {self.server.label!r} sent something that is not an MCP message"
            f"{where}{said}: check that the command starts an MCP server, and that the server "
            "writes its logs to stderr, never to stdout"
        )


def _require_sdk() -> None:
    """Refuse early, and say what to install, when the MCP SDK (2.x) is missing."""
    try:
        from mcp import Client  # noqa: F401
    except ImportError as exc:
        raise McpSessionError(
            f"MCP tools need the official MCP SDK, version 2 or later ({exc}): "
            "pip install 'agentlog[mcp]'"
        ) from exc


@contextlib.asynccontextmanager
async def _closing_http(url: str, http: Any) -> AsyncIterator[Any]:
    """The streamable HTTP transport over our own HTTP client, closed with it."""
    from mcp.client.streamable_http import streamable_http_client

    async with http, streamable_http_client(url, http_client=http) as streams:
        yield streams


def _closed(exc: BaseException) -> bool:
    """True when `exc` says the connection is gone (not a slow or refused call)."""
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED

    return isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED


def _timed_out(exc: BaseException) -> bool:
    """True when `exc` is the SDK's timeout of a request (the server did not answer)."""
    from mcp import MCPError
    from mcp_types import REQUEST_TIMEOUT

    return isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT


def _stopped(server: Server, exc: BaseException) -> str:
    return f"MCP server {server.label!r}: the connection's task stopped ({type(exc).__name__})"


def _describe(exc: BaseException) -> str:
    """An exception in one line; an exception group by its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or "no detail"
    return f"{type(exc).__name__}: {text}"


def _text_of(result: Any) -> str:
    """The text blocks of a tool result, joined."""
    return "\n".join(b.text for b in result.content if getattr(b, "type", None) == "text")


def output_of(result: Any) -> Any:
    """What a tool result records as its output: the structured content when there is some;
    else its text (one text block, or several joined); else its content blocks as builtins."""
    if result.structured_content is not None:
        return result.structured_content
    blocks = [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in result.content]
    if not blocks:
        return None
    if all(b.get("type") == "text" for b in blocks):
        return "\n".join(str(b.get("text", "")) for b in blocks)
    return blocks


@dataclass(frozen=True)
class McpTool(SchemaTool):
    """One tool of an MCP server, as a `ToolNode` runs it (a `ToolLike`).

    `name` is what a model calls it (the server's name with the server's `prefix`, made
    acceptable to model providers); `remote_name` is the server's own.
    """

    name: str
    remote_name: str
    description: str
    parameters: dict[str, Any]
    """The server's input schema for the tool."""
    output_schema: dict[str, Any] | None
    session: McpSession = field(repr=False, compare=False)
    validator: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, session: McpSession, tool: Any) -> McpTool:
        """The tool `tool` (the SDK's listing entry) of `session`'s server."""
        remote = str(tool.name)
        name = session.server.prefix + _NAME_UNSAFE.sub("_", remote)
        if not name or len(name) > _NAME_LIMIT:
            raise GraphError(
                f"MCP server {session.server.label!r} has tool {remote!r}, whose name "
                f"{name!r} is not 1 to {_NAME_LIMIT} characters as model providers require: "
                "give the server a shorter prefix"
            )
        schema = dict(tool.input_schema or {"type": "object", "properties": {}})
        return cls(
            name=name,
            remote_name=remote,
            description=" ".join((tool.description or "").split()),
            parameters=schema,
            output_schema=tool.output_schema,
            session=session,
            validator=schema_validator(schema),
        )

    async def call(
        self, pos: list[Any], kw: dict[str, Any], context: NodeContext, call_id: str = ""
    ) -> Any:
        """Call the tool on its server; an error result or a lost server raises."""
        return await self.session.call(self.remote_name, kw, call_id)


def _distinct(server: Server, tools: list[McpTool]) -> None:
    """Refuse a server two of whose tools a model would call by one name (their names differ
    only in characters providers refuse, or the server lists one twice)."""
    seen: dict[str, McpTool] = {}
    for tool in tools:
        other = seen.setdefault(tool.name, tool)
        if other is not tool:
            raise GraphError(
                f"MCP server {server.label!r} has tools {other.remote_name!r} and "
                f"{tool.remote_name!r}, both called {tool.name!r} once made acceptable to "
                "model providers (letters, digits, _ and -): rename one of them on the server"
            )


MCP_HINT = (
    ": MCP servers give their tools inside a block, `async with mcp_tools(server) as "
    "tools:`, then ToolNode([*tools]) (run the graph within that block)"
)
"""What a `ToolNode` given an MCP server instead of its tools says to do."""


def is_mcp_setup(value: object) -> bool:
    """True for an MCP server's address, or an `mcp_tools(...)` block not yet entered: what
    a hurried user hands a `ToolNode` instead of the tools the block yields."""
    if isinstance(value, StdioServer | HttpServer):
        return True
    return isinstance(value, contextlib.AbstractAsyncContextManager)


@contextlib.asynccontextmanager
async def mcp_tools(*servers: Server) -> AsyncIterator[list[McpTool]]:
    """Connect to every server and yield all their tools, for a `ToolNode`; the sessions
    close when the block ends. A server that cannot be reached raises
    `McpConnectionError` before the block runs."""
    for server in servers:
        if isinstance(server, list | tuple):
            raise GraphError(
                f"mcp_tools takes each server as an argument, got a {type(server).__name__}: "
                "mcp_tools(first, second), or mcp_tools(*servers)"
            )
    async with contextlib.AsyncExitStack() as stack:
        found: list[McpTool] = []
        for server in servers:
            session = await stack.enter_async_context(McpSession(server))
            found.extend(await session.tools())
        yield found
