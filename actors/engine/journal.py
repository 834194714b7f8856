"""The journal: the one actor that writes a store, shared by every run on it."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from agentlog.actors.engine.actor import Actor
from agentlog.events import Claim, EventRecord, EventStore
from agentlog.events.kinds import Event


@dataclass(frozen=True)
class Append:
    """Append `events` to a thread after `expected_seq`."""

    thread_id: str
    events: Sequence[Event]
    expected_seq: int
    run_id: str | None
    actor: str | Sequence[str | None] | None
    claim: Claim | None = None


class Journal(Actor[Append, list[EventRecord]]):
    """Every append of every run passes here; appends arriving together commit together.

    It handles its messages concurrently, so the store sees concurrent appends and
    group-commits them; each append is still all-or-nothing and answered on its own.
    """

    def __init__(self, store: EventStore) -> None:
        super().__init__("journal", mailbox_size=4096, concurrency=None)
        self.store = store

    async def receive(self, message: Append) -> list[EventRecord]:
        return await self.store.append(
            message.thread_id,
            message.events,
            expected_seq=message.expected_seq,
            run_id=message.run_id,
            actor=message.actor,
            claim=message.claim,
        )

    async def append(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        run_id: str | None = None,
        actor: str | Sequence[str | None] | None = None,
        claim: Claim | None = None,
    ) -> list[EventRecord]:
        """Ask the journal to append and wait for the records."""
        return await self.ask(Append(thread_id, events, expected_seq, run_id, actor, claim))

    def submit(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        run_id: str | None = None,
        actor: str | Sequence[str | None] | None = None,
        claim: Claim | None = None,
    ) -> asyncio.Future[list[EventRecord]]:
        """Hand the journal an append now; the future gets its records (or its error).

        The append goes on whoever awaits it: a run's step shields it, so a cancelled run
        still knows whether its last commit landed.
        """
        return self.ask_nowait(Append(thread_id, events, expected_seq, run_id, actor, claim))


_journals: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, Journal]] = (
    weakref.WeakKeyDictionary()
)


def journal_for(store: EventStore) -> Journal:
    """The running loop's journal of `store`, started on first use."""
    loop = asyncio.get_running_loop()
    for old in [other for other in _journals if other.is_closed()]:
        del _journals[old]  # its journal's task keeps a closed loop alive otherwise
    per_loop = _journals.setdefault(loop, {})
    journal = per_loop.get(id(store))
    if journal is None or journal.store is not store or not journal.running:
        journal = Journal(store).start()
        per_loop[id(store)] = journal
    return journal
