"""Live streams (Server-Sent Events): a thread's records, and one run's, as they commit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from agentlog.actors.http.access import Runtime, Who, current
from agentlog.actors.http.errors import ApiError
from agentlog.actors.http.shapes import sse_record
from agentlog.actors.http.streams import BadResumePoint, EventStream, resume_point
from agentlog.actors.http.summaries import readable
from agentlog.actors.http.tokens import Principal
from agentlog.actors.runtime.facade import RuntimeFacade
from agentlog.events import EventRecord

KEEPALIVE_S = 15.0
"""How often an idle event stream sends a comment, so proxies keep it open."""

router = APIRouter()


@router.get(
    "/threads/{thread_id}/stream",
    summary="The thread's records as they commit (SSE)",
    response_class=EventStream,
)
async def stream_thread(
    thread_id: str,
    request: Request,
    who: Principal = Who,
    after: str | None = Query(default=None, description="a position: continue after it"),
    last_event_id: str | None = Header(default=None),
    rt: RuntimeFacade = Runtime,
) -> StreamingResponse:
    await readable(rt, thread_id, who, "read")  # its summary: no fold while its head holds
    start = start_after(after, last_event_id)
    records = rt.follow_thread(thread_id, start)
    return sse(request, records, lambda r: rt.run_at(thread_id, r.seq))


@router.get(
    "/threads/{thread_id}/runs/{run_id}/stream",
    summary="A run's records (SSE)",
    response_class=EventStream,
)
async def stream_run(
    thread_id: str,
    run_id: str,
    request: Request,
    who: Principal = Who,
    last_event_id: str | None = Header(default=None),
    rt: RuntimeFacade = Runtime,
) -> StreamingResponse:
    trigger = await rt.find_run(thread_id, run_id)
    who.require("read", trigger.accepted.graph_id)
    if await rt.has_records(thread_id):
        await current(rt, thread_id, trigger.accepted.graph_id)
    start = start_after(None, last_event_id)
    finished = trigger.finished_position
    if trigger.done and finished is not None and start >= finished:
        return sse(request, nothing(), lambda _: trigger.id)  # reconnected after its end
    return sse(request, rt.run_records(trigger, start), lambda _: trigger.id)


def start_after(after: str | None, last_event_id: str | None) -> int:
    """The position a stream continues after (`streams.resume_point`); 400 when it is none."""
    try:
        return resume_point(after, last_event_id)
    except BadResumePoint as exc:
        raise ApiError(400, "invalid_position", str(exc)) from None


async def nothing() -> AsyncIterator[EventRecord]:
    return
    yield  # an async generator that yields nothing


def sse(
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
                yield sse_record(record, run_of(record))
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
