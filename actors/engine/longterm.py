"""The long-term store: LangGraph's `BaseStore` (values under keys in namespaces, kept across
threads and runs), every write an event of agentlog's log.

`LogStore(event_store)` keeps its items on one thread of `event_store` (`STORE_THREAD`,
"__store__", unless named): each `put` is a `store_item_put` record and each `delete` a
`store_item_deleted`, appended through the commit path (`agentlog.actors.engine.commit`), so
the store's history is audited (who wrote what, from which node of which run), replayable
(`StoreIndex` folds it, the same answers every time) and verifiable (one hash chain:
`await event_store.verify("__store__")` covers every write). `InMemoryStore()` is a `LogStore`
over a fresh `MemoryEventStore`.

Why one thread for the whole store, not one per namespace: one chain proves every write
and its order; reads keep an index in memory and catch it up by reading only the thread's
new records (a per-namespace layout would have to scan every thread of the log to find new
namespaces); writers in one process never race each other. Writers in several processes
race for the thread's next seq, and the loser catches up and tries again (the commit path's
rule); a store that outgrows that takes a thread of its own per tenant
(`LogStore(event_store, thread="__store__/tenant-a")`).

Inside a node, `get_store()` (or a `store` parameter) gives the store the graph was compiled
with. A write made by a node is committed at once, in a commit of its own (not with the
node's step): it is visible to the next read at once, and it stays written if the step then
fails or the process dies. It carries the node's name, its run and an op id naming the step
and the write's place in it, so the step run again after a crash finds its writes already in
the log and does not make them again (a write that differs from the one recorded is made).
A node run again after a pause (`interrupt()`, a stop, a failure) runs as a new step and
makes its writes again, as in LangGraph.
"""

from __future__ import annotations

import asyncio
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from agentlog.actors.engine.commit import commit
from agentlog.actors.engine.context import NodeContext, _current, current_context
from agentlog.actors.engine.portal import BlockingCalls, Portal
from agentlog.actors.engine.threads import STORE_THREAD
from agentlog.events import EventRecord, EventStore, MemoryEventStore
from agentlog.events.codec import UnstorableValueError
from agentlog.events.kinds import Event, StoreItemDeleted, StoreItemPut
from agentlog.events.store import check_thread_id
from agentlog.projections.edge import to_builtins
from agentlog.projections.longterm import (
    InvalidNamespaceError,
    Item,
    LongTermStoreError,
    Namespace,
    SearchItem,
    StoreIndex,
    check_filter,
    check_index,
    check_key,
    check_namespace,
    check_page,
    check_ttl,
    op_digest,
)

T = TypeVar("T")

USER = "user"
"""The actor of a write made outside any node (the program, a person)."""


