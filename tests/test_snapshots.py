"""Snapshots that point into the log: exact at every point of a thread, refused when they
name a hash the chain does not have, caught by `verify_snapshots` when they lie about the
state, and rows of the whole-state format still read."""

from __future__ import annotations

import asyncio
import random
import shutil
import sqlite3
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field

from agentlog.events import (
    ChainBrokenError,
    ContextSummarized,
    EventStore,
    Forked,
    MemoryEventStore,
    MessageAppended,
    MessageReplaced,
    MessagesRemoved,
    NodeEntered,
    RunStarted,
    Snapshot,
    SQLiteEventStore,
    StepAdvanced,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.events.codec import decode_state, encode_state
from agentlog.events.errors import InvalidAppendError
from agentlog.events.store import CorruptSnapshotError, decode_context_refs, encode_context_refs
from agentlog.projections import (
    AgentState,
    Message,
    PointOutOfRangeError,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    message_appended,
    messages_replaced,
    snapshot_of,
    state_at,
    state_data,
    state_updated,
    take_snapshot,
    to_builtins,
)
from agentlog.projections.fold import Fold
from agentlog.projections.generic import reducer_name, state_fields
from agentlog.projections.snapshot_checks import verify_snapshots
from agentlog.projections.snapshots import SnapshotWriter, write_snapshot

from .fixtures.make_v1_fixture import DB as FIXTURE_DB
from .fixtures.make_v1_fixture import FORK, THREAD, FixtureState

T = "t"


# ---- building threads -------------------------------------------------------------------


class Thread:
    """A thread written straight to a store, folded alongside as the engine folds it."""

    def __init__(
        self, store: EventStore, state_cls: type[AgentState] = AgentState, observe: bool = False
    ) -> None:
        self.store = store
        self.fold: Fold[Any] = Fold.new(state_cls)
        self.writer = SnapshotWriter(store, T)
        self.observe = observe  # feed the writer each commit, as the engine does
        self.seen: list[Message] = []  # every message ever appended, in order
        self.count = 0

    async def append(self, *events: Any) -> None:
        records = await self.store.append(T, list(events), expected_seq=self.fold.seq)
        self.fold.apply_all(records)
        if self.observe:
            self.writer.observe(records)

    def message(self, role: str = "assistant", **extra: Any) -> Message:
        self.count += 1
        text = f"message {self.count}: " + "words " * (self.count % 7)
        made = Message.text_message(text, role=role, message_id=f"m{self.count}")  # type: ignore[arg-type]
        if extra:
            made = made.model_copy(update=extra)
        self.seen.append(made)
        return made

    async def step(self, tool: bool) -> None:
        step = self.fold.state.execution_meta.step + 1
        events: list[Any] = [NodeEntered(node="agent")]
        if tool:
            call_id = f"call-{self.count}"
            asked = self.message(
                content=[TextBlock(text="let me look"), ToolCallBlock(id=call_id, name="look")]
            )
            self.count += 1
            result = Message.tool_message(
                [ToolResultBlock(call_id=call_id, output="found")], message_id=f"m{self.count}"
            )
            self.seen.append(result)
            events += [
                message_appended(asked),
                ToolCallStarted(call_id=call_id, name="look"),
                ToolCallFinished(call_id=call_id, name="look", output="found"),
                message_appended(result),
            ]
        else:
            events.append(message_appended(self.message()))
        events.append(StepAdvanced(step=step, next_node="agent"))
        await self.append(*events)

    async def snapshot(self, fresh_writer: bool = False) -> Snapshot:
        if fresh_writer:
            self.writer = SnapshotWriter(self.store, T)
        return await self.writer.snapshot(self.fold.seq, self.fold.state, hash=self.fold.hash)

    @property
    def context(self) -> list[Message]:
        return list(self.fold.state.context)


async def started(
    store: EventStore, state_cls: type[AgentState] = AgentState, observe: bool = False
) -> Thread:
    thread = Thread(store, state_cls, observe)
    fields = state_fields(state_cls)
    await thread.append(
        RunStarted(entry_node="agent", fields=fields or None),
        message_appended(thread.message("user")),
    )
    return thread


async def steps(thread: Thread, n: int) -> None:
    for k in range(n):
        await thread.step(tool=k % 2 == 1)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        yield store


async def same_as_the_log(store: EventStore, seq: int, state_cls: type[AgentState]) -> None:
    from_snapshot = await state_at(store, T, seq, state_cls)
    assert from_snapshot == await state_at(store, T, seq, state_cls, use_snapshots=False), seq


def problems(findings: list[Any]) -> list[Any]:
    return [f for f in findings if f.problem]


def raw(store: SQLiteEventStore, sql: str, *args: Any) -> list[Any]:
    conn = sqlite3.connect(store.path)
    try:
        with conn:
            return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


# ---- the state at any point is the fold's --------------------------------------------------

INDEX = st.integers(0, 10**6)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.booleans()),
        st.tuples(st.just("again"), INDEX),  # a message seen before, appended again
        st.tuples(st.just("delta"), st.none()),
        st.tuples(st.just("remove"), st.lists(INDEX, min_size=1, max_size=4)),
        st.tuples(st.just("replace_one"), INDEX),
        st.tuples(st.just("replace_all"), st.lists(INDEX, max_size=6)),
        st.tuples(st.just("summarize"), st.integers(-1, 6)),
        st.tuples(st.just("update"), st.none()),  # through the reducer: stored inline
        st.tuples(st.just("snapshot"), st.booleans()),  # True: a new writer, from the store
    ),
    min_size=1,
    max_size=300,
)


