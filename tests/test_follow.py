"""`agentlog.events.follow`: a live subscription to the log, on real SQLite files and in memory.

Every record after a position, in commit order, never a gap nor a repeat, however many
writers; filters; resuming; a follower woken at once by a commit in this process (the tests
give it an hour-long poll, so only the commit signal can wake it) and by polling for one in
another process; and memory that does not grow while a follower lags.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import tracemalloc
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import pytest

from agentlog.actors.testing import until
from agentlog.events import (
    EventRecord,
    EventStore,
    InterruptRaised,
    InvalidArgumentError,
    MemoryEventStore,
    NodeEntered,
    SQLiteEventStore,
    StateUpdated,
    StepAdvanced,
    StoreClosedError,
    ToolCallStarted,
    UnknownEventKindError,
    UnknownKindFilterError,
    follow,
    last_position,
)
from agentlog.events.kinds import Event

from .helpers import spawn_worker, step_events, wait_ready

HOUR = 3600.0
"""A poll interval no test waits out: a follower given it is woken by the commit signal."""

PATIENCE = 60.0
"""How long a test waits for what must happen before it calls it hung (never a speed check)."""


async def everything(store: EventStore, after: int = 0) -> list[EventRecord]:
    return [record async for record in store.read_all(after)]


async def take(records: AsyncIterator[EventRecord], count: int) -> list[EventRecord]:
    """The next `count` records a follower yields (failing, not hanging, when they never come)."""

    async def collect() -> list[EventRecord]:
        return [await anext(records) for _ in range(count)]

    return await asyncio.wait_for(collect(), PATIENCE)


def identity(records: list[EventRecord]) -> list[tuple[int, str, int, str]]:
    return [(r.position, r.thread_id, r.seq, r.hash) for r in records]


async def write_steps(store: EventStore, thread_id: str, steps: int, actor: str = "agent") -> None:
    seq = await store.last_seq(thread_id)
    for k in range(steps):
        records = await store.append(thread_id, step_events(k + 1), expected_seq=seq, actor=actor)
        seq = records[-1].seq


# ---- order, waking, resuming ---------------------------------------------------------------


async def test_a_follower_yields_the_log_then_each_new_commit_at_once(store: EventStore) -> None:
    await write_steps(store, "a", 2)
    async with contextlib.aclosing(follow(store, poll_s=HOUR)) as records:
        backlog = await take(records, 6)
        assert identity(backlog) == identity(await everything(store))
        later = asyncio.create_task(take(records, 3))
        await asyncio.sleep(0)  # the follower is now waiting for a commit
        await write_steps(store, "b", 1)
        fresh = await later
    assert [r.position for r in fresh] == [7, 8, 9]
    assert identity(backlog + fresh) == identity(await everything(store))


async def test_after_skips_what_came_before(store: EventStore) -> None:
    await write_steps(store, "a", 3)
    async with contextlib.aclosing(follow(store, after=4, poll_s=HOUR)) as records:
        got = await take(records, 5)
    assert [r.position for r in got] == [5, 6, 7, 8, 9]


async def test_a_consumer_resumes_from_the_last_position_it_saw(store: EventStore) -> None:
    await write_steps(store, "a", 4)
    seen: list[EventRecord] = []
    last = 0
    for chunk in (5, 1, 4):
        async with contextlib.aclosing(follow(store, after=last, poll_s=HOUR)) as records:
            seen += await take(records, chunk)
        last = seen[-1].position
    await write_steps(store, "b", 2)
    async with contextlib.aclosing(follow(store, after=last, poll_s=HOUR)) as records:
        seen += await take(records, 8)
    assert identity(seen) == identity(await everything(store))


async def test_a_filtered_follower_resumes_without_gap_or_repeat(store: EventStore) -> None:
    for k in range(6):
        await write_steps(store, f"t{k % 2}", 1)
    wanted = [r for r in await everything(store) if r.thread_id == "t1"]
    seen: list[EventRecord] = []
    last = 0
    while len(seen) < len(wanted):
        async with contextlib.aclosing(
            follow(store, after=last, thread_id="t1", poll_s=HOUR)
        ) as records:
            seen += await take(records, min(2, len(wanted) - len(seen)))
        last = seen[-1].position
    assert identity(seen) == identity(wanted)


def test_a_commit_from_another_event_loop_wakes_the_follower_at_once(tmp_path: Path) -> None:
    """The writer thread hands the wake-up to the follower's loop, thread-safely."""
    store = SQLiteEventStore(tmp_path / "log.db")

    def other_loop() -> None:
        asyncio.run(write_steps(store, "elsewhere", 3))

    async def main() -> list[EventRecord]:
        await store.open()
        async with contextlib.aclosing(follow(store, poll_s=HOUR)) as records:
            first = asyncio.create_task(take(records, 9))
            await asyncio.sleep(0)
            writer = threading.Thread(target=other_loop)
            writer.start()
            await asyncio.to_thread(writer.join)
            got = await first
        assert identity(got) == identity(await everything(store))
        await store.close()
        return got

    assert len(asyncio.run(main())) == 9


