"""Retention: a thread's oldest runs pruned from the store, its chain still proven, the thread
still resumable; SQLite and PostgreSQL (AGENTLOG_PG_DSN)."""

from __future__ import annotations

import base64
import io
import os
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentlog.actors import END, StateGraph
from agentlog.actors.engine.erasure import erase_subject
from agentlog.actors.engine.retention import prune_thread, verify_archive
from agentlog.events import (
    EventStore,
    InvalidArgumentError,
    MemoryEventStore,
    SQLiteEventStore,
    StoreError,
    export_jsonl,
)
from agentlog.events.keystore import pruned_floor, vacuum
from agentlog.events.kinds import Pruned
from agentlog.events.sealing import MASTER_KEY_ENV
from agentlog.projections import AgentState, Message

from .workers.pg_env import DSN, fresh_schema


@pytest.fixture(autouse=True)
def master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, base64.urlsafe_b64encode(bytes(range(32))).decode())


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    if request.param == "sqlite":
        async with SQLiteEventStore(tmp_path / "log.db") as sqlite:
            yield sqlite
    else:
        if not DSN:
            pytest.skip("AGENTLOG_PG_DSN is unset")
        from agentlog.events.stores.postgres import PostgresEventStore

        async with fresh_schema() as schema, PostgresEventStore(DSN, schema=schema) as pg:
            yield pg


