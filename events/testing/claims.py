"""The claims' part of the store contract: one owner per thread, fenced appends, takeovers."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time

import pytest

from agentlog.events.claims import HOST, Claim, Holder, process_marker
from agentlog.events.errors import (
    AgentlogError,
    ClaimLostError,
    InvalidAppendError,
    ThreadBusyError,
)
from agentlog.events.kinds import (
    NodeEntered,
    RunCompleted,
    StopRequested,
)
from agentlog.events.store import EventStore
from agentlog.events.testing.base import (
    ConformanceBase,
    eventually,
    step_events,
)

__all__ = ["ClaimConformance"]


class ClaimConformance(ConformanceBase):
    """What every store does with claims: one winner, fencing of appends under a lost claim,
    takeover of dead or silent owners. Needs the `forge_holder` hook."""

    @staticmethod
    def _dead_pid() -> int:
        """The pid of a process that has just ended (and been reaped)."""
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        assert process_marker(proc.pid) == ""
        return proc.pid

    async def test_a_second_claim_is_refused_naming_the_owner(self, store: EventStore) -> None:
        claim = await store.claim("t", purpose="first purpose")
        assert claim.thread_id == "t" and claim.pid == os.getpid() and claim.host == HOST
        with pytest.raises(ThreadBusyError) as info:
            await store.claim("t", purpose="second")
        assert not isinstance(info.value, ClaimLostError)
        message = str(info.value)
        assert "'t'" in message and "this process" in message and "first purpose" in message
        holder = await store.holder("t")
        assert holder is not None and holder.token == claim.token
        assert holder.pid == os.getpid() and holder.purpose == "first purpose"
        other = await store.claim("u")  # claims are per thread
        assert other.token != claim.token
        assert await store.threads() == []  # claiming writes no record

    async def test_concurrent_claims_have_one_winner(self, store: EventStore) -> None:
        results = await asyncio.gather(
            *(store.claim("t", purpose=f"c{i}") for i in range(8)), return_exceptions=True
        )
        winners = [r for r in results if isinstance(r, Claim)]
        assert len(winners) == 1
        assert all(isinstance(r, ThreadBusyError) for r in results if r not in winners)
        holder = await store.holder("t")
        assert holder is not None and holder.token == winners[0].token

    async def test_release_frees_the_thread_and_only_its_own_claim(self, store: EventStore) -> None:
        first = await store.claim("t")
        await store.release(first)
        assert await store.holder("t") is None
        second = await store.claim("t")
        await store.release(first)  # a stale release must not free the new owner's thread
        holder = await store.holder("t")
        assert holder is not None and holder.token == second.token
        with pytest.raises(ThreadBusyError):
            await store.claim("t")
        store.release_threadsafe(second)
        await eventually(  # the thread-safe form does not wait for the write
            lambda: _is_free(store, "t"), what="the thread-safe release to free 't'"
        )
        await store.release(second)  # releasing twice is harmless
        await store.claim("t")

    async def test_an_append_under_a_released_claim_is_lost_and_writes_nothing(
        self, store: EventStore
    ) -> None:
        claim = await store.claim("t")
        await store.append("t", step_events(1), expected_seq=0, claim=claim)
        await store.release(claim)
        with pytest.raises(ClaimLostError, match="'t'") as info:
            await store.append("t", step_events(2), expected_seq=3, claim=claim)
        assert "nothing was written" in str(info.value)
        assert await store.last_seq("t") == 3
        with pytest.raises(ClaimLostError):  # nor on a new thread
            await store.append("t2", step_events(1), expected_seq=0, claim=await _moved(store))
        assert await store.threads() == ["t"]
        assert (await store.verify("t")).ok

    async def test_an_append_under_a_claim_taken_over_is_lost(self, store: EventStore) -> None:
        mine = await store.claim("t")
        await store.append("t", step_events(1), expected_seq=0, claim=mine)
        # Another process judged this owner dead and took the thread over.
        usurper = Holder("other-token", HOST, os.getpid(), process_marker(os.getpid()),
                         time.time(), 30.0, "a takeover")  # fmt: skip
        await self.forge_holder(store, "t", usurper)
        with pytest.raises(ClaimLostError):
            await store.append("t", step_events(2), expected_seq=3, claim=mine)
        with pytest.raises(ClaimLostError):  # even a stop request under a lost claim
            await store.append("t", [StopRequested(by="me")], expected_seq=3, claim=mine)
        assert await store.last_seq("t") == 3
        await store.release(mine)  # must not free the usurper's claim
        holder = await store.holder("t")
        assert holder is not None and holder.token == "other-token"

    async def test_a_claim_fences_only_its_own_thread(self, store: EventStore) -> None:
        claim = await store.claim("t")
        with pytest.raises(InvalidAppendError, match="'t'"):
            await store.append("u", step_events(1), expected_seq=0, claim=claim)
        assert await store.threads() == []

    async def test_an_unclaimed_append_to_an_owned_thread_is_busy_except_stop_requests(
        self, store: EventStore
    ) -> None:
        claim = await store.claim("t", purpose="a long run")
        await store.append("t", step_events(1), expected_seq=0, claim=claim)
        with pytest.raises(ThreadBusyError, match="a long run") as info:
            await store.append("t", step_events(2), expected_seq=3)
        assert not isinstance(info.value, ClaimLostError)
        with pytest.raises(ThreadBusyError):  # a stop request with company is no stop request
            await store.append("t", [StopRequested(by="u"), NodeEntered(node="x")], expected_seq=3)
        assert await store.last_seq("t") == 3
        [stop] = await store.append("t", [StopRequested(by="u", reason="enough")], expected_seq=3)
        assert stop.seq == 4 and stop.event == StopRequested(by="u", reason="enough")
        records = await store.append("t", step_events(2), expected_seq=4, claim=claim)
        assert [r.seq for r in records] == [5, 6, 7]
        await store.release(claim)
        await store.append("t", [RunCompleted()], expected_seq=7)  # free again
        assert (await store.verify("t")).ok

    async def test_relabel_shows_in_the_busy_error(self, store: EventStore) -> None:
        claim = await store.claim("t", purpose="a run of graph 'g'")
        await store.relabel(claim, "tool 'charge' of an earlier run, still running")
        with pytest.raises(ThreadBusyError, match="tool 'charge' of an earlier run") as info:
            await store.claim("t")
        assert "a run of graph" not in str(info.value)
        holder = await store.holder("t")
        assert holder is not None and holder.purpose.startswith("tool 'charge'")
        await store.release(claim)
        newer = await store.claim("t", purpose="newer")
        await store.relabel(claim, "stale relabel")  # a lost claim relabels nothing
        holder = await store.holder("t")
        assert holder is not None and holder.token == newer.token and holder.purpose == "newer"

    async def test_a_claim_under_another_is_taken_only_while_that_one_holds(
        self, store: EventStore
    ) -> None:
        lease = await store.claim("lease")
        claim = await store.claim("t", under=lease)
        holder = await store.holder("t")
        assert holder is not None and holder.token == claim.token
        await store.release(claim)
        await store.release(lease)  # the lease is gone (taken over, or let go)
        with pytest.raises(ClaimLostError, match="no longer held"):
            await store.claim("t", under=lease)
        assert await store.holder("t") is None  # nothing was taken
        await store.release(await store.claim("t"))  # and the thread is free

    async def test_a_claim_of_a_dead_process_on_this_host_is_taken_over_at_once(
        self, store: EventStore
    ) -> None:
        dead = self._dead_pid()
        gone = Holder("dead-token", HOST, dead, "12345", time.time(), 3600.0, "a crashed run")
        await self.forge_holder(store, "t", gone)
        holder = await store.holder("t")
        assert holder is not None and not holder.alive(time.time())
        # Fresh heartbeat, an hour of lease: still dead, because its process is gone.
        await store.append("t", step_events(1), expected_seq=0)  # no live owner: no fence
        claim = await store.claim("t")
        holder = await store.holder("t")
        assert holder is not None and holder.token == claim.token and holder.pid == os.getpid()
        with pytest.raises(ClaimLostError):
            await store.append("t", step_events(2), expected_seq=3, claim=_with_token(claim))

    async def test_a_reused_pid_does_not_keep_a_dead_claim(self, store: EventStore) -> None:
        """A live pid whose start time differs is another process: the owner is gone."""
        reused = Holder("old-token", HOST, os.getpid(), "not-my-start-time", time.time(),
                        3600.0, "a run before a reboot")  # fmt: skip
        await self.forge_holder(store, "t", reused)
        claim = await store.claim("t")
        assert (await store.holder("t")).token == claim.token  # type: ignore[union-attr]

    async def test_a_claim_from_another_host_lives_by_its_heartbeat(
        self, store: EventStore
    ) -> None:
        now = time.time()
        # A pid that is alive here, to show that on another host only the heartbeat counts.
        fresh = Holder("far-token", "farhost/boot-1", os.getpid(), "1", now, 30.0, "far run")
        await self.forge_holder(store, "t", fresh)
        with pytest.raises(ThreadBusyError) as info:
            await store.claim("t")
        message = str(info.value)
        assert "farhost" in message and "far run" in message and "boot-1" not in message
        with pytest.raises(ThreadBusyError):
            await store.append("t", step_events(1), expected_seq=0)

        stale = Holder("far-token", "farhost/boot-1", 1, "1", now - 31.0, 30.0, "far run")
        await self.forge_holder(store, "t", stale)
        claim = await store.claim("t")
        assert (await store.holder("t")).token == claim.token  # type: ignore[union-attr]
        await store.release(claim)

        # Each holder's own lease counts: the same silence is alive under a long lease and
        # dead under a short one (no waiting for a lease to run out, so no clock to race).
        silent_since = time.time() - 2.0
        long = Holder("long-token", "farhost/boot-1", 1, "1", silent_since, 60.0, "long lease")
        await self.forge_holder(store, "u", long)
        with pytest.raises(ThreadBusyError, match="long lease"):
            await store.claim("u")
        short = Holder("short-token", "farhost/boot-1", 1, "1", silent_since, 1.0, "short lease")
        await self.forge_holder(store, "u", short)
        await store.claim("u")

    async def test_claims_are_checked_like_appends(self, store: EventStore) -> None:
        for bad in ("", "  ", "-rf", "a\nb", "bell\x07"):
            with pytest.raises(InvalidAppendError):
                await store.claim(bad)
        assert await store.threads() == []

    async def test_a_bad_lease_is_a_typed_error(self, store: EventStore) -> None:
        for lease in (0, -1.0, float("nan"), True, "30"):
            with pytest.raises(AgentlogError, match="lease"):
                await store.claim("t", lease=lease)  # type: ignore[arg-type]
        assert await store.holder("t") is None


async def _moved(store: EventStore) -> Claim:
    """A claim of thread "t2" that was released again: what a run holds after a takeover."""
    claim = await store.claim("t2")
    await store.release(claim)
    return claim


def _with_token(claim: Claim) -> Claim:
    """The same claim as a dead owner would still hold it (its old token)."""
    return dataclasses.replace(claim, token="dead-token")


async def _is_free(store: EventStore, thread_id: str) -> bool:
    return await store.holder(thread_id) is None