async def test_twenty_writer_threads_and_two_followers_agree_with_the_log(tmp_path: Path) -> None:
    """20 threads, each on an event loop of its own, append to one store while two followers
    read on this loop; each follower sees exactly `read_all`: every record once, in order."""
    writers, steps = 20, 50
    total = writers * steps * 3
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        followers = [follow(store, poll_s=HOUR), follow(store, poll_s=HOUR)]
        reading = [asyncio.create_task(take(f, total)) for f in followers]
        await asyncio.sleep(0)

        def write(k: int) -> None:
            asyncio.run(write_steps(store, f"w{k}", steps, actor=f"writer-{k}"))

        threads = [threading.Thread(target=write, args=(k,)) for k in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            await asyncio.to_thread(thread.join, PATIENCE)
        assert not any(thread.is_alive() for thread in threads)
        seen = await asyncio.gather(*reading)
        for f in followers:
            await f.aclose()
        log = await everything(store)
    assert len(log) == total
    assert [r.position for r in log] == list(range(1, total + 1))
    for got in seen:
        assert identity(got) == identity(log)
    by_thread: dict[str, list[int]] = {}
    for record in seen[0]:
        by_thread.setdefault(record.thread_id, []).append(record.seq)
    assert all(seqs == list(range(1, steps * 3 + 1)) for seqs in by_thread.values())


# ---- filters -------------------------------------------------------------------------------


async def mixed_log(store: EventStore) -> list[EventRecord]:
    """Records of two threads by several actors, some naming node "tools" in their payload."""
    batches: list[tuple[str, list[Event], str]] = [
        ("a", [NodeEntered(node="agent"), StepAdvanced(step=1, next_node="tools")], "agent"),
        ("b", [NodeEntered(node="tools")], "runtime"),
        ("a", [ToolCallStarted(call_id="c1", name="search", node="tools")], "tools"),
        ("b", [StateUpdated(values={"x": 1})], "user"),
        ("a", [InterruptRaised(node="tools", reason="approve")], "runtime"),
        ("b", [StepAdvanced(step=1, next_node="tools")], "agent"),
        # a step's commit enters the next node: "tools" is named, "agent" wrote it
        ("a", [StepAdvanced(step=2, next_node="tools"), NodeEntered(node="tools")], "agent"),
    ]
    for thread_id, events, actor in batches:
        seq = await store.last_seq(thread_id)
        await store.append(thread_id, events, expected_seq=seq, actor=actor)
    return await everything(store)


FILTERS: list[tuple[dict[str, Any], Callable[[EventRecord], bool]]] = [
    ({"kinds": ["step_advanced"]}, lambda r: r.kind == "step_advanced"),
    (
        {"kinds": {"node_entered", "state_updated"}},
        lambda r: r.kind in ("node_entered", "state_updated"),
    ),
    ({"thread_id": "b"}, lambda r: r.thread_id == "b"),
    # a record naming a node is that node's, whoever wrote it; else its actor decides
    (
        {"node": "agent"},
        lambda r: (
            getattr(r.event, "node", None) == "agent"
            if getattr(r.event, "node", None) is not None
            else r.actor == "agent"
        ),
    ),
    # "tools" is named by node_entered, tool_call_started and interrupt_raised payloads and by
    # one actor, never by a next_node
    (
        {"node": "tools"},
        lambda r: (
            r.kind in ("node_entered", "tool_call_started", "interrupt_raised")
            and getattr(r.event, "node", None) == "tools"
        ),
    ),
    (
        {"thread_id": "a", "node": "tools", "kinds": ["interrupt_raised", "step_advanced"]},
        lambda r: r.thread_id == "a" and r.kind == "interrupt_raised",
    ),
]


@pytest.mark.parametrize(("given", "expected"), FILTERS)
async def test_filters_pick_exactly_the_records_they_name(
    store: EventStore, given: dict[str, Any], expected: Callable[[EventRecord], bool]
) -> None:
    log = await mixed_log(store)
    wanted = [r for r in log if expected(r)]
    assert wanted, "a filter test must expect something"
    async with contextlib.aclosing(follow(store, poll_s=HOUR, **given)) as records:
        got = await take(records, len(wanted))
        await mixed_log(store)  # the same again, committed while the follower waits
        later = [r for r in await everything(store, log[-1].position) if expected(r)]
        more = await take(records, len(later))
    assert identity(got) == identity(wanted)
    assert identity(more) == identity(later)


async def test_a_record_matched_by_actor_or_payload_node(store: EventStore) -> None:
    await mixed_log(store)
    async with contextlib.aclosing(follow(store, node="tools", poll_s=HOUR)) as records:
        got = await take(records, 3)
    assert [(r.kind, r.actor) for r in got] == [
        ("node_entered", "runtime"),
        ("tool_call_started", "tools"),
        ("interrupt_raised", "runtime"),
    ]


@pytest.mark.parametrize("kinds", [["no_such_kind"], ["node_entered", "NodeEntered"], [3]])
def test_an_unknown_kind_is_refused_where_the_follower_is_made(kinds: list[Any]) -> None:
    store = MemoryEventStore()
    with pytest.raises(UnknownKindFilterError) as caught:
        follow(store, kinds=kinds)
    assert isinstance(caught.value, UnknownEventKindError)
    assert isinstance(caught.value, InvalidArgumentError)
    unknown = next(k for k in kinds if k != "node_entered")
    assert repr(unknown) in str(caught.value)
    assert "step_advanced" in str(caught.value)  # it lists the kinds there are


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"kinds": "node_entered"}, "pass ['node_entered']"),
        ({"kinds": []}, "nothing would match"),
        ({"after": -1}, "after must be a position"),
        ({"after": True}, "after must be a position"),
        ({"poll_s": 0}, "poll_s"),
        ({"poll_s": float("nan")}, "poll_s"),
        ({"node": ""}, "node must be"),
        ({"thread_id": ""}, "thread id"),
    ],
)
def test_bad_arguments_are_refused_at_once(given: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
        follow(MemoryEventStore(), **given)


# ---- memory, closing, other writers --------------------------------------------------------


def _growth_in_events(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> int:
    """Bytes still allocated at lines of the `events` package that were not before."""
    keep = [tracemalloc.Filter(True, str(Path(__file__).parents[1] / "events" / "*"))]
    diff = after.filter_traces(keep).compare_to(before.filter_traces(keep), "filename")
    return sum(stat.size_diff for stat in diff)


async def test_a_follower_that_stops_reading_holds_no_growing_memory(tmp_path: Path) -> None:
    """10,000 records committed past two lagging followers (one parked after its first record,
    one waiting for the next commit) leave the store's and the followers' memory where it
    was: a queue of records, even of the rows only, would hold megabytes here."""
    records, per_append = 10_000, 20
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        await write_steps(store, "warm", 1)
        parked = follow(store, poll_s=HOUR)
        assert (await take(parked, 1))[0].position == 1
        waiting = follow(store, after=3, poll_s=HOUR)
        next_one = asyncio.create_task(anext(waiting))
        await until(lambda: store.commit_signal.waiting_loops() == 1)
        events: list[Event] = [StateUpdated(values={"pad": "x" * 100})] * per_append
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            seq = 0
            for _ in range(records // per_append):
                await store.append("big", events, expected_seq=seq)
                seq += per_append
                assert store.commit_signal.waiting_loops() <= 1
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        growth = _growth_in_events(before, after)
        assert growth < 256 * 1024, f"{growth} bytes more held by the events package"
        assert (await asyncio.wait_for(next_one, PATIENCE)).position == 4
        # the parked follower lagged, and still misses nothing
        rest = await take(parked, 2 + records)
        assert [r.position for r in rest] == list(range(2, records + 4))
        await parked.aclose()
        await waiting.aclose()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_closing_the_store_ends_a_waiting_follower_with_store_closed(
    kind: str, tmp_path: Path
) -> None:
    store: EventStore = (
        MemoryEventStore() if kind == "memory" else await SQLiteEventStore(tmp_path / "l").open()
    )
    await write_steps(store, "a", 1)
    records = follow(store, poll_s=HOUR)
    assert len(await take(records, 3)) == 3
    waiting = asyncio.create_task(anext(records))
    signal = getattr(store, "commit_signal")  # noqa: B009 - both kinds have one
    await until(lambda: signal.waiting_loops() == 1)  # the follower waits for a commit
    await store.close()
    with pytest.raises(StoreClosedError, match=r"follow\(after=3\)"):
        await asyncio.wait_for(waiting, PATIENCE)


async def test_last_position_is_where_following_from_now_starts(store: EventStore) -> None:
    assert await last_position(store) == 0
    await write_steps(store, "a", 2)
    end = await last_position(store)
    assert end == 6
    async with contextlib.aclosing(follow(store, after=end, poll_s=HOUR)) as records:
        await write_steps(store, "b", 1)
        got = await take(records, 3)
    assert [r.position for r in got] == [7, 8, 9]


class LogOnly:
    """A store that offers the log alone: no commit signal, no `last_position`."""

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner

    def read_all(self, from_position: int = 0) -> AsyncIterator[EventRecord]:
        return self.inner.read_all(from_position)


async def test_a_store_without_a_signal_is_polled(store: EventStore) -> None:
    plain = cast(EventStore, LogOnly(store))
    await write_steps(store, "a", 1)
    assert await last_position(plain) == 3
    async with contextlib.aclosing(follow(plain, poll_s=0.01)) as records:
        first = await take(records, 3)
        await write_steps(store, "a", 1)
        second = await take(records, 3)
    assert identity(first + second) == identity(await everything(store))


async def test_another_store_object_on_the_same_file_is_seen_by_polling(tmp_path: Path) -> None:
    async with (
        SQLiteEventStore(tmp_path / "log.db") as mine,
        SQLiteEventStore(tmp_path / "log.db") as theirs,
    ):
        async with contextlib.aclosing(follow(mine, poll_s=0.02)) as records:
            await write_steps(theirs, "a", 2)
            got = await take(records, 6)
        assert identity(got) == identity(await everything(theirs))


@pytest.mark.slow
async def test_a_second_process_appending_is_seen_by_a_follower_here(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    steps = 40
    async with SQLiteEventStore(db) as store:
        async with contextlib.aclosing(follow(store, poll_s=0.02)) as records:
            worker = spawn_worker("appender", db, "other", str(steps))
            try:
                wait_ready(worker)
                got = await take(records, steps * 3)
                assert await asyncio.to_thread(worker.wait, PATIENCE) == 0
            finally:
                if worker.poll() is None:
                    worker.kill()
                worker.communicate()
        log = await everything(store)
    assert identity(got) == identity(log)
    assert [r.seq for r in got] == list(range(1, steps * 3 + 1))


async def test_a_threads_follower_reads_its_thread_by_index_never_the_log(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From any resume point (before, between or after the thread's records), a follower of
    one thread yields exactly its records past that point, then its new commits, and never
    reads the whole log: its cost is its thread's, whatever the log's length."""
    for k in range(30):
        await write_steps(store, f"other-{k % 5}", 1)
        if k % 10 == 3:
            await write_steps(store, "mine", 1)
    log = await everything(store)
    mine = [r for r in log if r.thread_id == "mine"]
    last = log[-1].position

    def no_scan(*_: Any) -> Any:
        raise AssertionError("a thread's follower read the whole log")

    monkeypatch.setattr(store, "read_all", no_scan)
    points = [0, mine[0].position - 1, mine[0].position, mine[4].position, last]
    for after in points:
        want = [r for r in mine if r.position > after]
        async with contextlib.aclosing(
            follow(store, after=after, thread_id="mine", poll_s=HOUR)
        ) as records:
            got = await take(records, len(want))
            assert identity(got) == identity(want)
            later = asyncio.create_task(take(records, 3))
            await asyncio.sleep(0)
            await write_steps(store, "other-0", 1)
            await write_steps(store, "mine", 1)
            fresh = await later
        assert {r.thread_id for r in fresh} == {"mine"} and fresh[0].position > last
        mine += fresh
        last = fresh[-1].position
