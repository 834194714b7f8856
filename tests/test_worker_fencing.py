"""Exactly once across hosts: PostgreSQL workers posing as two hosts, one frozen (SIGSTOP)
past its lease or with its clock 45 s off, never run a trigger to its end twice.

Each worker is a real process (`tests.workers.posing_worker`) with a host name and a clock
offset of its own; side effects are lines appended to a file, counted at the end. The lease
is short (1.5 s) so that the repetitions fit in CI; AGENTLOG_FENCE_REPS sets their number.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentlog.actors.runtime.ledger import Ledger
from agentlog.actors.testing import until
from agentlog.events import open_store
from tests.workers.pg_env import DSN, fresh_schema, needs_pg

pytestmark = [needs_pg, pytest.mark.slow]  # worker processes on PostgreSQL: 20-40 s each

ROOT = Path(__file__).resolve().parent.parent
WAIT = 120.0
"""A failure guard only: every wait below ends on an event long before."""
REPS = int(os.environ.get("AGENTLOG_FENCE_REPS", "20"))
"""Runs taken over from a frozen worker (and runs per clock skew)."""
PER_ROUND = 4


@contextmanager
def workers(
    dsn: str, folder: Path, specs: list[tuple[str, str, float]], hold_s: float = 0.0
) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Start one posing worker per (worker id, host, clock offset); stop them after."""
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for name, host, offset in specs:
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "AGENTLOG_TEST_HOST": host,
                "AGENTLOG_TEST_CLOCK_OFFSET": str(offset),
                "AGENTLOG_TEST_LEASE": "1.5",
                "AGENTLOG_TEST_HOLD": str(hold_s),
            }
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.workers.posing_worker", dsn, str(folder), name],
                cwd=ROOT, env=env, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            procs[name] = proc
            assert proc.stdout is not None
            ready = proc.stdout.readline().strip()
            assert ready == "ready", proc.stderr.read() if proc.stderr else ""
        yield procs
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGCONT)
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in procs.values():
            try:
                proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def trigger(proc: subprocess.Popen[str], thread: str) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"trigger {thread}\n")
    proc.stdin.flush()
    answer = proc.stdout.readline().strip()
    assert answer == f"ok {thread}", answer


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def runtime_ledger(store: object) -> tuple[Ledger, collections.Counter[str]]:
    """The ledger, and how often each trigger was dispatched."""
    ledger = Ledger()
    records = [r async for r in store.read("__runtime__")]  # type: ignore[attr-defined]
    ledger.apply_all(records)
    dispatched = collections.Counter(
        r.event.trigger_id for r in records if r.kind == "trigger_dispatched"
    )
    return ledger, dispatched


async def check_once_each(store: object, folder: Path, threads: list[str]) -> Ledger:
    """Every thread ran to its end once: one run, each side effect once, one end each."""
    effects = collections.Counter((kind, thread) for kind, thread, _ in lines(folder / "effects"))
    for thread in threads:
        assert effects[("one", thread)] == 1, (thread, lines(folder / "effects"))
        assert effects[("two", thread)] == 1, (thread, lines(folder / "effects"))
        kinds = [r.kind async for r in store.read(thread)]  # type: ignore[attr-defined]
        assert kinds.count("run_started") == 1, (thread, kinds)
        assert kinds.count("run_completed") == 1, (thread, kinds)
    ledger, _ = await runtime_ledger(store)
    ends = collections.Counter(
        [
            r.event.trigger_id
            async for r in store.read("__runtime__")  # type: ignore[attr-defined]
            if r.kind == "trigger_finished"
        ]
    )
    assert len(ledger.triggers) == len(threads)
    assert all(t.outcome == "completed" for t in ledger.triggers.values())
    assert set(ends.values()) == {1}, ends
    return ledger


