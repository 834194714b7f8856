"""Retention: a thread's oldest runs removed from the store while its chain stays provable.

`prune_thread` keeps the last N runs of a thread (or the runs begun in the last N days, and
always the last run), and removes every record before them, in three steps:

1. a whole-state snapshot (full content, no references; sealed like the records when the
   thread has a data subject) is stored at the last record to go, seq `k`;
2. a `pruned` record is appended through the commit path: `k`, how many records go, the
   chain hash of record `k` and the snapshot's content digest;
3. in one transaction, records 1..`k` and every other snapshot of the thread are deleted and
   the floor (`k`, its hash) is kept in `pruned_floors`.

The first record kept links to record `k`'s hash, which the floor holds and the `pruned`
record (inside the chain) vouches for: `verify` checks both, `read` starts from the floor, a
fold starts from the snapshot, so the thread stays resumable and every read stays checked.
A process killed after step 2 leaves the records in place (they still verify); pruning again
finishes the job first. `verify_archive` checks that an export of the removed records (made
before pruning) ends at the floor.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from agentlog.events import EventRecord, EventStore, InvalidArgumentError, Snapshot
from agentlog.events.keystore import prune_rows, pruned_floor
from agentlog.events.kinds import Event, Pruned, RunStarted
from agentlog.projections.edge import state_data
from agentlog.projections.fold import Fold
from agentlog.projections.state import AgentState
from agentlog.projections.views import fold_at, state_type_name

from .commit import write

__all__ = ["PruneReport", "Retention", "prune_thread", "verify_archive"]

DAY = 86_400.0


@dataclass(frozen=True)
class PruneReport:
    """What a prune did to one thread: the seq records went through, how many, the digest
    of the snapshot the thread resumes from."""

    thread_id: str
    through_seq: int
    removed: int
    snapshot_digest: str


async def _at(store: EventStore, thread_id: str, seq: int) -> EventRecord:
    async for record in store.read(thread_id, seq, seq):
        return record
    raise InvalidArgumentError(f"record {seq} of thread {thread_id!r} is not stored")


async def _cut(store: EventStore, thread_id: str, base: int, keep_runs: int | None,
               keep_days: float | None, now: float) -> int:  # fmt: skip
    """The last seq to remove: just before the oldest run kept (the last run always is).
    Found by the kind index alone: no record before the cut is read."""
    starts = [seq for seq in await store.seqs_of_kind(thread_id, RunStarted.KIND) if seq > base]
    if not starts:
        return 0
    if keep_runs is not None:
        return starts[-keep_runs:][0] - 1
    assert keep_days is not None
    for seq in starts:  # the oldest run begun within the window, else the last run
        if (await _at(store, thread_id, seq)).at >= now - keep_days * DAY:
            return seq - 1
    return starts[-1] - 1


def _check(keep_runs: int | None, keep_days: float | None, idle_days: float | None) -> None:
    if sum(x is not None for x in (keep_runs, keep_days, idle_days)) != 1:
        raise InvalidArgumentError(
            "name what to keep: keep_runs=N, keep_days=N or idle_days=N (a thread's TTL), "
            "one of them"
        )
    if idle_days is not None and (isinstance(idle_days, bool) or not idle_days >= 0):
        raise InvalidArgumentError(f"idle_days is a number of days >= 0, got {idle_days!r}")
    if keep_runs is not None and (type(keep_runs) is not int or keep_runs < 1):
        raise InvalidArgumentError(
            f"keep_runs is an int >= 1 (the last run stays), got {keep_runs!r}"
        )
    if keep_days is not None and (isinstance(keep_days, bool) or not keep_days >= 0):
        raise InvalidArgumentError(f"keep_days is a number of days >= 0, got {keep_days!r}")


@dataclass(frozen=True)
class Retention:
    """A retention policy a runtime applies on its own timer (`RuntimeConfig.retention`, or
    one graph's by `AgentRuntime.set_retention`): every `every_s` seconds of the runtime's
    clock, each thread its graph's runs wrote to is pruned by `prune_thread`, keeping the last
    `keep_runs` runs, the runs begun in the last `keep_days` days, or (`idle_days`) pruning
    whole a thread idle that long. One of the three; refused when wrong, before anything."""

    keep_runs: int | None = None
    keep_days: float | None = None
    idle_days: float | None = None
    every_s: float = 3600.0

    def __post_init__(self) -> None:
        _check(self.keep_runs, self.keep_days, self.idle_days)
        every = self.every_s
        if isinstance(every, bool) or not isinstance(every, int | float) or not every > 0:
            raise InvalidArgumentError(f"every_s is a number of seconds > 0, got {every!r}")

    async def apply(self, store: EventStore, thread_id: str, *, state_cls: type[AgentState],
                    now: float, by: str) -> PruneReport | None:  # fmt: skip
        """Prune the thread by this policy, as `prune_thread` (None: nothing to go)."""
        return await prune_thread(
            store, thread_id, keep_runs=self.keep_runs, keep_days=self.keep_days,
            idle_days=self.idle_days, by=by, reason="retention policy", state_cls=state_cls,
            now=now,
        )  # fmt: skip


async def prune_thread(
    store: EventStore,
    thread_id: str,
    *,
    keep_runs: int | None = None,
    keep_days: float | None = None,
    idle_days: float | None = None,
    by: str = "agentlog",
    reason: str | None = None,
    state_cls: type[AgentState] = AgentState,
    now: float | None = None,
) -> PruneReport | None:
    """Remove the thread's records before the runs kept; None when nothing is to go.

    With `idle_days` (a thread's time to live), a thread whose last record is older than
    that is pruned whole: every record goes, leaving the snapshot of its last state and the
    `pruned` record, a tombstone the snapshot and the floor link to."""
    _check(keep_runs, keep_days, idle_days)
    floor = await pruned_floor(store, thread_id)
    base = 0 if floor is None else floor[0]
    pending = [s for s in await store.seqs_of_kind(thread_id, Pruned.KIND) if s > base]
    if pending:  # the last prune may have been cut short before its delete: finish it
        last = (await _at(store, thread_id, pending[-1])).event
        if isinstance(last, Pruned) and last.through_seq > base:
            await prune_rows(store, thread_id, last.through_seq, bytes.fromhex(last.last_hash))
            base = last.through_seq
    clock = time.time() if now is None else now
    if idle_days is not None:
        newest = await _at(store, thread_id, await store.last_seq(thread_id))
        idle = newest.at < clock - idle_days * DAY and not isinstance(newest.event, Pruned)
        cut = newest.seq if idle else 0
    else:
        cut = await _cut(store, thread_id, base, keep_runs, keep_days, clock)
    if cut <= base:
        return None
    fold = await fold_at(store, thread_id, cut, state_cls)
    anchor = await _at(store, thread_id, cut)
    snapshot = Snapshot(
        thread_id=thread_id, seq=cut, state=state_data(fold.state),
        state_type=state_type_name(type(fold.state)), at=anchor.at, hash=anchor.hash,
    )  # fmt: skip
    await store.save_snapshot(snapshot)
    stored = await store.load_snapshot(thread_id, cut)
    assert stored is not None and stored.seq == cut and stored.digest
    removed = cut - base

    def build(_: Fold[AgentState]) -> list[Event]:
        return [
            Pruned(
                through_seq=cut, removed=removed, last_hash=anchor.hash,
                snapshot_digest=stored.digest, by=by, reason=reason,
            )
        ]  # fmt: skip

    await write(store, thread_id, build, state_cls=state_cls, actor=by, what="a prune")
    await prune_rows(store, thread_id, cut, bytes.fromhex(anchor.hash))
    return PruneReport(thread_id, cut, removed, stored.digest)


async def verify_archive(store: EventStore, thread_id: str, path: str | os.PathLike[str]) -> str:
    """Check that `path`, a JSONL export of the thread made before it was pruned, verifies on
    its own and ends where the store's chain now begins; 'ok: ...', or `InvalidArgumentError`
    saying what does not hold."""
    from agentlog.events.verify_export import Bad, verify

    floor = await pruned_floor(store, thread_id)
    if floor is None:
        raise InvalidArgumentError(f"thread {thread_id!r} was never pruned: nothing to link")
    with open(path, encoding="utf-8", newline="\n") as file:
        lines = file.read().splitlines()
    try:
        verify(lines, None)
    except Bad as exc:
        raise InvalidArgumentError(
            f"the archive {os.fspath(path)} does not verify: {exc}"
        ) from None
    by_seq = {line["seq"]: line for line in map(json.loads, lines)}
    line = by_seq.get(floor[0])
    if line is None or line["thread_id"] != thread_id or line["hash"] != floor[1].hex():
        raise InvalidArgumentError(
            f"the archive {os.fspath(path)} does not hold record {floor[0]} of thread "
            f"{thread_id!r} with the hash the kept records link to ({floor[1].hex()[:16]}...)"
        )
    return f"ok: records 1..{floor[0]} archived, linked to the chain kept at {floor[0] + 1}"
