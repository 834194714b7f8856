"""The ids a graph's nodes make, as the seed's dependency container sets them: a graph that
registers `generated_id_type` ("string", "int" or "bigint") and or `generated_id` (a function
giving the next id, an id, or an awaitable of either) has `generate_id` inside its nodes draw
from them (new messages, tool call ids a converter makes)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from agentlog.actors.engine.errors import GraphError
from agentlog.projections.ids import ID_TYPES, IdType, message_defaults

ID_TYPE_KEY = "generated_id_type"
ID_KEY = "generated_id"


class IdSource:
    """A compiled graph's registered id settings, checked at compile; an awaitable is
    awaited once, when a node first needs it, by every node that does."""

    def __init__(self, dependencies: Mapping[str, Any]) -> None:
        kind = dependencies.get(ID_TYPE_KEY)
        if kind is not None and kind not in ID_TYPES:
            raise GraphError(
                f"the registered {ID_TYPE_KEY!r} must be one of {', '.join(ID_TYPES)}, "
                f"got {kind!r:.40}"
            )
        value = dependencies.get(ID_KEY)
        if inspect.iscoroutinefunction(value):
            raise GraphError(
                f"the registered {ID_KEY!r} is an async function, which the sync generate_id "
                "cannot call: register a sync function, or an awaitable (awaited once, its "
                "result used)"
            )
        self.kind = cast("IdType | None", kind)
        self.value: Any = value
        self.pending: asyncio.Future[Any] | None = None

    @property
    def active(self) -> bool:
        return self.kind is not None or self.value is not None

    async def resolve(self) -> None:
        """Await a registered awaitable once (concurrent nodes share the one wait)."""
        if not inspect.isawaitable(self.value):
            return
        if self.pending is None:
            self.pending = asyncio.ensure_future(self.value)
        result = await self.pending
        self.value, self.pending = result, None

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Within the block, `generate_id` draws from the registered settings."""
        value = self.value
        source: Callable[[], str | int] | None = None
        if callable(value):
            source = value
        elif value is not None:
            source = lambda: value  # noqa: E731  the seed's: one given id
        with message_defaults(ids=source, id_type=self.kind):
            yield
