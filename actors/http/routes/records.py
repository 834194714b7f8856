"""A thread's records, a page at a time (what a timeline shows), and its hash chain checked."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from agentlog.actors.http.access import Runtime, Who, graph_of
from agentlog.actors.http.shapes import record_json
from agentlog.actors.http.summaries import check, readable
from agentlog.actors.http.tokens import Principal
from agentlog.actors.runtime.facade import RuntimeFacade

router = APIRouter()


@router.get(
    "/threads/{thread_id}/records",
    summary="The thread's records after a seq, oldest first, a page at a time",
)
async def get_records(
    thread_id: str,
    who: Principal = Who,
    after: int = Query(default=0, ge=0, description="only records after this seq"),
    limit: int = Query(default=200, ge=1, le=1000),
    rt: RuntimeFacade = Runtime,
) -> dict[str, Any]:
    await readable(rt, thread_id, who, "read")  # its summary: no fold while its head holds
    records = await rt.records(thread_id, after, limit)
    return {
        "thread_id": thread_id,
        "head": await rt.head(thread_id),
        "records": [record_json(r, rt.run_at(thread_id, r.seq)) for r in records],
    }


@router.get(
    "/threads/{thread_id}/verify",
    summary="Recompute the thread's hash chain: intact, or its first broken link",
)
async def verify_thread(
    thread_id: str,
    who: Principal = Who,
    max_age: float = Query(
        default=0.0,
        ge=0.0,
        le=3600.0,
        description="seconds: answer with a check of the same head made at most this long "
        "ago (`checked_at` says when) instead of recomputing; 0, the default, recomputes",
    ),
    rt: RuntimeFacade = Runtime,
) -> dict[str, Any]:
    graph = await graph_of(rt, thread_id)  # not its state: a damaged log cannot fold
    who.require("read", graph)
    done = await check(rt, thread_id, max_age)
    report = done.report
    return {
        "thread_id": thread_id,
        "ok": report.ok,
        "records_checked": report.records_checked,
        "first_bad_seq": report.first_bad_seq,
        "problem": report.problem,
        "checked_at": done.at,
    }
