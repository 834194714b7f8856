"""The Agent Server's store endpoints over the long-term store (`LogStore`): put, get,
delete, search items, list namespaces. The store is the one the runtime's graphs were
compiled with, else a `LogStore` on the runtime's own log (its `__store__` thread), so a
node's `get_store()` and these endpoints read and write the same items, every write a record.
Reading takes the `read` right, writing `edit`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from agentlog.actors.engine.longterm import LogStore
from agentlog.actors.http.access import Who
from agentlog.actors.http.agentserver.access import Server
from agentlog.actors.http.agentserver.facade import AgentServer
from agentlog.actors.http.agentserver.schemas import Item, Namespaces, SearchItems
from agentlog.actors.http.errors import ERRORS, ApiError
from agentlog.actors.http.tokens import Principal
from agentlog.projections.longterm import LongTermStoreError

router = APIRouter(tags=["store"], responses=ERRORS)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ItemPut(Body):
    namespace: list[str]
    key: str
    value: dict[str, Any]
    index: list[str] | bool | None = None
    ttl: float | None = None


class ItemDelete(Body):
    namespace: list[str]
    key: str


class ItemSearch(Body):
    namespace_prefix: list[str] = Field(default_factory=list)
    filter: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    query: str | None = None
    refresh_ttl: bool | None = None


class NamespaceList(Body):
    prefix: list[str] | None = None
    suffix: list[str] | None = None
    max_depth: int | None = Field(default=None, ge=1)
    limit: int = Field(default=100, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


def refused(exc: LongTermStoreError) -> ApiError:
    return ApiError(422, "invalid_request", str(exc))


@router.put("/store/items", summary="Put an item (recorded)", status_code=204)
async def put_item(body: ItemPut, who: Principal = Who, srv: AgentServer = Server) -> Response:
    who.require("edit")
    try:
        store = srv.long_term()
        namespace = tuple(body.namespace)
        if isinstance(store, LogStore):  # the token's name is the write's actor
            await store.aput(namespace, body.key, body.value, body.index, ttl=body.ttl, by=who.name)
        else:
            await store.aput(namespace, body.key, body.value, body.index, ttl=body.ttl)
    except LongTermStoreError as exc:
        raise refused(exc) from None
    return Response(status_code=204)


@router.get("/store/items", summary="An item", response_model=Item)
async def get_item(
    key: str,
    who: Principal = Who,
    namespace: str = Query(default="", description="the namespace, its parts joined by '.'"),
    srv: AgentServer = Server,
) -> dict[str, Any]:
    who.require("read")
    parts = tuple(namespace.split(".")) if namespace else ()
    try:
        item = await srv.long_term().aget(parts, key)
    except LongTermStoreError as exc:
        raise refused(exc) from None
    if item is None:
        raise ApiError(404, "not_found", f"no item {key!r} in namespace {list(parts)!r}")
    return item.dict()


@router.delete("/store/items", summary="Delete an item (recorded)", status_code=204)
async def delete_item(
    body: ItemDelete, who: Principal = Who, srv: AgentServer = Server
) -> Response:
    who.require("edit")
    try:
        store = srv.long_term()
        if isinstance(store, LogStore):
            await store.adelete(tuple(body.namespace), body.key, by=who.name)
        else:
            await store.adelete(tuple(body.namespace), body.key)
    except LongTermStoreError as exc:
        raise refused(exc) from None
    return Response(status_code=204)


@router.post(
    "/store/items/search", summary="Items under a namespace prefix", response_model=SearchItems
)
async def search_items(
    body: ItemSearch | None = None, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    body = body or ItemSearch()
    who.require("read")
    try:
        found = await srv.long_term().asearch(
            tuple(body.namespace_prefix),
            query=body.query,
            filter=body.filter,
            limit=body.limit,
            offset=body.offset,
        )
    except LongTermStoreError as exc:
        raise refused(exc) from None
    return {"items": [item.dict() for item in found]}


@router.post("/store/namespaces", summary="The namespaces holding items", response_model=Namespaces)
async def list_namespaces(
    body: NamespaceList | None = None, who: Principal = Who, srv: AgentServer = Server
) -> dict[str, Any]:
    body = body or NamespaceList()
    who.require("read")
    try:
        found = await srv.long_term().alist_namespaces(
            prefix=tuple(body.prefix) if body.prefix else None,
            suffix=tuple(body.suffix) if body.suffix else None,
            max_depth=body.max_depth,
            limit=body.limit,
            offset=body.offset,
        )
    except LongTermStoreError as exc:
        raise refused(exc) from None
    return {"namespaces": [list(n) for n in found]}
