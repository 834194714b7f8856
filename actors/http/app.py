"""The runtime over HTTP: threads, state, history, runs and live streams, with LangGraph
Agent Server's paths and field names where it has the same thing, and webhook routes.

Every request acts as a principal (its bearer token's name, or "local" on a loopback server
without tokens), which is the `actor` of whatever it writes. Errors are JSON
`{"error": {"code": ..., "message": ...}}` with a stable code; request bodies are bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentlog.actors.engine.command import Command
from agentlog.actors.engine.errors import (
    BlockingCallError,
    GraphError,
    NodeError,
    NodeReportedError,
    NodeReturnError,
    NothingToResumeError,
    RecursionLimitError,
    UnreadResumeValueError,
)
from agentlog.actors.engine.journal import journal_for
from agentlog.actors.engine.threads import internal_threads
from agentlog.actors.http.guard import BODY_TIMEOUT_S, RequestGuard, answer
from agentlog.actors.http.limits import MAX_DEPTH, nesting_within, showable, shown
from agentlog.actors.http.streams import BadResumePoint, resume_point, run_at, run_records
from agentlog.actors.http.tokens import LOCAL, Forbidden, Principal, Right, TokenBook, Unauthorized
from agentlog.actors.runtime import AgentRuntime
from agentlog.actors.runtime.ledger import TriggerState
from agentlog.actors.runtime.spec import (
    IdempotencyKeyMismatchError,
    InvalidTriggerInputError,
    RegistrationError,
    RunCancelledError,
    RunNotWaitingError,
    RuntimeNotStartedError,
    RuntimeRunFailedError,
    ThreadBusyRunError,
    UnknownEntryPointError,
    UnknownRunError,
)
from agentlog.events import EventRecord
from agentlog.events.errors import (
    AgentlogError,
    ConcurrencyError,
    CorruptRecordError,
    StoreError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from agentlog.events.follow import follow
from agentlog.events.kinds import Event, ThreadCreated, ThreadHidden
from agentlog.events.store import CorruptSnapshotError
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    ForkPointInCommitError,
    IllegalTransitionError,
    InvalidStateUpdateError,
)
from agentlog.projections.edge import to_builtins
from agentlog.projections.fold import Fold
from agentlog.projections.timetravel import fork, interrupt_summary
from agentlog.projections.views import PointOutOfRangeError

MAX_BODY = 1_048_576
"""The default limit of a request body, in bytes."""
MAX_THREAD_ID = 200
"""The longest thread id a request may name."""
SEARCH_LIMIT = 100
"""The most threads one search returns."""
WaitTimeout = Annotated[float, Query(gt=0, le=3600, description="seconds to wait")]
"""How long a request waits for a run (the run goes on after it)."""
RunStatus = Literal[
    "pending", "running", "success", "interrupted", "failed", "cancelled", "rejected"
]
"""A run's status as the API shows it."""
KEEPALIVE_S = 15.0
"""How often an idle event stream sends a comment, so proxies keep it open."""


