"""A thread's state, now or at a step, and its history (one entry per step)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from agentlog.actors.http.access import Runtime, Who, visible
from agentlog.actors.http.bodies import HistoryQuery
from agentlog.actors.http.errors import ApiError
from agentlog.actors.http.shapes import StateShape, StepShape, state_json, step_json
from agentlog.actors.http.tokens import Principal
from agentlog.actors.runtime.facade import RuntimeFacade

router = APIRouter()


@router.get(
    "/threads/{thread_id}/state",
    summary="The thread's state, now or at a step",
    response_model=StateShape,
)
async def get_state(
    thread_id: str,
    who: Principal = Who,
    step: int | None = Query(default=None, ge=0),
    rt: RuntimeFacade = Runtime,
) -> dict[str, Any]:
    return await state_at(rt, thread_id, who, step)


@router.get(
    "/threads/{thread_id}/state/{step}",
    summary="The thread's state right after a step",
    response_model=StateShape,
)
async def get_state_at(
    thread_id: str, step: int, who: Principal = Who, rt: RuntimeFacade = Runtime
) -> dict[str, Any]:
    if step < 0:
        raise ApiError(422, "invalid_request", "step counts from 0")
    return await state_at(rt, thread_id, who, step)


async def state_at(
    rt: RuntimeFacade, thread_id: str, who: Principal, step: int | None
) -> dict[str, Any]:
    graph, state = await visible(rt, thread_id, who, "read")
    if step is not None:
        state = await rt.state(thread_id, graph, at_step=step)
    return state_json(thread_id, state)


async def history(
    rt: RuntimeFacade, thread_id: str, who: Principal, query: HistoryQuery
) -> list[dict[str, Any]]:
    graph, _ = await visible(rt, thread_id, who, "read")
    entries = await rt.history(thread_id, graph)
    newest_first = [e for e in reversed(entries) if query.before is None or e.step < query.before]
    return [step_json(e) for e in newest_first[: query.limit]]


@router.get(
    "/threads/{thread_id}/history",
    summary="One entry per step, newest first",
    response_model=list[StepShape],
)
async def get_history(
    thread_id: str,
    who: Principal = Who,
    limit: int = Query(default=20, ge=1, le=1000),
    before: int | None = Query(default=None, ge=0, description="only steps before this"),
    rt: RuntimeFacade = Runtime,
) -> list[dict[str, Any]]:
    return await history(rt, thread_id, who, HistoryQuery(limit=limit, before=before))


@router.post(
    "/threads/{thread_id}/history",
    summary="One entry per step, newest first",
    response_model=list[StepShape],
)
async def post_history(
    thread_id: str,
    body: HistoryQuery | None = None,
    who: Principal = Who,
    rt: RuntimeFacade = Runtime,
) -> list[dict[str, Any]]:
    return await history(rt, thread_id, who, body or HistoryQuery())
