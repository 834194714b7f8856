"""When a run's records become durable: its call's `durability` mode.

- `sync` (the default): each commit lands before the run goes on, so a step is in the log
  before the next one starts.
- `async`: a step's commit is appended while the next step runs (one append in flight at
  most); a crash can lose that last step, which then runs again.
- `exit`: a run's commits are held and appended together when the run comes to rest
  (completed, failed, paused, stopped); a crash loses every step since the last append,
  which run again.

In every mode a commit holding a tool call's records (`tool_call_started`,
`tool_call_finished`) or bringing the run to rest lands at once, with everything held
before it: a tool runs only once its start is durable and its result is used only once it
is, so no side effect is repeated, whatever the mode. The weaker modes weaken only what a
crash keeps of node outputs (the guarantees page has the table). Records not yet durable
are folded, streamed and handed to hooks as in `sync` (with their seq, without a hash), so
a run reads the same in every mode; a run in a weaker mode takes no snapshots.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.options import Durability
from agentlog.actors.engine.run import scratch_records
from agentlog.events import (
    ConcurrencyError,
    EventRecord,
    StopRequested,
    ThreadBusyError,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.events.kinds import Event

if TYPE_CHECKING:
    from agentlog.actors.engine.run import Engine, Run


def must_land(events: Sequence[Event]) -> bool:
    """Whether a commit is durable before the run goes on in every mode: it holds a tool
    call's records, or brings the run to rest."""
    return any(
        isinstance(e, ToolCallStarted | ToolCallFinished) or type(e).ENDS_RUN for e in events
    )


Actors = str | tuple[str, ...]


class Held:
    """A run's records not yet durable (`async`: the append in flight; `exit`: those held
    until the run comes to rest), and how they land."""

    def __init__(self, engine: Engine[Any], run: Run[Any], mode: Durability) -> None:
        self.engine, self.run, self.mode = engine, run, mode
        self.events: list[Event] = []
        self.actors: list[str] = []
        self.base = 0
        self.flight: asyncio.Future[list[EventRecord]] | None = None
        self.flight_base = 0
        self.shift = 0
        """Stop requests that landed between this run's held records: each later record
        lands that many seqs after the one the run folded it at."""
        self.moved = False
        """A held record landed after a stop request: the run's fold must be read again."""

    async def append(self, events: Sequence[Event], base: int, actor: Actors) -> list[EventRecord]:
        """Append `events` (built on the run's fold at seq `base`) as the mode says: the
        records, durable or not yet."""
        names = [actor] * len(events) if isinstance(actor, str) else list(actor)
        await self.settle()
        if self.moved:  # a stop request came in: build again on the log's state
            raise ConcurrencyError(self.run.thread_id, base, base + self.shift)
        if self.mode == "async":
            if must_land(events):
                return await self._land(list(events), base, names)
            self.flight_base = base
            self.flight = asyncio.ensure_future(self._land(list(events), base, names))
            self.run.committing = self.flight
            return self._scratch(events, base)
        if not self.events:
            self.base = base
        self.events.extend(events)
        self.actors.extend(names)
        if not must_land(events):
            return self._scratch(events, base)
        return (await self.flush())[-len(events) :]

    def durable_seq(self) -> int:
        """The seq up to which the log holds the run's records (see `Run.durable_seq`)."""
        if self.events:
            return self.base + self.shift
        if self.flight is not None and not self.flight.done():
            return self.flight_base + self.shift
        return self.run.fold.seq + self.shift

    async def settle(self) -> None:
        """Wait for the append in flight (`async`); its error, if any, is raised here."""
        flight, self.flight = self.flight, None
        if flight is not None:
            await asyncio.shield(flight)

    async def flush(self) -> list[EventRecord]:
        """Land every held record now (`exit`), after the append in flight (`async`)."""
        await self.settle()
        if not self.events:
            return []
        events, names, base = self.events, self.actors, self.base
        self.events, self.actors = [], []
        return await self._land(events, base, names)

    def drop(self) -> None:
        """Forget what is held: the run's fold is read again from the log."""
        if self.flight is not None:
            self.flight.cancel()
        self.flight, self.events, self.actors = None, [], []
        self.shift, self.moved = 0, False

    async def _land(self, events: list[Event], base: int, names: list[str]) -> list[EventRecord]:
        """Append after `base` (moved past stop requests that landed meanwhile)."""
        store, run = self.engine.store, self.run
        while True:
            try:
                append = store.append(
                    run.thread_id,
                    events,
                    expected_seq=base + self.shift,
                    run_id=run.run_id,
                    actor=tuple(names),
                    claim=run.claim,
                )
                return await shielded(run, append)
            except ConcurrencyError:
                since = base + self.shift + 1
                found = [r async for r in store.read(run.thread_id, since)]
                if not found or not all(isinstance(r.event, StopRequested) for r in found):
                    raise ThreadBusyError(
                        f"thread {run.thread_id!r} was changed by another writer while run "
                        f"{run.run_id} held records after seq {base + self.shift}: two runs "
                        "must not share a thread at once"
                    ) from None
                self.shift += len(found)
                self.moved = True

    def _scratch(self, events: Sequence[Event], base: int) -> list[EventRecord]:
        return scratch_records(self.run.thread_id, events, base, self.run.run_id)


async def shielded(
    run: Run[Any], append: Coroutine[Any, Any, list[EventRecord]]
) -> list[EventRecord]:
    """Await `append` run as a task of its own, kept as `run.committing`: cancelling the
    caller leaves the append going on, and whoever records the run's end waits for it. What
    `asyncio.shield` does, less a turn of the loop: the caller is woken from the task
    itself, the moment the append returns, not from the task's done callbacks."""
    landed: asyncio.Future[list[EventRecord]] = asyncio.get_running_loop().create_future()
    run.committing = asyncio.ensure_future(_forwarded(append, landed))
    return await landed


async def _forwarded(
    append: Coroutine[Any, Any, list[EventRecord]], landed: asyncio.Future[list[EventRecord]]
) -> list[EventRecord] | None:
    """The append's outcome, handed to its caller; an error is the caller's alone (the task
    ends without it: whoever awaits `run.committing` only waits for the append to end)."""
    try:
        records = await append
    except asyncio.CancelledError:
        landed.cancel()
        raise
    except Exception as exc:
        if not landed.done():  # else the caller was cancelled: nobody waits for it
            landed.set_exception(exc)
        return None
    if not landed.done():
        landed.set_result(records)
    return records


async def land_held(held: Held | None) -> None:
    """Make every record of the run durable now (its end, a cancel, a failure recorded
    from the log); a failure to do so is the run's to report, so it is raised."""
    if held is not None:
        await held.flush()