async def test_a_worker_frozen_past_its_lease_gives_its_trigger_up(tmp_path: Path) -> None:
    """The frozen worker's runs are taken over and completed by the other; when it wakes its
    commits are fenced, and it gives each trigger up instead of sending its input again.

    Each round runs `PER_ROUND` triggers at once and freezes the worker running the first;
    rounds go on until `REPS` runs were taken over from a frozen worker."""
    marks, effects = tmp_path / "marks", tmp_path / "effects"

    def holders(thread: str) -> list[str]:
        """The workers that entered "hold" on `thread`, first first."""
        return [m[2] for m in lines(marks) if m[:2] == ["hold", thread]]

    def ran_again(thread: str) -> bool:
        return [e[:2] for e in lines(effects)].count(["one", thread]) > 1

    async with fresh_schema() as schema:
        dsn = f"{DSN}{'&' if '?' in DSN else '?'}schema={schema}"
        specs = [("wa", "host-a", 0.0), ("wb", "host-b", 0.0)]
        threads: list[str] = []
        taken_over = 0
        async with open_store(dsn) as store:

            async def ended(batch: list[str]) -> bool:
                ledger, _ = await runtime_ledger(store)
                done = {t.accepted.thread_id for t in ledger.triggers.values() if t.done}
                return done.issuperset(batch)

            with workers(dsn, tmp_path, specs) as procs:
                while taken_over < REPS:
                    batch = [f"t{len(threads) + i}" for i in range(PER_ROUND)]
                    threads += batch
                    for thread in batch:
                        trigger(procs[specs[len(threads) // PER_ROUND % 2][0]], thread)
                    await until(
                        lambda: all(holders(t) for t in batch),  # noqa: B023
                        timeout=WAIT,
                        what="every run to start",
                    )
                    name = holders(batch[0])[0]
                    taken = [t for t in batch if holders(t)[0] == name]
                    procs[name].send_signal(signal.SIGSTOP)
                    await until(
                        lambda: all(len(set(holders(t))) == 2 for t in taken),  # noqa: B023
                        timeout=WAIT,
                        what=f"the runs of frozen {name} to be taken over",
                    )
                    for thread in batch:
                        (tmp_path / f"go-{thread}").touch()
                    await until(lambda: ended(batch), timeout=WAIT, what=f"{batch} to end")  # noqa: B023
                    procs[name].send_signal(signal.SIGCONT)
                    await until(
                        lambda: all(
                            ["gave-up", t, name] in lines(marks) or ran_again(t)  # noqa: B023
                            for t in taken  # noqa: B023
                        ),
                        timeout=WAIT,
                        what=f"{name} to give {taken} up once awake",
                    )
                    taken_over += len(taken)
            await check_once_each(store, tmp_path, threads)


@pytest.mark.parametrize("skew", [45.0, -45.0])
async def test_a_clock_45_s_off_takes_no_run_from_a_live_worker(
    tmp_path: Path, skew: float
) -> None:
    """One worker's clock runs `skew` seconds off the other's: neither takes a run the other
    is running (liveness is judged by the database's clock), so each runs once, dispatched
    once."""
    async with fresh_schema() as schema:
        dsn = f"{DSN}{'&' if '?' in DSN else '?'}schema={schema}"
        specs = [("wa", "host-a", skew), ("wb", "host-b", 0.0)]
        threads = [f"s{i}" for i in range(REPS)]
        for thread in threads:
            (tmp_path / f"go-{thread}").touch()
        async with open_store(dsn) as store:
            with workers(dsn, tmp_path, specs, hold_s=1.0) as procs:
                for i, thread in enumerate(threads):
                    trigger(procs[specs[i % 2][0]], thread)

                async def all_done() -> collections.Counter[str] | None:
                    ledger, dispatched = await runtime_ledger(store)
                    done = len(ledger.triggers) == len(threads) and all(
                        t.done for t in ledger.triggers.values()
                    )
                    return dispatched if done else None

                dispatched = await until(all_done, timeout=WAIT, what="the runs to end")
            assert set(dispatched.values()) == {1}, dispatched  # none taken over
            assert not [m for m in lines(tmp_path / "marks") if m[0] == "gave-up"]
            await check_once_each(store, tmp_path, threads)
            runners = {m[2] for m in lines(tmp_path / "marks") if m[0] == "hold"}
            assert runners == {"wa", "wb"}, runners  # both ran runs: the skew met live work
