"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from agentlog.actors.http.access import Runtime
from agentlog.actors.http.errors import error_body
from agentlog.actors.runtime.facade import RuntimeFacade

router = APIRouter()


@router.get("/ok", summary="Liveness")
async def ok() -> dict[str, bool]:
    return {"ok": True}


@router.get("/ready", summary="Readiness: the runtime is running")
async def ready(rt: RuntimeFacade = Runtime) -> JSONResponse:
    if rt.ready:
        return JSONResponse({"ready": True})
    return JSONResponse(error_body("not_ready", "the runtime is not running"), status_code=503)
