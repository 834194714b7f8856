"""Threads: create, read, search, delete (hide) and fork."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Query

from agentlog.actors.http.access import (
    Runtime,
    Who,
    check_new_thread_id,
    current,
    graph_for,
    graph_of,
    thread_of,
    visible,
)
from agentlog.actors.http.bodies import ThreadCreate, ThreadFork, ThreadSearch
from agentlog.actors.http.errors import ApiError
from agentlog.actors.http.shapes import ForkShape, HiddenShape, ThreadShape, unreadable_json
from agentlog.actors.http.summaries import readable, summary
from agentlog.actors.http.tokens import Forbidden, Principal
from agentlog.actors.runtime.facade import RuntimeFacade, created_metadata, hidden
from agentlog.events.verify_export import same
from agentlog.projections import AgentState

router = APIRouter()


async def existing(
    rt: RuntimeFacade, thread_id: str, body: ThreadCreate, who: Principal
) -> dict[str, Any]:
    """A thread a creation names that is in the log already, as `if_exists` says."""
    if body.if_exists == "raise":
        raise ApiError(
            409,
            "conflict",
            f"thread {thread_id!r} exists; send if_exists='do_nothing' to get it, or "
            "pick another id",
        )
    graph, state = await visible(rt, thread_id, who, "read")
    return await thread_of(rt, thread_id, graph, state)


@router.post(
    "/threads",
    summary="Create a thread (recorded: thread_created, with its graph and metadata)",
    response_model=ThreadShape,
)
async def create_thread(
    body: ThreadCreate | None = None, who: Principal = Who, rt: RuntimeFacade = Runtime
) -> dict[str, Any]:
    body = body or ThreadCreate()
    who.require("run")
    thread_id = body.thread_id or str(uuid.uuid4())
    check_new_thread_id(rt, thread_id)
    if body.thread_id is not None and await rt.has_records(thread_id):
        return await existing(rt, thread_id, body, who)
    graph = graph_for(rt, body, who)
    who.require("run", graph)
    created = await rt.create_thread(thread_id, graph, by=who.name, metadata=body.metadata)
    if not created:  # created (or run) since it was looked at
        return await existing(rt, thread_id, body, who)
    return await thread_of(rt, thread_id, graph, await current(rt, thread_id, graph))


@router.get(
    "/threads/{thread_id}",
    summary="A thread: status, step, graph, values",
    response_model=ThreadShape,
)
async def get_thread(
    thread_id: str,
    who: Principal = Who,
    values: bool = Query(default=True, description="false: without its values (null)"),
    rt: RuntimeFacade = Runtime,
) -> dict[str, Any]:
    if not values:  # what the thread's head decides: kept per head, no fold when it holds
        return dict((await readable(rt, thread_id, who, "read")).thread)
    graph, state = await visible(rt, thread_id, who, "read")
    return await thread_of(rt, thread_id, graph, state, values)


@router.post("/threads/search", summary="Threads, newest first, paginated")
async def search_threads(
    body: ThreadSearch | None = None, who: Principal = Who, rt: RuntimeFacade = Runtime
) -> list[dict[str, Any]]:
    body = body or ThreadSearch()
    who.require("read")
    found: list[dict[str, Any]] = []
    skipped = 0
    state: AgentState | None
    for thread_id in await rt.listed_threads():
        graph = await rt.graph_of(thread_id)
        if graph is None or not rt.has_graph(graph) or not who.may("read", graph):
            continue
        if body.graph_id is not None and graph != body.graph_id:
            continue
        try:
            if body.values:
                read = await rt.state(thread_id, graph)
                state, shown = (
                    read,
                    (hidden(read), read.execution_meta.status, created_metadata(read)),
                )
            else:  # without values: the thread's summary, kept per head
                state, brief = None, await summary(rt, thread_id, graph)
                shown = brief.hidden, brief.status, brief.metadata
        except (ApiError, Forbidden):
            raise
        except Exception as exc:  # one unreadable thread never fails the search
            if body.status is None and not body.metadata and skipped >= body.offset:
                found.append(unreadable_json(thread_id, graph, exc))
            elif body.status is None and not body.metadata:
                skipped += 1
            if len(found) >= body.limit:
                break
            continue
        is_hidden, status, metadata = shown
        if is_hidden:
            continue
        if body.status is not None and status != body.status:
            continue
        if body.metadata and not has_metadata(metadata, body.metadata):
            continue
        if skipped < body.offset:
            skipped += 1
            continue
        if state is None:
            found.append(dict(brief.thread))
        else:
            found.append(await thread_of(rt, thread_id, graph, state))
        if len(found) >= body.limit:
            break
    return found


def has_metadata(metadata: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a thread's creation metadata holds every key of `wanted`, equal."""
    return all(key in metadata and same(metadata[key], value) for key, value in wanted.items())


@router.delete(
    "/threads/{thread_id}",
    summary="Hide a thread (its log stays and verifies)",
    description=(
        "Deleting hides the thread: a `thread_hidden` record says who and why, the thread "
        "leaves listings, and its reads and new runs answer 404. Its log stays and still "
        "verifies. Erasure is not offered yet (`erased` is false)."
    ),
    response_model=HiddenShape,
)
async def delete_thread(
    thread_id: str,
    who: Principal = Who,
    reason: str | None = Query(default=None, max_length=2000),
    rt: RuntimeFacade = Runtime,
) -> dict[str, Any]:
    graph = await graph_of(rt, thread_id)
    who.require("admin", graph)
    await rt.hide_thread(thread_id, graph, by=who.name, reason=reason)
    return {"thread_id": thread_id, "hidden": True, "erased": False}


@router.post(
    "/threads/{thread_id}/copy",
    summary="Fork the thread at a step (default: now)",
    response_model=ForkShape,
)
async def fork_thread(
    thread_id: str,
    body: ThreadFork | None = None,
    who: Principal = Who,
    rt: RuntimeFacade = Runtime,
) -> dict[str, Any]:
    body = body or ThreadFork()
    graph, state = await visible(rt, thread_id, who, "edit")
    if body.thread_id is not None:
        check_new_thread_id(rt, body.thread_id)
    new = await rt.fork_thread(
        thread_id, graph, at_step=body.step, new_thread_id=body.thread_id, actor=who.name
    )
    step = state.execution_meta.step if body.step is None else body.step
    return {"thread_id": new, "forked_from": {"thread_id": thread_id, "step": step}}
