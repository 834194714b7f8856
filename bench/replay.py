"""Replay speed and resume cost: how fast the log becomes state again.

A thread of N events (100,000; 20,000 with --quick) is written through
`SQLiteEventStore.append`, one append per agent step: NodeEntered, MessageAppended
(alternating user/assistant text of ~100 characters), StepAdvanced, plus a
ToolCallStarted/ToolCallFinished pair every 4th step, after one RunStarted.

* fold: `agentlog.projections.replay` over records already in memory, against a plain loop that only
  validates each message into a pydantic `Message` (target: >= 300,000 events/s). `replay`
  pauses the cyclic GC, so the plain loop is also reported with the GC paused.
* from_disk: `agentlog.projections.state_at(use_snapshots=False)` on a freshly opened store, against
  just reading the records (`store.read`) on a fresh store; the ratio says what the fold adds.
  Every read checks each record's hash link; `chain_check` times that check alone, and
  `fold_plus_chain_check` is the replay rate with it (target: still >= 300,000 events/s).
* resume: `state_at` after a snapshot at the end plus 30 newer events, with and without the
  snapshot (target: < 20 ms with it), for (i) a thread whose context holds every message and
  (ii) one trimmed by `ContextSummarized` every 50 steps, as MessageContextManager(20) would.

Usage: .venv/bin/python bench/replay.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import _common as common

from agentlog.events import (
    GENESIS_HASH,
    ContextSummarized,
    Event,
    EventRecord,
    MessageAppended,
    NodeEntered,
    RunStarted,
    SQLiteEventStore,
    StepAdvanced,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.events.codec import chain_hash
from agentlog.projections import (
    AgentState,
    Message,
    MessageContextManager,
    message_appended,
    replay,
    state_at,
    take_snapshot,
)
from agentlog.projections.fold import gc_paused
from agentlog.projections.messages import Role

THREAD = "replay"
TARGET_FOLD_EVENTS_PER_S = 300_000
TARGET_RESUME_MS = 20.0
SUMMARY_EVERY = 50


def new_message(k: int) -> Message:
    """Step `k`'s message: about 100 characters, from the user on odd steps."""
    role: Role = "user" if k % 2 else "assistant"
    return Message.text_message(f"{role} turn {k}: ".ljust(100, "y"), role=role)


def step_events(k: int, message: Message, *, with_tool: bool) -> list[Event]:
    """One agent step; a tool call pair when `with_tool`."""
    events: list[Event] = [NodeEntered(node="agent"), message_appended(message)]
    if with_tool:
        call = f"call-{k}"
        events.append(ToolCallStarted(call_id=call, name="search", args={"q": f"q{k}"}))
        events.append(ToolCallFinished(call_id=call, name="search", output=f"r{k}"))
    events.append(StepAdvanced(step=k, next_node="agent"))
    return events


async def build_thread(path: Path, total: int, *, trimmed: bool) -> int:
    """Write a `total`-event thread; return the messages its context holds at the end."""
    manager: MessageContextManager[AgentState] = MessageContextManager(max_messages=20)
    context: list[Message] = []
    async with SQLiteEventStore(path) as store:
        await store.append(THREAD, [RunStarted(entry_node="agent")], expected_seq=0)
        seq, k = 1, 0
        while seq < total:
            k += 1
            message, room = new_message(k), total - seq
            context.append(message)
            events = step_events(k, message, with_tool=k % 4 == 0)
            if trimmed and k % SUMMARY_EVERY == 0 and len(events) < room:
                context = manager.trimmed(context) or context
                kept = [m.model_dump(mode="json") for m in context]
                events.append(ContextSummarized(summary=f"up to step {k}", messages=kept))
            events = events[:room]  # the last step may be cut short to land on `total`
            if len(events) < 2:  # ... before its message
                context.pop()
            await store.append(THREAD, events, expected_seq=seq)
            seq += len(events)
        return len(context)


