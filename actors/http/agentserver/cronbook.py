"""Crons made over the Agent Server API: kept as items of a long-term store on the runtime's
log (thread `__store__/crons`, so every create, change and delete is a record naming its
token), each one a timer entry point of the runtime (`cron:<cron_id>`, its five cron fields
read in UTC, as the Agent Server reads a cron made over its API), fired by the runtime's
own scheduler.

A slot fires once: the runtime records each firing with its slot, so a restart never fires a
slot twice, and slots missed while no server ran coalesce into one firing (the latest). A
cron on a thread runs there; one without a thread runs each slot on a new thread of its
own, deleted (hidden) when the run ends unless the cron says `on_run_completed="keep"`. A
cron's `webhook` is recorded on each run's acceptance and sent when the run ends. A server
registers the stored crons when it starts; a deleted or disabled cron, or one past its
`end_time`, fires no more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from agentlog.actors.http.agentserver import wire
from agentlog.actors.http.errors import ApiError
from agentlog.actors.runtime.facade import RuntimeFacade, TriggerState
from agentlog.actors.runtime.spec import EntryPoint, RegistrationError
from agentlog.actors.runtime.timers import Schedule
from agentlog.events import EventRecord
from agentlog.events.kinds import TriggerAccepted

CRONS_STORE = "crons"
"""The runtime's own store the crons are kept in (thread `__store__/crons`)."""
NAMESPACE = ("crons",)
PREFIX = "cron:"
"""A cron's timer entry point is `cron:<cron_id>`."""
UTC_NAMES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z"})

_log = logging.getLogger(__name__)


def entry_id(cron_id: str) -> str:
    return PREFIX + cron_id


def schedule_of(cron_id: str, graph_id: str, expression: str, now: float) -> Schedule:
    """The schedule of a cron expression, as a timer entry point keeps it; 422 when bad."""
    entry = EntryPoint(id=cron_id, graph_id=graph_id, trigger="timer", cron=expression)
    try:
        return Schedule.of(entry, now)
    except RegistrationError as exc:
        why = str(exc).removeprefix(f"entry point {cron_id!r}: ")  # the cron is not one to them
        raise ApiError(422, "invalid_request", f"cron schedule: {why}") from None


def timer_of(cron: dict[str, Any]) -> EntryPoint:
    """The cron's timer entry point: its schedule in UTC, its thread, its input, its
    webhook."""
    payload = cron["payload"]
    made = wire.incoming(payload.get("input"))
    return EntryPoint(
        id=entry_id(cron["cron_id"]),
        graph_id=cron["graph_id"],
        trigger="timer",
        cron=cron["schedule"],
        timezone="UTC",
        thread_id=cron["thread_id"],
        input_from=lambda _fired: made,
        multitask_strategy=payload.get("multitask_strategy") or "enqueue",
        result_webhook=payload.get("webhook"),
        name=cron["assistant_id"],
    )


class CronBook:
    """The crons of one server: their store, and their timer entry points."""

    def __init__(self, rt: RuntimeFacade) -> None:
        self.rt = rt
        self.store = rt.own_store(CRONS_STORE)
        self.fired: Callable[[TriggerState], None] = lambda _run: None
        """Called with each run a cron starts (the server sends its webhook)."""
        self.subscription: str | None = None
        self.pending: set[asyncio.Task[None]] = set()
        """What waits for cron runs to end: their own threads' deletions, ended timers'
        removals."""

    # ---- the book ----------------------------------------------------------------------

    async def all(self) -> list[dict[str, Any]]:
        items = await self.store.asearch(NAMESPACE, limit=10_000)
        return [dict(item.value) for item in items]

    async def get(self, cron_id: str) -> dict[str, Any]:
        item = await self.store.aget(NAMESPACE, cron_id)
        if item is None:
            raise ApiError(
                404, "not_found", f"no cron {cron_id!r}: POST /runs/crons/search lists them"
            )
        return dict(item.value)

    async def put(self, cron: dict[str, Any], by: str) -> dict[str, Any]:
        now = self.rt.clock()
        schedule = schedule_of(cron["cron_id"], cron["graph_id"], cron["schedule"], now)
        cron["updated_at"] = wire.iso(now)
        cron["next_run_date"] = wire.iso(schedule.next_after(schedule.slot_at_or_before(now)))
        await self.store.aput(NAMESPACE, cron["cron_id"], cron, by=by)
        await self.schedule(cron)
        return cron

    async def delete(self, cron_id: str, by: str) -> None:
        await self.get(cron_id)
        await self.store.adelete(NAMESPACE, cron_id, by=by)
        await self.rt.remove_timer(entry_id(cron_id))

    # ---- the runtime's timers ----------------------------------------------------------

    async def schedule(self, cron: dict[str, Any]) -> None:
        """Make the cron's timer entry point the one the runtime keeps: none when it is
        disabled or past its end."""
        await self.rt.remove_timer(entry_id(cron["cron_id"]))
        if not cron.get("enabled", True) or self._ended(cron):
            return
        self.rt.add_timer(timer_of(cron))
        self._follow()

    def _ended(self, cron: dict[str, Any]) -> bool:
        end = cron.get("end_before")
        if end is None:
            return False
        schedule = schedule_of(cron["cron_id"], cron["graph_id"], cron["schedule"], 0)
        next_run = self.rt.next_fire(entry_id(cron["cron_id"]))
        now = self.rt.clock()
        upcoming = next_run or schedule.next_after(schedule.slot_at_or_before(now))
        return bool(upcoming >= end)

    async def start(self) -> None:
        """Register the stored crons' timers (a server starting on a log that has some)."""
        for cron in await self.all():
            try:
                await self.schedule(cron)
            except Exception as exc:  # one cron failing stops no other
                _log.error("cron %s is not scheduled: %s: %s", cron.get("cron_id"),
                           type(exc).__name__, exc)  # fmt: skip

    async def stop(self) -> None:
        if self.subscription is not None:
            self.rt.unsubscribe(self.subscription)
            self.subscription = None
        for waiting in list(self.pending):
            waiting.cancel()

    def _follow(self) -> None:
        if self.subscription is None:
            self.subscription = self.rt.follow_runtime([TriggerAccepted.KIND], self._accepted)

    async def _accepted(self, record: EventRecord) -> None:
        """A run a cron started: its webhook is watched, its own thread deleted at its end
        when the cron says so; a cron past its end fires no more."""
        accepted = record.event
        if not isinstance(accepted, TriggerAccepted) or not accepted.entry_point.startswith(PREFIX):
            return
        run = self.rt.known_run(accepted.trigger_id)
        if run is not None:
            self.fired(run)
        cron_id = accepted.entry_point[len(PREFIX) :]
        item = await self.store.aget(NAMESPACE, cron_id)
        if item is None:
            return
        cron = dict(item.value)
        if self._ended(cron):  # its last slot fired: removed once that run ends
            self._later(self.rt.remove_timer(entry_id(cron_id)))
        if run is not None and cron["thread_id"] is None and cron["on_run_completed"] == "delete":
            self._later(self._delete_after(run, cron_id))

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _delete_after(self, trigger: TriggerState, cron_id: str) -> None:
        """Delete (hide) a cron run's own thread once the run ends, as `on_run_completed`
        says."""
        with contextlib.suppress(Exception):
            await self.rt.wait_for(trigger.id, timeout=24 * 3600)
        accepted = trigger.accepted
        await self.rt.hide_thread(
            accepted.thread_id, accepted.graph_id, by=f"cron:{cron_id}", reason="cron run ended"
        )
