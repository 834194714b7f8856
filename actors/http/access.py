"""What every route needs: the runtime (a `RuntimeFacade`) and the principal a request acts
as, as FastAPI dependencies, and the checks before a thread is read or written: its id, its
graph, the caller's right on that graph, and whether it was deleted."""

from __future__ import annotations

from typing import Any, cast

from fastapi import Depends, Header, Request

from agentlog.actors.http.bodies import MAX_THREAD_ID, ThreadCreate
from agentlog.actors.http.errors import ApiError
from agentlog.actors.http.shapes import thread_json
from agentlog.actors.http.tokens import LOCAL, READER, Principal, Right, TokenBook
from agentlog.actors.runtime.facade import RuntimeFacade, hidden, hidden_by
from agentlog.events.errors import ThreadNotFoundError
from agentlog.projections import AgentState


def runtime_of(request: Request) -> RuntimeFacade:
    """The runtime the app serves (`create_app` keeps it in `app.state.facade`)."""
    return cast(RuntimeFacade, request.app.state.facade)


async def principal(
    request: Request,
    authorization: str | None = Header(default=None),
    x_api_key: str | None = Header(default=None),
) -> Principal:
    """Who the request acts as: its token's name (`Authorization: Bearer ...`, or the
    `x-api-key` header LangGraph's clients send), or "local" on a server without tokens."""
    tokens = cast("TokenBook | None", request.app.state.tokens)
    if tokens is None:
        return READER if request.app.state.read_only else LOCAL
    if authorization is None and x_api_key:
        authorization = f"Bearer {x_api_key}"
    who = tokens.check(authorization)
    if request.app.state.read_only:  # a token reads what it may, and writes nothing
        rights = frozenset({"read"}) if who.may("read") else frozenset()
        return Principal(who.name, who.graphs, rights)
    return who


Who = Depends(principal)
"""The principal a request acts as, as a route's parameter default."""
Runtime = Depends(runtime_of)
"""The runtime, as a route's parameter default."""


def check_thread_id(rt: RuntimeFacade, thread_id: str) -> None:
    if thread_id == rt.runtime_thread:
        raise ApiError(404, "not_found", "that thread is the runtime's own")


def check_new_thread_id(rt: RuntimeFacade, thread_id: str) -> None:
    """A thread id a request brings into the log: not the runtime's, and not too long."""
    if rt.is_internal(thread_id):
        own = rt.runtime_thread
        raise ApiError(
            422,
            "invalid_request",
            f"{thread_id!r} names one of the runtime's own threads ({own!r} and ids beginning "
            f"{own + '/'!r} or '__shared__/' are reserved): pick another id",
        )
    if not 1 <= len(thread_id) <= MAX_THREAD_ID:
        raise ApiError(
            422, "invalid_request", f"a new thread's id is 1 to {MAX_THREAD_ID} characters long"
        )


def graph_for(rt: RuntimeFacade, body: ThreadCreate, who: Principal) -> str:
    """The graph a new thread runs: the body's graph_id, else its metadata's, else the
    server's only graph."""
    named = body.graph_id
    if named is None and isinstance(body.metadata.get("graph_id"), str):
        named = body.metadata["graph_id"]
    graphs = rt.graph_ids()
    mine = sorted(g for g in graphs if who.may("run", g))
    if named is None:
        if len(graphs) == 1:
            return graphs[0]
        raise ApiError(
            422,
            "invalid_request",
            "send graph_id, the graph the thread runs: this server has "
            f"{len(graphs)} graphs (those you may run: "
            f"{', '.join(map(repr, mine)) or 'none'})",
        )
    if named not in graphs:
        raise ApiError(
            404,
            "not_found",
            f"no graph {named!r} on this server (those you may run: "
            f"{', '.join(map(repr, mine)) or 'none'})",
        )
    return named


async def graph_of(rt: RuntimeFacade, thread_id: str) -> str:
    """The graph of a thread a request names: in the log (or with a run accepted), and
    running a graph this server has."""
    check_thread_id(rt, thread_id)
    graph = rt.accepted_graph(thread_id)
    if graph is None:
        if not await rt.has_records(thread_id):
            raise ThreadNotFoundError(thread_id)
        graph = await rt.graph_of(thread_id)
        if graph is None and await rt.head(thread_id) == 1:
            raise ApiError(
                404,
                "not_found",
                f"thread {thread_id!r} was created with no graph and has not run yet: it has "
                "no state here until its first run names its graph (GET /threads/{thread_id} "
                "shows it meanwhile)",
            )
    if graph is None or not rt.has_graph(graph):
        raise ApiError(404, "not_found", f"thread {thread_id!r} runs no graph this server has")
    return graph


def deleted(thread_id: str, by: Any) -> str:
    return (
        f"thread {thread_id!r} was deleted by {by!r}: it is hidden, its log stays and still "
        "verifies (agentlog verify); erasure is not offered yet"
    )


async def current(rt: RuntimeFacade, thread_id: str, graph: str) -> AgentState:
    """The thread's state now; a deleted (hidden) thread answers 404, saying so."""
    state = await rt.state(thread_id, graph)
    if hidden(state):
        raise ApiError(404, "not_found", deleted(thread_id, hidden_by(state)))
    return state


async def visible(
    rt: RuntimeFacade, thread_id: str, who: Principal, right: Right
) -> tuple[str, AgentState]:
    """The thread's graph and state, for a principal with `right` on that graph."""
    graph = await graph_of(rt, thread_id)
    who.require(right, graph)
    return graph, await current(rt, thread_id, graph)


async def thread_of(
    rt: RuntimeFacade, thread_id: str, graph: str, state: AgentState, with_values: bool = True
) -> dict[str, Any]:
    """The thread as the API shows it, with when it was created and last written."""
    created_at, updated_at = await rt.thread_times(thread_id)
    return thread_json(thread_id, graph, state, created_at, updated_at, with_values)