def echo_graph() -> StateGraph[AgentState]:
    def reply(state: AgentState) -> list[Message]:
        return [Message.text_message(f"echo {state.context[-1].text()}", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph(AgentState)
    graph.add_node("reply", reply)
    graph.set_entry_point("reply")
    graph.add_edge("reply", END)
    return graph


async def _runs(
    store: EventStore, thread: str, texts: list[str], subject: str | None = None
) -> None:
    app = echo_graph().compile(store)
    config = {"thread_id": thread} | ({"subject": subject} if subject else {})
    for text in texts:
        await app.ainvoke({"messages": [Message.text_message(text)]}, config)


async def test_prune_keeps_the_last_runs_provable_and_resumable(store: EventStore) -> None:
    await _runs(store, "t", [f"message {i}" for i in range(5)])
    before = [r async for r in store.read("t")]
    archive = io.StringIO()
    await export_jsonl(store, "t", archive)
    report = await prune_thread(store, "t", keep_runs=2, by="ops", reason="90 days")
    assert report is not None and report.removed == report.through_seq
    kept = [r async for r in store.read("t")]
    assert kept[0].seq == report.through_seq + 1
    assert [r.hash for r in kept[:-1]] == [r.hash for r in before[report.through_seq :]]
    last = kept[-1].event
    assert isinstance(last, Pruned) and last.last_hash == before[report.through_seq - 1].hash
    verdict = await store.verify("t")
    assert verdict.ok and verdict.records_checked == len(kept), verdict
    assert await pruned_floor(store, "t") == (report.through_seq, bytes.fromhex(last.last_hash))
    # the state is whole: every message, those of pruned runs from the snapshot
    app = echo_graph().compile(store)
    state = await app.aget_state({"thread_id": "t"})
    assert [m.text() for m in state.context][-2:] == ["message 4", "echo message 4"]
    assert len(state.context) == 10
    await app.ainvoke({"messages": [Message.text_message("after")]}, {"thread_id": "t"})
    state = await app.aget_state({"thread_id": "t"})
    assert len(state.context) == 12 and (await store.verify("t")).ok
    # nothing more to prune, then a second prune links to the first's floor
    assert await prune_thread(store, "t", keep_runs=3) is None
    again = await prune_thread(store, "t", keep_runs=1)
    assert again is not None and again.removed == again.through_seq - report.through_seq
    assert (await store.verify("t")).ok
    assert len((await app.aget_state({"thread_id": "t"})).context) == 12


async def test_an_archive_of_the_prefix_links_to_the_kept_chain(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        await _runs(store, "t", ["a", "b", "c"])
        await export_jsonl(store, "t", tmp_path / "archive.jsonl")
        await _runs(store, "other", ["x"])
        await export_jsonl(store, "other", tmp_path / "wrong.jsonl")
        await prune_thread(store, "t", keep_runs=1)
        assert (await verify_archive(store, "t", tmp_path / "archive.jsonl")).startswith("ok")
        with pytest.raises(InvalidArgumentError, match="does not hold record"):
            await verify_archive(store, "t", tmp_path / "wrong.jsonl")


async def test_a_removed_floor_or_pruned_record_fails_verify(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    async with SQLiteEventStore(path) as store:
        await _runs(store, "t", ["a", "b", "c"])
        report = await prune_thread(store, "t", keep_runs=1)
        assert report is not None
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE pruned_floors SET last_hash = zeroblob(32)")
    async with SQLiteEventStore(path) as store:
        assert not (await store.verify("t")).ok
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM pruned_floors")
    async with SQLiteEventStore(path) as store:
        verdict = await store.verify("t")
        assert not verdict.ok and "missing" in (verdict.problem or "")


async def test_pruning_is_refused_with_a_reason(tmp_path: Path) -> None:
    memory = MemoryEventStore()
    await _runs(memory, "t", ["a", "b"])
    with pytest.raises(StoreError, match="cannot prune"):
        await prune_thread(memory, "t", keep_runs=1)
    with pytest.raises(InvalidArgumentError, match="one of them"):
        await prune_thread(memory, "t", keep_runs=1, keep_days=3)
    with pytest.raises(InvalidArgumentError, match="keep_runs"):
        await prune_thread(memory, "t", keep_runs=0)
    assert (await anext(memory.read("t"))).seq == 1


async def test_keep_days_keeps_the_recent_runs_and_always_the_last(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        await _runs(store, "t", ["a", "b"])
        starts = [r for r in [r async for r in store.read("t")] if r.kind == "run_started"]
        at = starts[-1].at
        assert await prune_thread(store, "t", keep_days=1, now=at + 0.5) is None  # both recent
        assert await prune_thread(store, "t", keep_days=1, now=at + 2 * 86400) is not None
        first = await anext(store.read("t"))
        assert first.seq == starts[-1].seq
        assert await prune_thread(store, "t", keep_days=0, now=at + 10 * 86400) is None


async def test_a_pruned_subject_thread_is_erased_and_leaves_no_plaintext(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    async with SQLiteEventStore(path) as store:
        await _runs(store, "t", ["Alice at 7 Rabbit Hole Lane", "second", "third"], "alice")
        await prune_thread(store, "t", keep_runs=1)
        app = echo_graph().compile(store)
        state = await app.aget_state({"thread_id": "t"})
        assert state.context[0].text() == "Alice at 7 Rabbit Hole Lane"
        await erase_subject(store, "alice", by="dpo", reason="request")
        state = await app.aget_state({"thread_id": "t"})
        assert state.context[0].text().startswith("erased on")
        assert (await store.verify("t")).ok
        await vacuum(store)
    for file in tmp_path.iterdir():
        assert b"Rabbit Hole" not in file.read_bytes(), file.name


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_sigkill_during_prune_leaves_old_or_new(tmp_path: Path, seed: int) -> None:
    import asyncio
    import random

    from .helpers import spawn_worker, wait_ready

    db, threads = tmp_path / "log.db", 8

    async def prepare() -> None:
        async with SQLiteEventStore(db) as store:
            for i in range(threads):
                await _runs(store, f"t{i}", ["a", "b", "c"])

    async def check() -> list[int]:
        """Per thread: the first seq still stored; every chain verifies and folds whole."""
        async with SQLiteEventStore(db) as store:
            app = echo_graph().compile(store)
            firsts = []
            for i in range(threads):
                assert (await store.verify(f"t{i}")).ok
                state = await app.aget_state({"thread_id": f"t{i}"})
                assert [m.text() for m in state.context] == [
                    "a", "echo a", "b", "echo b", "c", "echo c"]  # fmt: skip
                firsts.append((await anext(store.read(f"t{i}"))).seq)
            return firsts

    asyncio.run(prepare())
    proc = spawn_worker("prune_run", db, threads)
    wait_ready(proc)
    kill_at = random.Random(seed).randrange(1, threads)
    assert proc.stdout is not None
    while proc.stdout.readline().strip() != f"start t{kill_at}":
        pass
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    firsts = asyncio.run(check())
    assert firsts[:kill_at] == [firsts[0]] * kill_at and firsts[0] > 1
    finish = spawn_worker("prune_run", db, threads)
    _, err = finish.communicate(timeout=120)
    assert finish.returncode == 0, err
    assert asyncio.run(check()) == [firsts[0]] * threads


def test_the_cli_prunes_every_thread_and_the_export_still_verifies(tmp_path: Path) -> None:
    import asyncio
    import json
    import subprocess
    import sys

    db = tmp_path / "log.db"

    async def prepare() -> None:
        async with SQLiteEventStore(db) as store:
            await _runs(store, "a", ["1", "2", "3"])
            await _runs(store, "b", ["1"])

    asyncio.run(prepare())

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from agentlog.actors.cli import main; main()", *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    refused = cli("prune", "--db", str(db))
    assert refused.returncode == 2 and "--keep-runs" in refused.stderr
    done = cli("prune", "--keep-runs", "1", "--vacuum", "--db", str(db), "--json")
    assert done.returncode == 0, done.stderr
    (report,) = json.loads(done.stdout)
    assert report["thread_id"] == "a" and report["removed"] == report["through_seq"]
    assert cli("verify", "--db", str(db)).returncode == 0
    out = tmp_path / "a.jsonl"
    assert cli("export", "a", "--db", str(db), "--out", str(out)).returncode == 0
    checked = subprocess.run(
        [sys.executable, "-I", str(Path(__file__).parents[1] / "events" / "verify_export.py"),
         str(out)], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout
    assert f"pruned through {report['through_seq']}" in checked.stdout


async def test_a_thread_idle_past_its_ttl_is_pruned_whole_to_a_tombstone(store: EventStore) -> None:
    await _runs(store, "t", ["a", "b"])
    last = [r async for r in store.read("t")][-1]
    assert await prune_thread(store, "t", idle_days=30, now=last.at + 86400) is None  # not idle
    report = await prune_thread(store, "t", idle_days=30, now=last.at + 31 * 86400)
    assert report is not None and report.through_seq == last.seq
    kept = [r async for r in store.read("t")]
    assert [r.kind for r in kept] == ["pruned"]  # the tombstone alone
    assert (await store.verify("t")).ok
    app = echo_graph().compile(store)
    assert len((await app.aget_state({"thread_id": "t"})).context) == 4
    assert await prune_thread(store, "t", idle_days=30, now=last.at + 99 * 86400) is None
    await app.ainvoke({"messages": [Message.text_message("back")]}, {"thread_id": "t"})
    assert len((await app.aget_state({"thread_id": "t"})).context) == 6
    assert (await store.verify("t")).ok
