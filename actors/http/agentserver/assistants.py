"""The Agent Server's assistants: one per entry point of the runtime (its graph is the
assistant's `graph_id`), in a single version; a graph's id names its first entry point too.
Search, count, get, versions, graph, schemas, subgraphs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import TypeAdapter

from agentlog.actors.engine.subgraph import SubgraphNode
from agentlog.actors.http.access import Who
from agentlog.actors.http.agentserver.access import Server
from agentlog.actors.http.agentserver.bodies import (
    AssistantCount,
    AssistantSearch,
    AssistantVersions,
)
from agentlog.actors.http.agentserver.facade import AgentServer
from agentlog.actors.http.agentserver.schemas import Assistant, AssistantVersion
from agentlog.actors.http.errors import ERRORS, ApiError
from agentlog.actors.http.tokens import Principal
from agentlog.actors.langgraph.compiled import ShapedGraph
from agentlog.actors.runtime.spec import EntryPoint
from agentlog.events.verify_export import same

router = APIRouter(tags=["assistants"], responses=ERRORS)


def found(srv: AgentServer, who: Principal, assistant_id: str) -> EntryPoint:
    entry = srv.entry(assistant_id)
    if entry is None or not who.may("read", entry.graph_id):
        yours = sorted(e.id for e in srv.entry_points() if who.may("read", e.graph_id))
        raise ApiError(
            404,
            "not_found",
            f"no assistant {assistant_id!r}: name an entry point or graph "
            f"({', '.join(yours) or 'none you may read'})",
        )
    return entry


def chosen(
    srv: AgentServer, who: Principal, body: AssistantCount | AssistantSearch
) -> list[dict[str, Any]]:
    shown = [srv.assistant(e) for e in srv.entry_points() if who.may("read", e.graph_id)]
    return [
        a
        for a in shown
        if (body.graph_id is None or a["graph_id"] == body.graph_id)
        and (body.name is None or a["name"] == body.name)
        and all(
            k in a["metadata"] and same(a["metadata"][k], v)
            for k, v in (body.metadata or {}).items()
        )
    ]


@router.post(
    "/assistants/search", summary="Assistants (entry points)", response_model=list[Assistant]
)
async def search(
    body: AssistantSearch | None = None, who: Principal = Who, srv: AgentServer = Server
) -> list[dict[str, Any]]:
    body = body or AssistantSearch()
    shown = chosen(srv, who, body)[body.offset :][: body.limit]
    if body.select:
        shown = [{k: v for k, v in a.items() if k in body.select} for a in shown]
    return shown


@router.post("/assistants/count", summary="How many assistants a search finds")
async def count(
    body: AssistantCount | None = None, who: Principal = Who, srv: AgentServer = Server
) -> int:
    return len(chosen(srv, who, body or AssistantCount()))


@router.get("/assistants/{assistant_id}", summary="An assistant", response_model=Assistant)
async def get(assistant_id: str, who: Principal = Who, srv: AgentServer = Server) -> dict[str, Any]:
    return srv.assistant(found(srv, who, assistant_id))


@router.post(
    "/assistants/{assistant_id}/versions",
    summary="An assistant's versions (one)",
    response_model=list[AssistantVersion],
)
async def versions(
    assistant_id: str,
    body: AssistantVersions | None = None,
    who: Principal = Who,
    srv: AgentServer = Server,
) -> list[dict[str, Any]]:
    shown = srv.assistant(found(srv, who, assistant_id))
    del shown["updated_at"]
    return [shown]


@router.get("/assistants/{assistant_id}/graph", summary="The assistant's graph: nodes, edges")
async def graph(
    assistant_id: str,
    who: Principal = Who,
    xray: bool | int = Query(default=False),
    srv: AgentServer = Server,
) -> dict[str, Any]:
    drawing = srv.app(found(srv, who, assistant_id).graph_id).get_graph()
    return {
        "nodes": [
            {"id": n.id, "type": "schema" if n.id.startswith("__") else "runnable", "data": n.name}
            for n in drawing.nodes.values()
        ],
        "edges": [
            {"source": e.source, "target": e.target, "conditional": e.conditional}
            | ({"data": e.data} if e.data is not None else {})
            for e in drawing.edges
        ],
    }


def json_schema(source: Any) -> dict[str, Any] | None:
    """The JSON Schema of a state, context or input type (None when it has none)."""
    if source is None:
        return None
    try:
        shown: dict[str, Any] = TypeAdapter(source).json_schema()
    except Exception:  # a type pydantic cannot describe: no schema, as the server says
        return None
    return shown


def schemas_of(graph_id: str, app: Any) -> dict[str, Any]:
    if isinstance(app, ShapedGraph):
        state = json_schema(app.front.shapes.schema.source)
    else:
        state = json_schema(app.graph.state_cls)
    context = json_schema(getattr(app.graph, "context_schema", None))
    return {
        "graph_id": graph_id,
        "input_schema": state,
        "output_schema": state,
        "state_schema": state,
        "config_schema": None,
        "context_schema": context,
    }


@router.get("/assistants/{assistant_id}/schemas", summary="The assistant's graph's schemas")
async def schemas(
    assistant_id: str, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    graph_id = found(srv, who, assistant_id).graph_id
    return schemas_of(graph_id, srv.app(graph_id))


@router.get("/assistants/{assistant_id}/subgraphs", summary="The graph's subgraph nodes' schemas")
async def subgraphs(
    assistant_id: str,
    who: Principal = Who,
    recurse: bool = Query(default=False),
    srv: AgentServer = Server,
) -> dict[str, Any]:
    graph_id = found(srv, who, assistant_id).graph_id
    nodes = srv.app(graph_id).graph.nodes
    return {
        name: schemas_of(name, node.graph)
        for name, node in nodes.items()
        if isinstance(node, SubgraphNode)
    }