class BaseStore(ABC):
    """A long-term store with LangGraph's `BaseStore` methods: `put`, `get`, `search`,
    `delete`, `list_namespaces` and their awaitable twins (`aput`, ...).

    The blocking methods run on a private event loop of the store and may be called from
    any thread without a running event loop (a `def` node's worker thread, a script); in
    async code await the twins (a blocking call there raises `BlockingCallError`).
    """

    @abstractmethod
    async def aget(self, namespace: Namespace, key: str) -> Item | None:
        """The item under `key` in `namespace`, or None."""

    @abstractmethod
    async def asearch(
        self,
        namespace_prefix: Namespace,
        /,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[SearchItem]:
        """Items under namespaces starting with `namespace_prefix` (see `StoreIndex.search`)."""

    @abstractmethod
    async def aput(
        self,
        namespace: Namespace,
        key: str,
        value: dict[str, Any],
        index: list[str] | bool | None = None,
        *,
        ttl: float | None = None,
    ) -> None:
        """Put `value` under `key` in `namespace`, replacing what was there."""

    @abstractmethod
    async def adelete(self, namespace: Namespace, key: str) -> None:
        """Delete the item under `key` in `namespace` (nothing when there is none)."""

    @abstractmethod
    async def alist_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        suffix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        """The namespaces holding items (see `StoreIndex.list_namespaces`)."""

    @abstractmethod
    def _blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` to its end from blocking code."""

    def get(self, namespace: Namespace, key: str) -> Item | None:
        return self._blocking(self.aget(namespace, key))

    def search(
        self,
        namespace_prefix: Namespace,
        /,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[SearchItem]:
        return self._blocking(
            self.asearch(namespace_prefix, query=query, filter=filter, limit=limit, offset=offset)
        )

    def put(
        self,
        namespace: Namespace,
        key: str,
        value: dict[str, Any],
        index: list[str] | bool | None = None,
        *,
        ttl: float | None = None,
    ) -> None:
        self._blocking(self.aput(namespace, key, value, index, ttl=ttl))

    def delete(self, namespace: Namespace, key: str) -> None:
        self._blocking(self.adelete(namespace, key))

    def list_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        suffix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        return self._blocking(
            self.alist_namespaces(
                prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
            )
        )


class LogStore(BlockingCalls, BaseStore):
    """A long-term store kept on thread `thread` of `event_store` (see the module notes).

    Reads answer from an index folded from the thread (`index`), first caught up with the
    records other writers committed since (one read of the thread's new records, none when
    its head has not moved). `clock` tells expired items (`put(..., ttl=minutes)`) from live
    ones: an item expires `ttl` minutes after the commit of its put; its records stay.
    """

    BLOCKING_WHAT = "store"
    ASYNC_FORMS = "aput, aget, asearch, adelete, alist_namespaces"

    def __init__(
        self,
        event_store: EventStore,
        *,
        thread: str = STORE_THREAD,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(event_store, EventStore):
            raise LongTermStoreError(
                f"LogStore keeps its items on an event store (SQLiteEventStore, "
                f"PostgresEventStore, MemoryEventStore), got {type(event_store).__name__}"
            )
        self.event_store = event_store
        self.thread_id = check_thread_id(thread)
        self.clock = clock
        self.index = StoreIndex()
        self._folding = threading.Lock()  # callers on several loops and threads fold here
        self._portal: Portal | None = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({type(self.event_store).__name__}, thread={self.thread_id!r})"
        )

    # ---- reads ------------------------------------------------------------------------------

    async def catch_up(self) -> StoreIndex:
        """Fold the records committed to the store's thread since the index last read it,
        each checked against its hash link (from the last record the index folded)."""
        head = await self.event_store.last_seq(self.thread_id)
        with self._folding:
            seq, last_hash = self.index.seq, self.index.hash
        if head > seq:
            after = bytes.fromhex(last_hash) if last_hash is not None else None
            read = self.event_store.read(self.thread_id, seq + 1, head, after_hash=after)
            self._fold([record async for record in read])
        return self.index

    def _fold(self, records: Sequence[EventRecord]) -> None:
        with self._folding:
            for record in records:
                if record.seq == self.index.seq + 1:  # one another caller folded is skipped
                    self.index.apply(record)

    async def _read(self, answer: Callable[[StoreIndex], T]) -> T:
        """`answer` from the index caught up to the thread's head, while no caller folds
        (a write landing from another thread never changes the index under a read)."""
        index = await self.catch_up()
        with self._folding:
            return answer(index)

    async def aget(self, namespace: Namespace, key: str) -> Item | None:
        namespace, key = check_namespace(namespace), check_key(key)
        return await self._read(lambda index: index.get(namespace, key, self.clock()))

    async def asearch(
        self,
        namespace_prefix: Namespace,
        /,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[SearchItem]:
        prefix = check_namespace(namespace_prefix, "namespace prefix")
        conditions = check_filter(filter)
        if query is not None and not isinstance(query, str):
            raise InvalidNamespaceError(f"query is text or None, got {query!r:.60}")
        limit, offset = check_page(limit, offset)
        return await self._read(
            lambda index: index.search(
                prefix,
                query=query,
                filter=conditions,
                limit=limit,
                offset=offset,
                now=self.clock(),
            )
        )

    async def alist_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        suffix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        paths = [
            None if p is None else check_namespace(p, "namespace path") for p in (prefix, suffix)
        ]
        if max_depth is not None and (
            isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1
        ):
            raise InvalidNamespaceError(f"max_depth is an int >= 1 or None, got {max_depth!r:.60}")
        limit, offset = check_page(limit, offset)
        return await self._read(
            lambda index: index.list_namespaces(
                prefix=paths[0],
                suffix=paths[1],
                max_depth=max_depth,
                limit=limit,
                offset=offset,
                now=self.clock(),
            )
        )

    # ---- writes -----------------------------------------------------------------------------

    async def aput(
        self,
        namespace: Namespace,
        key: str,
        value: dict[str, Any],
        index: list[str] | bool | None = None,
        *,
        ttl: float | None = None,
        by: str | None = None,
    ) -> None:
        """`BaseStore.aput`; outside a node, `by` names who writes (default "user")."""
        event = StoreItemPut(
            namespace=list(check_namespace(namespace)), key=check_key(key),
            value=_stored_value(value), index=check_index(index), ttl=check_ttl(ttl),
        )  # fmt: skip
        await self._write(event, _Writer.of(_current.get(), by))

    async def adelete(self, namespace: Namespace, key: str, *, by: str | None = None) -> None:
        """`BaseStore.adelete`; outside a node, `by` names who deletes (default "user")."""
        event = StoreItemDeleted(namespace=list(check_namespace(namespace)), key=check_key(key))
        await self._write(event, _Writer.of(_current.get(), by))

    def put(
        self,
        namespace: Namespace,
        key: str,
        value: dict[str, Any],
        index: list[str] | bool | None = None,
        *,
        ttl: float | None = None,
    ) -> None:
        # checked and stamped here, in the caller's thread (a node's worker thread knows its
        # node; the store's own loop does not)
        event = StoreItemPut(
            namespace=list(check_namespace(namespace)), key=check_key(key),
            value=_stored_value(value), index=check_index(index), ttl=check_ttl(ttl),
        )  # fmt: skip
        self._blocking(self._write(event, _Writer.of(_current.get())))

    def delete(self, namespace: Namespace, key: str) -> None:
        event = StoreItemDeleted(namespace=list(check_namespace(namespace)), key=check_key(key))
        self._blocking(self._write(event, _Writer.of(_current.get())))

    async def _write(self, event: StoreItemPut | StoreItemDeleted, writer: _Writer) -> None:
        stamped = writer.stamp(event)
        await commit(
            _StoreWrite(self, stamped, writer),
            thread_id=self.thread_id,
            what=f"a long-term store {'put' if isinstance(event, StoreItemPut) else 'delete'}",
        )

    # ---- blocking calls ---------------------------------------------------------------------

    def close(self) -> None:
        """Stop the private event loop of the blocking methods, if they started one (the
        event store stays open: it is its owner's to close)."""
        self._close_portal()

    async def aclose(self) -> None:
        """`close`, awaited off the event loop."""
        await asyncio.to_thread(self.close)


class InMemoryStore(LogStore):
    """A long-term store in this process's memory (nothing survives it), still kept as a
    log: `event_store` is its `MemoryEventStore`, whose store thread verifies as any other.

    `index=` (LangGraph's embedding configuration) is refused: there are no embeddings here;
    `search(query=...)` is a text match."""

    def __init__(
        self, *, index: Mapping[str, Any] | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        if index is not None:
            raise LongTermStoreError(
                "agentlog's long-term store has no embeddings, so it takes no index "
                "configuration: drop index=...; search(query=...) matches the query's words "
                "in the items' text"
            )
        super().__init__(MemoryEventStore(clock=clock), clock=clock)


# ---- who writes -------------------------------------------------------------------------------


class _Writer:
    """Who makes a write: a node's step (its context), or the program outside any node."""

    def __init__(self, context: NodeContext | None, place: int, by: str | None = None) -> None:
        self.context, self.place, self.by = context, place, by

    @classmethod
    def of(cls, context: NodeContext | None, by: str | None = None) -> _Writer:
        """The writer of the next write, numbered in its step now, in call order (`by`:
        who writes outside any node)."""
        if context is None:
            return cls(None, 0, by)
        context.store_writes += 1
        return cls(context, context.store_writes)

    @property
    def actor(self) -> str:
        return (self.by or USER) if self.context is None else self.context.node

    @property
    def run_id(self) -> str | None:
        return None if self.context is None else self.context.run_id

    def stamp(self, event: StoreItemPut | StoreItemDeleted) -> StoreItemPut | StoreItemDeleted:
        """`event` with the node and the op id of its place in the node's step."""
        context = self.context
        if context is None:
            return event
        op_id = f"{context.thread_id}:{context.step_seq}:{self.place}"
        return msgspec.structs.replace(event, node=context.node, op_id=op_id)


class _StoreWrite:
    """One write's side of a commit (`agentlog.actors.engine.commit.Writer`): the store's
    index is its fold, caught up from the thread before each attempt."""

    def __init__(
        self, store: LogStore, event: StoreItemPut | StoreItemDeleted, writer: _Writer
    ) -> None:
        self.store, self.event, self.writer = store, event, writer

    async def base(self) -> int:
        return (await self.store.catch_up()).seq

    async def build(self, base: int) -> list[Event]:
        op_id = self.event.op_id
        if op_id is not None and self.store.index.applied.get(op_id) == op_digest(self.event):
            return []  # made before, by this step's earlier life
        return [self.event]

    async def append(self, events: Sequence[Event], base: int) -> list[EventRecord]:
        return await self.store.event_store.append(
            self.store.thread_id, events, expected_seq=base, run_id=self.writer.run_id,
            actor=self.writer.actor,
        )  # fmt: skip

    async def landed(self, records: list[EventRecord]) -> None:
        self.store._fold(records)

    async def lost(self, base: int) -> None:
        return None  # the next attempt catches up first

    async def failed(self) -> None:
        return None


def _stored_value(value: object) -> dict[str, Any]:
    """The value as the log stores it: a dict of builtins, or refused before any write."""
    if not isinstance(value, Mapping):
        raise InvalidNamespaceError(
            f"a stored value is a dict, such as {{'food': 'pizza'}}, got {type(value).__name__}"
        )
    try:
        stored = to_builtins(dict(value))
    except (TypeError, ValueError, UnstorableValueError) as exc:
        raise InvalidNamespaceError(
            f"a stored value is recorded in the log as builtins; this one cannot be ({exc})"
        ) from exc
    if not all(isinstance(name, str) for name in stored):
        raise InvalidNamespaceError("a stored value's field names are strings")
    return stored  # type: ignore[no-any-return]


# ---- the store of the running graph -------------------------------------------------------


def get_store() -> BaseStore:
    """The long-term store of the graph whose node is running here (`compile(store=...)`),
    as LangGraph's `get_store()`; call it inside a node (or code a node calls)."""
    context = current_context()
    if context.store is None:
        raise LongTermStoreError(
            f"node {context.node!r} asked for the long-term store, but its graph was compiled "
            "without one: compile(checkpointer=..., store=InMemoryStore()) or "
            "store=LogStore(event_store)"
        )
    return context.store


__all__ = [
    "STORE_THREAD",
    "BaseStore",
    "InMemoryStore",
    "InvalidNamespaceError",
    "Item",
    "LogStore",
    "LongTermStoreError",
    "SearchItem",
    "get_store",
]
