"""The Agent Server's runs: create (in the background), wait, stream, join, join a stream,
get, list, cancel (`action=interrupt|rollback`), on a thread or stateless (`/runs/*`, a new
thread of its own, deleted at the run's end unless `on_completion="keep"`)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from agentlog.actors.engine.command import Command
from agentlog.actors.engine.options import InvalidContextError, checked_context
from agentlog.actors.http.access import Who, check_new_thread_id, check_thread_id
from agentlog.actors.http.agentserver import wire
from agentlog.actors.http.agentserver.access import Server, located
from agentlog.actors.http.agentserver.bodies import RunCreate
from agentlog.actors.http.agentserver.facade import INTERRUPT, AgentServer
from agentlog.actors.http.agentserver.schemas import Run
from agentlog.actors.http.agentserver.streaming import run_events
from agentlog.actors.http.bodies import WaitTimeout
from agentlog.actors.http.errors import ERRORS, ApiError
from agentlog.actors.http.streams import EventStream
from agentlog.actors.http.tokens import Principal
from agentlog.actors.runtime.asked import Ask, asking
from agentlog.actors.runtime.facade import TriggerState
from agentlog.events import ThreadNotFoundError

router = APIRouter(tags=["runs"], responses=ERRORS)
StreamModes = Annotated[list[str] | None, Query(description="the modes to stream")]
"""A joined stream's modes (default: those its run was created with)."""


async def begin(
    srv: AgentServer, thread_id: str | None, body: RunCreate, who: Principal
) -> TriggerState:
    """Accept the run the body asks for; refused, writing nothing, when it cannot be run."""
    body.refuse()
    rt = srv.rt
    entry = srv.entry(body.assistant_id)
    if entry is None:
        yours = sorted(e.id for e in rt.entry_points() if who.may("run", e.graph_id))
        raise ApiError(
            404,
            "not_found",
            f"no assistant {body.assistant_id!r}: name one of {', '.join(yours) or 'none'}",
        )
    who.require("run", entry.graph_id)
    if body.input is not None:
        who.require_start(entry.id, entry.trigger)
    if thread_id is None:
        thread_id = str(uuid.uuid4())
    elif await rt.has_records(thread_id) or rt.has_runs(thread_id):
        graph, _ = await located(srv, thread_id, who, "run")
        if graph is not None and graph != entry.graph_id:
            raise ApiError(
                409,
                "conflict",
                f"thread {thread_id!r} runs graph {graph!r}, not assistant "
                f"{entry.id!r}'s {entry.graph_id!r}: start a new thread",
            )
    elif body.if_not_exists != "create":
        check_thread_id(rt, thread_id)
        raise ThreadNotFoundError(thread_id)
    else:
        check_new_thread_id(rt, thread_id)
    ask = asked_of(srv, entry.graph_id, body)
    deferred = await srv.deferred(body)  # webhook, after_seconds: checked, then recorded
    await srv.go_back(thread_id, entry.graph_id, body.checkpoint_ref(), by=who.name)
    resume = body.command.resume if body.command is not None else None
    payload = Command(resume=resume) if body.command is not None else wire.incoming(body.input)
    with asking(ask):  # the run's breakpoints (recorded) and context, for this run only
        trigger = await rt.submit(
            entry.id,
            payload,
            thread_id=thread_id,
            idempotency_key=None,
            actor=who.name,
            multitask_strategy=body.multitask_strategy,
            correlation_id=None,
            **deferred,
        )
    srv.note(trigger.id, body)
    srv.outbox.watch(trigger)
    return trigger


def asked_of(srv: AgentServer, graph_id: str, body: RunCreate) -> Ask:
    """What the body asks of its run beyond its input, checked against the graph (422,
    before anything is written): breakpoints at its nodes, a context its schema takes."""
    graph = srv.app(graph_id).graph
    for name in ("interrupt_before", "interrupt_after"):
        asked = getattr(body, name)
        unknown = [] if asked in (None, "*") else [n for n in asked if n not in graph.nodes]
        if unknown:
            raise ApiError(
                422,
                "invalid_request",
                f"{name} names {', '.join(map(repr, unknown))[:300]}, not nodes of graph "
                f"{graph_id!r}: name some of {', '.join(graph.nodes)}, or '*' for all",
            )
    try:
        context = checked_context(graph.context_schema, body.context)
    except InvalidContextError as exc:
        raise ApiError(422, "invalid_context", str(exc)) from None
    return Ask(body.interrupt_before, body.interrupt_after, context)


async def finish(srv: AgentServer, trigger: TriggerState, body: RunCreate, who: Principal) -> None:
    """A stateless run's thread is deleted at its end unless the body keeps it."""
    if body.on_completion == "keep":
        return
    with contextlib.suppress(Exception):
        await srv.rt.wait_for(trigger.id, timeout=3600)
    await srv.rt.hide_thread(
        trigger.accepted.thread_id, trigger.accepted.graph_id, by=who.name, reason="stateless run"
    )


