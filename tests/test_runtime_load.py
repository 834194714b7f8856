"""The runtime under load, on a real SQLite file: 1,000 runs triggered at once all complete
with the state their logs replay to, and a subscriber that stops reading costs a bounded
amount of memory (it lags in the log, it buffers nothing).

Peak memory is measured with tracemalloc over each batch of 1,000 runs, once with no
subscriber and once with a stalled one, on the same runtime; only the difference is asserted.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig
from agentlog.actors.testing import until
from agentlog.events import EventRecord, SQLiteEventStore
from agentlog.events.follow import last_position
from agentlog.events.store import READ_CHUNK
from agentlog.projections import AgentState, Message, replay
from tests.helpers import line

pytestmark = pytest.mark.slow

RUNS = 1_000
MAX_CONCURRENT = 100
"""The runtime's limit: 1,000 triggers at once means 900 of them wait in its queue."""
WAIT_S = 300.0
"""How long `wait` may take before the test fails instead of hanging (not a speed check)."""
ROW_BYTES = 1_024
"""A generous size for one stored row held in memory: its envelope, hash and payload bytes and
the Python objects around them (the rows of this test measure ~800 bytes)."""
NOISE_BYTES = 2 << 20
"""How far the peak of one batch strays from the next identical one by itself (scheduling,
collection and dict-resize timing): up to 1.9 MB measured over 7 identical 1,000-run batches."""
SUBSCRIBER_BOUND = READ_CHUNK * ROW_BYTES + NOISE_BYTES
"""What a stalled subscriber may add to the peak: one chunk of rows plus the noise, 4 MiB.
A follower reads the log in chunks of READ_CHUNK rows and holds no queue of its own, so
stopped mid-chunk it keeps that chunk alive and nothing more, however far the log runs
ahead (~1 MB measured here: the runtime's first commit, ~1,000 accepted triggers).
Holding what it did not read would instead cost every record of the batch: ~8 MB for the
~9,000 records of 1,000 runs, measured by the test too, so the bound tells the two apart."""


def answer(state: AgentState) -> list[Message]:
    """The node: its reply is a function of the question alone, so each result is checkable."""
    return [Message.text_message(expected_answer(state.context[-1].text()), role="assistant")]


def expected_answer(question: str) -> str:
    return f"{len(question)} characters, backwards: {question[::-1]}"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore(tmp_path / "load.db") as s:
        yield s


async def batch(runtime: AgentRuntime, tag: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Trigger RUNS runs at once, wait for all; (question, thread, result) of each."""
    questions = [f"{tag} question {i}" for i in range(RUNS)]
    threads = await asyncio.gather(*(runtime.trigger("chat", q) for q in questions))
    results = await asyncio.gather(*(runtime.wait(t, timeout=WAIT_S) for t in threads))
    return list(zip(questions, threads, results, strict=True))


async def measured(runtime: AgentRuntime, tag: str) -> tuple[int, list[Any]]:
    """A batch under tracemalloc: the peak it allocated above what lived before it, in bytes."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        runs = await batch(runtime, tag)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return peak, runs


async def check_runs(store: SQLiteEventStore, runs: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Every run completed, its log replays to what `wait` returned, and that state holds the
    question and the node's answer to it, nothing else."""
    assert len({thread for _, thread, _ in runs}) == RUNS
    for question, thread, result in runs:
        assert result["status"] == "completed", (thread, result["status"])
        assert result["thread_id"] == thread
        replayed = replay([r async for r in store.read(thread)])
        assert replayed.model_dump() == result["state"].model_dump(), thread
        texts = [(m.role, m.text()) for m in replayed.context]
        assert texts == [("user", question), ("assistant", expected_answer(question))], thread


async def buffered_bytes(store: SQLiteEventStore, after: int) -> int:
    """What holding every record committed after `after` would cost: what a subscriber that
    queued what it did not read would hold by the end of the batch."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        records = [r async for r in store.read_all(after)]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(records) > RUNS * 3  # at least the runtime's three records per run
    return held


async def test_a_thousand_runs_at_once_complete_and_a_stalled_subscriber_costs_one_chunk(
    store: SQLiteEventStore,
) -> None:
    runtime = AgentRuntime(store, RuntimeConfig(max_concurrent_runs=MAX_CONCURRENT))
    runtime.add_graph("support", line(("agent", answer)).compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    async with runtime:
        await batch(runtime, "warm-up")  # first-use allocations (caches, pools) out of the way
        alone, first_runs = await measured(runtime, "alone")
        await check_runs(store, first_runs)

        feed = runtime.subscribe()
        first: asyncio.Future[EventRecord] = asyncio.ensure_future(anext(feed))
        await until(lambda: runtime.subscribers, timeout=WAIT_S)  # the feed is open first
        opened_at = runtime.subscribers[0].position
        watched, second_runs = await measured(runtime, "watched")
        stalled_at = (await first).position  # the one record it reads; then it never reads
        lag = runtime.stats()["subscriber_lag"]
        head = await last_position(store)
        await feed.aclose()
        assert runtime.subscribers == []
        await check_runs(store, second_runs)
        counts = runtime.stats()["entry_points"]["chat"]
        buffered = await buffered_bytes(store, stalled_at)

    assert counts["completed"] == 3 * RUNS
    assert counts["failed"] == counts["queued"] == counts["active"] == 0
    # it read the first record committed after it opened, then the log ran on without it
    assert opened_at < stalled_at
    assert lag == [head - stalled_at]
    assert lag[0] > RUNS * 3
    added = watched - alone
    print(
        f"peak over {RUNS} runs: {alone} B alone, {watched} B with a stalled subscriber "
        f"(+{added} B, bound {SUBSCRIBER_BOUND} B); holding its {lag[0]} unread records: "
        f"{buffered} B"
    )
    assert buffered > SUBSCRIBER_BOUND  # the bound tells a lagging feed from a buffering one
    assert added < SUBSCRIBER_BOUND, (alone, watched)
