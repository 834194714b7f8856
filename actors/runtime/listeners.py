"""Event and timer entry points: what the runtime hears in the log and on the clock.

Both read the runtime's ledger to know where they stopped: an event entry point answers each
record after the last position it answered (or began listening at) once; a timer fires each
slot after the last one it fired once. Both positions are in the log, so a restart neither
misses nor repeats a firing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agentlog.actors.runtime.inputs import (
    event_payload,
    made_input,
    session_thread,
    timer_payload,
)
from agentlog.actors.runtime.spec import EntryPoint
from agentlog.events import EventRecord, EventStore
from agentlog.events.follow import commit_signal, follow
from agentlog.events.keystore import subject_of_thread
from agentlog.events.kinds import (
    Forked,
    RunStarted,
    ThreadCreated,
    TriggerAccepted,
    TriggerListening,
)
from agentlog.events.sealing import SubjectErasedError
from agentlog.projections.edge import to_builtins

if TYPE_CHECKING:
    from agentlog.actors.engine.retention import PruneReport
    from agentlog.actors.runtime.runtime import AgentRuntime
    from agentlog.projections.state import AgentState

_log = logging.getLogger("agentlog.runtime")

TIMER_TICK_S = 1.0
"""The longest a timer waits before looking at the clock again (a fake clock moves too)."""


def event_input(record: EventRecord, graph_id: str | None = None) -> dict[str, Any]:
    """What an event-triggered run receives before it is mapped into the state (hive's
    `{"event": event.to_dict()}`); `graph_id`: the graph the record's thread runs."""
    return {"event": event_payload(record, graph_id)}


def timer_input(entry: EntryPoint, slot: float, missed: int) -> dict[str, Any]:
    """What a timer-triggered run receives before it is mapped into the state (hive's
    `{"event": {"source": "timer", "reason": "scheduled"}}`, with its slot)."""
    return {"event": timer_payload(entry, slot, missed)}


def delivery_input(record: EventRecord) -> dict[str, Any]:
    """What a run answering a webhook delivery receives before it is mapped into the state
    (hive's `{"event": {"type": "webhook_received", ...}}`): the route, the delivery id and
    the parsed body, as the delivery's acceptance records them."""
    accepted = record.event
    if not isinstance(accepted, TriggerAccepted):
        raise TypeError(f"record {record.position} is no delivery: {record.kind}")
    webhook: dict[str, Any] = {}
    messages = accepted.input.get("messages") if isinstance(accepted.input, dict) else None
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        found = (messages[0].get("metadata") or {}).get("webhook")
        webhook = found if isinstance(found, dict) else {}
    return {
        "event": {
            "type": "webhook_received",
            "source_id": accepted.entry_point,
            "delivery_id": accepted.idempotency_key,
            "route": webhook.get("route"),
            "body": webhook.get("body"),
            "thread_id": accepted.thread_id,
            "position": record.position,
        }
    }


def _is_delivery(record: EventRecord) -> bool:
    event = record.event
    return isinstance(event, TriggerAccepted) and event.cause == "webhook"


GRAPHS_KEPT = 100_000
"""Threads whose graph `graph_of_thread` remembers before it forgets them all."""


def _own_name(name: str) -> str | None:
    return name


async def graph_of_thread(
    store: EventStore,
    thread_id: str,
    known: Mapping[str, str],
    cache: dict[str, str | None],
    by_name: Callable[[str], str | None] = _own_name,
) -> str | None:
    """The graph a thread runs: the runtime's record of it (`known`, thread -> graph id),
    else the graph its first record names (thread_created's graph id; run_started's graph
    name, through `by_name`; a fork runs its source's graph); None when neither says.
    Answers read are kept in `cache` (not that of a thread with no record yet).
    """
    found = known.get(thread_id)
    if found is not None:
        return found
    if thread_id in cache:
        return cache[thread_id]
    read = False
    async for record in store.read(thread_id, 1, 1):
        read = True
        event = record.event
        if isinstance(event, ThreadCreated):
            found = event.graph_id
            if found is None:  # created with no graph: its first run names it
                async for second in store.read(thread_id, 2, 2):
                    if isinstance(second.event, RunStarted) and second.event.graph:
                        found = by_name(second.event.graph)
        elif isinstance(event, RunStarted) and event.graph:
            found = by_name(event.graph)
        elif isinstance(event, Forked):
            found = await graph_of_thread(store, event.source_thread, known, cache, by_name)
    if not read:
        return None
    if len(cache) > GRAPHS_KEPT:
        cache.clear()
    cache[thread_id] = found
    return found


