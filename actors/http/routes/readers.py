"""The log's durable readers: where each relay and span follower stands, and its lag."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from agentlog.actors.http.access import Runtime, Who
from agentlog.actors.http.tokens import Principal
from agentlog.actors.runtime.facade import RuntimeFacade

router = APIRouter()


@router.get(
    "/readers",
    summary="Durable readers of the log (relays, span followers): position, head and lag",
)
async def readers(who: Principal = Who, rt: RuntimeFacade = Runtime) -> dict[str, Any]:
    who.require("read")
    return {"readers": await rt.readers()}
