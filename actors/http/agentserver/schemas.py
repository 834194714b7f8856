"""The JSON schemas of the Agent Server's answers, as the OpenAPI document declares them: a
`Thread`, its `ThreadState`, a `Run`, an `Assistant` and its versions, a `Cron`, a store
`Item` (LangGraph's field names). The facade builds the dicts; a route names its schema
with `response_model`, so what is sent is checked against it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Thread(BaseModel):
    model_config = ConfigDict(extra="allow")

    thread_id: str
    created_at: str | None
    updated_at: str | None
    metadata: dict[str, Any]
    status: Literal["idle", "busy", "interrupted", "error"]
    values: dict[str, Any] | list[Any] | None
    interrupts: dict[str, list[dict[str, Any]]]
    config: dict[str, Any]
    error: Any


class Checkpoint(BaseModel):
    model_config = ConfigDict(extra="allow")

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None
    checkpoint_map: dict[str, Any] | None


class ThreadState(BaseModel):
    model_config = ConfigDict(extra="allow")

    values: dict[str, Any] | list[Any] | None
    next: list[str]
    checkpoint: Checkpoint
    metadata: dict[str, Any]
    created_at: str | None
    parent_checkpoint: Checkpoint | None
    tasks: list[dict[str, Any]]
    interrupts: list[dict[str, Any]]


class Run(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    run_id: str
    thread_id: str
    assistant_id: str
    created_at: str | None
    updated_at: str | None
    status: Literal["pending", "running", "error", "success", "timeout", "interrupted"]
    metadata: dict[str, Any]
    multitask_strategy: str
    kwargs_: dict[str, Any] = Field(alias="kwargs")  # `kwargs` is taken by the model


class AssistantVersion(BaseModel):
    model_config = ConfigDict(extra="allow")

    assistant_id: str
    graph_id: str
    config: dict[str, Any]
    context: dict[str, Any]
    created_at: str | None
    metadata: dict[str, Any]
    version: int
    name: str
    description: str | None


class Assistant(AssistantVersion):
    updated_at: str | None


class Item(BaseModel):
    model_config = ConfigDict(extra="allow")

    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: str
    updated_at: str


class SearchItem(Item):
    score: float | None = None


class SearchItems(BaseModel):
    items: list[SearchItem]


class Namespaces(BaseModel):
    namespaces: list[list[str]]


class Cron(BaseModel):
    model_config = ConfigDict(extra="allow")

    cron_id: str
    assistant_id: str
    thread_id: str | None
    end_time: str | None
    schedule: str
    created_at: str | None
    updated_at: str | None
    payload: dict[str, Any]
    user_id: str | None
    next_run_date: str | None
    metadata: dict[str, Any]
    enabled: bool
