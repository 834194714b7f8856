"""A store that dies, or waits, at a chosen commit: crashes and races a test can place exactly.

`FaultyStore` wraps any `EventStore` and passes everything through, counting the appends to
one thread. Armed with `crash_at`, the chosen append either never reaches the inner store
("before") or reaches it and is never answered ("after"), and from then on the store refuses
every write, as a dead process writes nothing; `bury()` then lets go of the claims the dead
engine held, which is what the operating system does for a killed process. Armed with
`pause_at`, the chosen append waits (before or after it commits) until `resume()`, and so does
every later append made under a claim (the paused run's next commits), so a test can stop a
run, edit it or start a second one at a known point; a stop request (no claim) goes through.

In process, this is weaker than a real SIGKILL: a `def` node or tool still running on a worker
thread of the dead engine goes on running (its writes are refused), and nothing is lost from
the operating system's buffers. `kill=True` makes the crash a real `SIGKILL` of the process.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Self

from agentlog.events import (
    Claim,
    EventRecord,
    EventStore,
    Snapshot,
    StoreUnavailableError,
    VerifyReport,
)
from agentlog.events.claims import DEFAULT_LEASE, Holder, let_go
from agentlog.events.codec import Row
from agentlog.events.kinds import Event

When = Literal["before", "after"]
"""A commit boundary: just before the append reaches the store, or just after it committed."""

__all__ = ["FaultyStore", "SimulatedCrashError", "When"]


class SimulatedCrashError(StoreUnavailableError):
    """The store died at the boundary a test chose; nothing more is written through it."""


@dataclass
class _Trap:
    commit: int
    when: When
    action: Literal["crash", "pause"]
    kill: bool = False


class FaultyStore:
    """An `EventStore` passing everything to `inner`, with crashes and pauses on demand.

    Appends to `thread_id` (every thread when None) are counted from 1 after each arming;
    `commits` says how many there have been.
    """

    def __init__(self, inner: EventStore, thread_id: str | None = None) -> None:
        self.inner = inner
        self.thread_id = thread_id
        self.commits = 0
        self.crashed = False
        self.paused = asyncio.Event()
        """Set when an append reaches a pause: the run is waiting at the chosen point."""
        self._go = asyncio.Event()
        self._trap: _Trap | None = None
        self._claims: dict[str, Claim] = {}

    # ---- arming ---------------------------------------------------------------------------

    def crash_at(self, commit: int, when: When = "after", *, kill: bool = False) -> None:
        """Die at the `commit`-th append from now (`kill`: SIGKILL this process there)."""
        self._arm(_Trap(_positive(commit), _boundary(when), "crash", kill))

    def pause_at(self, commit: int, when: When = "after") -> None:
        """Hold the `commit`-th append from now until `resume()`."""
        self._arm(_Trap(_positive(commit), _boundary(when), "pause"))

    def disarm(self) -> None:
        """Forget the armed crash or pause and let any paused append go on."""
        self._trap = None
        self.resume()
        self.paused.clear()

    def resume(self) -> None:
        """Let a paused append go on."""
        self._go.set()

    def bury(self) -> list[Claim]:
        """After a crash: let go of every claim the dead engine held, as its death would."""
        dead = list(self._claims.values())
        for claim in dead:
            let_go(claim)
        self._claims.clear()
        return dead

    def _arm(self, trap: _Trap) -> None:
        if self.crashed:
            raise SimulatedCrashError("this store has crashed: reopen the inner store instead")
        self._trap, self.commits = trap, 0
        self.paused.clear()
        self._go.clear()

    def _check_alive(self) -> None:
        if self.crashed:
            raise SimulatedCrashError("the store crashed at the chosen commit: nothing is written")

    # ---- the store ----------------------------------------------------------------------

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
        self._check_alive()
        if claim is not None and self.paused.is_set() and not self._go.is_set():
            await self._go.wait()  # the paused run's later commits wait too (ride-ahead)
            self._check_alive()
        trap = self._trap
        if trap is not None and self.thread_id in (None, thread_id):
            self.commits += 1
            if self.commits == trap.commit:
                return await self._spring(
                    trap, thread_id, events, expected_seq, run_id, actor, claim
                )
        return await self.inner.append(
            thread_id, events, expected_seq=expected_seq, run_id=run_id, actor=actor, claim=claim
        )

    async def _spring(
        self,
        trap: _Trap,
        thread_id: str,
        events: Sequence[Event],
        expected_seq: int,
        run_id: str | None,
        actor: str | Sequence[str | None] | None,
        claim: Claim | None,
    ) -> list[EventRecord]:
        """The armed append: crash or pause on its chosen side of the commit."""
        self._trap = None

        async def commit() -> list[EventRecord]:
            return await self.inner.append(
                thread_id, events, expected_seq=expected_seq, run_id=run_id, actor=actor,
                claim=claim,
            )  # fmt: skip

        records = await commit() if trap.when == "after" else []
        if trap.action == "crash":
            if trap.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            self.crashed = True
            raise SimulatedCrashError(f"crashed {trap.when} commit {trap.commit}")
        self.paused.set()
        await self._go.wait()
        self._check_alive()
        if trap.when == "before":
            records = await commit()
        return records

    def read(
        self,
        thread_id: str,
        from_seq: int = 1,
        to_seq: int | None = None,
        *,
        after_hash: bytes | None = None,
    ) -> AsyncIterator[EventRecord]:
        return self.inner.read(thread_id, from_seq, to_seq, after_hash=after_hash)

    def read_all(self, from_position: int = 0) -> AsyncIterator[EventRecord]:
        return self.inner.read_all(from_position)

    def read_rows(
        self, thread_id: str, from_seq: int = 1, to_seq: int | None = None
    ) -> AsyncIterator[Row]:
        return self.inner.read_rows(thread_id, from_seq, to_seq)

    def files(self) -> list[str]:
        return self.inner.files()

    async def last_seq(self, thread_id: str) -> int:
        return await self.inner.last_seq(thread_id)

    async def threads(self) -> list[str]:
        return await self.inner.threads()

    async def seqs_of_kind(self, thread_id: str, kind: str) -> list[int]:
        return await self.inner.seqs_of_kind(thread_id, kind)

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        self._check_alive()
        await self.inner.save_snapshot(snapshot)

    async def load_snapshot(
        self,
        thread_id: str,
        max_seq: int | None = None,
        *,
        resolve: bool = True,
        check: bool = True,
        payloads: bool = False,
    ) -> Snapshot | None:
        return await self.inner.load_snapshot(
            thread_id, max_seq, resolve=resolve, check=check, payloads=payloads
        )

    async def snapshot_seqs(self, thread_id: str) -> list[int]:
        return await self.inner.snapshot_seqs(thread_id)

    async def verify(self, thread_id: str) -> VerifyReport:
        return await self.inner.verify(thread_id)

    async def claim(
        self,
        thread_id: str,
        *,
        purpose: str = "run",
        lease: float = DEFAULT_LEASE,
        under: Claim | None = None,
    ) -> Claim:
        self._check_alive()
        claim = await self.inner.claim(thread_id, purpose=purpose, lease=lease, under=under)
        self._claims[claim.token] = claim
        return claim

    async def release(self, claim: Claim) -> None:
        self.release_threadsafe(claim)

    def release_threadsafe(self, claim: Claim) -> None:
        if self.crashed:
            return  # a dead process releases nothing; bury() lets its claims go
        self._claims.pop(claim.token, None)
        self.inner.release_threadsafe(claim)

    async def relabel(self, claim: Claim, purpose: str) -> None:
        self._check_alive()
        await self.inner.relabel(claim, purpose)

    async def holder(self, thread_id: str) -> Holder | None:
        return await self.inner.holder(thread_id)

    async def close(self) -> None:
        """Close the inner store (after a crash too: a reopen starts from its files)."""
        await self.inner.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "crashed" if self.crashed else f"{self.commits} commits"
        return f"FaultyStore({self.inner!r}, {state})"


def _positive(commit: int) -> int:
    if isinstance(commit, bool) or not isinstance(commit, int) or commit < 1:
        raise ValueError(f"a commit is counted from 1, got {commit!r}")
    return commit


def _boundary(when: str) -> When:
    if when not in ("before", "after"):
        raise ValueError(f"a commit boundary is 'before' or 'after', got {when!r}")
    return "before" if when == "before" else "after"
