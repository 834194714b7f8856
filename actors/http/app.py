"""The runtime over HTTP: LangGraph's Agent Server API at the root paths (wire-compatible,
`agentserver/`), agentlog's own record-level API under `/log` (threads, state, history,
runs and live streams of records, in agentlog's shapes), webhook routes, and the viewer at `/ui`
(`ui/`: a page and a script in the package, reading through these same routes).

Every request acts as a principal (its token's name, or "local" on a loopback server
without tokens), which is the `actor` of whatever it writes. Errors are JSON
`{"error": {"code": ..., "message": ...}}` with a stable code; request bodies are bounded.

The routes (`routes/`, `agentserver/`) are thin: each parses a request, calls the runtime
through a facade, and shapes the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from agentlog.actors.http import errors
from agentlog.actors.http.agentserver import ROUTERS as AGENT_SERVER
from agentlog.actors.http.agentserver.facade import AgentServer
from agentlog.actors.http.agentserver.outbound import RunWebhooks
from agentlog.actors.http.guard import BODY_TIMEOUT_S, BodyLimit, RequestGuard
from agentlog.actors.http.routes import ROUTERS, health
from agentlog.actors.http.tokens import TokenBook
from agentlog.actors.http.ui import router as viewer
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.runtime.facade import RuntimeFacade
from agentlog.actors.runtime.tracing import caller_trace

LOG_PREFIX = "/log"
"""Where agentlog's own record-level routes live (the Agent Server's own the root paths)."""
MAX_BODY = 1_048_576
"""The default limit of a request body, in bytes."""


def create_app(
    runtime: AgentRuntime,
    *,
    tokens: TokenBook | None = None,
    max_body: int = MAX_BODY,
    webhooks: bool = True,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] = (),
    body_timeout: float = BODY_TIMEOUT_S,
    read_only: bool = False,
    run_webhooks: RunWebhooks | None = None,
) -> FastAPI:
    """The HTTP app of `runtime`; it starts the runtime with the server if it is not running.

    Without `tokens`, every request acts as "local" with every right: only for a loopback
    address (`agentlog serve` refuses anything else).

    Requests pass `guard.RequestGuard` first: a `Host` of `allowed_hosts` (loopback names
    always; "*" for any), no change from a page of another origin than the server's own or
    `allowed_origins`, a JSON body nesting at most 64 deep that arrives within
    `body_timeout` seconds.

    `read_only`: every request acts with the `read` right only (as "local" without
    `tokens`), and the runtime is not started, so the server writes nothing (`agentlog ui`).

    `run_webhooks`: how runs' `webhook=` results are sent (signing secret, whether loopback
    and private targets are allowed); None: unsigned, public targets only.
    """
    rt = RuntimeFacade(runtime)
    server = AgentServer(rt, run_webhooks)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if read_only:  # nothing runs: the runtime, which writes as it starts, is not started
            yield
            return
        owned = not rt.started
        if owned:
            await rt.start()
        await server.crons.start()  # the crons made over the API: the runtime's timers
        server.outbox.start()  # webhooks of runs that ended undelivered are sent
        try:
            yield
        finally:
            await server.outbox.stop()
            await server.crons.stop()
            if owned:
                await rt.stop()

    app = FastAPI(
        title="agentlog",
        version="0.1.0",
        description="An agent runtime on an event log: threads, runs, state and live streams.",
        lifespan=lifespan,
        docs_url=None,  # /docs is served from the package's own copy of Swagger UI (ui/)
        redoc_url=None,
    )
    # set when the server begins to shut down (`agentlog serve` sets it): open event streams
    # end at once, so a drain waits for no stream and cancels none
    app.state.draining = asyncio.Event()
    app.state.facade = rt  # what the routes call (`access.Runtime`)
    app.state.tokens = tokens  # who a request acts as (`access.Who`)
    app.state.read_only = read_only
    errors.install(app)
    hooks = [e.path for e in rt.webhook_entries() if e.path]
    app.add_middleware(TraceContext)
    app.add_middleware(
        RequestGuard,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        exempt_paths=frozenset(hooks if webhooks else ()),
        body_timeout=body_timeout,
    )
    app.add_middleware(BodyLimit, max_body=max_body)  # outermost: the guard reads within it
    app.state.agentserver = server  # the Agent Server routes' facade
    for router in AGENT_SERVER:
        app.include_router(router)
    for router in ROUTERS:
        prefix = LOG_PREFIX if router is not health.router else ""
        app.include_router(router, prefix=prefix, responses=errors.ERRORS)
    app.include_router(viewer)  # the viewer at /ui, a page over the routes above
    if webhooks:
        _mount_webhooks(app, runtime, rt.webhook_entries(), max_body)
    return app


class TraceContext:
    """Serves each request with its `traceparent` header as the caller's trace context, so a
    run it starts (a run request, a webhook delivery) records it and its spans join the
    caller's trace."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope["headers"] if k == b"traceparent"), None)
        with caller_trace(header.decode("latin-1") if header is not None else None):
            await self.app(scope, receive, send)


def _mount_webhooks(
    app: FastAPI, runtime: AgentRuntime, entries: list[EntryPoint], max_body: int
) -> None:
    """A route per webhook entry point, verified by its scheme (see `webhooks`)."""
    if not entries:
        return
    from agentlog.actors.http import webhooks

    for entry in entries:

        async def deliver(request: Request, entry: Any = entry) -> Response:
            try:
                return await webhooks.receive(runtime, entry, request, max_body=max_body)
            except Exception as exc:
                return errors.answer_error(exc)

        assert entry.path is not None
        app.add_api_route(
            entry.path,
            deliver,
            methods=[m.upper() for m in entry.methods],
            summary=f"Webhook deliveries for entry point {entry.id}",
            status_code=202,
            responses=errors.ERRORS,
        )
