"""What the Agent Server routes need besides the principal: the `AgentServer` facade, and a
thread located for a caller (its graph, none before its first run on a server of several,
and its state), refused when deleted."""

from __future__ import annotations

from typing import cast

from fastapi import Depends, Request

from agentlog.actors.http.access import check_thread_id, deleted
from agentlog.actors.http.agentserver.facade import AgentServer
from agentlog.actors.http.errors import ApiError
from agentlog.actors.http.tokens import Principal, Right
from agentlog.actors.runtime.facade import hidden, hidden_by
from agentlog.events.errors import ThreadNotFoundError
from agentlog.projections import AgentState


def server_of(request: Request) -> AgentServer:
    """The facade `create_app` keeps in `app.state.agentserver`."""
    return cast(AgentServer, request.app.state.agentserver)


Server = Depends(server_of)
"""The Agent Server facade, as a route's parameter default."""


async def located(
    srv: AgentServer, thread_id: str, who: Principal, right: Right
) -> tuple[str | None, AgentState]:
    """The thread's graph (None: created, no run yet, no graph named) and state now, for a
    principal with `right` on that graph; 404 when it is not in the log or was deleted."""
    rt = srv.rt
    check_thread_id(rt, thread_id)
    graph = rt.accepted_graph(thread_id)
    if graph is None:
        if not await rt.has_records(thread_id):
            raise ThreadNotFoundError(thread_id)
        graph = await rt.graph_of(thread_id)
        if graph is None and await srv.head(thread_id) > 1:
            raise ApiError(404, "not_found", f"thread {thread_id!r} runs no graph this server has")
    if graph is not None and not rt.has_graph(graph):
        raise ApiError(404, "not_found", f"thread {thread_id!r} runs no graph this server has")
    who.require(right, graph)
    state = await rt.state(thread_id, graph)
    if hidden(state):
        raise ApiError(404, "not_found", deleted(thread_id, hidden_by(state)))
    return graph, state
