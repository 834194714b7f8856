"""`MemoryEventStore`: the whole protocol in a process's memory, for tests and examples.

It stores the same encoded, chained rows as the durable stores, so a test that passes here
exercises the codec and the chain too.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence

from agentlog.events.claims import (
    DEFAULT_LEASE,
    Claim,
    Holder,
    fence,
    hold,
    let_go,
    lost_under,
    new_claim,
)
from agentlog.events.codec import GENESIS_HASH, Row, chain_rows
from agentlog.events.errors import ConcurrencyError
from agentlog.events.follow import CommitSignal
from agentlog.events.record import EventRecord
from agentlog.events.store import (
    MESSAGE_KINDS,
    AppendRequest,
    BaseEventStore,
    Linked,
    StoredSnapshot,
)

_KINDS = frozenset(MESSAGE_KINDS)


class MemoryEventStore(BaseEventStore):
    """An in-memory event store; nothing survives the process.

    A commit numbers and appends its rows in one step (no await between), so readers always
    see a prefix of the positions; `commit_signal` then wakes the store's followers.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock=clock)
        self._threads: dict[str, list[Row]] = {}
        self._all: list[Row] = []
        self._snapshots: dict[str, dict[int, StoredSnapshot]] = {}
        self._claims: dict[str, Holder] = {}
        self._claims_lock = threading.Lock()  # released from worker threads too
        self.commit_signal = CommitSignal()
        """Committed up to which position, and the wake-up of followers
        (`agentlog.events.follow`)."""

    async def _commit(self, request: AppendRequest) -> list[EventRecord]:
        thread_id, encoded, expected_seq = request.thread_id, request.encoded, request.expected_seq
        run_id, actor, at, claim = request.run_id, request.actor, request.at, request.claim
        only_stops = request.only_stop_requests
        with self._claims_lock:
            holder = self._claims.get(thread_id)
        token = None if claim is None else claim.token
        refusal = fence(thread_id, token, only_stops, holder, time.time())
        if refusal is not None:
            raise refusal
        rows_of_thread = self._threads.get(thread_id, [])
        actual = len(rows_of_thread)
        if actual != expected_seq:
            raise ConcurrencyError(thread_id, expected_seq, actual)
        prev = rows_of_thread[-1].hash if rows_of_thread else GENESIS_HASH
        first_position = len(self._all) + 1
        rows = chain_rows(thread_id, actual + 1, prev, encoded, run_id, actor, at, first_position)
        self._threads.setdefault(thread_id, []).extend(rows)
        self._all.extend(rows)
        self.commit_signal.advance(rows[-1].position)
        return self._records(rows, encoded)

    async def last_position(self) -> int:
        """The position of the newest record; 0 when the store holds none."""
        self._check_open()
        return len(self._all)

    async def close(self) -> None:
        """Close the store; its followers stop at once (`StoreClosedError`)."""
        await super().close()
        self.commit_signal.close()

    async def _fetch(self, thread_id: str, from_seq: int, to_seq: int, limit: int) -> list[Row]:
        rows = self._threads.get(thread_id, [])
        return rows[from_seq - 1 : min(to_seq, from_seq - 1 + limit)]

    async def _fetch_all(self, from_position: int, limit: int) -> list[Row]:
        return self._all[from_position : from_position + limit]

    async def _head(self, thread_id: str) -> tuple[int, bytes] | None:
        rows = self._threads.get(thread_id)
        if not rows:
            return None
        return len(rows), rows[-1].hash

    async def threads(self) -> list[str]:
        self._check_open()
        return list(self._threads)

    async def _seqs_of_kind(self, thread_id: str, kind: str) -> list[int]:
        return [row.seq for row in self._threads.get(thread_id, []) if row.kind == kind]

    async def _put_snapshot(self, thread_id: str, stored: StoredSnapshot) -> None:
        self._snapshots.setdefault(thread_id, {})[stored.seq] = stored

    async def _get_snapshot(self, thread_id: str, max_seq: int) -> StoredSnapshot | None:
        by_seq = self._snapshots.get(thread_id)
        if not by_seq:
            return None
        seqs = sorted(by_seq)
        i = bisect.bisect_right(seqs, max_seq)
        return by_seq[seqs[i - 1]] if i else None

    async def _snapshot_seqs(self, thread_id: str) -> list[int]:
        return sorted(self._snapshots.get(thread_id, ()))

    async def _fetch_carriers(self, thread_id: str, seqs: Sequence[int]) -> list[Linked]:
        rows = self._threads.get(thread_id, [])
        return [
            (*row[1:7], row.position, *row[7:9], rows[seq - 2].hash if seq > 1 else None)
            for seq in seqs
            if 0 < seq <= len(rows) and (row := rows[seq - 1]).kind in _KINDS
        ]

    async def claim(
        self,
        thread_id: str,
        *,
        purpose: str = "run",
        lease: float = DEFAULT_LEASE,
        under: Claim | None = None,
    ) -> Claim:
        self._check_open()
        claim = new_claim(self._checked_id(thread_id), lease=lease, purpose=purpose)
        now = time.time()
        with self._claims_lock:
            if under is not None:
                outer = self._claims.get(under.thread_id)
                if outer is None or outer.token != under.token:
                    raise lost_under(claim, under)
            holder = self._claims.get(thread_id)
            if holder is not None and holder.alive(now):
                raise holder.busy_error(thread_id, now)
            self._claims[thread_id] = Holder(
                claim.token, claim.host, claim.pid, claim.started, now, lease, purpose
            )
            hold(claim)
        return claim

    async def release(self, claim: Claim) -> None:
        self.release_threadsafe(claim)

    def release_threadsafe(self, claim: Claim) -> None:
        let_go(claim)
        with self._claims_lock:
            holder = self._claims.get(claim.thread_id)
            if holder is not None and holder.token == claim.token:
                del self._claims[claim.thread_id]

    async def relabel(self, claim: Claim, purpose: str) -> None:
        with self._claims_lock:
            holder = self._claims.get(claim.thread_id)
            if holder is not None and holder.token == claim.token:
                self._claims[claim.thread_id] = Holder(
                    holder.token, holder.host, holder.pid, holder.started,
                    holder.heartbeat_at, holder.lease, purpose,
                )  # fmt: skip

    async def holder(self, thread_id: str) -> Holder | None:
        self._check_open()
        with self._claims_lock:
            return self._claims.get(self._checked_id(thread_id))