class ApiError(AgentlogError):
    """An error a request caused, with its HTTP status and a stable code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


_STATUS: list[tuple[type[BaseException], int, str]] = [
    (Unauthorized, 401, "unauthorized"),
    (Forbidden, 403, "forbidden"),
    (ThreadNotFoundError, 404, "not_found"),
    (UnknownRunError, 404, "not_found"),
    (PointOutOfRangeError, 404, "not_found"),
    (UnknownEntryPointError, 404, "unknown_assistant"),
    (ThreadBusyError, 409, "thread_busy"),
    (ThreadBusyRunError, 409, "thread_busy"),
    (ConcurrencyError, 409, "conflict"),
    (IdempotencyKeyMismatchError, 409, "idempotency_key_mismatch"),
    (RunNotWaitingError, 409, "run_not_waiting"),
    (NothingToResumeError, 409, "nothing_to_resume"),
    (UnreadResumeValueError, 409, "resume_value_unread"),
    (IllegalTransitionError, 409, "illegal_transition"),
    (RunCancelledError, 409, "run_cancelled"),
    (RuntimeRunFailedError, 409, "run_failed"),
    (NodeError, 409, "run_failed"),
    (NodeReturnError, 409, "run_failed"),
    (NodeReportedError, 409, "run_failed"),
    (RecursionLimitError, 409, "run_failed"),
    (BlockingCallError, 409, "run_failed"),
    (ForkPointInCommitError, 422, "fork_point_in_commit"),
    (InvalidStateUpdateError, 422, "invalid_state_update"),
    (InvalidTriggerInputError, 422, "invalid_input"),
    (RegistrationError, 422, "invalid_request"),
    (GraphError, 422, "invalid_request"),
    (RuntimeNotStartedError, 503, "not_ready"),
]

_ROUTING = {404: "not_found", 405: "method_not_allowed"}
"""Codes of the answers routing gives itself (no such path, a method the path does not take)."""


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _classify(exc: BaseException) -> tuple[int, str, str]:
    if isinstance(exc, ApiError):
        return exc.status, exc.code, exc.message
    if isinstance(exc, ThreadBusyError):  # its message names the owner's host and process
        return 409, "thread_busy", "a run holds the thread: try again once it has ended"
    if isinstance(exc, ThreadNotFoundError):  # its message names a Python call, not a path
        return (
            404,
            "not_found",
            (
                f"no thread {exc.thread_id!r} in the log: a thread enters the log when it is "
                "created (POST /threads) or with its first run (POST /threads/{thread_id}/runs); "
                "POST /threads/search lists those there are"
            ),
        )
    if isinstance(exc, CorruptRecordError):  # a retry reads the same bytes: say so, and who acts
        snapshot = isinstance(exc, CorruptSnapshotError)
        check = "agentlog verify --snapshots" if snapshot else "agentlog verify"
        what = "snapshot" if snapshot else "record"
        return (
            500,
            "integrity_error",
            (
                f"thread {exc.thread_id!r} cannot be served: its {what} at seq {exc.seq} fails "
                f"an integrity check (altered, damaged or written outside agentlog); a retry "
                f"will not help: the operator should run `{check}` on the server's log and "
                "restore it from a verified copy. Other threads are not affected"
            ),
        )
    for kind, status, code in _STATUS:
        if isinstance(exc, kind):
            return status, code, str(exc)
    if isinstance(exc, StoreError) and not isinstance(exc, ValueError):
        return 503, "store_unavailable", "the log cannot serve this request now; it is logged"
    if isinstance(exc, AgentlogError):
        if isinstance(exc, ValueError):
            return 422, "invalid_request", str(exc)
        if isinstance(exc, LookupError):
            return 404, "not_found", str(exc)
        return 409, "conflict", f"{type(exc).__name__}: {exc}"
    return 500, "internal", "the server failed to handle the request; it is logged"


def _invalid(exc: RequestValidationError) -> JSONResponse:
    """A request its endpoint cannot take: 422 `invalid_request`, saying that the body is not
    JSON, or naming each field that is wrong."""
    errors = exc.errors()
    for e in errors:
        if e.get("type") == "json_invalid":
            why = (e.get("ctx") or {}).get("error") or e.get("msg")
            return JSONResponse(
                error_body("invalid_request", f"the body is not valid JSON: {why}"),
                status_code=422,
            )
    problems = []
    for e in errors:
        where = ".".join(str(p) for p in e.get("loc", ()))
        if tuple(e.get("loc", ())) == ("body",) and e.get("type") in (
            "model_attributes_type",
            "dict_type",
        ):
            problems.append("the body must be a JSON object, sent as application/json")
        else:
            problems.append(f"{where}: {e.get('msg')}")
    return JSONResponse(error_body("invalid_request", "; ".join(problems)[:2000]), status_code=422)


class BodyLimit:
    """Refuse a request body over `max_body` bytes with 413, whether it declares its length
    or streams it: the bytes are counted as they arrive, never held beyond the limit."""

    def __init__(self, app: Any, max_body: int) -> None:
        self.app, self.max_body = app, max_body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await self._refuse(send)
            return
        seen = 0
        over = False

        async def counted() -> Any:
            nonlocal seen, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:  # the request is never handled: the answer is a 413
                    over = True
                    return {"type": "http.disconnect"}
            return message

        refused = False

        async def sending(message: Any) -> None:
            nonlocal refused
            if over:
                if not refused:
                    refused = True
                    await self._refuse(send)
                return
            await send(message)

        await self.app(scope, counted, sending)
        if over and not refused:
            await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        message = f"request bodies are limited to {self.max_body} bytes"
        await answer(send, 413, "body_too_large", message)


# ---- request bodies ----------------------------------------------------------------------


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ThreadCreate(_Body):
    thread_id: str | None = Field(default=None, min_length=1, max_length=MAX_THREAD_ID)
    graph_id: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "the graph the thread runs (default: metadata's graph_id, else the server's only graph)"
        ),
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="recorded with the thread (its thread_created record)"
    )
    if_exists: Literal["raise", "do_nothing"] = Field(
        default="raise",
        description="a thread_id already in the log: 409 (raise), or that thread (do_nothing)",
    )


class ThreadSearch(_Body):
    limit: int = Field(default=10, ge=1, le=SEARCH_LIMIT)
    offset: int = Field(default=0, ge=0)
    status: ExecutionStatus | None = Field(
        default=None,
        description="A thread status ('idle': created with POST /threads and never run yet)",
    )
    graph_id: str | None = None
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="threads whose creation metadata holds each of these keys, equal",
    )


class HistoryQuery(_Body):
    limit: int = Field(default=20, ge=1, le=1000)
    before: int | None = Field(default=None, ge=0, description="only steps before this one")


class ResumeCommand(_Body):
    resume: Any = None


class RunCreate(_Body):
    assistant_id: str = Field(min_length=1, description="the entry point to run")
    input: Any = None
    command: ResumeCommand | None = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    multitask_strategy: Literal["reject", "enqueue", "interrupt", "rollback"] | None = Field(
        default=None, description="new input for a busy thread (default: the entry point's)"
    )
    correlation_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="ties related runs together (hive's correlation_id); recorded with the run",
    )


class RunCancel(_Body):
    reason: str | None = Field(default=None, max_length=2000)


class ThreadFork(_Body):
    step: int | None = Field(default=None, ge=0, description="the step to fork at (default: now)")
    thread_id: str | None = Field(default=None, min_length=1, max_length=MAX_THREAD_ID)


# ---- the app ------------------------------------------------------------------------------


def create_app(
    runtime: AgentRuntime,
    *,
    tokens: TokenBook | None = None,
    max_body: int = MAX_BODY,
    webhooks: bool = True,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] = (),
    body_timeout: float = BODY_TIMEOUT_S,
) -> FastAPI:
    """The HTTP app of `runtime`; it starts the runtime with the server if it is not running.

    Without `tokens`, every request acts as "local" with every right: only for a loopback
    address (`agentlog serve` refuses anything else).

    Requests pass `guard.RequestGuard` first: a `Host` of `allowed_hosts` (loopback names
    always; "*" for any), no change from a page of another origin than the server's own or
    `allowed_origins`, a JSON body nesting at most 64 deep that arrives within
    `body_timeout` seconds.
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = not runtime.started
        if owned:
            await runtime.start()
        try:
            yield
        finally:
            if owned:
                await runtime.stop()

    app = FastAPI(
        title="agentlog",
        version="0.1.0",
        description="An agent runtime on an event log: threads, runs, state and live streams.",
        lifespan=lifespan,
    )
    # set when the server begins to shut down (`agentlog serve` sets it): open event streams
    # end at once, so a drain waits for no stream and cancels none
    app.state.draining = asyncio.Event()

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        status, code, message = _classify(exc)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(error_body(code, message), status_code=status, headers=headers)

    app.add_exception_handler(ApiError, on_error)  # answered, not logged as a failure
    app.add_exception_handler(AgentlogError, on_error)
    app.add_exception_handler(Exception, on_error)  # a 500: answered, and logged

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _invalid(exc)

    @app.exception_handler(StarletteHTTPException)
    async def on_routing(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _ROUTING.get(exc.status_code, "http_error")
        if exc.status_code == 404:
            message = f"no endpoint {request.url.path!r}: /openapi.json lists them"
        elif exc.status_code == 405:
            allowed = next(
                (v for k, v in (exc.headers or {}).items() if k.lower() == "allow"), "other methods"
            )
            message = f"{request.url.path!r} does not take {request.method}; it takes {allowed}"
        else:
            message = str(exc.detail)
        return JSONResponse(
            error_body(code, message), status_code=exc.status_code, headers=exc.headers
        )

    hooks = [e.path for e in runtime.entries.values() if e.trigger == "webhook" and e.path]
    app.add_middleware(
        RequestGuard,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        exempt_paths=frozenset(hooks if webhooks else ()),
        body_timeout=body_timeout,
    )
    app.add_middleware(BodyLimit, max_body=max_body)  # outermost: the guard reads within it

    async def principal(authorization: str | None = Header(default=None)) -> Principal:
        return LOCAL if tokens is None else tokens.check(authorization)

    Who = Depends(principal)

    async def graph_of(thread_id: str) -> str:
        _check_thread_id(runtime, thread_id)
        graph = runtime.ledger.graph_of.get(thread_id)
        if graph is None:
            if await runtime.store.last_seq(thread_id) == 0:
                raise ThreadNotFoundError(thread_id)
            graph = await runtime.listeners.graph_of_thread(thread_id)
        if graph is None or graph not in runtime.graphs:
            raise ApiError(404, "not_found", f"thread {thread_id!r} runs no graph this server has")
        return graph

    async def current(thread_id: str, graph: str) -> AgentState:
        """The thread's state now; a deleted (hidden) thread answers 404, saying so."""
        state: AgentState = await runtime.graphs[graph].app.aget_state({"thread_id": thread_id})
        hidden = state.execution_meta.internal_data.get("hidden")
        if hidden:
            by = hidden.get("by") if isinstance(hidden, dict) else None
            raise ApiError(404, "not_found", _deleted(thread_id, by))
        return state

    async def visible(thread_id: str, who: Principal, right: Right) -> tuple[str, AgentState]:
        """The thread's graph and state, for a principal with `right` on that graph."""
        graph = await graph_of(thread_id)
        who.require(right, graph)
        return graph, await current(thread_id, graph)

    async def thread_of(thread_id: str, graph: str, state: AgentState) -> dict[str, Any]:
        last = await runtime.store.last_seq(thread_id)
        first = [r.at async for r in runtime.store.read(thread_id, 1, 1)]
        latest = [r.at async for r in runtime.store.read(thread_id, last, last)] if last else []
        return _thread(
            thread_id, graph, state, first[0] if first else None, latest[0] if latest else None
        )

    # ---- health --------------------------------------------------------------------------

    @app.get("/ok", summary="Liveness")
    async def ok() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/ready", summary="Readiness: the runtime is running")
    async def ready() -> JSONResponse:
        if runtime.started and not runtime.stopping:
            return JSONResponse({"ready": True})
        return JSONResponse(error_body("not_ready", "the runtime is not running"), status_code=503)

    # ---- threads --------------------------------------------------------------------------

    async def existing(thread_id: str, body: ThreadCreate, who: Principal) -> dict[str, Any]:
        """A thread a creation names that is in the log already, as `if_exists` says."""
        if body.if_exists == "raise":
            raise ApiError(
                409,
                "conflict",
                f"thread {thread_id!r} exists; send if_exists='do_nothing' to get it, or "
                "pick another id",
            )
        graph, state = await visible(thread_id, who, "read")
        return await thread_of(thread_id, graph, state)

    @app.post(
        "/threads",
        summary="Create a thread (recorded: thread_created, with its graph and metadata)",
    )
    async def create_thread(
        body: ThreadCreate | None = None, who: Principal = Who
    ) -> dict[str, Any]:
        body = body or ThreadCreate()
        who.require("run")
        thread_id = body.thread_id or str(uuid.uuid4())
        _check_new_thread_id(runtime, thread_id)
        if body.thread_id is not None and await runtime.store.last_seq(thread_id) > 0:
            return await existing(thread_id, body, who)
        graph = _graph_for(runtime, body, who)
        who.require("run", graph)
        existed = False

        def create(fold: Fold[AgentState]) -> list[Event]:
            nonlocal existed
            existed = fold.seq > 0  # created (or run) since it was looked at
            if existed:
                return []
            return [ThreadCreated(by=who.name, graph_id=graph, metadata=body.metadata)]

        await runtime.graphs[graph].app.awrite_claimed(
            thread_id, create, actor=who.name, what="a thread's creation"
        )
        if existed:
            return await existing(thread_id, body, who)
        return await thread_of(thread_id, graph, await current(thread_id, graph))

    @app.get("/threads/{thread_id}", summary="A thread: status, step, graph, values")
    async def get_thread(thread_id: str, who: Principal = Who) -> dict[str, Any]:
        graph, state = await visible(thread_id, who, "read")
        return await thread_of(thread_id, graph, state)

    @app.post("/threads/search", summary="Threads, newest first, paginated")
    async def search_threads(
        body: ThreadSearch | None = None, who: Principal = Who
    ) -> list[dict[str, Any]]:
        body = body or ThreadSearch()
        who.require("read")
        found: list[dict[str, Any]] = []
        stored = await runtime.store.threads()
        hidden = await internal_threads(runtime.store, stored, runtime.config.runtime_thread)
        threads = [t for t in reversed(stored) if t not in hidden]
        skipped = 0
        for thread_id in threads:
            graph = runtime.ledger.graph_of.get(
                thread_id
            ) or await runtime.listeners.graph_of_thread(thread_id)
            if graph is None or graph not in runtime.graphs or not who.may("read", graph):
                continue
            if body.graph_id is not None and graph != body.graph_id:
                continue
            try:
                state = await runtime.graphs[graph].app.aget_state({"thread_id": thread_id})
            except (ApiError, Forbidden):
                raise
            except Exception as exc:  # one unreadable thread never fails the search
                if body.status is None and not body.metadata and skipped >= body.offset:
                    found.append(_unreadable(thread_id, graph, exc))
                elif body.status is None and not body.metadata:
                    skipped += 1
                if len(found) >= body.limit:
                    break
                continue
            if state.execution_meta.internal_data.get("hidden"):
                continue
            if body.status is not None and state.execution_meta.status != body.status:
                continue
            if body.metadata and not _has_metadata(state, body.metadata):
                continue
            if skipped < body.offset:
                skipped += 1
                continue
            found.append(await thread_of(thread_id, graph, state))
            if len(found) >= body.limit:
                break
        return found

    @app.delete(
        "/threads/{thread_id}",
        summary="Hide a thread (its log stays and verifies)",
        description=(
            "Deleting hides the thread: a `thread_hidden` record says who and why, the thread "
            "leaves listings, and its reads and new runs answer 404. Its log stays and still "
            "verifies. Erasure is not offered yet (`erased` is false)."
        ),
    )
    async def delete_thread(
        thread_id: str,
        who: Principal = Who,
        reason: str | None = Query(default=None, max_length=2000),
    ) -> dict[str, Any]:
        graph = await graph_of(thread_id)
        who.require("admin", graph)
        await runtime.graphs[graph].app.awrite_claimed(
            thread_id,
            lambda fold: (
                []
                if fold.state.execution_meta.internal_data.get("hidden")
                else [ThreadHidden(by=who.name, reason=reason)]
            ),
            actor=who.name,
            what="a thread deletion",
        )
        return {"thread_id": thread_id, "hidden": True, "erased": False}

    @app.get("/threads/{thread_id}/state", summary="The thread's state, now or at a step")
    async def get_state(
        thread_id: str, who: Principal = Who, step: int | None = Query(default=None, ge=0)
    ) -> dict[str, Any]:
        return await state_at(thread_id, who, step)

    @app.get("/threads/{thread_id}/state/{step}", summary="The thread's state right after a step")
    async def get_state_at(thread_id: str, step: int, who: Principal = Who) -> dict[str, Any]:
        if step < 0:
            raise ApiError(422, "invalid_request", "step counts from 0")
        return await state_at(thread_id, who, step)

    async def state_at(thread_id: str, who: Principal, step: int | None) -> dict[str, Any]:
        graph, state = await visible(thread_id, who, "read")
        if step is not None:
            app_ = runtime.graphs[graph].app
            state = await app_.aget_state({"thread_id": thread_id}, at_step=step)
        return _state(thread_id, state)

    async def history(thread_id: str, who: Principal, query: HistoryQuery) -> list[dict[str, Any]]:
        graph, _ = await visible(thread_id, who, "read")
        entries = await runtime.graphs[graph].app.aget_state_history({"thread_id": thread_id})
        newest_first = [
            e for e in reversed(entries) if query.before is None or e.step < query.before
        ]
        found = []
        for e in newest_first[: query.limit]:
            messages, unshown = showable([to_builtins(m) for m in e.messages], "the step")
            found.append(
                {
                    "step": e.step,
                    "node": e.node,
                    "status": e.status,
                    "first_seq": e.first_seq,
                    "last_seq": e.last_seq,
                    "at": e.at,
                    "messages": messages,
                    **({"messages_error": unshown} if unshown else {}),
                }
            )
        return found

    @app.get("/threads/{thread_id}/history", summary="One entry per step, newest first")
    async def get_history(
        thread_id: str,
        who: Principal = Who,
        limit: int = Query(default=20, ge=1, le=1000),
        before: int | None = Query(default=None, ge=0, description="only steps before this"),
    ) -> list[dict[str, Any]]:
        return await history(thread_id, who, HistoryQuery(limit=limit, before=before))

    @app.post("/threads/{thread_id}/history", summary="One entry per step, newest first")
    async def post_history(
        thread_id: str, body: HistoryQuery | None = None, who: Principal = Who
    ) -> list[dict[str, Any]]:
        return await history(thread_id, who, body or HistoryQuery())

    @app.post("/threads/{thread_id}/copy", summary="Fork the thread at a step (default: now)")
    async def fork_thread(
        thread_id: str, body: ThreadFork | None = None, who: Principal = Who
    ) -> dict[str, Any]:
        body = body or ThreadFork()
        graph, state = await visible(thread_id, who, "edit")
        if body.thread_id is not None:
            _check_new_thread_id(runtime, body.thread_id)
        app_ = runtime.graphs[graph].app
        new = await fork(
            runtime.store,
            thread_id,
            at_step=body.step,
            new_thread_id=body.thread_id,
            state_cls=app_.graph.state_cls,
            actor=who.name,
            append=journal_for(runtime.store).append,
        )
        step = state.execution_meta.step if body.step is None else body.step
        return {"thread_id": new, "forked_from": {"thread_id": thread_id, "step": step}}

    # ---- runs ------------------------------------------------------------------------------

    async def start_run(thread_id: str, body: RunCreate, who: Principal) -> TriggerState:
        entry = runtime.entries.get(body.assistant_id)
        if entry is None:
            yours = sorted(e.id for e in runtime.entries.values() if who.may("run", e.graph_id))
            raise UnknownEntryPointError(
                f"no assistant (entry point) {body.assistant_id!r}: set assistant_id to "
                + (f"one of {', '.join(yours)}" if yours else "an entry point your token may run")
            )
        who.require("run", entry.graph_id)
        if body.input is not None:  # new input; answering a paused run of it starts nothing
            who.require_start(entry.id, entry.trigger)
        _check_thread_id(runtime, thread_id)
        if body.command is not None and body.input is not None:
            raise ApiError(422, "invalid_request", "send input or command, not both")
        if await runtime.store.last_seq(thread_id) > 0:
            graph = runtime.ledger.graph_of.get(
                thread_id
            ) or await runtime.listeners.graph_of_thread(thread_id)
            if graph in runtime.graphs:
                await current(thread_id, graph)  # a deleted thread takes no new run
        elif thread_id not in runtime.ledger.graph_of:
            _check_new_thread_id(runtime, thread_id)
        payload = Command(resume=body.command.resume) if body.command is not None else body.input
        accepted = await runtime.submit(
            entry.id,
            payload,
            thread_id=thread_id,
            idempotency_key=body.idempotency_key,
            actor=who.name,
            multitask_strategy=body.multitask_strategy,
            correlation_id=body.correlation_id,
        )
        return runtime.ledger.triggers[accepted.trigger_id]

    @app.post("/threads/{thread_id}/runs", summary="Start a run (returns at once)", status_code=202)
    async def create_run(thread_id: str, body: RunCreate, who: Principal = Who) -> dict[str, Any]:
        return _run(await start_run(thread_id, body, who), runtime)

    @app.post("/threads/{thread_id}/runs/wait", summary="Start a run and wait for its result")
    async def create_run_wait(
        thread_id: str,
        body: RunCreate,
        who: Principal = Who,
        timeout: WaitTimeout = 300,
    ) -> dict[str, Any]:
        trigger = await start_run(thread_id, body, who)
        return await _wait(runtime, trigger, timeout, who)

    @app.post("/runs/wait", summary="A run on a new thread, waited for")
    async def stateless_wait(
        body: RunCreate, who: Principal = Who, timeout: WaitTimeout = 300
    ) -> dict[str, Any]:
        trigger = await start_run(_new_thread_id(who, body), body, who)
        return await _wait(runtime, trigger, timeout, who)

    @app.get("/threads/{thread_id}/runs", summary="The thread's runs, oldest first, paginated")
    async def list_runs(
        thread_id: str,
        who: Principal = Who,
        limit: int = Query(default=100, ge=1, le=1000),
        offset: int = Query(default=0, ge=0),
        status: RunStatus | None = None,
    ) -> list[dict[str, Any]]:
        graph = await graph_of(thread_id)
        who.require("read", graph)
        if await runtime.store.last_seq(thread_id) > 0:  # else its first run has not begun
            await current(thread_id, graph)
        runs = [
            _run(runtime.ledger.triggers[t], runtime)
            for t in runtime.ledger.by_thread.get(thread_id, [])
        ]
        return [r for r in runs if status is None or r["status"] == status][offset:][:limit]

    @app.get("/threads/{thread_id}/runs/{run_id}", summary="One run")
    async def get_run(thread_id: str, run_id: str, who: Principal = Who) -> dict[str, Any]:
        trigger = await _trigger(runtime, thread_id, run_id)
        who.require("read", trigger.accepted.graph_id)
        if await runtime.store.last_seq(thread_id) > 0:
            await current(thread_id, trigger.accepted.graph_id)
        return _run(trigger, runtime)

    @app.get("/threads/{thread_id}/runs/{run_id}/join", summary="Wait for a run's result")
    async def join_run(
        thread_id: str,
        run_id: str,
        who: Principal = Who,
        timeout: WaitTimeout = 300,
    ) -> dict[str, Any]:
        trigger = await _trigger(runtime, thread_id, run_id)
        who.require("read", trigger.accepted.graph_id)
        return await _wait(runtime, trigger, timeout, who)

    @app.post("/threads/{thread_id}/runs/{run_id}/cancel", summary="Cancel a run")
    async def cancel_run(
        thread_id: str, run_id: str, body: RunCancel | None = None, who: Principal = Who
    ) -> dict[str, Any]:
        trigger = await _trigger(runtime, thread_id, run_id)
        who.require("run", trigger.accepted.graph_id)
        ended = ApiError(
            409, "conflict", f"run {run_id!r} has ended ({trigger.outcome}): nothing to cancel"
        )
        if trigger.done and trigger.id != (runtime.ledger.latest_on(thread_id) or trigger).id:
            raise ended
        running = runtime.dispatcher.executing.get(thread_id)
        others = {s.id for s in runtime.dispatcher.queued_on(thread_id)}
        if running is not None:
            others.add(running.state.id)
        others.discard(trigger.id)
        if not trigger.done and trigger.id not in runtime.dispatcher.running_ids() and others:
            raise ApiError(
                409,
                "run_queued",
                f"run {run_id!r} waits behind {', '.join(map(repr, sorted(others)))} on this "
                "thread, and a cancel ends every run of the thread: cancel the running one "
                "(all end), or wait",
            )
        try:
            await runtime.cancel(thread_id, actor=who.name, reason=body.reason if body else None)
        except UnknownRunError:
            raise ended from None
        return _run(runtime.ledger.triggers[trigger.id], runtime)

    # ---- live streams ------------------------------------------------------------------

    @app.get("/threads/{thread_id}/stream", summary="The thread's records as they commit (SSE)")
    async def stream_thread(
        thread_id: str,
        request: Request,
        who: Principal = Who,
        after: str | None = Query(default=None, description="a position: continue after it"),
        last_event_id: str | None = Header(default=None),
    ) -> StreamingResponse:
        await visible(thread_id, who, "read")
        start = _resume_point(after, last_event_id)
        records = follow(runtime.store, after=start, thread_id=thread_id)
        return _sse(request, records, lambda r: run_at(runtime.ledger, thread_id, r.seq))

    @app.get("/threads/{thread_id}/runs/{run_id}/stream", summary="A run's records (SSE)")
    async def stream_run(
        thread_id: str,
        run_id: str,
        request: Request,
        who: Principal = Who,
        last_event_id: str | None = Header(default=None),
    ) -> StreamingResponse:
        trigger = await _trigger(runtime, thread_id, run_id)
        who.require("read", trigger.accepted.graph_id)
        if await runtime.store.last_seq(thread_id) > 0:
            await current(thread_id, trigger.accepted.graph_id)
        start = _resume_point(None, last_event_id)
        finished = trigger.finished_position
        if trigger.done and finished is not None and start >= finished:
            return _sse(request, _nothing(), lambda _: trigger.id)  # reconnected after its end
        return _sse(request, run_records(runtime, trigger, start), lambda _: trigger.id)

    if webhooks:
        _mount_webhooks(app, runtime, max_body)
    return app


def _mount_webhooks(app: FastAPI, runtime: AgentRuntime, max_body: int) -> None:
    """A route per webhook entry point, verified by its scheme (see `webhooks`)."""
    routes = [e for e in runtime.entries.values() if e.trigger == "webhook"]
    if not routes:
        return
    from agentlog.actors.http import webhooks

    for entry in routes:

        async def deliver(request: Request, entry: Any = entry) -> Response:
            try:
                return await webhooks.receive(runtime, entry, request, max_body=max_body)
            except Exception as exc:
                status, code, message = _classify(exc)
                return JSONResponse(error_body(code, message), status_code=status)

        assert entry.path is not None
        app.add_api_route(
            entry.path,
            deliver,
            methods=[m.upper() for m in entry.methods],
            summary=f"Webhook deliveries for entry point {entry.id}",
            status_code=202,
        )


# ---- shapes ------------------------------------------------------------------------------------


async def _nothing() -> AsyncIterator[EventRecord]:
    return
    yield  # an async generator that yields nothing


def _check_thread_id(runtime: AgentRuntime, thread_id: str) -> None:
    if thread_id == runtime.config.runtime_thread:
        raise ApiError(404, "not_found", "that thread is the runtime's own")


def _check_new_thread_id(runtime: AgentRuntime, thread_id: str) -> None:
    """A thread id a request brings into the log: not the runtime's, and not too long."""
    if runtime.config.is_internal(thread_id):
        own = runtime.config.runtime_thread
        raise ApiError(
            422,
            "invalid_request",
            f"{thread_id!r} names one of the runtime's own threads ({own!r} and ids beginning "
            f"{own + '/'!r} or '__shared__/' are reserved): pick another id",
        )
    if not 1 <= len(thread_id) <= MAX_THREAD_ID:
        raise ApiError(
            422, "invalid_request", f"a new thread's id is 1 to {MAX_THREAD_ID} characters long"
        )


def _graph_for(runtime: AgentRuntime, body: ThreadCreate, who: Principal) -> str:
    """The graph a new thread runs: the body's graph_id, else its metadata's, else the
    server's only graph."""
    named = body.graph_id
    if named is None and isinstance(body.metadata.get("graph_id"), str):
        named = body.metadata["graph_id"]
    mine = sorted(g for g in runtime.graphs if who.may("run", g))
    if named is None:
        if len(runtime.graphs) == 1:
            return next(iter(runtime.graphs))
        raise ApiError(
            422,
            "invalid_request",
            "send graph_id, the graph the thread runs: this server has "
            f"{len(runtime.graphs)} graphs (those you may run: "
            f"{', '.join(map(repr, mine)) or 'none'})",
        )
    if named not in runtime.graphs:
        raise ApiError(
            404,
            "not_found",
            f"no graph {named!r} on this server (those you may run: "
            f"{', '.join(map(repr, mine)) or 'none'})",
        )
    return named


def _created(state: AgentState) -> dict[str, Any]:
    """The metadata the thread was created with (its thread_created record), or {}."""
    created = state.execution_meta.internal_data.get("created")
    metadata = created.get("metadata") if isinstance(created, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def _has_metadata(state: AgentState, wanted: dict[str, Any]) -> bool:
    """Whether the thread's creation metadata holds every key of `wanted`, equal."""
    metadata = _created(state)
    return all(key in metadata and _same(metadata[key], value) for key, value in wanted.items())


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values (so true is not 1, nor 1 true)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _deleted(thread_id: str, by: Any) -> str:
    return (
        f"thread {thread_id!r} was deleted by {by!r}: it is hidden, its log stays and still "
        "verifies (agentlog verify); erasure is not offered yet"
    )


def _thread(
    thread_id: str,
    graph: str,
    state: AgentState,
    created_at: float | None = None,
    updated_at: float | None = None,
) -> dict[str, Any]:
    meta = state.execution_meta
    values, unshown = shown(state)
    return {
        "thread_id": thread_id,
        "graph_id": graph,
        "created_at": created_at,
        "updated_at": updated_at,
        "metadata": _created(state) if unshown is None else _shown_metadata(state),
        "status": meta.status.value,
        "step": meta.step,
        "hidden": bool(meta.internal_data.get("hidden")),
        "interrupts": [p] if (p := interrupt_summary(meta)) else [],
        "messages": len(state.context),
        "values": values,
        **({"values_error": unshown} if unshown else {}),
    }


def _unreadable(thread_id: str, graph: str, exc: Exception) -> dict[str, Any]:
    """A search's row for a thread whose state could not be read: its id, and why."""
    _, code, message = _classify(exc)
    return {"thread_id": thread_id, "graph_id": graph, "error": {"code": code, "message": message}}


def _shown_metadata(state: AgentState) -> dict[str, Any]:
    """The creation metadata, or {} when it nests too deep to show (written before the
    limit): one thread's value never fails a listing."""
    metadata = _created(state)
    return metadata if nesting_within(metadata, 2 * MAX_DEPTH) else {}


def _state(thread_id: str, state: AgentState) -> dict[str, Any]:
    meta = state.execution_meta
    pause = interrupt_summary(meta)
    done = meta.status in (ExecutionStatus.COMPLETED, ExecutionStatus.CANCELLED)
    values, unshown = shown(state)
    return {
        "thread_id": thread_id,
        "values": values,
        **({"values_error": unshown} if unshown else {}),
        "next": [] if done else [meta.current_node],
        "step": meta.step,
        "status": meta.status.value,
        "interrupts": [pause] if pause else [],
    }


async def _trigger(runtime: AgentRuntime, thread_id: str, run_id: str) -> TriggerState:
    """The trigger a run id names: a trigger id (the run ids this API answers with), or the
    run id the thread's records carry (`run-...` in logs written before runs were named by
    their trigger), mapped to the trigger whose dispatch began that run."""
    trigger = runtime.ledger.triggers.get(run_id)
    if trigger is None:
        trigger = await _trigger_of_log_run(runtime, thread_id, run_id)
    if trigger is None or trigger.accepted.thread_id != thread_id:
        raise UnknownRunError(f"no run {run_id!r} on thread {thread_id!r}")
    return trigger


async def _trigger_of_log_run(
    runtime: AgentRuntime, thread_id: str, run_id: str
) -> TriggerState | None:
    """The trigger that began the log run `run_id` of the thread: the one its first record
    belongs to (`streams.run_at`). Reads the thread up to that record; only an id the ledger
    does not know comes here."""
    if not run_id or not runtime.ledger.by_thread.get(thread_id):
        return None
    async for record in runtime.store.read(thread_id):
        if record.run_id == run_id:
            trigger_id = run_at(runtime.ledger, thread_id, record.seq)
            return None if trigger_id is None else runtime.ledger.triggers.get(trigger_id)
    return None


def _run(trigger: TriggerState, runtime: AgentRuntime) -> dict[str, Any]:
    accepted = trigger.accepted
    if trigger.id in runtime.dispatcher.running_ids():
        status = "running"
    elif not trigger.done:
        status = "pending"
    else:
        status = {"completed": "success", "interrupted": "interrupted"}.get(
            trigger.outcome or "", trigger.outcome or "pending"
        )
    return {
        "run_id": trigger.id,
        "thread_id": accepted.thread_id,
        "assistant_id": accepted.entry_point,
        "graph_id": accepted.graph_id,
        "status": status,
        "created_at": trigger.accepted_at,
        "updated_at": trigger.updated_at,
        "attempt": trigger.attempt,
        "cause": accepted.cause,
        "created_by": accepted.by,
        "idempotency_key": accepted.idempotency_key,
        "correlation_id": accepted.correlation_id,
        "error": (
            {"type": trigger.error_type, "message": trigger.message}
            if trigger.outcome == "failed"
            else None
        ),
    }


def _new_thread_id(who: Principal, body: RunCreate) -> str:
    """The thread of a run on a new thread: its own, or, for a request with an idempotency
    key, the same one each time that caller sends that key (so a retry is the same request)."""
    if body.idempotency_key is None:
        return str(uuid.uuid4())
    named = "\n".join((who.name, body.assistant_id, body.idempotency_key))
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"agentlog:runs/wait:{named}"))


