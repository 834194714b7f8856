"""PostgreSQL under concurrent processes: races on one thread, a follower under many
writers, and backends killed mid-run (pg_terminate_backend)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.testing import until
from agentlog.events import (
    EventRecord,
    NodeEntered,
    StepAdvanced,
    StoreUnavailableError,
    follow,
)
from agentlog.events.testing import step_events

from .workers.pg_env import DSN, fresh_schema, needs_pg

pytestmark = needs_pg
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    async with fresh_schema() as name:
        yield name


def spawn(module: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", f"tests.workers.{module}", DSN, *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def finish(procs: list[subprocess.Popen[str]], timeout: float = 60) -> list[str]:
    """Wait for every process; each must exit 0. Returns their outputs."""
    outs = []
    for proc in procs:
        out, err = await asyncio.to_thread(proc.communicate, timeout=timeout)
        assert proc.returncode == 0, err
        outs.append(out)
    return outs


async def table(schema: str, sql: str) -> list[tuple[object, ...]]:
    import asyncpg

    conn = await asyncpg.connect(DSN)
    try:
        return [tuple(r) for r in await conn.fetch(sql.replace("S.", f'"{schema}".'))]
    finally:
        await conn.close()


async def test_processes_racing_on_one_thread_have_one_winner_per_seq(schema: str) -> None:
    from agentlog.events.stores.postgres import PostgresEventStore

    procs = [spawn("pg_appender", schema, "race", 15, f"p{i}") for i in range(4)]
    outs = await finish(procs)
    assert all(out.splitlines()[-1].startswith("done 15") for out in outs)
    async with PostgresEventStore(DSN, schema=schema) as store:
        records = [r async for r in store.read("race")]
        assert [r.seq for r in records] == list(range(1, 4 * 15 * 3 + 1))
        assert (await store.verify("race")).ok
    for i in range(0, len(records), 3):  # every step is one writer's whole append
        step = records[i : i + 3]
        assert len({r.actor for r in step}) == 1 and len({r.position for r in step}) == 3
        assert [r.kind for r in step] == ["node_entered", "state_updated", "step_advanced"]
    per_writer = {f"p{i}": 0 for i in range(4)}
    for r in records[::3]:
        per_writer[str(r.actor)] += 1
    assert per_writer == {f"p{i}": 15 for i in range(4)}
    positions = [p for (p,) in await table(schema, "SELECT position FROM S.events ORDER BY 1")]
    assert positions == list(range(1, len(records) + 1))  # a lost race leaves no hole


async def test_a_follower_under_concurrent_writers_misses_nothing(schema: str) -> None:
    from agentlog.events.stores.postgres import PostgresEventStore

    seen: list[EventRecord] = []
    async with PostgresEventStore(DSN, schema=schema) as store:

        async def collect() -> None:
            async for record in follow(store, poll_s=5.0):  # woken by NOTIFY, not the poll
                seen.append(record)

        follower = asyncio.create_task(collect())
        procs = [spawn("pg_writer", schema, f"w{i}", 6, 25) for i in range(3)]
        local = [store.append(f"local-{i}", [NodeEntered(node="n")], expected_seq=0)
                 for i in range(40)]  # fmt: skip
        await asyncio.gather(*local)
        await finish(procs)
        total = await store.last_position()
        await until(lambda: seen and seen[-1].position >= total)
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
    rows = await table(schema, "SELECT position, thread_id, seq FROM S.events ORDER BY 1")
    assert len(rows) == total == 3 * 6 * (25 + 12) + 40  # odd appends carry two events
    assert [(r.position, r.thread_id, r.seq) for r in seen] == rows


async def test_killing_backends_mid_run_fails_loudly_or_carries_on(schema: str) -> None:
    from agentlog.events.stores.postgres import PostgresEventStore

    procs = [spawn("pg_writer", schema, f"k{i}", 4, 60) for i in range(2)]
    failures: list[Exception] = []
    async with PostgresEventStore(DSN, schema=schema) as store:
        tries, ended = [0], [0]

        async def local(thread: str) -> None:
            for _ in range(40):
                seq = await _last_seq(store, thread)
                try:
                    await store.append(
                        thread, [NodeEntered(node="a"), StepAdvanced(step=seq)], expected_seq=seq
                    )
                except StoreUnavailableError as exc:
                    failures.append(exc)
                tries[0] += 1
            ended[0] += 1

        async def killer() -> int:
            """Eight rounds of kills spread over the local appends (one per 12 tries of the
            120), not over the clock: each lands amid appends however busy the machine is."""
            killed = 0
            for round_ in range(8):
                await until(
                    lambda: tries[0] >= 12 * (round_ + 1) or ended[0] == 3,  # noqa: B023
                    what="more local appends",
                )
                rows = await table(
                    schema,
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                    f"application_name = 'agentlog:{schema}'",
                )
                killed += len(rows)
            return killed

        results = await asyncio.gather(killer(), *(local(f"l{i}") for i in range(3)))
        assert results[0] > 0
        outs = await finish(procs, timeout=90)
        assert failures or any("unavailable" in out for out in outs)  # the kills did hit

        # The store carries on once the server is back: a fresh append and a read succeed.
        # (A connection killed by the last round can still fail the first call after it.)
        async def appended() -> bool:
            seq = await _last_seq(store, "after")
            try:
                await store.append("after", [NodeEntered(node="z")], expected_seq=seq)
            except StoreUnavailableError:
                return False
            return True

        await until(appended, interval=0.05)
        assert await store.last_seq("after") == 1
        for thread in await store.threads():
            assert (await store.verify(thread)).ok, thread
    for exc in failures:  # each failure said what happened to the append
        assert "connection to PostgreSQL was lost" in str(exc) or "PostgreSQL" in str(exc)
    rows = await table(schema, "SELECT position, thread_id, seq, kind, at FROM S.events ORDER BY 1")
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))  # no hole, nothing torn
    by_commit: dict[tuple[object, object], list[object]] = {}
    for _, thread, _, kind, at in rows:
        by_commit.setdefault((thread, at), []).append(kind)
    for (thread, _), kinds in by_commit.items():  # the local appends are whole pairs
        if str(thread).startswith("l"):
            assert kinds == ["node_entered", "step_advanced"], (thread, kinds)


async def _last_seq(store: object, thread: str) -> int:
    """The thread's last seq, retried while the server is unreachable."""

    async def last() -> tuple[int] | None:
        try:
            return (await store.last_seq(thread),)  # type: ignore[attr-defined]
        except StoreUnavailableError:
            return None

    found = await until(last, interval=0.05, what="the store to come back")
    return found[0]


