"""The Agent Server's threads: create (with `if_exists`), get, search, count, copy, delete,
state now or at a checkpoint, state edits (`as_node`), history."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Query, Response

from agentlog.actors.http.access import Who, check_new_thread_id
from agentlog.actors.http.agentserver import wire
from agentlog.actors.http.agentserver.access import Server, located
from agentlog.actors.http.agentserver.bodies import (
    CheckpointRef,
    HistoryQuery,
    StateAt,
    StateUpdate,
    ThreadCopy,
    ThreadCount,
    ThreadCreate,
    ThreadPatch,
    ThreadSearch,
)
from agentlog.actors.http.agentserver.facade import AgentServer
from agentlog.actors.http.agentserver.schemas import Thread, ThreadState
from agentlog.actors.http.errors import ERRORS, ApiError
from agentlog.actors.http.tokens import Forbidden, Principal
from agentlog.actors.langgraph.compiled import ShapedGraph
from agentlog.actors.runtime.facade import hidden
from agentlog.events.verify_export import same

router = APIRouter(tags=["threads"], responses=ERRORS)


@router.post("/threads", summary="Create a thread", response_model=Thread)
async def create_thread(
    body: ThreadCreate | None = None, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    body = body or ThreadCreate()
    rt = srv.rt
    who.require("run")
    if body.supersteps or body.ttl:
        raise ApiError(
            422, "unsupported", "supersteps and ttl are not carried out yet: leave them out"
        )
    thread_id = body.thread_id or str(uuid.uuid4())
    check_new_thread_id(rt, thread_id)
    metadata = body.metadata or {}
    if await rt.has_records(thread_id) or rt.has_runs(thread_id):
        if body.if_exists != "do_nothing":
            raise ApiError(
                409,
                "conflict",
                f"thread {thread_id!r} exists: send if_exists='do_nothing' to get it",
            )
        graph, state = await located(srv, thread_id, who, "read")
        return await srv.thread(thread_id, graph, state)
    named = body.graph_id or metadata.get("graph_id")
    graphs = rt.graph_ids()
    graph = named if isinstance(named, str) else (graphs[0] if len(graphs) == 1 else None)
    if graph is not None and not rt.has_graph(graph):
        raise ApiError(
            404, "not_found", f"no graph {graph!r} on this server (graphs: {', '.join(graphs)})"
        )
    if graph is not None:
        who.require("run", graph)
    await rt.create_thread(thread_id, graph, by=who.name, metadata=metadata)
    graph, state = await located(srv, thread_id, who, "read")
    return await srv.thread(thread_id, graph, state)


@router.get("/threads/{thread_id}", summary="A thread", response_model=Thread)
async def get_thread(
    thread_id: str, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    graph, state = await located(srv, thread_id, who, "read")
    return await srv.thread(thread_id, graph, state)


@router.patch(
    "/threads/{thread_id}", summary="Set metadata on a thread (recorded)", response_model=Thread
)
async def patch_thread(
    thread_id: str, body: ThreadPatch, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    graph, state = await located(srv, thread_id, who, "edit")
    if body.ttl:
        raise ApiError(422, "unsupported", "ttl is not carried out yet: leave it out")
    if body.metadata:
        await srv.set_metadata(thread_id, body.metadata, by=who.name)
    return await srv.thread(thread_id, graph, state)


async def matching(
    srv: AgentServer, who: Principal, body: ThreadCount | ThreadSearch
) -> list[dict[str, Any]]:
    """The threads a search or count finds, newest first."""
    who.require("read")
    found: list[dict[str, Any]] = []
    ids = set(body.ids) if isinstance(body, ThreadSearch) and body.ids is not None else None
    for thread_id in await srv.rt.listed_threads():
        if ids is not None and thread_id not in ids:
            continue
        try:
            graph, state = await located(srv, thread_id, who, "read")
        except (ApiError, Forbidden):
            continue  # deleted, of a graph this server lacks, or not the caller's
        if hidden(state):
            continue
        thread = await srv.thread(thread_id, graph, state)
        if body.status is not None and thread["status"] != body.status:
            continue
        if not holds(thread["metadata"], body.metadata) or not holds(thread["values"], body.values):
            continue
        found.append(thread)
    return found


def holds(shown: dict[str, Any], wanted: dict[str, Any] | None) -> bool:
    return all(k in shown and same(shown[k], v) for k, v in (wanted or {}).items())


@router.post("/threads/search", summary="Threads, newest first", response_model=list[Thread])
async def search_threads(
    body: ThreadSearch | None = None, who: Principal = Who, srv: AgentServer = Server
) -> list[dict[str, Any]]:
    body = body or ThreadSearch()
    found = await matching(srv, who, body)
    if body.sort_by is not None:
        found.sort(key=lambda t: str(t[body.sort_by or ""] or ""), reverse=body.sort_order != "asc")
    found = found[body.offset :][: body.limit]
    if body.select:
        found = [{k: v for k, v in t.items() if k in body.select} for t in found]
    return found


@router.post("/threads/count", summary="How many threads a search finds")
async def count_threads(
    body: ThreadCount | None = None, who: Principal = Who, srv: AgentServer = Server
) -> int:
    return len(await matching(srv, who, body or ThreadCount()))


@router.delete(
    "/threads/{thread_id}", summary="Delete (hide) a thread; its log stays", status_code=204
)
async def delete_thread(
    thread_id: str, who: Principal = Who, srv: AgentServer = Server
) -> Response:
    graph, _ = await located(srv, thread_id, who, "admin")
    await srv.rt.hide_thread(thread_id, graph, by=who.name, reason=None)
    return Response(status_code=204)


@router.post(
    "/threads/{thread_id}/copy",
    summary="A new thread forked from this one now",
    response_model=Thread,
)
async def copy_thread(
    thread_id: str, body: ThreadCopy | None = None, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    graph, _ = await located(srv, thread_id, who, "edit")
    if graph is None:
        raise ApiError(409, "conflict", f"thread {thread_id!r} has not run yet: nothing to copy")
    new = await srv.rt.fork_thread(
        thread_id, graph, at_step=None, new_thread_id=None, actor=who.name
    )
    graph, state = await located(srv, new, who, "read")
    return await srv.thread(new, graph, state)


@router.get(
    "/threads/{thread_id}/state", summary="The thread's state now", response_model=ThreadState
)
async def get_state(
    thread_id: str,
    who: Principal = Who,
    subgraphs: bool = Query(default=False),
    srv: AgentServer = Server,
) -> dict[str, Any]:
    graph, _ = await located(srv, thread_id, who, "read")
    return await srv.snapshot(thread_id, graph, await srv.head(thread_id))


@router.get(
    "/threads/{thread_id}/state/{checkpoint_id}",
    summary="The state at a checkpoint",
    response_model=ThreadState,
)
async def get_state_at(
    thread_id: str, checkpoint_id: str, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    graph, _ = await located(srv, thread_id, who, "read")
    return await srv.snapshot(thread_id, graph, await srv.seq_of(thread_id, checkpoint_id))


@router.post(
    "/threads/{thread_id}/state/checkpoint",
    summary="The state at a checkpoint",
    response_model=ThreadState,
)
async def post_state_at(
    thread_id: str, body: StateAt, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    graph, _ = await located(srv, thread_id, who, "read")
    ident = body.checkpoint.checkpoint_id
    seq = await srv.head(thread_id) if ident is None else await srv.seq_of(thread_id, ident)
    return await srv.snapshot(thread_id, graph, seq)


@router.post("/threads/{thread_id}/state", summary="Edit the thread's state (recorded)")
async def update_state(
    thread_id: str, body: StateUpdate, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    graph, _ = await located(srv, thread_id, who, "edit")
    if graph is None:
        raise ApiError(409, "conflict", f"thread {thread_id!r} runs no graph yet: run it first")
    app = srv.app(graph)
    values = wire.incoming(body.values) if isinstance(body.values, dict) else {}
    if isinstance(app, ShapedGraph):
        values = app.front.shapes.update(values)
    ident = body.checkpoint_id or (body.checkpoint.checkpoint_id if body.checkpoint else None)
    await srv.go_back(thread_id, graph, ident, by=who.name)
    await app.aupdate_state({"thread_id": thread_id}, values, body.as_node, actor=who.name)
    ident = await srv.checkpoint_id(thread_id, await srv.head(thread_id))
    return {"checkpoint": wire.checkpoint(thread_id, ident)}


async def history(
    srv: AgentServer, thread_id: str, who: Principal, query: HistoryQuery
) -> list[dict[str, Any]]:
    graph, _ = await located(srv, thread_id, who, "read")
    before = query.before
    ident = before.checkpoint_id if isinstance(before, CheckpointRef) else before
    limit = await srv.seq_of(thread_id, ident) if ident is not None else None
    states = await srv.history(thread_id, graph, before=limit)
    states = [s for s in states if holds(s["metadata"], query.metadata)]
    return states[: query.limit]


@router.post(
    "/threads/{thread_id}/history",
    summary="The thread's states, newest first",
    response_model=list[ThreadState],
)
async def post_history(
    thread_id: str,
    body: HistoryQuery | None = None,
    who: Principal = Who,
    srv: AgentServer = Server,
) -> list[dict[str, Any]]:
    return await history(srv, thread_id, who, body or HistoryQuery())


@router.get(
    "/threads/{thread_id}/history",
    summary="The thread's states, newest first",
    response_model=list[ThreadState],
)
async def get_history(
    thread_id: str,
    who: Principal = Who,
    limit: int = Query(default=10, ge=1, le=1000),
    before: str | None = None,
    srv: AgentServer = Server,
) -> list[dict[str, Any]]:
    return await history(srv, thread_id, who, HistoryQuery(limit=limit, before=before))