async def append_steps(path: Path, steps: int) -> int:
    """Append `steps` more plain steps (3 events each) to the thread; return its last seq."""
    async with SQLiteEventStore(path) as store:
        seq = await store.last_seq(THREAD)
        first = (await state_at(store, THREAD)).execution_meta.step + 1
        for k in range(first, first + steps):
            events = step_events(k, new_message(k), with_tool=False)
            await store.append(THREAD, events, expected_seq=seq)
            seq += len(events)
        return seq


async def read_records(path: Path) -> list[EventRecord]:
    """Every record of the thread, from a freshly opened store."""
    async with SQLiteEventStore(path) as store:
        return [r async for r in store.read(THREAD)]


async def timed_state(path: Path, *, use_snapshots: bool) -> tuple[float, AgentState]:
    """Seconds `state_at` takes on a freshly opened (already connected) store, and the state."""
    async with SQLiteEventStore(path) as store:  # entering opens both connections
        start = time.perf_counter()
        state: AgentState = await state_at(store, THREAD, use_snapshots=use_snapshots)
        return time.perf_counter() - start, state


def state_seconds(path: Path, *, use_snapshots: bool) -> Callable[[], float]:
    """A contender: `state_at` on a fresh store in a fresh event loop."""
    return lambda: asyncio.run(timed_state(path, use_snapshots=use_snapshots))[0]


async def timed_read(path: Path) -> float:
    """Seconds reading every record takes on a freshly opened store."""
    async with SQLiteEventStore(path) as store:
        start = time.perf_counter()
        records = [r async for r in store.read(THREAD)]
        assert records
        return time.perf_counter() - start


def plain_fold(records: list[EventRecord]) -> list[Message]:
    """The baseline: validate each message into a model, nothing else."""
    out: list[Message] = []
    for r in records:
        if isinstance(r.event, MessageAppended):
            out.append(Message.model_validate(r.event.message))
    return out


def plain_fold_gc_paused(records: list[EventRecord]) -> list[Message]:
    """The baseline with the cyclic GC paused, as `replay` pauses it (a fairer peer)."""
    with gc_paused():
        return plain_fold(records)


def bench_fold(path: Path, rounds: int) -> dict[str, Any]:
    records = asyncio.run(read_records(path))
    n = len(records)
    common.log(f"fold: {n} records in memory")
    t = common.medians(
        common.alternate(
            rounds,
            {
                "ours": common.timer(lambda: replay(records)),
                "plain": common.timer(lambda: plain_fold(records)),
                "plain_gc_paused": common.timer(lambda: plain_fold_gc_paused(records)),
            },
            warmup=1,
        )
    )
    ours, plain = common.per_second(n, t["ours"]), common.per_second(n, t["plain"])
    paused = common.per_second(n, t["plain_gc_paused"])
    return {
        "events_per_s": ours,
        "plain_events_per_s": plain,
        "ratio": common.ratio(ours, plain),
        "plain_gc_paused_events_per_s": paused,
        "ratio_to_plain_gc_paused": common.ratio(ours, paused),
        "target": TARGET_FOLD_EVENTS_PER_S,
        "ok": ours >= TARGET_FOLD_EVENTS_PER_S,
        "_fold_s": t["ours"],
    }


