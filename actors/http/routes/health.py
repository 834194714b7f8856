"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from agentlog.actors.http.access import Runtime
from agentlog.actors.http.errors import error_body
from agentlog.actors.runtime.facade import RuntimeFacade

router = APIRouter()

READY: dict[str, Any] = {
    "type": "object",
    "required": ["ready"],
    "properties": {"ready": {"type": "boolean", "const": True}},
}
"""`/ready`'s answer while the runtime runs (else 503 with an error body)."""


@router.get("/ok", summary="Liveness")
async def ok() -> dict[str, bool]:
    return {"ok": True}


@router.get(
    "/ready",
    summary="Readiness: the runtime is running",
    responses={200: {"content": {"application/json": {"schema": READY}}}},
)
async def ready(rt: RuntimeFacade = Runtime) -> JSONResponse:
    if rt.ready:
        return JSONResponse({"ready": True})
    return JSONResponse(error_body("not_ready", "the runtime is not running"), status_code=503)
