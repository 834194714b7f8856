"""Many workers on one store: what each does beyond a lone runtime.

Workers share the runtime thread: each appends its records there under the store's
optimistic concurrency (a writer that loses the race folds in the winner's records and
tries again), and follows it to learn what the others accepted, ran and finished. Nothing
runs twice:

- a triggered run is leased before it runs: the worker claims the run's lease thread
  (`<runtime thread>/lease/<trigger id>`) with the store's thread claims, which heartbeat
  while held and are judged dead when their process is gone (same host) or their heartbeat
  is older than the lease (another host); whoever holds the lease runs it, and takes
  over from the log a run whose worker died;
- a worker holds a claim on its own id (`<runtime thread>/worker/<id>`) while it runs, so
  two live workers never share an id;
- a timer slot and an answered record are accepted under a key (`agentlog:timer:<slot>`,
  `agentlog:event:<position>`): when two workers accept the same one, the one first in
  the log is the trigger and the other is recorded as a rejected duplicate, never run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from agentlog.events import Claim, EventRecord, ThreadBusyError
from agentlog.events.errors import StoreError
from agentlog.events.kinds import TriggerAccepted, TriggerDispatched, TriggerFinished

if TYPE_CHECKING:
    from agentlog.actors.runtime.runtime import AgentRuntime

_log = logging.getLogger(__name__)


def lease_thread(runtime_thread: str, trigger_id: str) -> str:
    """The thread whose claim is the lease on one triggered run."""
    return f"{runtime_thread}/lease/{trigger_id}"


async def take_lease(runtime: AgentRuntime, trigger_id: str) -> Claim | None:
    """Lease a triggered run for this worker; None while another live worker holds it."""
    config = runtime.config
    try:
        return await runtime.store.claim(
            lease_thread(config.runtime_thread, trigger_id),
            purpose=f"run of trigger {trigger_id} by worker {config.worker_id}",
            lease=config.lease_s,
        )
    except ThreadBusyError:
        return None


def worker_thread(runtime_thread: str, worker_id: str) -> str:
    """The thread whose claim says a worker of this id is alive on the store."""
    return f"{runtime_thread}/worker/{worker_id}"


async def take_worker_id(runtime: AgentRuntime) -> Claim:
    """Hold this worker's id while it runs: a second live worker with the same id is refused
    (`ThreadBusyError`), since leases, logs and `agentlog worker --id` name workers by it."""
    config = runtime.config
    assert config.worker_id is not None
    thread = worker_thread(config.runtime_thread, config.worker_id)
    try:
        return await runtime.store.claim(
            thread, purpose=f"worker {config.worker_id}", lease=config.lease_s
        )
    except ThreadBusyError as exc:
        holder = await runtime.store.holder(thread)
        who = (
            f"process {holder.pid} on {holder.host}, heartbeat "
            f"{max(time.time() - holder.heartbeat_at, 0):.0f} s ago"
            if holder is not None
            else "it has just let go: try again"
        )
        raise ThreadBusyError(
            f"worker id {config.worker_id!r} is in use by a live worker on this store ({who}): "
            "give each worker its own id (`agentlog worker --id NAME`, RuntimeConfig("
            "worker_id=...)); a dead worker's id is free at once on its own host, from another "
            f"host once its lease ({config.lease_s:g} s) has passed"
        ) from exc


async def check_no_workers_running(runtime: AgentRuntime) -> None:
    """For a lone runtime starting (holding the runtime thread, so no worker writes there
    any more): refuse (`ThreadBusyError`) when a live worker holds the lease of a run in
    flight, which the lone runtime would otherwise resume a second time, or holds its id
    while idle (it would run the triggers it shares with this one)."""
    store, thread = runtime.store, runtime.config.runtime_thread
    leases = [lease_thread(thread, s.id) for s in runtime.ledger.pending() if s.in_flight]
    ids = [worker_thread(thread, worker_id) for worker_id in sorted(runtime.ledger.workers)]
    for held in (*leases, *ids):
        holder = await store.holder(held)
        if holder is not None and holder.alive(time.time()):
            raise ThreadBusyError(
                f"workers run on this store ({holder.purpose}, process {holder.pid} on "
                f"{holder.host}): a lone runtime cannot join them; start this one as a worker "
                "(`agentlog worker --id NAME`, RuntimeConfig(worker_id=...)) or stop the "
                "workers first"
            )


async def give_lease(runtime: AgentRuntime, claim: Claim) -> None:
    """Let the lease go (after the run's end is recorded, or when it was not needed)."""
    with contextlib.suppress(StoreError):
        await runtime.store.release(claim)


class Follower:
    """Reads the runtime thread as the other workers write it: new triggers are queued,
    ends and dispatches wake whoever waits; now and then every unfinished trigger is
    queued again, so one whose worker died is taken over once its lease lets go."""

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def seen(self, records: list[EventRecord]) -> None:
        """React to records the ledger folded in from other workers."""
        dispatcher = self.runtime.dispatcher
        for record in records:
            event = record.event
            if isinstance(event, TriggerAccepted):
                state = self.runtime.ledger.triggers.get(event.trigger_id)
                if state is not None and not state.done:
                    dispatcher.enqueue(state)
            elif isinstance(event, TriggerDispatched | TriggerFinished):
                dispatcher.notify(event.trigger_id)

    async def _run(self) -> None:
        runtime = self.runtime
        sweep_every = max(runtime.config.lease_s / 4, runtime.config.poll_s)
        loop = asyncio.get_running_loop()
        next_sweep = loop.time()
        while not runtime.stopping:
            try:
                await runtime.journal.catch_up()
                if loop.time() >= next_sweep:
                    next_sweep = loop.time() + sweep_every
                    runtime.dispatcher.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store hiccuped: the next round reads again
                _log.warning("worker %s could not read the runtime thread: %s",
                             runtime.config.worker_id, exc)  # fmt: skip
            await asyncio.sleep(runtime.config.poll_s)
