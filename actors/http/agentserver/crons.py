"""The Agent Server's crons: create (on a thread, or a new thread per run), search, count,
update, delete. Each is a timer entry point of the runtime (`CronBook`); a schedule is five
cron fields read in UTC."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from agentlog.actors.http.access import Who
from agentlog.actors.http.agentserver import wire
from agentlog.actors.http.agentserver.access import Server, located
from agentlog.actors.http.agentserver.bodies import RunCreate
from agentlog.actors.http.agentserver.cronbook import UTC_NAMES
from agentlog.actors.http.agentserver.facade import AgentServer
from agentlog.actors.http.agentserver.schemas import Cron
from agentlog.actors.http.errors import ERRORS, ApiError
from agentlog.actors.http.tokens import Principal
from agentlog.events.verify_export import same

router = APIRouter(tags=["crons"], responses=ERRORS)
INTERNAL = ("graph_id", "end_before")
"""What the book keeps of a cron that the wire does not show."""


class CronCreate(RunCreate):
    schedule: str = Field(min_length=1, max_length=200)
    end_time: datetime | None = None
    enabled: bool = True
    timezone: str | None = None
    on_run_completed: Literal["delete", "keep"] | None = None


class CronUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schedule: str | None = Field(default=None, min_length=1, max_length=200)
    end_time: datetime | None = None
    enabled: bool | None = None
    metadata: dict[str, Any] | None = None
    input: Any = None
    timezone: str | None = None
    webhook: str | None = None


class CronSearch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    assistant_id: str | None = None
    thread_id: str | None = None
    enabled: bool | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    sort_by: str | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None


def in_utc(timezone: str | None) -> None:
    if timezone is not None and timezone not in UTC_NAMES:
        raise ApiError(
            422,
            "unsupported",
            f"timezone {timezone[:60]!r}: a cron's schedule is read in UTC here; write the "
            "schedule in UTC and leave timezone out (or 'UTC')",
        )


def shown(cron: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cron.items() if k not in INTERNAL}


async def create(
    srv: AgentServer, thread_id: str | None, body: CronCreate, who: Principal
) -> dict[str, Any]:
    body.refuse()
    in_utc(body.timezone)
    if body.after_seconds:
        raise ApiError(
            422, "unsupported", "a cron's runs start at its slots: leave after_seconds out"
        )
    await srv.outbox.check(body.webhook)
    entry = srv.entry(body.assistant_id)
    if entry is None:
        raise ApiError(404, "not_found", f"no assistant {body.assistant_id!r}")
    who.require("run", entry.graph_id)
    if body.input is not None:
        who.require_start(entry.id, entry.trigger)
    if thread_id is not None:
        graph, _ = await located(srv, thread_id, who, "run")
        if graph is not None and graph != entry.graph_id:
            raise ApiError(
                409,
                "conflict",
                f"thread {thread_id!r} runs graph {graph!r}, not {entry.graph_id!r}",
            )
    now = wire.iso(srv.rt.clock())
    cron: dict[str, Any] = {
        "cron_id": str(uuid.uuid4()),
        "assistant_id": entry.id,
        "graph_id": entry.graph_id,
        "thread_id": thread_id,
        "on_run_completed": body.on_run_completed or ("keep" if thread_id else "delete"),
        "end_time": body.end_time.isoformat() if body.end_time else None,
        "schedule": body.schedule,
        "timezone": "UTC",
        "created_at": now,
        "updated_at": now,
        "payload": {
            "input": wire.jsonable(body.input),
            "multitask_strategy": body.multitask_strategy,
            "stream_mode": body.modes(),
            "webhook": body.webhook,
        },
        "user_id": who.name,
        "next_run_date": None,
        "metadata": wire.jsonable(body.metadata or {}),
        "enabled": body.enabled,
    }
    if body.end_time is not None:
        cron["end_before"] = body.end_time.timestamp()
    return shown(await srv.crons.put(cron, by=who.name))


@router.post(
    "/runs/crons", summary="A cron: a run on a new thread at each slot (UTC)", response_model=Cron
)
async def create_cron(
    body: CronCreate, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    return await create(srv, None, body, who)


@router.post(
    "/threads/{thread_id}/runs/crons", summary="A cron on a thread (UTC)", response_model=Cron
)
async def create_thread_cron(
    thread_id: str, body: CronCreate, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    return await create(srv, thread_id, body, who)


async def matching(srv: AgentServer, who: Principal, body: CronSearch) -> list[dict[str, Any]]:
    found = []
    for cron in await srv.crons.all():
        if not who.may("read", cron["graph_id"]):
            continue
        if body.assistant_id is not None and cron["assistant_id"] != body.assistant_id:
            continue
        if body.thread_id is not None and cron["thread_id"] != body.thread_id:
            continue
        if body.enabled is not None and cron["enabled"] != body.enabled:
            continue
        wanted = body.metadata or {}
        if not all(
            k in cron["metadata"] and same(cron["metadata"][k], v) for k, v in wanted.items()
        ):
            continue
        found.append(shown(cron))
    return found


@router.post("/runs/crons/search", summary="Crons", response_model=list[Cron])
async def search_crons(
    body: CronSearch | None = None, who: Principal = Who, srv: AgentServer = Server
) -> list[dict[str, Any]]:
    body = body or CronSearch()
    found = await matching(srv, who, body)
    key = body.sort_by or "created_at"
    found.sort(key=lambda c: str(c.get(key) or ""), reverse=body.sort_order == "desc")
    found = found[body.offset :][: body.limit]
    if body.select:
        found = [{k: v for k, v in c.items() if k in body.select} for c in found]
    return found


@router.post("/runs/crons/count", summary="How many crons a search finds")
async def count_crons(
    body: CronSearch | None = None, who: Principal = Who, srv: AgentServer = Server
) -> int:
    return len(await matching(srv, who, body or CronSearch()))


@router.patch("/runs/crons/{cron_id}", summary="Change a cron", response_model=Cron)
async def update_cron(
    cron_id: str, body: CronUpdate, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    cron = await srv.crons.get(cron_id)
    who.require("run", cron["graph_id"])
    in_utc(body.timezone)
    if body.schedule is not None:
        cron["schedule"] = body.schedule
    if body.end_time is not None:
        cron["end_time"], cron["end_before"] = body.end_time.isoformat(), body.end_time.timestamp()
    if body.enabled is not None:
        cron["enabled"] = body.enabled
    if body.metadata is not None:
        cron["metadata"] = wire.jsonable(body.metadata)
    if body.input is not None:
        cron["payload"] = {**cron["payload"], "input": wire.jsonable(body.input)}
    if body.webhook is not None:
        await srv.outbox.check(body.webhook)
        cron["payload"] = {**cron["payload"], "webhook": body.webhook}
    return shown(await srv.crons.put(cron, by=who.name))


@router.delete("/runs/crons/{cron_id}", summary="Delete a cron", status_code=204)
async def delete_cron(cron_id: str, who: Principal = Who, srv: AgentServer = Server) -> Response:
    cron = await srv.crons.get(cron_id)
    who.require("run", cron["graph_id"])
    await srv.crons.delete(cron_id, by=who.name)
    return Response(status_code=204)