def after_run(srv: AgentServer, trigger: TriggerState, body: RunCreate, who: Principal) -> None:
    srv.keep(asyncio.ensure_future(finish(srv, trigger, body, who)))


async def result(srv: AgentServer, trigger: TriggerState, timeout: float) -> dict[str, Any]:
    """What `wait` and `join` answer: the thread's values at the run's end (with
    `__interrupt__` when it paused), or `__error__` when it failed."""
    try:
        ended = await srv.rt.wait_for(trigger.id, timeout=timeout)
    except TimeoutError as exc:
        raise ApiError(408, "timeout", f"run {trigger.id!r} did not end within {timeout}s") from exc
    except Exception as exc:
        now = srv.rt.run_now(trigger)
        if now.outcome != "failed":
            raise
        return {
            "__error__": {
                "error": now.error_type or type(exc).__name__,
                "message": now.message or str(exc),
            }
        }
    thread_id, graph_id = trigger.accepted.thread_id, trigger.accepted.graph_id
    state = ended["state"]
    values = srv.values(graph_id, state)
    pending = srv.interrupts(graph_id, state, thread_id)
    if pending:
        values[INTERRUPT] = pending
    return values


def streamed(
    request: Request,
    events: AsyncIterator[str],
    trigger: TriggerState,
    srv: AgentServer | None = None,
    who: Principal | None = None,
) -> StreamingResponse:
    """The stream as SSE; with `srv` and `who` (a run created with `on_disconnect="cancel"`),
    a client that goes away cancels the run."""
    thread_id = trigger.accepted.thread_id

    async def body() -> AsyncIterator[str]:
        async for event in events:
            if await request.is_disconnected():
                if srv is not None and who is not None and not srv.rt.run_now(trigger).done:
                    await srv.rt.cancel(thread_id, actor=who.name, reason="client disconnected")
                return
            yield event

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-cache",
            "Location": f"/threads/{thread_id}/runs/{trigger.id}/stream",
            "Content-Location": f"/threads/{thread_id}/runs/{trigger.id}",
        },
    )


