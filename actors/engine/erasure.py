"""Erasing a data subject: its key destroyed, the erasure recorded through the commit path.

`erase_subject` first destroys the subject's key in the key store, in one transaction with
the snapshots of its threads (the caches that hold its plaintext; a pruned thread's floor
snapshot stays, sealed), empties this process's message cache, then records an `erased`
event on the erasures' own thread (`ERASURE_THREAD`) through `commit.write`. A process killed
between the two leaves the subject erased (every read shows its fields as erased) and the
record missing; running the erasure again writes the record with the erasure first kept (who,
when, why), and writes nothing when it is there already. No record is changed: every chain
verifies before and after.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from agentlog.events import EventStore, InvalidArgumentError
from agentlog.events.keystore import ERASURE_THREAD, keyring, threads_of_subject
from agentlog.events.kinds import Erased, Event
from agentlog.events.sealing import Erasure, check_subject
from agentlog.projections.fold import Fold
from agentlog.projections.state import AgentState
from agentlog.projections.views import clear_message_cache

from .commit import write

__all__ = ["ERASURE_THREAD", "ErasureReport", "erase_subject", "erasures"]


@dataclass(frozen=True)
class ErasureReport:
    """What an erasure did: the erasure in force, its threads, whether this call recorded it."""

    erasure: Erasure
    threads: list[str]
    recorded: bool


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise InvalidArgumentError(
            f"an erasure names {name} in printable text (such as 'dpo@example.com' and "
            f"'GDPR Art. 17 request 2026-118'), got {value!r:.80}"
        )
    return value


async def erasures(store: EventStore) -> list[Erased]:
    """Every `erased` record of the store, in order."""
    if await store.last_seq(ERASURE_THREAD) == 0:
        return []
    return [r.event async for r in store.read(ERASURE_THREAD) if isinstance(r.event, Erased)]


async def erase_subject(
    store: EventStore, subject: str, *, by: str, reason: str, at: float | None = None
) -> ErasureReport:
    """Destroy `subject`'s key and record who erased it, why and when (safe to run again)."""
    check_subject(subject)
    _text("who erases (by)", by)
    _text("the reason", reason)
    threads = await threads_of_subject(store, subject)
    now = time.time() if at is None else at
    erasure = await keyring(store).destroy(Erasure(subject, now, by, reason))
    clear_message_cache()  # messages this process validated from the subject's records go too

    async def build(fold: Fold[AgentState]) -> list[Event]:
        if any(e.subject == subject for e in await erasures(store)):
            return []
        return [
            Erased(
                subject=subject, by=erasure.by, reason=erasure.reason,
                erased_at=erasure.at, threads=threads,
            )
        ]  # fmt: skip

    records = await write(
        store, ERASURE_THREAD, build, state_cls=AgentState, actor=by, what="an erasure"
    )
    return ErasureReport(erasure, threads, bool(records))
