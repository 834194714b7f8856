"""The commit path: the one way anything reaches the log, under one retry rule.

Every write goes build -> decide -> append -> fold -> publish -> snapshot -> hooks. What
differs between writers is only where their fold stands and what follows a commit, so each
is a `Writer` (a run's live fold, a thread folded from the log for an edit, a stop, a cancel,
a fork or a rollback, the runtime's ledger, a shared key's thread) handed to `commit`, the one
loop, which `RetryRule` governs: what is tried again, how often, after what wait, and what
never is.

There is no journal actor in front of the store: the stores group-commit the appends made in
the same turn of the loop (`SQLiteEventStore` hands them to its writer thread as one
transaction, Postgres likewise), which is the batching a journal would do, without a queue
hop per append.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from agentlog.events import (
    Claim,
    ClaimLostError,
    ConcurrencyError,
    EventRecord,
    EventStore,
    ThreadBusyError,
)
from agentlog.events.keystore import subject_of_thread, tag_thread
from agentlog.events.kinds import ENDING_KINDS, OPENING_KINDS, Event
from agentlog.projections.fold import Fold, decide
from agentlog.projections.forks import fork_build, fork_event
from agentlog.projections.state import AgentState
from agentlog.projections.views import fold_at

S = TypeVar("S", bound=AgentState)
T = TypeVar("T")


@dataclass(frozen=True)
class RetryRule:
    """What a write tries again, how many times, and after what wait.

    - A **lost race** (`ConcurrencyError`: another writer took the next seq) is built again
      on the state the winner left, at once the first time, then after a short random wait
      that doubles each time (so a crowd of writers on one thread thins out), `races` times
      at most; then `ThreadBusyError`.
    - A **busy thread** (`ThreadBusyError`: another owner holds it, a `def` node cut short
      still runs) is waited out by the callers that must go on once it is free (the
      runtime's dispatch, cancel and rollback), with a wait growing from `busy_wait_s` to
      `max_busy_wait_s`, for as long as they still want the write.
    - **Never** tried again: a claim taken over (`ClaimLostError`: the writer may no longer
      write), a refusal of the write itself (an illegal transition, bad input, a user
      function's error), and a store that failed mid-append (`StoreUnavailableError`: the
      append may have landed, so building it again could write it twice; the stores wait
      out their own locks first, SQLite's busy timeout).
    """

    races: int = 32
    """How many times a write is built and appended before it gives up."""
    race_wait_s: float = 0.001
    """The wait after the second lost race (none after the first); doubled each time."""
    max_race_wait_s: float = 0.5
    """The longest of those waits: long enough that processes sharing a thread on a loaded
    machine (the runtime's ledger of several workers) thin out before `races` run out."""
    busy_wait_s: float = 0.02
    """The first wait for a busy thread; doubled each time."""
    max_busy_wait_s: float = 0.1

    def race_wait(self, lost: int) -> float:
        """Seconds to wait after `lost` races lost in a row (jittered: writers spread out)."""
        if lost <= 1:
            return 0.0
        return random.uniform(0, min(self.max_race_wait_s, self.race_wait_s * 2.0 ** (lost - 2)))

    def busy_wait(self, tries: int) -> float:
        """Seconds to wait after finding the thread busy `tries` times in a row."""
        return min(self.max_busy_wait_s, self.busy_wait_s * 2.0 ** max(0, tries - 1))

    @staticmethod
    def is_busy(exc: BaseException) -> bool:
        """Whether `exc` says the thread is busy, for now (a lost claim never frees up)."""
        return isinstance(exc, ThreadBusyError) and not isinstance(exc, ClaimLostError)

    async def while_busy(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        still: Callable[[], Awaitable[bool]] | None = None,
    ) -> T | None:
        """`attempt()` until the thread is no longer busy; None when `still()` says the write
        is no longer wanted (checked after each busy try)."""
        tries = 0
        while True:
            try:
                return await attempt()
            except ThreadBusyError as exc:
                if not self.is_busy(exc):
                    raise
            tries += 1
            if still is not None and not await still():
                return None
            await asyncio.sleep(self.busy_wait(tries))


RETRY = RetryRule()
"""The retry rule of every write."""


class Writer(Protocol):
    """One writer's side of a commit (see `commit`)."""

    async def base(self) -> int:
        """The seq the next attempt builds on, folding in what the writer must first."""

    async def build(self, base: int) -> Sequence[Event]:
        """The events to append after `base`, decided (checked against the state); none:
        nothing is written."""

    async def append(self, events: Sequence[Event], base: int) -> list[EventRecord]:
        """Append `events` after exactly `base` (`ConcurrencyError` when the race is lost)."""

    async def landed(self, records: list[EventRecord]) -> None:
        """Fold, publish, snapshot and call the hooks of what was committed."""

    async def lost(self, base: int) -> None:
        """Another writer got there first: catch up (or raise: not a race to retry)."""

    async def failed(self) -> None:
        """Anything else went wrong: forget what the attempt folded ahead."""


async def commit(
    writer: Writer, *, thread_id: str, what: str, rule: RetryRule = RETRY
) -> list[EventRecord]:
    """The one commit loop: build on the writer's fold, append after exactly that seq, and
    when another writer got there first, catch up and build again, as `rule` says."""
    for lost in range(1, rule.races + 1):
        base = await writer.base()
        try:
            events = await writer.build(base)
            if not events:
                return []
            records = await writer.append(events, base)
        except ConcurrencyError:
            await writer.lost(base)
            wait = rule.race_wait(lost)
            if wait:
                await asyncio.sleep(wait)
            continue
        except BaseException:
            await writer.failed()
            raise
        await writer.landed(records)
        if _log.isEnabledFor(logging.INFO):
            tell(records)
        return records
    raise ThreadBusyError(
        f"{what} on thread {thread_id!r} gave up after {rule.races} tries: the thread kept "
        "moving under it"
    )


_log = logging.getLogger("agentlog.runs")


def tell(records: Sequence[EventRecord]) -> None:
    """Log what a commit did: an info line per run started, resumed, ended or paused, and a
    debug line per other record, each with its fields (`extra=`: thread_id, run_id, seq,
    kind, node, actor)."""
    debug = _log.isEnabledFor(logging.DEBUG)
    for record in records:
        opens, ends = record.kind in OPENING_KINDS, record.kind in ENDING_KINDS
        if not (opens or ends or debug):
            continue
        node = getattr(record.event, "node", None)
        fields = {
            "thread_id": record.thread_id,
            "run_id": record.run_id,
            "seq": record.seq,
            "kind": record.kind,
            "node": node if isinstance(node, str) else record.actor,
            "actor": record.actor,
        }
        if opens or ends:
            _log.info("run %s on thread %r: %s", record.run_id, record.thread_id, record.kind,
                      extra=fields)  # fmt: skip
        else:
            _log.debug("thread %r seq %d: %s by %r", record.thread_id, record.seq, record.kind,
                       record.actor, extra=fields)  # fmt: skip


async def built(value: T | Awaitable[T]) -> T:
    """`value`, awaited when a build returned a coroutine."""
    return await value if inspect.isawaitable(value) else value


# ---- writes outside a running step -----------------------------------------------------------


class Append(Protocol):
    """The append a write goes through: a store's."""

    def __call__(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        run_id: str | None = ...,
        actor: str | Sequence[str | None] | None = ...,
        claim: Claim | None = ...,
    ) -> Awaitable[list[EventRecord]]: ...


class ThreadWrite(Generic[S]):
    """A write outside a running step (a stop request, a human edit, a cancel, a fork, a
    rollback, the record of an abandoned run): built from the thread's state as the log has
    it at each attempt, checked by `decide`, fenced by `claim` when there is one."""

    def __init__(
        self,
        store: EventStore,
        thread_id: str,
        build: Callable[[Fold[S]], Sequence[Event] | Awaitable[Sequence[Event]]],
        *,
        state_cls: type[S],
        actor: str | None,
        run_id: str | Callable[[Fold[S]], str | None] | None = None,
        claim: Claim | None = None,
        append: Append | None = None,
        after: Callable[[list[EventRecord]], Awaitable[None]] | None = None,
    ) -> None:
        self.store, self.thread_id, self._build = store, thread_id, build
        self.state_cls, self.actor, self.run_id, self.claim = state_cls, actor, run_id, claim
        self._append: Any = append if append is not None else store.append
        self._after = after
        self.fold: Fold[S] = Fold.new(state_cls)

    async def base(self) -> int:
        if await self.store.last_seq(self.thread_id) == 0:
            self.fold = Fold.new(self.state_cls)
        else:
            self.fold = await fold_at(self.store, self.thread_id, None, self.state_cls)
        return self.fold.seq

    async def build(self, base: int) -> Sequence[Event]:
        events = list(await built(self._build(self.fold)))
        if events:
            decide(self.fold.state, events, seq=base)
        return events

    async def append(self, events: Sequence[Event], base: int) -> list[EventRecord]:
        run_id = self.run_id(self.fold) if callable(self.run_id) else self.run_id
        records: list[EventRecord] = await self._append(
            self.thread_id,
            events,
            expected_seq=base,
            run_id=run_id,
            actor=self.actor,
            claim=self.claim,
        )
        return records

    async def landed(self, records: list[EventRecord]) -> None:
        if self._after is not None:
            await self._after(records)

    async def lost(self, base: int) -> None:
        return None  # the next attempt folds the thread again

    async def failed(self) -> None:
        return None


async def write(
    store: EventStore,
    thread_id: str,
    build: Callable[[Fold[S]], Sequence[Event] | Awaitable[Sequence[Event]]],
    *,
    state_cls: type[S],
    actor: str | None,
    run_id: str | Callable[[Fold[S]], str | None] | None = None,
    claim: Claim | None = None,
    append: Append | None = None,
    what: str = "a write",
    after: Callable[[list[EventRecord]], Awaitable[None]] | None = None,
) -> list[EventRecord]:
    """Build events from the thread's state, check them and append them, through `commit`.

    `build` sees the thread's fold (a fresh state for a thread with no records) and returns
    the events to write, or nothing: then nothing is written and `[]` is returned. It may
    raise to refuse, and may be a coroutine (to read the log, as closing a run's tool calls
    does). `run_id` may be read from the fold too; `after` follows the commit (the hooks).
    """
    writer = ThreadWrite(
        store, thread_id, build, state_cls=state_cls, actor=actor, run_id=run_id,
        claim=claim, append=append, after=after,
    )  # fmt: skip
    return await commit(writer, thread_id=thread_id, what=what)


async def fork_thread(
    store: EventStore,
    thread_id: str,
    *,
    at_step: int | None = None,
    at_seq: int | None = None,
    new_thread_id: str | None = None,
    state_cls: type[S],
    actor: str = "user",
) -> str:
    """Branch `thread_id` at a past point into a new thread, through the commit path; its id.

    The fork point is checked (`agentlog.projections.forks.fork_event`: never inside a
    commit); a thread that exists under the new id, or is made meanwhile, refuses the fork
    with `IllegalTransitionError`. The source thread is untouched.
    """
    new_id, event = await fork_event(
        store, thread_id, at_step=at_step, at_seq=at_seq, new_thread_id=new_thread_id,
        state_cls=state_cls,
    )  # fmt: skip
    subject = await subject_of_thread(store, thread_id)
    if subject is not None:  # the copy holds the subject's data: sealed as the source is
        await tag_thread(store, new_id, subject)
    await write(store, new_id, fork_build(new_id, event), state_cls=state_cls, actor=actor,
                what="a fork")  # fmt: skip
    return new_id


__all__ = [
    "RETRY",
    "Append",
    "RetryRule",
    "ThreadWrite",
    "Writer",
    "commit",
    "fork_thread",
    "write",
]
