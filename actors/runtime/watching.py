"""What the runtime lets people watch: live feeds of the log (`subscribe`) and handler
subscriptions (`subscribe_to_events`), each a follower of the log that lags behind it rather
than hold anything up."""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentlog.actors.runtime.spec import EntryPoint, RegistrationError
from agentlog.events import EventRecord, EventStore
from agentlog.events.follow import commit_signal, follow, last_position

if TYPE_CHECKING:
    from agentlog.actors.runtime.ledger import Ledger
    from agentlog.actors.runtime.listeners import Listeners
    from agentlog.actors.runtime.spec import RuntimeConfig

_log = logging.getLogger(__name__)

Handler = Callable[[EventRecord], Awaitable[None] | None]
"""What `subscribe_to_events` calls with each record (a def or an async def)."""


@dataclass(eq=False)
class Subscriber:
    """One live feed, for the statistics: how far behind the log it is (compared by
    identity: two feeds at one position are still two)."""

    position: int = 0


class Watching:
    """The runtime's feeds and handler subscriptions (a part of `AgentRuntime`)."""

    store: EventStore
    config: RuntimeConfig
    ledger: Ledger
    listeners: Listeners
    graphs: dict[str, Any]
    started: bool
    stopping: bool
    subscribers: list[Subscriber]
    _handlers: dict[str, asyncio.Task[None]]
    _pending_handlers: dict[str, tuple[Callable[[int], AsyncIterator[EventRecord]], Handler]]

    _check_started: Callable[[], None]
    _entry: Callable[[str], EntryPoint]

    def subscribe(
        self,
        kinds: Collection[str] | None = None,
        graph_id: str | None = None,
        thread_id: str | None = None,
        node: str | None = None,
        after: int | None = None,
    ) -> AsyncIterator[EventRecord]:
        """Committed records in log order, live, from after position `after` (default: what
        is committed from this call on, even when the feed is first read later; before
        `start`, from its first read).

        A slow subscriber reads behind from the log: it never makes memory grow or slows
        the writers. `graph_id` keeps the threads of that graph (and the runtime's own
        records about it). The filters are checked here, at once: an unknown kind or graph
        raises now, not at the first record.
        """
        if graph_id is not None and graph_id not in self.graphs:
            raise RegistrationError(
                f"no graph {graph_id!r} is registered (graphs: {', '.join(self.graphs) or 'none'})"
            )
        # follow checks kinds, thread, node and after when called; its generator is dropped
        # unstarted (the feed follows from the head it reads when first iterated)
        follow(self.store, after=0 if after is None else after, kinds=kinds, thread_id=thread_id,
               node=node)  # fmt: skip
        if after is None and self.started and commit_signal(self.store) is not None:
            after = self.listeners.head  # the head as this process knows it, now
        return self._feed(kinds, graph_id, thread_id, node, after)

    async def _feed(
        self,
        kinds: Collection[str] | None,
        graph_id: str | None,
        thread_id: str | None,
        node: str | None,
        after: int | None,
    ) -> AsyncIterator[EventRecord]:
        start = await last_position(self.store) if after is None else after
        me = Subscriber(start)
        self.subscribers.append(me)
        try:
            async for record in follow(
                self.store, after=start, kinds=kinds, thread_id=thread_id, node=node
            ):
                me.position = record.position
                if graph_id is None or await self.graph_of(record) == graph_id:
                    yield record
        finally:
            self.subscribers.remove(me)

    async def graph_of(self, record: EventRecord) -> str | None:
        """The graph id of the thread a record belongs to (None: not known)."""
        if record.thread_id == self.config.runtime_thread:
            return getattr(record.event, "graph_id", None)
        return await self.listeners.graph_of_thread(record.thread_id)

    def subscribe_to_events(
        self,
        kinds: Collection[str] | None,
        handler: Handler,
        *,
        graph_id: str | None = None,
        thread_id: str | None = None,
        node: str | None = None,
        entry_point: str | None = None,
        filter_graph: str | None = None,
        filter_stream: str | None = None,
    ) -> str:
        """Call `handler` with each committed record that matches, from now on (made before
        `start`: from the runtime's start), until `unsubscribe_from_events(id)` or `stop()`;
        returns the id (hive's handler form). `entry_point` keeps the records of threads
        that entry point started runs on (and the runtime's own records about them);
        hive's `filter_graph` and `filter_stream` are `graph_id` and `entry_point`.

        A handler that raises is logged and keeps its subscription; a slow one lags behind
        the log without holding anything up.
        """
        if self.stopping:
            self._check_started()
        if not callable(handler):
            raise RegistrationError(
                f"subscribe_to_events takes a handler function, got {handler!r}"
            )
        graph_id = _alias("graph_id", graph_id, "filter_graph", filter_graph)
        entry_point = _alias("entry_point", entry_point, "filter_stream", filter_stream)
        if entry_point is not None:
            self._entry(entry_point)
            handler = self._only_entry_point(entry_point, handler)

        def feed(after: int | None = None) -> AsyncIterator[EventRecord]:
            return self.subscribe(kinds, graph_id=graph_id, thread_id=thread_id, node=node,
                                  after=after)  # fmt: skip

        feed()  # the filters are checked now, whether the runtime runs yet or not
        subscription = uuid.uuid4().hex
        if not self.started:
            self._pending_handlers[subscription] = (feed, handler)
        else:
            self._handlers[subscription] = asyncio.ensure_future(_deliver(feed(), handler))
        return subscription

    def _only_entry_point(self, entry_id: str, handler: Handler) -> Handler:
        """`handler`, called only for records of threads `entry_id` started runs on."""
        ledger = self.ledger

        def started_by(record: EventRecord) -> bool:
            event = record.event
            if record.thread_id == self.config.runtime_thread:
                trigger = ledger.triggers.get(getattr(event, "trigger_id", ""))
                named = trigger.accepted.entry_point if trigger else None
                return (getattr(event, "entry_point", None) or named) == entry_id
            ids = ledger.by_thread.get(record.thread_id, ())
            return any(ledger.triggers[i].accepted.entry_point == entry_id for i in ids)

        if _is_async(handler):

            async def filtered_async(record: EventRecord) -> None:
                if started_by(record):
                    await handler(record)  # type: ignore[misc]

            return filtered_async

        def filtered(record: EventRecord) -> Awaitable[None] | None:
            return handler(record) if started_by(record) else None

        return filtered

    def unsubscribe_from_events(self, subscription_id: str) -> bool:
        """End a handler subscription; False when there is none by that id."""
        if self._pending_handlers.pop(subscription_id, None) is not None:
            return True
        task = self._handlers.pop(subscription_id, None)
        if task is None:
            return False
        task.cancel()
        return True


async def _deliver(feed: AsyncIterator[EventRecord], handler: Handler) -> None:
    """Hand each record of `feed` to `handler`, in order, logging what it raises. A plain
    `def` handler runs on a worker thread, so a slow or blocking one (a `time.sleep`, a
    synchronous HTTP call) lags behind the log instead of freezing every run's event loop."""
    blocking = not _is_async(handler)
    async for record in feed:
        try:
            if blocking:
                outcome = await asyncio.to_thread(handler, record)
            else:
                outcome = handler(record)
            if asyncio.iscoroutine(outcome) or isinstance(outcome, asyncio.Future):
                await outcome
        except asyncio.CancelledError:
            raise
        except Exception:
            _log.exception("event handler %r failed on record %d", handler, record.position)


def _is_async(handler: Handler) -> bool:
    """Whether calling `handler` returns an awaitable at once (an async def, or a callable
    object whose __call__ is one): those run on the event loop, the rest on a thread."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004
    )


def _alias(name: str, value: str | None, hive: str, hive_value: str | None) -> str | None:
    """One value from an argument and its hive alias; refused when both are given."""
    if value is not None and hive_value is not None and value != hive_value:
        raise RegistrationError(f"give {name} or hive's {hive}, not both")
    return value if value is not None else hive_value
