"""Many workers sharing one store: every triggered run runs once, a dead worker's runs are
taken over, timer slots and answered records fire once across workers.

`shared_store_cases` runs the same checks on SQLite (several processes on one file) and, when
AGENTLOG_PG_DSN is set, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig, dispatch
from agentlog.actors.runtime.ledger import Ledger
from agentlog.actors.testing import WaitTimeoutError, until, wait_for_record
from agentlog.events import (
    MemoryEventStore,
    SQLiteEventStore,
    StoreUnavailableError,
    ThreadBusyError,
    open_store,
)
from agentlog.events.kinds import TriggerAccepted, TriggerDispatched
from agentlog.projections import replay
from tests.helpers import line
from tests.workers.worker_app import build

ROOT = Path(__file__).resolve().parent.parent
WAIT = 120.0


def said(state: Any) -> list[Any]:
    from agentlog.projections import Message

    return [Message.text_message("ok", role="assistant")]


def worker(store: Any, name: str, **config: Any) -> AgentRuntime:
    runtime = AgentRuntime(store, RuntimeConfig(worker_id=name, **config))
    runtime.add_graph("g", line(("work", said)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    return runtime


async def ledger_of(store: Any) -> Ledger:
    ledger = Ledger()
    ledger.apply_all([r async for r in store.read("__runtime__")])
    return ledger


async def test_workers_in_one_process_share_the_runs_and_each_runs_once(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    stores = [SQLiteEventStore(db) for _ in range(3)]
    for store in stores:
        await store.open()
    workers = [worker(store, f"w{i}") for i, store in enumerate(stores)]
    for runtime in workers:
        await runtime.start()
    threads = [await workers[i % 3].trigger("api", f"go {i}") for i in range(60)]
    for i, thread in enumerate(threads):
        result = await workers[(i + 1) % 3].wait(thread, timeout=WAIT)  # another worker waits
        assert result["status"] == "completed"
    for runtime in workers:
        await runtime.stop()
    ledger = await ledger_of(stores[0])
    finished = collections.Counter(
        [
            r.event.trigger_id
            async for r in stores[0].read("__runtime__")
            if r.kind == "trigger_finished"
        ]
    )
    assert set(finished.values()) == {1} and len(finished) == 60
    for thread in threads:
        records = [r async for r in stores[0].read(thread)]
        assert [r.kind for r in records].count("run_started") == 1
        assert replay(records).execution_meta.status.value == "completed"
    assert all(t.outcome == "completed" for t in ledger.triggers.values())
    for store in stores:
        await store.close()


async def test_a_lone_runtime_and_workers_do_not_share_a_store(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "x.db") as store:
        lone = AgentRuntime(store)
        lone.add_graph("g", line(("work", said)).compile(store))
        async with lone:
            with pytest.raises(ThreadBusyError, match="workers share a store only"):
                await worker(store, "w1").start()
        with pytest.raises(Exception, match="worker_id is a non-empty string"):
            RuntimeConfig(worker_id="")
        with pytest.raises(Exception, match="lease_s is a number"):
            RuntimeConfig(worker_id="w", lease_s=0)


def spawn(address: str, effects: Path, name: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workers.worker_app", address, str(effects), name],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
    return proc


async def shared_workers_survive_a_kill(address: str, effects: Path, runs: int) -> None:
    """Three worker processes and this one share `address`; this one triggers `runs` runs
    and stops cleanly, one worker is SIGKILLed mid-way; everything runs exactly once."""
    procs = {name: spawn(address, effects, name) for name in ("w1", "w2", "w3")}
    try:
        async with open_store(address) as store:
            here = build(store, str(effects), "w0", max_runs=1)  # mostly a client
            await here.start()
            threads = [
                await here.trigger("api", f"order {i}", idempotency_key=f"k{i}")
                for i in range(runs)
            ]
            await here.stop()  # its own runs pause between nodes: the others take them over

            async def finished(count: int) -> bool:
                ledger = await ledger_of(store)
                api = [t for t in ledger.triggers.values() if t.accepted.entry_point == "api"]
                return len([t for t in api if t.done]) >= count

            await until(lambda: finished(runs // 5), timeout=WAIT, what="a fifth of the runs")
            procs["w1"].send_signal(signal.SIGKILL)
            procs["w1"].wait(10)
            killed = True
            with contextlib.suppress(WaitTimeoutError):  # what did not end is reported below
                await until(lambda: finished(runs), timeout=WAIT, what="every run to end")
            ledger = await ledger_of(store)
            api = [t for t in ledger.triggers.values() if t.accepted.entry_point == "api"]
            odd = [t for t in api if t.outcome != "completed"]
            if odd:  # say who recorded what about it and where its thread stands
                told = [
                    (r.position, r.kind, r.actor, getattr(r.event, "outcome", None))
                    async for r in store.read("__runtime__")
                    if getattr(r.event, "trigger_id", None) == odd[0].id
                ]
                tail = [(r.kind, r.actor) async for r in store.read(odd[0].accepted.thread_id)]
                pytest.fail(f"{len(odd)} run(s) did not complete; {odd[0].id}: {told}; {tail}")
            assert killed

            async def all_ended() -> bool:  # the audit runs of the last completions
                triggers = (await ledger_of(store)).triggers.values()
                audits = [t for t in triggers if t.accepted.entry_point == "after"]
                return len(audits) >= runs and all(t.done for t in audits)

            await until(all_ended, timeout=WAIT, what="every audit run to end")
            for name in ("w2", "w3"):
                procs[name].send_signal(signal.SIGTERM)
            for name in ("w2", "w3"):
                _, err = procs[name].communicate(timeout=60)
                assert procs[name].returncode == 0, err
            await check_everything_once(store, threads, effects, procs["w1"].pid)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def check_everything_once(
    store: Any, threads: list[str], effects: Path, killed_pid: int
) -> None:
    ledger = await ledger_of(store)
    finishes = collections.Counter(
        [
            (r.event.trigger_id, r.event.outcome)
            async for r in store.read("__runtime__")
            if r.kind == "trigger_finished"
        ]
    )
    twice = [t for (t, outcome), n in finishes.items() if outcome == "completed" and n > 1]
    if twice:  # say who recorded what about it, so a failure can be read
        told = [
            (r.position, r.kind, r.actor, getattr(r.event, "attempt", None))
            async for r in store.read("__runtime__")
            if getattr(r.event, "trigger_id", None) == twice[0]
        ]
        pytest.fail(f"trigger {twice[0]} finished twice: {told}")
    for thread in threads:
        report = await store.verify(thread)
        assert report.ok, report
        records = [r async for r in store.read(thread)]
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        state = replay(records)
        assert [m.text() for m in state.context if m.role == "assistant"][-1] == "shipped"
        assert [r.kind for r in records].count("tool_call_finished") == 1
    ran: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
    for entry in effects.read_text().splitlines():
        name, pid, call = entry.split()
        ran[call].append((name, int(pid)))
    for call, runs in ran.items():
        # a second execution only when the first was the killed worker's, cut off before
        # its result was committed (a committed result is never run again)
        assert len(runs) == 1 or (len(runs) == 2 and runs[0][1] == killed_pid), (call, runs)
    slots = [
        t.accepted.slot
        for t in ledger.triggers.values()
        if t.accepted.entry_point == "tick" and t.outcome != "rejected"
    ]
    assert len(slots) == len(set(slots)) and slots, "a timer slot fired twice"
    answered = [
        t.accepted.source_position
        for t in ledger.triggers.values()
        if t.accepted.entry_point == "after" and t.outcome != "rejected"
    ]
    assert len(answered) == len(set(answered)), "a record was answered twice"


@pytest.mark.slow
async def test_three_sqlite_worker_processes_and_a_sigkill(tmp_path: Path) -> None:
    await shared_workers_survive_a_kill(str(tmp_path / "shared.db"), tmp_path / "effects", 120)


@pytest.mark.slow
async def test_three_postgres_worker_processes_and_a_sigkill(tmp_path: Path) -> None:
    from tests.workers.pg_env import DSN, SKIP_REASON, fresh_schema

    if not DSN:
        pytest.skip(SKIP_REASON)
    async with fresh_schema() as schema:
        sep = "&" if "?" in DSN else "?"
        await shared_workers_survive_a_kill(f"{DSN}{sep}schema={schema}", tmp_path / "fx", 300)


# ---- store failures while dispatching ------------------------------------------------------


class FlakyStore(MemoryEventStore):
    """Fails the first `failures` appends recording a dispatch on its own (not with the
    trigger's acceptance), as a lost server would."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def append(self, thread_id: str, events: Sequence[Any], **kwargs: Any) -> Any:
        if (
            self.failures
            and any(isinstance(e, TriggerDispatched) for e in events)
            and not any(isinstance(e, TriggerAccepted) for e in events)
        ):
            self.failures -= 1
            raise StoreUnavailableError("the connection to PostgreSQL was lost (test)")
        return await super().append(thread_id, events, **kwargs)


class FlakyClaims(MemoryEventStore):
    """Fails the first claim of a worker's lease, as a lost server would."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def claim(self, thread_id: str, **kwargs: Any) -> Any:
        if "/lease/" in thread_id and not self.failed:
            self.failed = True
            raise StoreUnavailableError("the connection to PostgreSQL was lost (test)")
        return await super().claim(thread_id, **kwargs)


@pytest.fixture
def quick_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "STORE_RETRY_S", 0.05)


def runtime_on(store: Any, worker_id: str | None, max_runs: int = 100) -> AgentRuntime:
    config = RuntimeConfig(worker_id=worker_id, poll_s=0.05, max_concurrent_runs=max_runs)
    runtime = AgentRuntime(store, config)
    runtime.add_graph("g", line(("work", said)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    return runtime


@pytest.mark.parametrize("worker_id", [None, "w1"])
async def test_a_dispatch_the_store_failed_is_tried_again(
    worker_id: str | None, caplog: pytest.LogCaptureFixture, quick_retry: None
) -> None:
    """A store failure while a queued trigger is dispatched (the server restarting, the
    runtime thread held by a lone runtime) leaves it accepted and tries it again, logged.
    (One run at a time: the second trigger queues, so its dispatch is a commit of its own.)"""
    store = FlakyStore(failures=2)
    async with store, runtime_on(store, worker_id, max_runs=1) as runtime:
        with caplog.at_level(logging.WARNING, logger="agentlog.actors.runtime.dispatch"):
            threads = await asyncio.gather(
                runtime.trigger("api", "go"), runtime.trigger("api", "on")
            )
            results = [await runtime.wait(thread, timeout=10) for thread in threads]
    assert [r["status"] for r in results] == ["completed"] * 2 and store.failures == 0
    warned = [r.getMessage() for r in caplog.records if "could not be run" in r.getMessage()]
    assert len(warned) == 2 and "'api'" in warned[0] and "lost (test)" in warned[0]


async def test_a_lease_the_store_failed_to_take_does_not_block_the_thread(
    quick_retry: None,
) -> None:
    store = FlakyClaims()
    async with store, runtime_on(store, "w1") as runtime:
        thread = await runtime.trigger("api", "go")
        result = await runtime.wait(thread, timeout=10)
        again = await runtime.trigger("api", "again", thread_id=thread)
        assert (await runtime.wait(again, timeout=10))["status"] == "completed"
    assert result["status"] == "completed" and store.failed


async def test_two_live_workers_never_share_an_id(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    first_store, second_store = SQLiteEventStore(db), SQLiteEventStore(db)
    async with first_store, second_store:
        first = worker(first_store, "w1")
        await first.start()
        second = worker(second_store, "w1")
        with pytest.raises(
            ThreadBusyError,
            match=r"worker id .w1. is in use by a live worker on this store \(process \d+ .*--id",
        ):
            await second.start()
        assert not second.started  # refused whole: nothing of it keeps running
        other = worker(second_store, "w2")
        async with other:  # another id on the same store is welcome
            thread = await other.trigger("api", "go")
            assert (await other.wait(thread, timeout=WAIT))["status"] == "completed"
        await first.stop()
        async with worker(second_store, "w1") as again:  # the id is free once w1 stopped
            assert again.started


async def test_a_lone_runtime_is_refused_while_a_worker_runs_a_run(tmp_path: Path) -> None:
    from agentlog.projections import Message

    db = tmp_path / "shared.db"
    release = asyncio.Event()

    async def slow(state: Any) -> list[Any]:
        await release.wait()
        return [Message.text_message("ok", role="assistant")]

    worker_store, lone_store = SQLiteEventStore(db), SQLiteEventStore(db)
    async with worker_store, lone_store:
        busy = AgentRuntime(worker_store, RuntimeConfig(worker_id="w1"))
        busy.add_graph("g", line(("work", slow)).compile(worker_store))
        busy.register_entry_point(EntryPoint(id="api", graph_id="g"))
        async with busy:
            thread = await busy.trigger("api", "go")
            await wait_for_record(worker_store, "__runtime__", "trigger_dispatched")
            lone = AgentRuntime(lone_store)
            lone.add_graph("g", line(("work", said)).compile(lone_store))
            lone.register_entry_point(EntryPoint(id="api", graph_id="g"))
            with pytest.raises(ThreadBusyError, match=r"workers run on this store.*as a worker"):
                await lone.start()
            assert not lone.started and await lone_store.holder("__runtime__") is None
            release.set()
            assert (await busy.wait(thread, timeout=WAIT))["status"] == "completed"
        async with lone:  # the workers gone, a lone runtime is welcome
            assert lone.started


async def test_a_lone_runtime_is_refused_while_a_worker_is_alive_and_idle(tmp_path: Path) -> None:
    """A worker that has run a trigger and now waits for more is still a worker of this
    store: a lone runtime is refused as when it runs one (it was let in, and the two would
    each run the triggers they share)."""
    db = tmp_path / "shared.db"
    worker_store, lone_store = SQLiteEventStore(db), SQLiteEventStore(db)
    async with worker_store, lone_store:
        idle = worker(worker_store, "w1")
        async with idle:
            thread = await idle.trigger("api", "go")
            assert (await idle.wait(thread, timeout=WAIT))["status"] == "completed"
            lone = AgentRuntime(lone_store)
            lone.add_graph("g", line(("work", said)).compile(lone_store))
            lone.register_entry_point(EntryPoint(id="api", graph_id="g"))
            with pytest.raises(ThreadBusyError, match=r"workers run on this store.*worker w1"):
                await lone.start()
            assert not lone.started and await lone_store.holder("__runtime__") is None
        async with lone:  # the worker gone, a lone runtime is welcome
            assert lone.started


class FailsOneAcceptance(MemoryEventStore):
    """Fails the first append that records a trigger's acceptance."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def append(self, thread_id: str, events: Sequence[Any], **kwargs: Any) -> Any:
        if not self.failed and any(isinstance(e, TriggerAccepted) for e in events):
            self.failed = True
            raise StoreUnavailableError("the connection to PostgreSQL was lost (test)")
        return await super().append(thread_id, events, **kwargs)


async def test_an_acceptance_the_store_failed_records_nothing_and_gives_its_slot_back() -> None:
    """A trigger whose acceptance (and dispatch with it) fails to commit raises the store's
    error and records nothing; the one run slot it held is free again for the next."""
    store = FailsOneAcceptance()
    async with store, runtime_on(store, None, max_runs=1) as runtime:
        with pytest.raises(StoreUnavailableError, match="lost"):
            await runtime.trigger("api", "go")  # a new thread: dispatched with its acceptance
        assert runtime.ledger.triggers == {}
        thread = await runtime.trigger("api", "again")
        result = await runtime.wait(thread, timeout=10)
    assert result["status"] == "completed"
    assert [m.text() for m in result["messages"]] == ["again", "ok"]