async def play(thread: Thread, op: str, arg: Any) -> None:
    """One operation on the context, as a node, a tool, a human or a context manager would."""
    context = thread.context
    pick = (lambda i: context[i % len(context)]) if context else None
    if op == "step":
        await thread.step(tool=arg)
    elif op == "again":
        await thread.append(message_appended(thread.seen[arg % len(thread.seen)]))
    elif op == "delta":
        await thread.append(message_appended(thread.message(delta=True)))
    elif op == "remove" and pick is not None:
        ids = list(dict.fromkeys(pick(i).message_id for i in arg))
        await thread.append(MessagesRemoved(message_ids=ids))
    elif op == "replace_one":
        target = pick(arg) if pick is not None else thread.seen[arg % len(thread.seen)]
        edited = target.model_copy(update={"content": [TextBlock(text=f"edited {arg}")]})
        await thread.append(MessageReplaced(message=to_builtins(edited)))
    elif op == "replace_all" and pick is not None:
        kept = [pick(i) for i in arg]  # may hold one message twice
        await thread.append(messages_replaced([*kept, thread.message()]))
    elif op == "summarize":
        kept = None if arg < 0 else [to_builtins(m) for m in context[-arg:]] if arg else []
        await thread.append(ContextSummarized(summary=f"summary {thread.count}", messages=kept))
    elif op == "update":
        await thread.append(state_updated({"context": [thread.message()]}))
    elif op == "snapshot":
        await thread.snapshot(fresh_writer=arg)


async def check_points(
    path: Path, warmup: int, ops: list[tuple[str, Any]], seed: int, observe: bool
) -> None:
    async with SQLiteEventStore(path) as store:
        thread = await started(store, observe=observe)
        last_snapshot = 0
        for k in range(warmup):  # a long plain stretch, snapshots by the engine's policy
            await thread.step(tool=k % 2 == 1)
            if thread.fold.seq // 97 > last_snapshot // 97:
                last_snapshot = thread.fold.seq
                await thread.snapshot()
        for op, arg in ops:
            await play(thread, op, arg)
        await thread.snapshot()
        last = thread.fold.seq
        snapshots = await store.snapshot_seqs(T)
        assert snapshots and snapshots[-1] == last
        around = {s + d for s in snapshots for d in (-1, 0, 1)}
        points = sorted({1, last, *random.Random(seed).sample(range(1, last + 1), min(last, 8))})
        for seq in sorted(p for p in around | set(points) if 1 <= p <= last):
            await same_as_the_log(store, seq, AgentState)
        assert await state_at(store, T) == thread.fold.state  # the live fold, too
        for state_cls in (AgentState, None):
            findings = await verify_snapshots(store, T, state_cls)
            assert not problems(findings), findings
        inline = 0
        for seq in snapshots:
            stored = await store.load_snapshot(T, seq, resolve=False)
            assert stored is not None and stored.context_refs is not None
            inline += sum(isinstance(e, dict) for e in stored.context_refs)
        if not any(op == "update" for op, _ in ops):
            assert inline == 0, "a message the log carries as is was stored inline"


