"""Errors as the API answers them: JSON `{"error": {"code": ..., "message": ...}}` with a
stable code and an HTTP status, for errors a request caused, errors of the runtime and the
log, requests their endpoint cannot take and paths or methods no route has."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

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
from agentlog.actors.http.tokens import Forbidden, Unauthorized
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
from agentlog.events.errors import (
    AgentlogError,
    ConcurrencyError,
    CorruptRecordError,
    StoreError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from agentlog.events.store import CorruptSnapshotError
from agentlog.projections import (
    ForkPointInCommitError,
    IllegalTransitionError,
    InvalidStateUpdateError,
)
from agentlog.projections.views import PointOutOfRangeError


class ApiError(AgentlogError):
    """An error a request caused, with its HTTP status and a stable code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


STATUS: list[tuple[type[BaseException], int, str]] = [
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
"""Error classes -> status and code, the first that matches."""


ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}
"""Every error's answer: a stable code and a message saying what to do (JSON, also on a
route that answers a stream)."""

ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"description": why, "content": {"application/json": {"schema": ERROR_SCHEMA}}}
    for status, why in (
        (400, "a malformed request: a Last-Event-ID that is no position, a body nested too deep"),
        (401, "no token, or one the server does not know"),
        (403, "the token lacks the right on that graph, or a page of another origin sent it"),
        (404, "no such thread, run, assistant, checkpoint, step, item or cron (or deleted)"),
        (408, "the run did not end within the wait (it goes on), or the body came too slowly"),
        (409, "a conflict: the thread's graph, a busy thread, a run that is not waiting"),
        (413, "the body is too large"),
        (415, "a body that is not JSON"),
        (422, "a body or value refused before anything was written"),
        (500, "the log fails an integrity check (the message says what the operator does)"),
        (503, "the runtime is not running, or the log cannot serve the request now"),
    )
}
"""The error statuses the API answers, declared on each route (`APIRouter(responses=...)`)."""


ROUTING = {404: "not_found", 405: "method_not_allowed"}
"""Codes of the answers routing gives itself (no such path, a method the path does not take)."""


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def classify(exc: BaseException) -> tuple[int, str, str]:
    """The status, code and message an error is answered with."""
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
    for kind, status, code in STATUS:
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


def answer_error(exc: BaseException) -> JSONResponse:
    """The answer to an error (`classify`), without the 401's challenge header."""
    status, code, message = classify(exc)
    return JSONResponse(error_body(code, message), status_code=status)


def invalid(exc: RequestValidationError) -> JSONResponse:
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


async def on_error(request: Request, exc: Exception) -> JSONResponse:
    status, code, message = classify(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    return invalid(exc)


async def on_routing(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = ROUTING.get(exc.status_code, "http_error")
    if exc.status_code == 404:
        message = f"no endpoint {request.url.path!r}: /openapi.json lists them"
    elif exc.status_code == 405:
        allowed = next(
            (v for k, v in (exc.headers or {}).items() if k.lower() == "allow"), "other methods"
        )
        message = f"{request.url.path!r} does not take {request.method}; it takes {allowed}"
    else:
        message = str(exc.detail)
    return JSONResponse(error_body(code, message), status_code=exc.status_code, headers=exc.headers)


def install(app: FastAPI) -> None:
    """Answer every error of `app` as JSON (`classify`)."""
    app.add_exception_handler(ApiError, on_error)  # answered, not logged as a failure
    app.add_exception_handler(AgentlogError, on_error)
    app.add_exception_handler(Exception, on_error)  # a 500: answered, and logged
    app.add_exception_handler(RequestValidationError, on_invalid)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, on_routing)  # type: ignore[arg-type]