class Listeners:
    """The runtime's follower of the log and its timer loop."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime
        self.timers_paused = False
        self._head = 0
        self.settled = 0
        """The position through which the event follower has answered every record: with the
        log's last position, tells a caller (a test waiting until idle) nothing is pending."""
        self._tasks: list[asyncio.Task[None]] = []
        self._poke = asyncio.Event()
        self._firing = asyncio.Lock()
        self._graphs: dict[str, str | None] = {}
        self._following = self._timing = False
        self._kept: dict[str, float] = {}
        """When each graph's retention policy last ran (its first run is `every_s` after
        the runtime started, or after the policy was set)."""

    def _entries(self, trigger: str) -> list[EntryPoint]:
        return [e for e in self.runtime.entries.values() if e.trigger == trigger]

    async def start(self) -> None:
        runtime, ledger = self.runtime, self.runtime.ledger
        self._head = runtime._head_at_start
        for entry in self._entries("event"):
            if entry.id not in ledger.answered:
                await self.listen_from(entry.id, self._head, None)
        now = runtime.clock()
        for entry in self._entries("timer"):
            if entry.id in ledger.fired:
                continue
            schedule = runtime.schedules[entry.id]
            slot = schedule.slot_at_or_before(now)
            if entry.run_immediately:
                await self._fire(entry, slot, 0)
            else:
                await self.listen_from(entry.id, None, slot)
        events = self._entries("event")
        if events:  # a follower decodes every record: only when something listens
            self._start_following(min(ledger.answered[e.id] for e in events))
        if self._entries("timer") or runtime.retentions():
            self._start_timing()

    def keep_from_now(self) -> None:
        """A retention policy was set while the runtime runs: its timer starts now."""
        self._start_timing()
        self.poke()

    def _start_following(self, after: int) -> None:
        if not self._following:
            self._following = True
            self._tasks.append(asyncio.ensure_future(self._follow(after)))

    def _start_timing(self) -> None:
        if not self._timing:
            self._timing = True
            self._tasks.append(asyncio.ensure_future(self._timers()))

    def adopt(self, entry: EntryPoint) -> None:
        """An event or timer entry point registered while the runtime runs (a graph added
        meanwhile): it answers what is committed from now on, fires the slots after now,
        and records where it began, as one registered before the start does."""
        runtime, ledger = self.runtime, self.runtime.ledger
        begin: Any
        if entry.trigger == "event":
            head = ledger.answered.setdefault(entry.id, self.head)
            begin = self.listen_from(entry.id, head, None)
            self._start_following(head)
        elif entry.trigger == "timer":
            slot = runtime.schedules[entry.id].slot_at_or_before(runtime.clock())
            if entry.run_immediately:
                begin = self._fire(entry, slot, 0)
            else:
                ledger.fired.setdefault(entry.id, slot)
                begin = self.listen_from(entry.id, None, slot)
            self._start_timing()
            self.poke()
        else:
            return
        self._tasks.append(asyncio.ensure_future(begin))

    async def listen_from(self, entry_id: str, position: int | None, slot: float | None) -> None:
        """Record where an event or timer entry point begins to listen."""
        await self.runtime.journal.record(
            [TriggerListening(entry_point=entry_id, position=position, slot=slot)]
        )

    async def stop(self) -> None:
        self._following = self._timing = False
        self._kept.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):  # logged where it failed
                await task
        self._tasks.clear()

    def poke(self) -> None:
        self._poke.set()

    @property
    def head(self) -> int:
        """The newest position this process knows committed (the store's commit signal)."""
        signal = commit_signal(self.runtime.store)
        return max(self._head, signal.position if signal is not None else 0)

    # ---- events ---------------------------------------------------------------------------

    async def _follow(self, after: int) -> None:
        runtime = self.runtime
        self.settled = after
        async for record in follow(runtime.store, after=after):
            self._head = max(self._head, record.position)
            delivery = record.thread_id == runtime.config.runtime_thread
            if delivery and not _is_delivery(record):
                self.settled = record.position
                continue
            for entry in self._entries("event"):
                if record.position <= runtime.ledger.answered.get(entry.id, 0):
                    continue
                if delivery != (entry.webhook is not None):
                    continue  # deliveries go to webhook listeners, runs' records to the rest
                try:
                    await self._answer(entry, record)
                except Exception as exc:  # one entry point's failure stops no other
                    _log.error(
                        "event entry point %r could not answer record %d (%s): %s: %s",
                        entry.id, record.position, record.kind, type(exc).__name__, exc,
                    )  # fmt: skip
            self.settled = record.position

    async def _answer(self, entry: EntryPoint, record: EventRecord) -> None:
        if entry.webhook is not None:
            if isinstance(record.event, TriggerAccepted) and (
                record.event.entry_point == entry.webhook
            ):
                made = entry.input_from(record) if entry.input_from else delivery_input(record)
                await self._start(entry, record, made, by=f"webhook:{entry.webhook}")
            return
        if await self._matches(entry, record):
            graph = await self.graph_of_thread(record.thread_id)  # cached by the match
            made = entry.input_from(record) if entry.input_from else event_input(record, graph)
            # a record of a data subject's thread carries the subject's data: the run it
            # starts is the subject's too (sealed under its key, erased with it)
            subject = await subject_of_thread(self.runtime.store, record.thread_id)
            try:
                await self._start(entry, record, made, by=f"event:{record.kind}", subject=subject)
            except SubjectErasedError:  # erased since it was read: its data goes nowhere
                _log.warning(
                    "entry point %r does not answer record %d: its subject was erased",
                    entry.id, record.position,
                )  # fmt: skip

    async def _start(
        self, entry: EntryPoint, record: EventRecord, made: Any, *, by: str,
        subject: str | None = None,
    ) -> None:  # fmt: skip
        """Accept the run `entry` starts in answer to `record` (keyed by the record's
        position, so the workers answer a record once)."""
        await self.runtime.accept(
            entry,
            to_builtins(made_input(entry, made, self._state_cls(entry))),
            cause="event",
            thread_id=await session_thread(self.runtime, entry),
            source_position=record.position,
            by=by,
            key=f"agentlog:event:{record.position}",
            subject=subject,
        )

    async def _matches(self, entry: EntryPoint, record: EventRecord) -> bool:
        if entry.kinds and record.kind not in entry.kinds:
            return False
        if entry.thread_id is not None and record.thread_id != entry.thread_id:
            return False
        if entry.node is not None and entry.node not in (
            record.actor,
            getattr(record.event, "node", None),
        ):
            return False
        graph = await self.graph_of_thread(record.thread_id)
        if entry.from_graph is not None and graph != entry.from_graph:
            return False
        return not (graph == entry.graph_id and not entry.include_own)

    async def graph_of_thread(self, thread_id: str) -> str | None:
        """The registered graph a thread runs: the runtime's own record of it, else the
        graph its creation names, else the graph named by its first run (by the graph's
        name)."""
        graphs = self.runtime.graphs

        def by_name(name: str) -> str | None:  # called only when the cache has no answer
            names = {g.app.graph.name: gid for gid, g in graphs.items() if g.app.graph.name}
            return names.get(name)

        return await graph_of_thread(
            self.runtime.store, thread_id, self.runtime.ledger.graph_of, self._graphs, by_name
        )

    # ---- timers ---------------------------------------------------------------------------

    async def _timers(self) -> None:
        while not self.runtime.stopping:
            try:
                await self.fire_due()
                await self.keep_due()
            except Exception as exc:  # the clock goes on: try again at the next tick
                _log.error("a timer could not fire: %s: %s", type(exc).__name__, exc)
            nexts = [self.next_fire(e.id) for e in self._entries("timer")]
            nexts += [self._kept[g] + p.every_s for g, p in self.runtime.retentions().items()
                      if g in self._kept]  # fmt: skip
            soonest = min((n for n in nexts if n is not None), default=None)
            wait = TIMER_TICK_S
            if soonest is not None:
                wait = min(max(soonest - self.runtime.clock(), 0.0), TIMER_TICK_S)
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), timeout=wait)

    async def fire_due(self) -> int:
        """Fire every timer slot that is due now; return how many fired."""
        async with self._firing:  # the timer loop and a caller never fire one slot twice
            if self.timers_paused:
                return 0
            fired = 0
            now = self.runtime.clock()
            for entry in self._entries("timer"):
                schedule = self.runtime.schedules[entry.id]
                slot, missed = schedule.due(self.runtime.ledger.fired.get(entry.id), now)
                if slot is not None:
                    await self._fire(entry, slot, missed)
                    fired += 1
            return fired

    async def keep_due(self) -> list[PruneReport]:
        """Apply each graph's retention policy whose time came (`RuntimeConfig.retention`,
        `set_retention`): every thread the graph's runs wrote to is pruned through
        `prune_thread`, the path `agentlog prune` takes; what was pruned."""
        runtime, reports = self.runtime, []
        async with self._firing:
            now = runtime.clock()
            for graph_id, policy in runtime.retentions().items():
                last = self._kept.setdefault(graph_id, now)
                if now < last + policy.every_s:
                    continue
                self._kept[graph_id] = now
                state_cls = runtime.graphs[graph_id].app.graph.state_cls
                threads = sorted(t for t, g in runtime.ledger.graph_of.items() if g == graph_id)
                for thread_id in threads:
                    report = await policy.apply(runtime.store, thread_id, state_cls=state_cls,
                                                now=now, by=f"retention:{graph_id}")  # fmt: skip
                    if report is not None:
                        reports.append(report)
        return reports

    def _state_cls(self, entry: EntryPoint) -> type[AgentState]:
        return self.runtime.graphs[entry.graph_id].app.graph.state_cls

    async def _fire(self, entry: EntryPoint, slot: float, missed: int) -> None:
        fired = timer_input(entry, slot, missed)
        made = entry.input_from(fired) if entry.input_from else fired
        await self.runtime.accept(
            entry,
            to_builtins(made_input(entry, made, self._state_cls(entry))),
            cause="timer",
            thread_id=entry.thread_id or await session_thread(self.runtime, entry),
            slot=slot,
            missed=missed,
            by=f"timer:{entry.id}",
            key=f"agentlog:timer:{slot!r}",  # workers fire a slot once
            webhook=entry.result_webhook,
        )

    def next_fire(self, entry_id: str) -> float | None:
        schedule = self.runtime.schedules.get(entry_id)
        if schedule is None:
            return None
        last = self.runtime.ledger.fired.get(entry_id)
        if last is None:
            last = schedule.slot_at_or_before(self.runtime.clock())
        return schedule.next_after(last)