@given(warmup=st.integers(0, 300), ops=OPS, seed=st.integers(0, 2**32), observe=st.booleans())
def test_the_state_at_any_point_is_the_fold_from_the_start(
    warmup: int, ops: list[tuple[str, Any]], seed: int, observe: bool
) -> None:
    """Up to 300 plain steps, then steps with tool calls, messages appended twice, deltas,
    removals, replacements one by one and whole, summaries that trim, updates through the
    reducer, snapshots by one writer (fed each commit, or reading the log back) and by new
    ones: at every snapshot, beside it and at random points, snapshot + tail is the fold
    from the first record."""
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(check_points(Path(directory) / "log.db", warmup, ops, seed, observe))


async def test_a_long_thread_every_step(db: SQLiteEventStore) -> None:
    thread = await started(db, observe=True)
    every, last_snapshot = 60, 0
    for k in range(150):
        await thread.step(tool=k % 2 == 1)
        if thread.fold.seq // every > last_snapshot // every:  # the engine's policy
            last_snapshot = thread.fold.seq
            await thread.snapshot()
    assert len(await db.snapshot_seqs(T)) >= 8
    for step_seq in await db.seqs_of_kind(T, "step_advanced"):
        await same_as_the_log(db, step_seq, AgentState)
    assert not problems(await verify_snapshots(db, T))


# ---- verifiable: the hash anchors, verify_snapshots compares -------------------------------


async def test_a_forged_snapshot_with_the_right_hash_is_refused_by_readers(
    db: SQLiteEventStore,
) -> None:
    thread = await started(db)
    await steps(thread, 20)
    honest = await thread.snapshot()
    seq = honest.seq
    assert await verify_snapshots(db, T) == []

    # In the file: the right seq and hash, another summary, the digest kept.
    state = decode_state(T, seq, raw(db, "SELECT state FROM snapshots WHERE seq = ?", seq)[0][0])
    state["context_summary"] = "all is well"
    raw(db, "UPDATE snapshots SET state = ? WHERE seq = ?", encode_state(state), seq)
    for reader in (db, SQLiteEventStore(db.path)):  # this store object, and a fresh one
        with pytest.raises(CorruptSnapshotError, match=f"seq {seq}.*digest"):
            await state_at(reader, T)
        with pytest.raises(CorruptSnapshotError, match=f"seq {seq}.*digest"):
            await state_at(reader, T, seq)
        if reader is not db:
            await reader.close()
    assert await state_at(db, T, use_snapshots=False) == thread.fold.state
    (finding,) = await verify_snapshots(db, T)  # and verify says where and why
    assert (finding.kind, finding.seq, finding.path, finding.problem) == (
        "content",
        seq,
        "context_summary",
        True,
    )
    assert "all is well" in finding.message and "readers refuse it" in finding.message

    # A snapshot loaded and then changed carries its old digest: the store refuses it.
    await db.save_snapshot(honest)
    loaded = await db.load_snapshot(T)
    assert loaded is not None and loaded.digest
    forged = msgspec.structs.replace(
        loaded, state={**loaded.state, "context_summary": "all is well"}
    )
    with pytest.raises(InvalidAppendError, match="digest"):
        await db.save_snapshot(forged)
    assert await state_at(db, T) == thread.fold.state

    # Through the store with content of its own (no digest claimed): the write path is
    # trusted, as for appends, so readers believe it; verify compares it with the log.
    mine = msgspec.structs.replace(honest, state={**honest.state, "context_summary": "mine"})
    await db.save_snapshot(mine)
    assert (await state_at(db, T)).context_summary == "mine"
    (finding,) = await verify_snapshots(db, T)
    assert (finding.kind, finding.path) == ("content", "context_summary")
    assert "readers would believe it" in finding.message

    # With raw sqlite3: the references swapped, so the context would hold other messages.
    await db.save_snapshot(honest)
    assert await verify_snapshots(db, T, AgentState) == []
    blob = decode_state(T, seq, raw(db, "SELECT refs FROM snapshots WHERE seq = ?", seq)[0][0])
    entries = decode_context_refs(blob["context"], T, seq)
    entries[3], entries[4] = entries[4], entries[3]
    blob["context"] = encode_context_refs(entries)
    raw(db, "UPDATE snapshots SET refs = ? WHERE seq = ?", encode_state(blob), seq)
    with pytest.raises(CorruptSnapshotError, match="digest"):
        await state_at(db, T)
    (finding,) = await verify_snapshots(db, T, AgentState)
    assert finding.kind == "content" and finding.path is not None
    assert finding.path.startswith("context[3]")
    # ... and with the digest dropped, the row is one no reader uses: the log is folded.
    del blob["digest"]
    raw(db, "UPDATE snapshots SET refs = ? WHERE seq = ?", encode_state(blob), seq)
    assert await state_at(db, T) == thread.fold.state

    # A whole-state row forged in the file is refused and caught the same way.
    whole = snapshot_of(T, seq, thread.fold.state, hash=thread.fold.hash)
    await db.save_snapshot(whole)
    assert await verify_snapshots(db, T) == []
    assert await state_at(db, T) == thread.fold.state
    state = decode_state(T, seq, raw(db, "SELECT state FROM snapshots WHERE seq = ?", seq)[0][0])
    state["execution_meta"]["step"] = 999
    raw(db, "UPDATE snapshots SET state = ? WHERE seq = ?", encode_state(state), seq)
    with pytest.raises(CorruptSnapshotError, match="digest"):
        await state_at(db, T)
    (finding,) = await verify_snapshots(db, T)
    assert (finding.kind, finding.path) == ("content", "execution_meta.step")