@router.post(
    "/threads/{thread_id}/runs", summary="Start a run in the background", response_model=Run
)
async def create(
    thread_id: str, body: RunCreate, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    return srv.run(await begin(srv, thread_id, body, who))


@router.post("/runs", summary="Start a run on a new thread, in the background", response_model=Run)
async def create_stateless(
    body: RunCreate, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    trigger = await begin(srv, body.thread_id, body, who)
    if body.thread_id is None:
        after_run(srv, trigger, body, who)
    return srv.run(trigger)


@router.post("/threads/{thread_id}/runs/wait", summary="Run and wait for the values")
async def wait(
    thread_id: str,
    body: RunCreate,
    who: Principal = Who,
    timeout: WaitTimeout = 300,
    srv: AgentServer = Server,
) -> dict[str, Any]:
    return await result(srv, await begin(srv, thread_id, body, who), timeout)


@router.post("/runs/wait", summary="Run on a new thread and wait for the values")
async def wait_stateless(
    body: RunCreate, who: Principal = Who, timeout: WaitTimeout = 300, srv: AgentServer = Server
) -> dict[str, Any]:
    trigger = await begin(srv, body.thread_id, body, who)
    try:
        return await result(srv, trigger, timeout)
    finally:
        if body.thread_id is None:
            after_run(srv, trigger, body, who)


@router.post(
    "/threads/{thread_id}/runs/stream",
    summary="Run and stream it (SSE)",
    response_class=EventStream,
)
async def stream(
    thread_id: str,
    body: RunCreate,
    request: Request,
    who: Principal = Who,
    srv: AgentServer = Server,
) -> StreamingResponse:
    trigger = await begin(srv, thread_id, body, who)
    subgraphs = bool(body.stream_subgraphs)
    events = run_events(srv, trigger, body.modes(), subgraphs=subgraphs, created=True)
    cancels = body.on_disconnect == "cancel"
    return streamed(request, events, trigger, srv if cancels else None, who)


@router.post(
    "/runs/stream", summary="Run on a new thread and stream it (SSE)", response_class=EventStream
)
async def stream_stateless(
    body: RunCreate, request: Request, who: Principal = Who, srv: AgentServer = Server
) -> StreamingResponse:
    trigger = await begin(srv, body.thread_id, body, who)
    if body.thread_id is None:
        after_run(srv, trigger, body, who)
    subgraphs = bool(body.stream_subgraphs)
    events = run_events(srv, trigger, body.modes(), subgraphs=subgraphs, created=True)
    cancels = body.on_disconnect == "cancel"
    return streamed(request, events, trigger, srv if cancels else None, who)


def resumed_after(last_event_id: str | None) -> int:
    """The position a reconnecting client saw last (its `Last-Event-ID`), 0 for none."""
    if last_event_id is None or not last_event_id.strip():
        return 0
    if not last_event_id.strip().isdigit():
        raise ApiError(400, "invalid_position", "Last-Event-ID is a position this server sent")
    return int(last_event_id)


async def found(srv: AgentServer, thread_id: str, run_id: str, who: Principal) -> TriggerState:
    trigger = await srv.rt.find_run(thread_id, run_id)
    await located(srv, thread_id, who, "read")
    return trigger


@router.get(
    "/threads/{thread_id}/runs", summary="The thread's runs, newest first", response_model=list[Run]
)
async def list_runs(
    thread_id: str,
    who: Principal = Who,
    limit: int = Query(default=10, ge=1, le=1000),
    offset: int = Query(default=0, ge=0),
    status: str | None = None,
    srv: AgentServer = Server,
) -> list[dict[str, Any]]:
    await located(srv, thread_id, who, "read")
    runs = [srv.run(t) for t in reversed(srv.rt.runs_on(thread_id))]
    return [r for r in runs if status is None or r["status"] == status][offset:][:limit]


@router.get("/threads/{thread_id}/runs/{run_id}", summary="A run", response_model=Run)
async def get_run(
    thread_id: str, run_id: str, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    return srv.run(await found(srv, thread_id, run_id, who))


@router.get("/threads/{thread_id}/runs/{run_id}/join", summary="Wait for a run's values")
async def join(
    thread_id: str,
    run_id: str,
    who: Principal = Who,
    timeout: WaitTimeout = 300,
    srv: AgentServer = Server,
) -> dict[str, Any]:
    return await result(srv, await found(srv, thread_id, run_id, who), timeout)


@router.get(
    "/threads/{thread_id}/runs/{run_id}/stream",
    summary="Join a run's stream (SSE)",
    response_class=EventStream,
)
async def join_stream(
    thread_id: str,
    run_id: str,
    request: Request,
    who: Principal = Who,
    stream_mode: StreamModes = None,
    last_event_id: str | None = Header(default=None),
    srv: AgentServer = Server,
) -> StreamingResponse:
    trigger = await found(srv, thread_id, run_id, who)
    modes = stream_mode or srv.modes_of(trigger.id)
    after = resumed_after(last_event_id)
    return streamed(request, run_events(srv, trigger, modes, after=after), trigger)


@router.get(
    "/threads/{thread_id}/stream",
    summary="Join the thread's latest run's stream (SSE)",
    response_class=EventStream,
)
async def join_thread_stream(
    thread_id: str,
    request: Request,
    who: Principal = Who,
    stream_mode: StreamModes = None,
    srv: AgentServer = Server,
) -> Response:
    await located(srv, thread_id, who, "read")
    trigger = srv.rt.latest_run_on(thread_id)
    if trigger is None:
        raise ApiError(404, "not_found", f"thread {thread_id!r} has no run to join")
    modes = stream_mode or srv.modes_of(trigger.id)
    return streamed(request, run_events(srv, trigger, modes), trigger)


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel",
    summary="Cancel a run",
    status_code=202,
    response_class=Response,
    responses={200: {"description": "the run was cancelled and ended (`wait=true`)"}},
)
async def cancel(
    thread_id: str,
    run_id: str,
    who: Principal = Who,
    wait: bool = Query(default=False),
    action: Literal["interrupt", "rollback"] = Query(default="interrupt"),
    srv: AgentServer = Server,
) -> Response:
    trigger = await found(srv, thread_id, run_id, who)
    who.require("run", trigger.accepted.graph_id)
    if not trigger.done:
        await srv.rt.cancel(thread_id, actor=who.name, reason=f"cancel ({action})")
    now = srv.rt.run_now(trigger)
    if action == "rollback" and now.first_seq is not None:
        await srv.rt.roll_back(
            thread_id,
            trigger.accepted.graph_id,
            now.first_seq,
            by=who.name,
            reason="cancel (rollback)",
        )
    return Response(status_code=202 if not wait else 200)


@router.delete(
    "/threads/{thread_id}/runs/{run_id}",
    summary="Deleting a run: refused (409)",
    response_class=Response,
)
async def delete_run(
    thread_id: str, run_id: str, who: Principal = Who, srv: AgentServer = Server
) -> Response:
    await found(srv, thread_id, run_id, who)
    raise ApiError(
        409,
        "conflict",
        f"run {run_id!r} stays in the log: a log only grows, so a run is never deleted; "
        "delete the thread (DELETE /threads/{thread_id} hides it), or cancel a running run",
    )