async def _wait(
    runtime: AgentRuntime, trigger: TriggerState, timeout: float, who: Principal
) -> dict[str, Any]:
    """A run's end, with the thread's state for a caller that may read it (the `run` right
    alone gets the run, never the state)."""
    try:
        result = await runtime.wait_for(trigger.id, timeout=timeout)
    except TimeoutError as exc:
        raise ApiError(
            408, "timeout", f"run {trigger.id!r} did not end within {timeout}s; it goes on"
        ) from exc
    except (ApiError, RunCancelledError, RuntimeNotStartedError, UnknownRunError):
        raise
    except Exception as exc:
        ended = runtime.ledger.triggers.get(trigger.id)
        if ended is None or ended.outcome != "failed":
            raise
        raise ApiError(
            409,
            "run_failed",
            f"run {trigger.id!r} failed after {ended.attempt} attempt(s): "
            f"{ended.error_type or type(exc).__name__}: {ended.message or exc}",
        ) from exc
    state: AgentState = result["state"]
    run = _run(runtime.ledger.triggers[trigger.id], runtime)
    if not who.may("read", trigger.accepted.graph_id):
        return {"run": run, "thread_id": trigger.accepted.thread_id}
    return {"run": run, **_state(trigger.accepted.thread_id, state)}


def _resume_point(after: str | None, last_event_id: str | None) -> int:
    try:
        return resume_point(after, last_event_id)
    except BadResumePoint as exc:
        raise ApiError(400, "invalid_position", str(exc)) from None