async def test_a_snapshot_whose_hash_is_not_the_chains_is_refused(db: SQLiteEventStore) -> None:
    thread = await started(db)
    await steps(thread, 12)
    honest = await thread.snapshot()
    await steps(thread, 3)
    records = [r async for r in db.read(T)]
    other = records[honest.seq - 3].hash
    await db.save_snapshot(msgspec.structs.replace(honest, hash=other))
    for seq in (honest.seq, None):
        with pytest.raises(ChainBrokenError, match="snapshot") as refused:
            await state_at(db, T, seq)
        assert refused.value.seq == honest.seq
    assert await state_at(db, T, use_snapshots=False) == thread.fold.state
    (finding,) = await verify_snapshots(db, T)
    assert (finding.kind, finding.seq, finding.problem) == ("hash", honest.seq, True)

    # The anchor changed in the file, not through the store: its digest no longer holds.
    await db.save_snapshot(honest)
    assert await state_at(db, T) == thread.fold.state
    raw(db, "UPDATE snapshots SET anchor = ? WHERE seq = ?", bytes(32), honest.seq)
    with pytest.raises(CorruptSnapshotError, match="digest"):
        await state_at(db, T)
    assert [f.kind for f in await verify_snapshots(db, T)] == ["hash"]


class Counting:
    """A store that counts what a reader takes from it: the records it reads, and the
    messages it has resolved (or checked) out of snapshots."""

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner
        self.records = 0
        self.messages = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def read(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for record in self.inner.read(*args, **kwargs):
            self.records += 1
            yield record

    async def load_snapshot(self, *args: Any, **kwargs: Any) -> Snapshot | None:
        snapshot = await self.inner.load_snapshot(*args, **kwargs)
        if snapshot is not None:
            context = snapshot.state.get("context")
            self.messages += len(context) if isinstance(context, list) else 0
            self.messages += len(getattr(snapshot, "record_hashes", None) or ())
        return snapshot


async def test_verify_reads_a_long_thread_once_however_many_snapshots(
    db: SQLiteEventStore,
) -> None:
    """What `verify_snapshots` reads grows with the thread, not with its snapshots times
    their contexts (each snapshot's whole context was read and validated before)."""
    thread = await started(db, observe=True)
    for k in range(600):
        await thread.step(tool=k % 2 == 1)
        if k % 10 == 9:
            await thread.snapshot()
    records = thread.fold.seq
    snapshots = await db.snapshot_seqs(T)
    assert len(snapshots) == 60 and len(thread.context) > 800
    for state_cls in (AgentState, None):
        counting = Counting(db)
        assert await verify_snapshots(counting, T, state_cls) == []  # type: ignore[arg-type]
        assert counting.records + counting.messages <= 2 * records, (
            counting.records,
            counting.messages,
        )

    # Compared where it changed, yet a forged snapshot in the middle is still found, and
    # the honest one after it still agrees.
    middle = snapshots[30]
    blob = decode_state(
        T, middle, raw(db, "SELECT refs FROM snapshots WHERE seq = ?", middle)[0][0]
    )
    entries = decode_context_refs(blob["context"], T, middle)
    entries[7], entries[8] = entries[8], entries[7]
    blob["context"] = encode_context_refs(entries)
    raw(db, "UPDATE snapshots SET refs = ? WHERE seq = ?", encode_state(blob), middle)
    counting = Counting(db)
    (finding,) = await verify_snapshots(counting, T, AgentState)  # type: ignore[arg-type]
    assert (finding.kind, finding.seq) == ("content", middle)
    assert finding.path is not None and finding.path.startswith("context[7]")
    # The snapshot after it is compared from the difference on: its records read once more.
    assert counting.records + counting.messages <= 3 * records


async def test_a_snapshot_beyond_the_thread_is_a_hash_finding(db: SQLiteEventStore) -> None:
    thread = await started(db)
    await steps(thread, 3)
    honest = await thread.snapshot()
    await db.save_snapshot(msgspec.structs.replace(honest, seq=honest.seq + 50))
    findings = await verify_snapshots(db, T)
    assert [(f.kind, f.seq) for f in findings] == [("hash", honest.seq + 50)]
    assert await state_at(db, T) == thread.fold.state  # a reader never looks past the end


async def test_damaged_references_are_a_typed_error(db: SQLiteEventStore) -> None:
    thread = await started(db)
    await steps(thread, 6)
    honest = await thread.snapshot()
    seq = honest.seq
    step_seq = (await db.seqs_of_kind(T, "step_advanced"))[0]  # a record carrying no message
    for bad in ([step_seq], [[2, 7]], "not a list", [True]):
        blob = encode_state({"context": bad})
        raw(db, "UPDATE snapshots SET refs = ? WHERE seq = ?", blob, seq)
        with pytest.raises(CorruptSnapshotError, match=f"seq {seq}") as damaged:
            await state_at(db, T)
        assert "use_snapshots=False" in str(damaged.value)
        assert await state_at(db, T, use_snapshots=False) == thread.fold.state
        (finding,) = await verify_snapshots(db, T)
        assert (finding.kind, finding.problem) == ("unreadable", True)
    # A writer does not build on it: it follows the log from the start instead.
    await steps(thread, 1)
    fresh = await thread.snapshot(fresh_writer=True)
    assert await state_at(db, T, fresh.seq) == thread.fold.state
    # Nothing reaching outside the snapshot's records is stored in the first place.
    with pytest.raises(InvalidAppendError, match="outside records"):
        await db.save_snapshot(msgspec.structs.replace(honest, context_refs=[seq + 1]))
    with pytest.raises(InvalidAppendError, match="64 hex digits"):
        await db.save_snapshot(msgspec.structs.replace(honest, hash="abc"))


# ---- the format: bytes, reads, old rows -------------------------------------------------------


async def test_a_snapshot_costs_bytes_per_message_not_per_character(
    db: SQLiteEventStore,
) -> None:
    thread = await started(db)
    await steps(thread, 200)
    snapshot = await thread.snapshot()
    messages = len(thread.context)
    assert messages > 250
    (refs, state), *_ = raw(
        db, "SELECT LENGTH(refs), LENGTH(state) FROM snapshots WHERE seq = ?", snapshot.seq
    )
    assert refs < 1.5 * messages  # about one byte of MessagePack per message
    assert state < 1000  # the execution metadata and the summary
    # A referencing row names no hash in the column older readers use: they never trust it.
    assert raw(db, "SELECT hash IS NULL, anchor IS NOT NULL FROM snapshots") == [(1, 1)]


async def test_the_writer_reads_only_the_records_since_its_last_snapshot(
    db: SQLiteEventStore,
) -> None:
    thread = await started(db)
    await steps(thread, 30)
    await thread.snapshot()
    since = thread.fold.seq
    await steps(thread, 10)
    reads: list[tuple[int, int | None]] = []
    original = db.read

    def spy(thread_id: str, from_seq: int = 1, to_seq: int | None = None, **how: Any) -> Any:
        reads.append((from_seq, to_seq))
        return original(thread_id, from_seq, to_seq, **how)

    db.read = spy  # type: ignore[method-assign]
    await thread.snapshot()
    assert reads == [(since + 1, thread.fold.seq)]
    reads.clear()
    await thread.snapshot(fresh_writer=True)  # a new writer starts from the stored snapshot
    assert reads == []
    before = thread.fold.seq
    await steps(thread, 2)
    await thread.snapshot(fresh_writer=True)
    assert reads == [(before + 1, thread.fold.seq)]


async def test_a_writer_fed_each_commit_reads_nothing_back(db: SQLiteEventStore) -> None:
    thread = await started(db, observe=True)
    await steps(thread, 5)
    reads: list[tuple[int, int | None]] = []
    original = db.read

    def spy(thread_id: str, from_seq: int = 1, to_seq: int | None = None, **how: Any) -> Any:
        reads.append((from_seq, to_seq))
        return original(thread_id, from_seq, to_seq, **how)

    db.read = spy  # type: ignore[method-assign]
    at = thread.fold.seq
    first = thread.writer.snapshot(at, thread.fold.state, hash=thread.fold.hash)
    await steps(thread, 3)  # more commits land before the snapshot is written ...
    assert (await first).seq == at
    assert reads == [(1, at), (at + 1, thread.fold.seq)]  # ... and it catches up with them
    reads.clear()
    for _ in range(3):
        await steps(thread, 4)
        await thread.snapshot()
    assert reads == []
    db.read = original  # type: ignore[method-assign]
    for seq in await db.snapshot_seqs(T):
        await same_as_the_log(db, seq, AgentState)
    # A commit it did not see (another writer's) makes it rebuild from the store once.
    records = await db.append(T, [NodeEntered(node="agent")], expected_seq=thread.fold.seq)
    thread.fold.apply_all(records)
    await steps(thread, 1)
    db.read = spy  # type: ignore[method-assign]
    await thread.snapshot()
    assert len(reads) == 1
    db.read = original  # type: ignore[method-assign]
    assert not problems(await verify_snapshots(db, T))


async def test_old_whole_state_rows_are_read_and_verified(db: SQLiteEventStore) -> None:
    thread = await started(db)
    await steps(thread, 10)
    old = snapshot_of(T, thread.fold.seq, thread.fold.state, hash=thread.fold.hash)
    await db.save_snapshot(old)
    await steps(thread, 4)
    reads: list[int] = []
    original = db.read

    def spy(thread_id: str, from_seq: int = 1, to_seq: int | None = None, **how: Any) -> Any:
        reads.append(from_seq)
        return original(thread_id, from_seq, to_seq, **how)

    db.read = spy  # type: ignore[method-assign]
    assert await state_at(db, T) == thread.fold.state
    assert reads == [old.seq + 1]  # it was used: only the tail was read
    db.read = original  # type: ignore[method-assign]
    assert await verify_snapshots(db, T) == []
    loaded = await db.load_snapshot(T)
    assert loaded is not None and loaded.context_refs is None
    assert loaded.state["context"] == old.state["context"]
    # A writer does not build on a whole row: it follows the log from its start.
    new = await thread.snapshot(fresh_writer=True)
    assert new.context_refs is not None and not any(isinstance(e, dict) for e in new.context_refs)


async def test_a_file_from_before_references_opens_reads_and_gains_them(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with SQLiteEventStore(path) as store:
        thread = await started(store)
        await steps(thread, 5)
        old = snapshot_of(T, thread.fold.seq, thread.fold.state, hash=thread.fold.hash)
        await store.save_snapshot(old)
        expected = thread.fold.state
    conn = sqlite3.connect(path)
    for column in ("refs", "anchor"):
        conn.execute(f"ALTER TABLE snapshots DROP COLUMN {column}")
    conn.commit()
    conn.close()
    async with SQLiteEventStore(path, readonly=True) as store:
        loaded = await store.load_snapshot(T)
        assert loaded is not None and loaded.hash == old.hash
        assert await state_at(store, T) == expected
        assert await verify_snapshots(store, T) == []
    async with SQLiteEventStore(path) as store:  # a writable open adds the columns
        thread = Thread(store)
        thread.fold.apply_all([r async for r in store.read(T)])
        await thread.snapshot()
        assert await state_at(store, T) == expected
        assert await verify_snapshots(store, T) == []


async def test_the_schema_fixtures_snapshots_verify(tmp_path: Path) -> None:
    copy = tmp_path / "fixture.db"
    shutil.copyfile(FIXTURE_DB, copy)
    async with SQLiteEventStore(copy, readonly=True) as store:
        for thread_id in (THREAD, FORK):
            assert await store.snapshot_seqs(thread_id)
            assert not problems(await verify_snapshots(store, thread_id, FixtureState))
            assert not problems(await verify_snapshots(store, thread_id))


async def test_take_snapshot_stores_references_and_returns_the_whole_state(
    db: SQLiteEventStore,
) -> None:
    thread = await started(db)
    await steps(thread, 8)
    taken = await take_snapshot(db, T, thread.fold.seq - 4)
    assert taken.context_refs is not None
    loaded = await db.load_snapshot(T)
    assert loaded is not None and loaded.state == taken.state
    assert await state_at(db, T, taken.seq) == await state_at(db, T, taken.seq, use_snapshots=False)
    with pytest.raises(PointOutOfRangeError, match="before its first record"):
        await take_snapshot(db, T, 0)


async def test_a_memory_store_reads_references_like_sqlite() -> None:
    async with MemoryEventStore() as store:
        thread = await started(store)
        await steps(thread, 12)
        await thread.snapshot()
        await steps(thread, 2)
        assert await state_at(store, T) == thread.fold.state
        assert await verify_snapshots(store, T) == []


# ---- custom state classes ----------------------------------------------------------------


def keep_last_two(left: list[Message], right: list[Message]) -> list[Message]:
    """A user's context reducer: the snapshot cannot follow it, so stores the context inline."""
    return [*left, *right][-2:]


def total(left: int | None, right: int | None) -> int:
    """A user's reducer of a custom field."""
    return (left or 0) + (right or 0)


class Trimmed(AgentState):
    context: Annotated[list[Message], keep_last_two] = Field(default_factory=list)
    score: Annotated[int, total] = 0


async def test_a_context_reducer_the_log_cannot_follow_is_stored_inline(
    db: SQLiteEventStore,
) -> None:
    thread = await started(db, Trimmed)
    for k in range(5):
        message = thread.message()
        await thread.append(state_updated({"context": [message], "score": k}))
    snapshot = await thread.snapshot()
    assert snapshot.context_refs is not None
    assert all(isinstance(e, dict) for e in snapshot.context_refs)
    assert len(thread.fold.state.context) == 2
    await thread.append(message_appended(thread.message()))
    await same_as_the_log(db, snapshot.seq, Trimmed)
    await same_as_the_log(db, thread.fold.seq, Trimmed)
    assert await verify_snapshots(db, T, Trimmed) == []

    # Without the class: the user-reduced fields are named, not guessed.
    findings = await verify_snapshots(db, T)
    assert not problems(findings)
    (unchecked,) = findings
    assert unchecked.kind == "unchecked" and "context" in unchecked.message
    assert "score" in unchecked.message

    # A forged user-reduced field is caught with the class, and only named without it.
    forged = msgspec.structs.replace(snapshot, state={**snapshot.state, "score": 1000})
    await db.save_snapshot(forged)
    (finding,) = await verify_snapshots(db, T, Trimmed)
    assert (finding.kind, finding.path) == ("content", "score")
    assert not problems(await verify_snapshots(db, T))
    assert reducer_name(keep_last_two) in str(state_fields(Trimmed))


async def test_a_snapshot_of_another_class_is_named_not_compared(db: SQLiteEventStore) -> None:
    thread = await started(db)
    await steps(thread, 3)
    await write_snapshot(db, T, thread.fold.seq, thread.fold.state, hash=thread.fold.hash)
    (finding,) = await verify_snapshots(db, T, Trimmed)
    assert (finding.kind, finding.problem) == ("other_class", False)
    assert await verify_snapshots(db, T, AgentState) == []


async def test_a_message_its_payload_does_not_identify_is_stored_as_the_live_state_holds_it(
    db: SQLiteEventStore,
) -> None:
    """A crafted payload without a message id: each fold of it draws a new id, so the
    snapshot keeps the message the live state holds, not a pointer to the payload."""
    thread = await started(db)
    await steps(thread, 2)
    anonymous = to_builtins(Message.text_message("who am I"))
    del anonymous["message_id"]
    await thread.append(MessageAppended(message=anonymous))
    await steps(thread, 1)
    snapshot = await thread.snapshot()
    assert snapshot.context_refs is not None
    inline = [e for e in snapshot.context_refs if isinstance(e, dict)]
    live = thread.fold.state.context[-2]
    assert [e["message_id"] for e in inline] == [live.message_id]
    assert await state_at(db, T, snapshot.seq) == thread.fold.state


async def test_a_snapshot_the_class_cannot_hold_is_passed_over_for_the_log(
    db: SQLiteEventStore, caplog: pytest.LogCaptureFixture
) -> None:
    thread = await started(db)
    await steps(thread, 4)
    broken = snapshot_of(T, thread.fold.seq, thread.fold.state, hash=thread.fold.hash)
    await db.save_snapshot(msgspec.structs.replace(broken, state={"context": "garbage"}))
    with caplog.at_level("WARNING", logger="agentlog.snapshots"):
        assert await state_at(db, T) == thread.fold.state
    assert "does not validate" in caplog.text
    (finding,) = await verify_snapshots(db, T, AgentState)
    assert (finding.kind, finding.problem) == ("unreadable", True)


async def test_a_forked_thread_points_into_its_first_record(db: SQLiteEventStore) -> None:
    source = AgentState(
        context=[Message.text_message(f"kept {i}", message_id=f"k{i}") for i in range(4)]
    )
    thread = Thread(db, observe=True)
    await thread.append(Forked(source_thread="src", source_seq=9, state=state_data(source)))
    await steps(thread, 3)
    snapshot = await thread.snapshot()
    assert snapshot.context_refs is not None
    assert snapshot.context_refs[:4] == [1, [0, 1], [0, 2], [0, 3]]  # seq 1, messages 0..3
    await same_as_the_log(db, snapshot.seq, AgentState)
    assert await verify_snapshots(db, T) == []


@pytest.mark.parametrize("observe", [False, True])
async def test_a_context_holding_one_message_twice(db: SQLiteEventStore, observe: bool) -> None:
    """A replacement may list a message twice; an edit then changes the last copy only, and a
    removal takes both: the references follow the fold exactly."""
    thread = await started(db, observe=observe)
    await steps(thread, 4)
    twice = thread.context[2]
    await thread.append(messages_replaced([*thread.context, twice, thread.message()]))
    await thread.snapshot()
    edited = twice.model_copy(update={"content": [TextBlock(text="edited")]})
    await thread.append(MessageReplaced(message=to_builtins(edited)))
    await steps(thread, 1)
    snapshot = await thread.snapshot()
    copies = [m for m in thread.context if m.message_id == twice.message_id]
    assert [m.content[0].text for m in copies] == [twice.content[0].text, "edited"]  # type: ignore[union-attr]
    await same_as_the_log(db, snapshot.seq, AgentState)
    await thread.append(MessagesRemoved(message_ids=[twice.message_id]))
    await steps(thread, 1)
    last = await thread.snapshot()
    assert twice.message_id not in {m.message_id for m in thread.context}
    await same_as_the_log(db, last.seq, AgentState)
    assert await verify_snapshots(db, T) == []


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_short_runs_snapshot_a_thread_at_rest_once_every_64_records(
    kind: str, tmp_path: Path
) -> None:
    """Runs of 6 records each: a snapshot at rest is taken only once the thread is 64
    records past its latest one (the one each run loads), not after every run past 64."""
    from agentlog.actors.engine.steps import SNAPSHOT_AT_REST
    from tests.helpers import line

    def echo(state: AgentState) -> list[Message]:
        return [Message.text_message("echo", role="assistant")]

    store: Any = MemoryEventStore() if kind == "memory" else SQLiteEventStore(tmp_path / "s.db")
    async with store:
        app = line(("echo", echo)).compile(checkpointer=store)
        for n in range(40):
            await app.ainvoke(f"order {n}", {"thread_id": "t"})
        last = await store.last_seq("t")
        assert last == 240
        seqs = await store.snapshot_seqs("t")
        assert seqs == [66, 132, 198], seqs
        gaps = [b - a for a, b in zip([0, *seqs], seqs, strict=False)]
        assert all(gap >= SNAPSHOT_AT_REST for gap in gaps)
