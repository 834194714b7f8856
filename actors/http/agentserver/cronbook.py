"""Crons made over the Agent Server API: kept as items of a long-term store on the runtime's
log (thread `__store__/crons`, so every create, change and delete is a record naming its
token), scheduled by the timer entry points' own `Schedule` (five cron fields, in UTC, as the
Agent Server reads a cron made over its API), fired by the server while it runs.

A slot fires one run through the runtime, with an idempotency key naming the cron and the
slot, so two servers on one log, or a restart, never fire a slot twice. A cron on a thread
runs there; one without a thread runs each slot on a new thread of its own, deleted (hidden)
when the run ends unless the cron says `on_run_completed="keep"`. Slots missed
while no server ran are not caught up: a cron goes on from the next slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from agentlog.actors.http.agentserver import wire
from agentlog.actors.http.errors import ApiError
from agentlog.actors.runtime.facade import RuntimeFacade, TriggerState
from agentlog.actors.runtime.spec import EntryPoint, RegistrationError
from agentlog.actors.runtime.timers import Schedule

CRONS_STORE = "crons"
"""The runtime's own store the crons are kept in (thread `__store__/crons`)."""
NAMESPACE = ("crons",)
TICK_S = 1.0
"""How often the server looks for due slots."""
UTC_NAMES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z"})

_log = logging.getLogger(__name__)


def schedule_of(cron_id: str, graph_id: str, expression: str, now: float) -> Schedule:
    """The schedule of a cron expression, as a timer entry point keeps it; 422 when bad."""
    entry = EntryPoint(id=cron_id, graph_id=graph_id, trigger="timer", cron=expression)
    try:
        return Schedule.of(entry, now)
    except RegistrationError as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None


class CronBook:
    """The crons of one server: their store, their schedules, the slots they fired last."""

    def __init__(self, rt: RuntimeFacade) -> None:
        self.rt = rt
        self.store = rt.own_store(CRONS_STORE)
        self.last: dict[str, float] = {}
        """Cron id -> the slot it fired last (or was made at): later slots are due."""
        self.task: asyncio.Task[None] | None = None
        self.pending: set[asyncio.Task[None]] = set()
        """The deletions of cron runs' own threads, waiting for their runs to end."""

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
        self.last.setdefault(cron["cron_id"], schedule.slot_at_or_before(now))
        return cron

    async def delete(self, cron_id: str, by: str) -> None:
        await self.get(cron_id)
        await self.store.adelete(NAMESPACE, cron_id, by=by)
        self.last.pop(cron_id, None)

    # ---- firing ------------------------------------------------------------------------

    async def fire_due(self) -> int:
        """Fire each enabled cron whose slot is due now; how many fired."""
        now = self.rt.clock()
        fired = 0
        for cron in await self.all():
            if not cron.get("enabled", True) or cron.get("end_before", float("inf")) <= now:
                continue
            schedule = schedule_of(cron["cron_id"], cron["graph_id"], cron["schedule"], now)
            last = self.last.setdefault(cron["cron_id"], schedule.slot_at_or_before(now))
            slot, _ = schedule.due(last, now)
            if slot is None:
                continue
            self.last[cron["cron_id"]] = slot
            try:
                await self.fire(cron, slot)
            except Exception as exc:  # one cron failing never stops the others
                _log.error(
                    "cron %s could not fire: %s: %s", cron["cron_id"], type(exc).__name__, exc
                )
                continue
            fired += 1
        return fired

    async def fire(self, cron: dict[str, Any], slot: float) -> str:
        """Start the run of `cron`'s `slot`; its run id."""
        payload = cron["payload"]
        named = f"agentlog:cron:{cron['cron_id']}:{slot!r}"
        thread_id = cron["thread_id"] or str(uuid.uuid5(uuid.NAMESPACE_URL, named))
        trigger = await self.rt.submit(
            cron["assistant_id"],
            wire.incoming(payload.get("input")),
            thread_id=thread_id,
            idempotency_key=named,
            actor=f"cron:{cron['cron_id']}",
            multitask_strategy=payload.get("multitask_strategy"),
            correlation_id=None,
        )
        if cron["thread_id"] is None and cron.get("on_run_completed") == "delete":
            task = asyncio.ensure_future(self._delete_after(trigger, cron["cron_id"]))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)
        return trigger.id

    async def _delete_after(self, trigger: TriggerState, cron_id: str) -> None:
        """Delete (hide) a cron run's own thread once the run ends, as `on_run_completed`
        says."""
        with contextlib.suppress(Exception):
            await self.rt.wait_for(trigger.id, timeout=24 * 3600)
        accepted = trigger.accepted
        await self.rt.hide_thread(
            accepted.thread_id, accepted.graph_id, by=f"cron:{cron_id}", reason="cron run ended"
        )

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        for waiting in list(self.pending):
            waiting.cancel()
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while True:
            try:
                await self.fire_due()
            except Exception as exc:  # the clock goes on: try again at the next tick
                _log.error("crons could not fire: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(TICK_S)