async def test_a_commit_elsewhere_wakes_a_follower_by_notify(schema: str) -> None:
    from agentlog.events.stores.postgres import PostgresEventStore

    async with (
        PostgresEventStore(DSN, schema=schema) as reader,
        PostgresEventStore(DSN, schema=schema) as writer,
    ):
        # the reader hears the writer's commits (its LISTEN is up) before the follower starts
        [warm] = await writer.append("w", [NodeEntered(node="w")], expected_seq=0)
        await until(lambda: reader.commit_signal.position >= warm.position, what="a NOTIFY")
        records = follow(reader, after=warm.position, poll_s=60.0)  # a poll comes too late
        first = asyncio.ensure_future(anext(records))
        await until(lambda: reader.commit_signal.waiting_loops(), what="the follower to wait")
        assert not first.done()  # it read the empty log and waits
        [written] = await writer.append("t", [NodeEntered(node="n")], expected_seq=0)
        got = await asyncio.wait_for(first, 60)  # woken by NOTIFY from the other store
        assert got == written
        second = asyncio.ensure_future(anext(records))
        await until(lambda: reader.commit_signal.waiting_loops(), what="the follower to wait")
        await writer.append("t", [NodeEntered(node="m")], expected_seq=1)
        assert (await asyncio.wait_for(second, 60)).seq == 2
        await records.aclose()


async def test_heartbeats_lock_claim_rows_in_thread_order(schema: str) -> None:
    """Appends lock claim rows in thread order (FOR SHARE); a heartbeat renewing many claims
    must take them in the same order, or the two deadlock. Rows lying against thread order,
    a rival holding c05: the beat waits at c05 and has not touched c20 yet."""
    import asyncpg

    from agentlog.events.stores.postgres import PostgresEventStore

    async with PostgresEventStore(DSN, schema=schema) as store:
        claims = [await store.claim(f"c{i:02}", lease=3600) for i in reversed(range(30))]
        rival, probe = await asyncpg.connect(DSN), await asyncpg.connect(DSN)
        try:
            rival_tx = rival.transaction()
            await rival_tx.start()
            await rival.execute(
                f'SELECT 1 FROM "{schema}".claims WHERE thread_id = $1 FOR UPDATE', "c05"
            )
            beat = asyncio.ensure_future(
                asyncio.to_thread(store._renew_blocking, claims, 1.0)  # type: ignore[arg-type]
            )

            async def at_the_rivals_row() -> bool:  # c00..c04 taken in order, then it waits
                return not await _free(probe, schema, "c02")

            await until(at_the_rivals_row)
            assert not beat.done()  # waiting for the rival's row
            locked = [t for t in ("c02", "c20", "c29") if not await _free(probe, schema, t)]
            assert locked == ["c02"]  # c00..c04 taken in order; c20, c29 untouched
            await rival_tx.rollback()
            await asyncio.wait_for(beat, 60)
        finally:
            await rival.close()
            await probe.close()
        for claim in claims:
            await store.release(claim)


async def _free(conn: object, schema: str, thread_id: str) -> bool:
    """Whether the claim row can be locked right now (no one else holds it)."""
    import asyncpg

    try:
        async with conn.transaction():  # type: ignore[attr-defined]
            await conn.execute(  # type: ignore[attr-defined]
                f'SELECT 1 FROM "{schema}".claims WHERE thread_id = $1 FOR SHARE NOWAIT',
                thread_id,
            )
    except asyncpg.exceptions.LockNotAvailableError:
        return False
    return True


async def test_a_backend_killed_before_commit_lands_nothing_and_says_so(schema: str) -> None:
    """The writer's backend dies after the rows are sent, before COMMIT: the store asks the
    database whether the batch landed (it did not), says so, and the next append works."""
    import asyncpg

    from agentlog.events.stores.postgres import PostgresEventStore

    class Killed(PostgresEventStore):
        kill_next = False

        async def _in_transaction(self, conn: Any, batch: Any) -> Any:
            outcome = await super()._in_transaction(conn, batch)
            if self.kill_next:
                self.kill_next = False
                killer = await asyncpg.connect(DSN)
                try:
                    await killer.execute("SELECT pg_terminate_backend($1)", conn.get_server_pid())
                finally:
                    await killer.close()
            return outcome

    async with Killed(DSN, schema=schema) as store:
        await store.append("t", step_events(1), expected_seq=0)
        store.kill_next = True
        with pytest.raises(StoreUnavailableError, match="did not land"):
            await store.append("t", step_events(2), expected_seq=3)
        assert await store.last_seq("t") == 3
        records = await store.append("t", step_events(2), expected_seq=3)
        assert [r.seq for r in records] == [4, 5, 6]
        assert (await store.verify("t")).ok
        positions = [r.position async for r in store.read_all()]
        assert positions == list(range(1, 7))  # the lost commit left no hole