def chain_seconds(path: Path) -> Callable[[], float]:
    """Time re-checking every hash link of the thread, as each read now does."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT thread_id, seq, run_id, actor, at, kind, version, position, payload, hash "
            "FROM events WHERE thread_id = ? ORDER BY seq",
            (THREAD,),
        ).fetchall()

    def check() -> float:
        begin = time.perf_counter()
        prev = GENESIS_HASH
        for *envelope, payload, digest in rows:
            if chain_hash(prev, tuple(envelope), payload) != digest:
                raise AssertionError("the benchmark's thread does not verify")
            prev = digest
        return time.perf_counter() - begin

    return check


def bench_from_disk(path: Path, events: int, fold_s: float, rounds: int) -> dict[str, Any]:
    common.log("from_disk: state_at(use_snapshots=False) vs store.read on a fresh store")
    t = common.medians(
        common.alternate(
            rounds,
            {
                "state_at": state_seconds(path, use_snapshots=False),
                "read": lambda: asyncio.run(timed_read(path)),
                "chain": chain_seconds(path),
            },
        )
    )
    fold_and_check = fold_s + t["chain"]
    return {
        "chain_check_ms": common.ms(t["chain"]),
        "chain_check_events_per_s": common.per_second(events, t["chain"]),
        "chain_check_share_of_state_at": common.ratio(t["chain"], t["state_at"]),
        "fold_plus_chain_check_events_per_s": common.per_second(events, fold_and_check),
        "fold_plus_chain_check_ok": events / fold_and_check >= TARGET_FOLD_EVENTS_PER_S,
        "ms": common.ms(t["state_at"]),
        "events_per_s": common.per_second(events, t["state_at"]),
        "read_only_ms": common.ms(t["read"]),
        "read_only_events_per_s": common.per_second(events, t["read"]),
        "fold_in_memory_ms": common.ms(fold_s),
        "ratio_read_plus_fold_to_state_at": common.ratio(t["read"] + fold_s, t["state_at"]),
    }


def bench_resume(path: Path, rounds: int) -> dict[str, Any]:
    async def snapshot() -> tuple[float, int]:
        async with SQLiteEventStore(path) as store:
            start = time.perf_counter()
            snap = await take_snapshot(store, THREAD)
            return time.perf_counter() - start, snap.seq

    snapshot_s, snapshot_seq = asyncio.run(snapshot())
    with closing(sqlite3.connect(path)) as conn:
        (snapshot_bytes,) = conn.execute("SELECT length(state) FROM snapshots").fetchone()
    last_seq = asyncio.run(append_steps(path, 10))
    _, with_state = asyncio.run(timed_state(path, use_snapshots=True))
    _, without_state = asyncio.run(timed_state(path, use_snapshots=False))
    same_state = with_state.model_dump() == without_state.model_dump()
    messages = len(with_state.context)
    del with_state, without_state  # live objects would slow every GC pass of the rounds
    t = common.medians(
        common.alternate(
            rounds,
            {
                "with": state_seconds(path, use_snapshots=True),
                "without": state_seconds(path, use_snapshots=False),
            },
        )
    )
    return {
        "with_snapshot_ms": common.ms(t["with"]),
        "without_snapshot_ms": common.ms(t["without"]),
        "ratio_without_to_with": common.ratio(t["without"], t["with"]),
        "messages": messages,
        "snapshot_seq": snapshot_seq,
        "events_after_snapshot": last_seq - snapshot_seq,
        "take_snapshot_ms": common.ms(snapshot_s),
        "snapshot_bytes": snapshot_bytes,
        "same_state": same_state,
        "ok": t["with"] * 1000 < TARGET_RESUME_MS,
    }


def main() -> None:
    args = common.parse_args(__doc__ or "")
    total = 20_000 if args.quick else 100_000
    with common.temp_dir() as directory:
        full, trim = directory / "full.sqlite", directory / "trimmed.sqlite"
        common.log(f"building a {total}-event thread (full context)")
        full_messages = asyncio.run(build_thread(full, total, trimmed=False))
        common.log(f"building a {total}-event thread (trimmed context, {full_messages} messages)")
        asyncio.run(build_thread(trim, total, trimmed=True))
        fold = bench_fold(full, args.rounds)
        from_disk = bench_from_disk(full, total, fold.pop("_fold_s"), args.rounds)
        common.log("resume: full context")
        resume_full = bench_resume(full, args.rounds)
        common.log("resume: trimmed context")
        resume_trim = bench_resume(trim, args.rounds)
    common.emit(
        {
            "bench": "replay",
            "quick": args.quick,
            "events": total,
            "fold": fold,
            "from_disk": from_disk,
            "resume": {
                "full_context": resume_full,
                "trimmed_context": resume_trim,
                "target_ms": TARGET_RESUME_MS,
            },
            "rounds": args.rounds,
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