def _sse(
    request: Request,
    records: AsyncIterator[EventRecord],
    run_of: Callable[[EventRecord], str | None],
) -> StreamingResponse:
    """Server-Sent Events of `records`, each naming its run (`run_of`: the API's run id):
    each one's position is its id, so a client that
    reconnects with Last-Event-ID continues with no gap and no duplicate. The records come
    from the log as the client reads: a slow client lags, the server holds nothing for it."""

    async def events() -> AsyncIterator[str]:
        iterator = records.__aiter__()
        pending: asyncio.Task[EventRecord] | None = None
        draining = asyncio.ensure_future(request.app.state.draining.wait())
        try:
            while not await request.is_disconnected():
                if pending is None:
                    pending = asyncio.ensure_future(iterator.__anext__())
                done, _ = await asyncio.wait(
                    {pending, draining}, timeout=KEEPALIVE_S, return_when=asyncio.FIRST_COMPLETED
                )
                if draining in done and pending not in done:
                    return  # the server is shutting down: the client reconnects elsewhere
                if not done:
                    yield ": keepalive\n\n"  # the read goes on: nothing is lost
                    continue
                try:
                    record = pending.result()
                except StopAsyncIteration:
                    return
                pending = None
                yield _sse_record(record, run_of(record))
        finally:
            draining.cancel()
            if pending is not None:
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending
            closer = getattr(iterator, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _sse_record(record: EventRecord, run_id: str | None) -> str:
    import msgspec

    data = {
        "position": record.position,
        "thread_id": record.thread_id,
        "run_id": run_id,
        "seq": record.seq,
        "kind": record.kind,
        "actor": record.actor,
        "at": record.at,
        "event": msgspec.to_builtins(record.event),
    }
    payload = json.dumps(data, ensure_ascii=True, default=str)
    return f"id: {record.position}\nevent: {record.kind}\ndata: {payload}\n\n"
