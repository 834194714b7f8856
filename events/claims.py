"""Thread claims: one owner per thread at a time, across processes and hosts.

A run claims its thread in the store before it writes or runs anything, and every append it
makes carries the claim's token (fencing), so an owner that was taken over cannot write. An
owner is judged alive by the rule here, shared by every store: on this host, by its process
(gone means dead at once, so the first restart after a crash just works); on another host,
only by its heartbeat, which must be younger than its lease.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from agentlog.events.errors import ClaimLostError, InvalidClaimError, ThreadBusyError

DEFAULT_LEASE = 30.0
"""Seconds a claim stays valid across hosts without a heartbeat."""


@dataclass(frozen=True)
class Claim:
    """A run's ownership of one thread; pass it to `append` so the store can fence it."""

    thread_id: str
    token: str
    host: str
    pid: int
    started: str
    lease: float
    purpose: str = "run"
    last_seq: int | None = field(default=None, compare=False)
    """The thread's last seq as the store recorded the claim (None: the store did not say).
    Since then, only the holder and stop requests can have appended to it (fencing)."""


@dataclass(frozen=True)
class Holder:
    """What a store knows of a thread's current owner."""

    token: str
    host: str
    pid: int
    started: str
    heartbeat_at: float
    lease: float
    purpose: str

    def alive(self, now: float) -> bool:
        """True while the owner may still be working (see the module's rule).

        In this very process an owner is alive while its claim is held: a claim whose
        holder never learnt of it (its caller was cancelled mid-claim) is dead at once.
        """
        if self.host == HOST:
            if self.pid == PID:
                return holds(self.token)
            return self.started == process_marker(self.pid)
        return now - self.heartbeat_at < self.lease

    def busy_error(self, thread_id: str, now: float) -> ThreadBusyError:
        """The error telling a second comer who holds the thread."""
        where = "this process" if (self.host, self.pid) == (HOST, PID) else f"process {self.pid}"
        if self.host != HOST:
            where += f" on host {self.host.split('/')[0]}"
        return ThreadBusyError(
            f"thread {thread_id!r} is owned by {where} ({self.purpose}; heartbeat "
            f"{max(now - self.heartbeat_at, 0.0):.0f}s ago): wait until that work is done "
            "(`await app.await_idle(config, timeout=...)` waits for it; a running run can be "
            "asked to pause with astop()); two runs never share a thread"
        )


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


_own_marker: tuple[int, str] | None = None


def process_marker(pid: int) -> str:
    """A string that changes when `pid` is reused; "" when no such process runs.

    On Linux it is the process's start time from /proc; elsewhere a live pid gives "pid"
    (a reused pid then looks alive until its lease runs out). This process's own marker is
    read once (per pid: a forked child reads its own), as every claim it takes names it.
    """
    global _own_marker
    if pid == os.getpid():
        if _own_marker is None or _own_marker[0] != pid:
            _own_marker = (pid, _read_marker(pid))
        return _own_marker[1]
    return _read_marker(pid)


def _read_marker(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):  # a zombie has finished its work
            return ""
        return fields[19].decode()
    except FileNotFoundError:
        return ""
    except (OSError, ValueError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return ""
    except PermissionError:
        return "pid"
    return "pid"


HOST = f"{socket.gethostname()}/{_boot_id()}"
"""This host, as claims name it: its name and boot, so a rebooted host's owners are dead."""

PID = os.getpid()


_held: set[str] = set()
_held_lock = threading.Lock()


def hold(claim: Claim) -> None:
    """Note that this process holds `claim` (a store calls it once the claim is recorded)."""
    with _held_lock:
        _held.add(claim.token)


def let_go(claim: Claim) -> None:
    """Note that this process no longer holds `claim`, whatever the store says."""
    with _held_lock:
        _held.discard(claim.token)


def holds(token: str) -> bool:
    """Whether this process holds the claim with `token`."""
    with _held_lock:
        return token in _held


def new_claim(thread_id: str, *, lease: float = DEFAULT_LEASE, purpose: str = "run") -> Claim:
    """A fresh claim by this process, not yet recorded in any store."""
    if isinstance(lease, bool) or not isinstance(lease, int | float) or not lease > 0:
        raise InvalidClaimError(
            f"a claim's lease must be a number of seconds > 0, got {lease!r}: it bounds how "
            "long another host waits for an owner that stopped beating"
        )
    pid = os.getpid()
    return Claim(thread_id, uuid.uuid4().hex, HOST, pid, process_marker(pid), lease, purpose)


class Heartbeat:
    """A daemon thread renewing a store's live claims, off the event loop.

    A run blocked in a slow tool keeps its claim: its heartbeat does not wait for the loop.
    A claim is first renewed a third of its lease after it was taken (taking it wrote its
    heartbeat), so a short run commits no beat of its own; then every third of a lease.
    """

    def __init__(self, renew: Callable[[list[Claim], float], None]) -> None:
        self._renew = renew
        self._claims: dict[str, Claim] = {}
        self._due: dict[str, float] = {}  # token -> when (monotonic) its next beat is due
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._wake_at = 0.0  # when (monotonic) the thread means to wake next

    def add(self, claim: Claim) -> None:
        """Renew `claim` from a third of its lease on."""
        with self._lock:
            self._claims[claim.token] = claim
            due = self._due[claim.token] = time.monotonic() + claim.lease / 3
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(
                    target=self._run, name="agentlog-heartbeat", daemon=True
                )
                self._thread.start()
                return
            sooner = due < self._wake_at
        if sooner:  # a shorter lease than the thread sleeps for beats soon; else no wake-up
            self._wake.set()

    def discard(self, claim: Claim) -> None:
        """Stop renewing `claim`."""
        with self._lock:
            self._claims.pop(claim.token, None)
            self._due.pop(claim.token, None)

    def stop(self) -> None:
        """End the thread (the store is closing)."""
        self._stopped = True
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped:
            with self._lock:
                now = time.monotonic()
                # all at once when one is due: one commit renews every live claim
                due = any(at <= now for at in self._due.values())
                claims = list(self._claims.values()) if due else []
                for claim in claims:
                    self._due[claim.token] = now + claim.lease / 3
                nearest = min(self._due.values(), default=now + DEFAULT_LEASE / 3)
                self._wake_at = nearest
            if claims:
                with contextlib.suppress(Exception):  # busy or closing: the next beat retries
                    self._renew(claims, time.time())
            self._wake.wait(max(0.0, nearest - time.monotonic()))
            self._wake.clear()


def lost_under(claim: Claim, under: Claim) -> ClaimLostError:
    """The error for a claim asked `under` another that is no longer held."""
    return ClaimLostError(
        f"thread {claim.thread_id!r} was not claimed: it was asked under the claim on "
        f"{under.thread_id!r}, which is no longer held (taken over or released)"
    )


def fence(
    thread_id: str, token: str | None, only_stop_requests: bool, holder: Holder | None, now: float
) -> Exception | None:
    """Why an append may not write under the thread's current claim; None when it may.

    A claimed append must hold the claim itself. An append without a claim may write to a
    thread without a live owner, and to any thread when all it does is ask for a stop.
    """
    if token is not None:
        if holder is None or holder.token != token:
            return ClaimLostError(
                f"thread {thread_id!r} is no longer claimed by this run (its claim was taken "
                "over or released); nothing was written: this run must stop"
            )
        return None
    if holder is not None and holder.alive(now) and not only_stop_requests:
        return holder.busy_error(thread_id, now)
    return None
