"""Runs: start one (at once, or waited for), list a thread's, read one, wait for one,
cancel one."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Query

from agentlog.actors.engine.command import Command
from agentlog.actors.http.access import (
    Runtime,
    Who,
    check_new_thread_id,
    check_thread_id,
    current,
    graph_of,
)
from agentlog.actors.http.bodies import RunCancel, RunCreate, RunStatus, WaitTimeout
from agentlog.actors.http.errors import ApiError
from agentlog.actors.http.shapes import RunResultShape, RunShape, run_json, state_json
from agentlog.actors.http.tokens import Principal
from agentlog.actors.runtime.facade import RuntimeFacade, TriggerState
from agentlog.actors.runtime.spec import (
    RunCancelledError,
    RuntimeNotStartedError,
    UnknownEntryPointError,
    UnknownRunError,
)
from agentlog.projections import AgentState

router = APIRouter()


def shown_run(rt: RuntimeFacade, trigger: TriggerState) -> dict[str, Any]:
    return run_json(trigger, rt.is_running(trigger.id))


async def start_run(
    rt: RuntimeFacade, thread_id: str, body: RunCreate, who: Principal
) -> TriggerState:
    entry = rt.entry(body.assistant_id)
    if entry is None:
        yours = sorted(e.id for e in rt.entry_points() if who.may("run", e.graph_id))
        raise UnknownEntryPointError(
            f"no assistant (entry point) {body.assistant_id!r}: set assistant_id to "
            + (f"one of {', '.join(yours)}" if yours else "an entry point your token may run")
        )
    who.require("run", entry.graph_id)
    if body.input is not None:  # new input; answering a paused run of it starts nothing
        who.require_start(entry.id, entry.trigger)
    check_thread_id(rt, thread_id)
    if body.command is not None and body.input is not None:
        raise ApiError(422, "invalid_request", "send input or command, not both")
    if await rt.has_records(thread_id):
        graph = await rt.graph_of(thread_id)
        if graph is not None and rt.has_graph(graph):
            await current(rt, thread_id, graph)  # a deleted thread takes no new run
    elif not rt.has_runs(thread_id):
        check_new_thread_id(rt, thread_id)
    payload = Command(resume=body.command.resume) if body.command is not None else body.input
    return await rt.submit(
        entry.id,
        payload,
        thread_id=thread_id,
        idempotency_key=body.idempotency_key,
        actor=who.name,
        multitask_strategy=body.multitask_strategy,
        correlation_id=body.correlation_id,
    )


def new_thread_id(who: Principal, body: RunCreate) -> str:
    """The thread of a run on a new thread: its own, or, for a request with an idempotency
    key, the same one each time that caller sends that key (so a retry is the same request)."""
    if body.idempotency_key is None:
        return str(uuid.uuid4())
    named = "\n".join((who.name, body.assistant_id, body.idempotency_key))
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"agentlog:runs/wait:{named}"))


async def wait(
    rt: RuntimeFacade, trigger: TriggerState, timeout: float, who: Principal
) -> dict[str, Any]:
    """A run's end, with the thread's state for a caller that may read it (the `run` right
    alone gets the run, never the state)."""
    try:
        result = await rt.wait_for(trigger.id, timeout=timeout)
    except TimeoutError as exc:
        raise ApiError(
            408, "timeout", f"run {trigger.id!r} did not end within {timeout}s; it goes on"
        ) from exc
    except (ApiError, RunCancelledError, RuntimeNotStartedError, UnknownRunError):
        raise
    except Exception as exc:
        ended = rt.run(trigger.id)
        if ended is None or ended.outcome != "failed":
            raise
        raise ApiError(
            409,
            "run_failed",
            f"run {trigger.id!r} failed after {ended.attempt} attempt(s): "
            f"{ended.error_type or type(exc).__name__}: {ended.message or exc}",
        ) from exc
    state: AgentState = result["state"]
    run = shown_run(rt, rt.run_now(trigger))
    if not who.may("read", trigger.accepted.graph_id):
        return {"run": run, "thread_id": trigger.accepted.thread_id}
    return {"run": run, **state_json(trigger.accepted.thread_id, state)}


@router.post(
    "/threads/{thread_id}/runs",
    summary="Start a run (returns at once)",
    status_code=202,
    response_model=RunShape,
)
async def create_run(
    thread_id: str, body: RunCreate, who: Principal = Who, rt: RuntimeFacade = Runtime
) -> dict[str, Any]:
    return shown_run(rt, await start_run(rt, thread_id, body, who))


@router.post(
    "/threads/{thread_id}/runs/wait",
    summary="Start a run and wait for its result",
    response_model=RunResultShape,
)
async def create_run_wait(
    thread_id: str,
    body: RunCreate,
    who: Principal = Who,
    timeout: WaitTimeout = 300,
    rt: RuntimeFacade = Runtime,
) -> dict[str, Any]:
    trigger = await start_run(rt, thread_id, body, who)
    return await wait(rt, trigger, timeout, who)


@router.post(
    "/runs/wait", summary="A run on a new thread, waited for", response_model=RunResultShape
)
async def stateless_wait(
    body: RunCreate, who: Principal = Who, timeout: WaitTimeout = 300, rt: RuntimeFacade = Runtime
) -> dict[str, Any]:
    trigger = await start_run(rt, new_thread_id(who, body), body, who)
    return await wait(rt, trigger, timeout, who)


@router.get(
    "/threads/{thread_id}/runs",
    summary="The thread's runs, oldest first, paginated",
    response_model=list[RunShape],
)
async def list_runs(
    thread_id: str,
    who: Principal = Who,
    limit: int = Query(default=100, ge=1, le=1000),
    offset: int = Query(default=0, ge=0),
    status: RunStatus | None = None,
    rt: RuntimeFacade = Runtime,
) -> list[dict[str, Any]]:
    graph = await graph_of(rt, thread_id)
    who.require("read", graph)
    if await rt.has_records(thread_id):  # else its first run has not begun
        await current(rt, thread_id, graph)
    runs = [shown_run(rt, t) for t in rt.runs_on(thread_id)]
    return [r for r in runs if status is None or r["status"] == status][offset:][:limit]


@router.get("/threads/{thread_id}/runs/{run_id}", summary="One run", response_model=RunShape)
async def get_run(
    thread_id: str, run_id: str, who: Principal = Who, rt: RuntimeFacade = Runtime
) -> dict[str, Any]:
    trigger = await rt.find_run(thread_id, run_id)
    who.require("read", trigger.accepted.graph_id)
    if await rt.has_records(thread_id):
        await current(rt, thread_id, trigger.accepted.graph_id)
    return shown_run(rt, trigger)


@router.get(
    "/threads/{thread_id}/runs/{run_id}/join",
    summary="Wait for a run's result",
    response_model=RunResultShape,
)
async def join_run(
    thread_id: str,
    run_id: str,
    who: Principal = Who,
    timeout: WaitTimeout = 300,
    rt: RuntimeFacade = Runtime,
) -> dict[str, Any]:
    trigger = await rt.find_run(thread_id, run_id)
    who.require("read", trigger.accepted.graph_id)
    return await wait(rt, trigger, timeout, who)


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel", summary="Cancel a run", response_model=RunShape
)
async def cancel_run(
    thread_id: str,
    run_id: str,
    body: RunCancel | None = None,
    who: Principal = Who,
    rt: RuntimeFacade = Runtime,
) -> dict[str, Any]:
    trigger = await rt.find_run(thread_id, run_id)
    who.require("run", trigger.accepted.graph_id)
    ended = ApiError(
        409, "conflict", f"run {run_id!r} has ended ({trigger.outcome}): nothing to cancel"
    )
    if trigger.done and trigger.id != (rt.latest_run_on(thread_id) or trigger).id:
        raise ended
    others = rt.runs_holding(thread_id)
    others.discard(trigger.id)
    if not trigger.done and not rt.is_running(trigger.id) and others:
        raise ApiError(
            409,
            "run_queued",
            f"run {run_id!r} waits behind {', '.join(map(repr, sorted(others)))} on this "
            "thread, and a cancel ends every run of the thread: cancel the running one "
            "(all end), or wait",
        )
    try:
        await rt.cancel(thread_id, actor=who.name, reason=body.reason if body else None)
    except UnknownRunError:
        raise ended from None
    return shown_run(rt, rt.run_now(trigger))
