"""The contract every `EventStore` keeps, as a pytest suite any backend can run.

A new store is proven by inheritance: subclass `StoreConformance` in a test module, give it
an async `store` fixture yielding a fresh, empty store, and a `forge_holder` that writes a
claim as another process would (the built-in stores have theirs here)::

    import pytest
    from agentlog.events.testing import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        async def store(self, tmp_path):
            async with MyEventStore(tmp_path / "log") as store:
                yield store

        async def forge_holder(self, store, thread_id, holder):
            await store.put_claim_row(thread_id, holder)  # however MyEventStore keeps claims

The suite needs pytest and pytest-asyncio (`pip install agentlog[testing]`), with
`asyncio_mode = "auto"` or the fixture declared with `pytest_asyncio.fixture`;
`import agentlog.events` needs neither, and nothing in the package imports this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import itertools
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from agentlog.events import verify_export
from agentlog.events.audit import export_jsonl, head, verify_store, verify_thread
from agentlog.events.claims import HOST, Claim, Holder, process_marker
from agentlog.events.codec import GENESIS_HASH, chain_hash, encode_payloads
from agentlog.events.errors import (
    AgentlogError,
    ChainBrokenError,
    ClaimLostError,
    ConcurrencyError,
    InvalidAppendError,
    StoreClosedError,
    ThreadBusyError,
    ThreadNotFoundError,
    UnknownEventKindError,
)
from agentlog.events.kinds import (
    Event,
    InterruptRaised,
    MessageAppended,
    MessagesReplaced,
    NodeEntered,
    Resumed,
    RunCompleted,
    StepAdvanced,
    StopRequested,
)
from agentlog.events.record import EventRecord, Snapshot
from agentlog.events.store import CorruptSnapshotError, EventStore, encode_context_refs
from agentlog.events.stores.memory import MemoryEventStore
from agentlog.events.stores.sqlite import SQLiteEventStore

__all__ = ["StoreConformance", "step_events", "text_event", "text_message"]

_ids = itertools.count(1)


def text_message(text: str, role: str = "user", message_id: str | None = None) -> dict[str, Any]:
    """A message as the log stores it (builtins): one text block."""
    return {
        "message_id": message_id or f"msg-{next(_ids)}",
        "role": role,
        "content": [{"type": "text", "text": text}],
    }


def text_event(text: str, message_id: str | None = None) -> MessageAppended:
    """A message_appended event of a user text."""
    return MessageAppended(message=text_message(text, message_id=message_id))


def step_events(step: int, text: str = "hello", role: str = "assistant") -> list[Event]:
    """The events of one ordinary agent step: a node entered, its reply, the step's end."""
    return [
        NodeEntered(node="agent"),
        MessageAppended(message=text_message(f"{text} {step}", role=role)),
        StepAdvanced(step=step, next_node="agent"),
    ]


class StoreConformance:
    """Behaviour shared by all stores. Subclasses provide an async `store` fixture (a fresh,
    empty store each test) and, for a backend other than the built-in ones, `forge_holder`."""

    pytestmark = pytest.mark.asyncio

    @pytest.fixture
    async def store(self) -> AsyncIterator[EventStore]:  # pragma: no cover - overridden
        raise NotImplementedError("a StoreConformance subclass provides the `store` fixture")
        yield

    async def forge_holder(self, store: EventStore, thread_id: str, holder: Holder) -> None:
        """Put `holder` in the store as the thread's claim, as another process would have.

        The claim tests need it to stage owners that are dead, remote or usurping; a new
        backend overrides it with a direct write to wherever it keeps claims.
        """
        if isinstance(store, SQLiteEventStore):
            await store.open()
            conn = sqlite3.connect(store.path, timeout=10)
            with conn:
                conn.execute(
                    "INSERT OR REPLACE INTO claims (thread_id, token, host, pid, started, "
                    "heartbeat_at, lease, purpose) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        thread_id, holder.token, holder.host, holder.pid, holder.started,
                        holder.heartbeat_at, holder.lease, holder.purpose,
                    ),
                )  # fmt: skip
            conn.close()
        elif isinstance(store, MemoryEventStore):
            store._claims[thread_id] = holder
        elif type(store).__module__ == "agentlog.events.stores.postgres":
            await store.open()  # type: ignore[attr-defined]
            await store._query(  # type: ignore[attr-defined]
                "execute",
                f'INSERT INTO "{store.schema}".claims (thread_id, token, host, pid, started, '  # type: ignore[attr-defined]
                "heartbeat_at, lease, purpose) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
                "ON CONFLICT (thread_id) DO UPDATE SET token = excluded.token, "
                "host = excluded.host, pid = excluded.pid, started = excluded.started, "
                "heartbeat_at = excluded.heartbeat_at, lease = excluded.lease, "
                "purpose = excluded.purpose",
                thread_id, holder.token, holder.host, holder.pid, holder.started,
                holder.heartbeat_at, holder.lease, holder.purpose,
            )  # fmt: skip
        else:
            pytest.fail(
                f"{type(store).__name__} has no way to stage a claim: override "
                "StoreConformance.forge_holder to write `holder` as the thread's claim"
            )

    async def alter_record(
        self, store: EventStore, thread_id: str, seq: int, event: Event, rehash: bool = False
    ) -> None:
        """Replace the payload of the thread's record `seq` with `event`'s behind the store,
        as a hand edit of the database would; with `rehash`, its stored hash is made to match
        the new bytes too (the records after it are left alone).

        The snapshot tests need it; a new backend overrides it with a direct write.
        """
        [encoded] = encode_payloads(thread_id, [event])
        rows = [r async for r in store.read_rows(thread_id, seq - 1 if seq > 1 else 1, seq)]
        row = rows[-1]
        prev = rows[0].hash if seq > 1 else GENESIS_HASH
        envelope = (
            row.thread_id, row.seq, row.run_id, row.actor,
            row.at, row.kind, row.version, row.position,
        )  # fmt: skip
        digest = chain_hash(prev, envelope, encoded.payload) if rehash else row.hash
        if isinstance(store, SQLiteEventStore):
            conn = sqlite3.connect(store.path, timeout=10)
            with conn:
                conn.execute(
                    "UPDATE events SET payload = ?, hash = ? WHERE thread_id = ? AND seq = ?",
                    (encoded.payload, digest, thread_id, seq),
                )
            conn.close()
        elif isinstance(store, MemoryEventStore):
            altered = row._replace(payload=encoded.payload, hash=digest)
            store._threads[thread_id][seq - 1] = altered
            store._all[row.position - 1] = altered
        elif type(store).__module__ == "agentlog.events.stores.postgres":
            await store._query(  # type: ignore[attr-defined]
                "execute",
                f'UPDATE "{store.schema}".events SET payload = $1, hash = $2 '  # type: ignore[attr-defined]
                "WHERE thread_id = $3 AND seq = $4",
                encoded.payload, digest, thread_id, seq,
            )  # fmt: skip
        else:
            pytest.fail(
                f"{type(store).__name__} has no way to alter a record: override "
                "StoreConformance.alter_record to rewrite it behind the store"
            )

    async def test_is_an_event_store(self, store: EventStore) -> None:
        assert isinstance(store, EventStore)

    async def test_append_numbers_records_from_one(self, store: EventStore) -> None:
        records = await store.append("t", step_events(1), expected_seq=0, run_id="r1", actor="a")
        assert [r.seq for r in records] == [1, 2, 3]
        assert [r.kind for r in records] == ["node_entered", "message_appended", "step_advanced"]
        assert all(r.thread_id == "t" and r.run_id == "r1" and r.actor == "a" for r in records)
        more = await store.append("t", [RunCompleted()], expected_seq=3)
        assert more[0].seq == 4
        assert await store.last_seq("t") == 4

    async def test_read_returns_what_was_appended(self, store: EventStore) -> None:
        written = await store.append("t", step_events(1), expected_seq=0)
        written += await store.append("t", step_events(2), expected_seq=3)
        read = [r async for r in store.read("t")]
        assert read == written
        assert [r.seq for r in store_range(read, 2, 4)] == [2, 3, 4]
        assert [r.seq async for r in store.read("t", 2, 4)] == [2, 3, 4]
        assert [r.seq async for r in store.read("t", 5)] == [5, 6]
        assert [r.seq async for r in store.read("t", 7)] == []

    async def test_read_rows_gives_the_stored_rows_unchecked_in_seq_order(
        self, store: EventStore
    ) -> None:
        seq = 0
        for step in range(1, 6):
            seq = (await store.append("t", step_events(step), expected_seq=seq))[-1].seq
        records = [r async for r in store.read("t")]
        rows = [r async for r in store.read_rows("t")]
        assert [r.seq for r in rows] == [r.seq for r in records] == list(range(1, seq + 1))
        assert [r.hash.hex() for r in rows] == [r.hash for r in records]
        assert [r.seq async for r in store.read_rows("t", 3, 5)] == [3, 4, 5]
        assert [r async for r in store.read_rows("nobody")] == []

    async def test_one_commit_may_name_an_actor_per_event(self, store: EventStore) -> None:
        events = step_events(1)
        actors = ["agent", "redactor", None]
        records = await store.append("t", events, expected_seq=0, actor=actors)
        assert [r.actor for r in records] == actors
        assert [r.actor async for r in store.read("t")] == actors
        assert (await store.verify("t")).ok
        with pytest.raises(InvalidAppendError, match="2 actors for 3 events"):
            await store.append("t", step_events(2), expected_seq=3, actor=["a", "b"])
        assert await store.last_seq("t") == 3

    async def test_files_names_what_an_export_must_not_overwrite(self, store: EventStore) -> None:
        files = store.files()
        assert isinstance(files, list) and all(isinstance(f, str) for f in files)

    async def test_read_streams_long_threads_in_order(self, store: EventStore) -> None:
        for step in range(1, 1501):
            await store.append("long", [StepAdvanced(step=step)], expected_seq=step - 1)
        seqs = [r.seq async for r in store.read("long")]
        assert seqs == list(range(1, 1501))
        middle = [r.event async for r in store.read("long", 1000, 1002)]
        assert middle == [StepAdvanced(step=step) for step in (1000, 1001, 1002)]

    async def test_positions_follow_commit_order_across_threads(self, store: EventStore) -> None:
        await store.append("a", [NodeEntered(node="x")], expected_seq=0)
        await store.append("b", [NodeEntered(node="y"), NodeEntered(node="z")], expected_seq=0)
        await store.append("a", [NodeEntered(node="w")], expected_seq=1)
        everything = [r async for r in store.read_all()]
        assert [(r.thread_id, r.seq) for r in everything] == [
            ("a", 1),
            ("b", 1),
            ("b", 2),
            ("a", 2),
        ]
        positions = [r.position for r in everything]
        assert positions == sorted(positions) and len(set(positions)) == 4
        after = [r async for r in store.read_all(from_position=positions[1])]
        assert [(r.thread_id, r.seq) for r in after] == [("b", 2), ("a", 2)]
        assert await store.threads() == ["a", "b"]

    async def test_wrong_expected_seq_raises_and_writes_nothing(self, store: EventStore) -> None:
        await store.append("t", step_events(1), expected_seq=0)
        for wrong in (0, 2, 4):
            with pytest.raises(ConcurrencyError) as info:
                await store.append("t", step_events(2), expected_seq=wrong)
            assert info.value.thread_id == "t"
            assert info.value.expected_seq == wrong and info.value.actual_seq == 3
            assert "'t'" in str(info.value)
        assert [r.seq async for r in store.read("t")] == [1, 2, 3]
        assert (await store.verify("t")).ok

    async def test_concurrent_appends_one_winner_per_seq(self, store: EventStore) -> None:
        await store.append("t", step_events(1), expected_seq=0)
        results = await asyncio.gather(
            *(store.append("t", step_events(2, f"w{i}"), expected_seq=3) for i in range(10)),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, list)]
        losers = [r for r in results if isinstance(r, ConcurrencyError)]
        assert len(winners) == 1 and len(losers) == 9
        assert [r.seq async for r in store.read("t")] == [1, 2, 3, 4, 5, 6]
        assert (await store.verify("t")).ok

    async def test_many_concurrent_threads_all_commit(self, store: EventStore) -> None:
        async def writer(i: int) -> None:
            seq = 0
            for step in range(1, 6):
                await store.append(f"w{i}", step_events(step), expected_seq=seq)
                seq += 3

        await asyncio.gather(*(writer(i) for i in range(30)))
        for i in range(30):
            assert [r.seq async for r in store.read(f"w{i}")] == list(range(1, 16))
            assert (await store.verify(f"w{i}")).ok
        positions = [r.position async for r in store.read_all()]
        assert positions == sorted(positions) and len(positions) == 450

    async def test_hash_chain_links_every_record(self, store: EventStore) -> None:
        await store.append("t", step_events(1), expected_seq=0)
        await store.append("t", step_events(2), expected_seq=3)
        records = [r async for r in store.read("t")]
        assert len({r.hash for r in records}) == len(records)
        report = await store.verify("t")
        assert report.ok and report.records_checked == 6
        assert report.head_hash == records[-1].hash
        assert report.first_bad_seq is None and report.problem is None

    async def test_same_events_on_other_thread_hash_differently(self, store: EventStore) -> None:
        a = await store.append("a", [NodeEntered(node="n")], expected_seq=0)
        b = await store.append("b", [NodeEntered(node="n")], expected_seq=0)
        assert a[0].hash != b[0].hash
        assert bytes.fromhex(a[0].hash) != GENESIS_HASH

    async def test_invalid_appends_are_refused(self, store: EventStore) -> None:
        with pytest.raises(InvalidAppendError, match="at least one event"):
            await store.append("t", [], expected_seq=0)
        with pytest.raises(InvalidAppendError, match="thread id"):
            await store.append("", [NodeEntered(node="n")], expected_seq=0)
        with pytest.raises(InvalidAppendError, match="dict"):
            await store.append("t", [{"kind": "node_entered"}], expected_seq=0)  # type: ignore[list-item]
        with pytest.raises(InvalidAppendError, match="expected_seq"):
            await store.append("t", [NodeEntered(node="n")], expected_seq=-1)
        assert await store.threads() == []

    async def test_a_bad_event_in_a_batch_writes_none_of_it(self, store: EventStore) -> None:
        with pytest.raises(InvalidAppendError):
            await store.append("t", [NodeEntered(node="n"), object()], expected_seq=0)  # type: ignore[list-item]
        assert await store.last_seq("t") == 0

    async def test_unencodable_payload_is_refused_up_front(self, store: EventStore) -> None:
        with pytest.raises(InvalidAppendError, match="'resumed'"):
            await store.append("t", [NodeEntered(node="n"), Resumed(value=2**70)], expected_seq=0)
        with pytest.raises(InvalidAppendError, match="JSON-like"):
            await store.append("t", [Resumed(value=object())], expected_seq=0)
        assert await store.last_seq("t") == 0
        ok = await store.append("t", [Resumed(value=2**40)], expected_seq=0)
        assert ok[0].event == Resumed(value=2**40)

    async def test_badly_typed_events_are_refused_up_front(self, store: EventStore) -> None:
        for bad in (NodeEntered(node=123), StepAdvanced(step="x"), RunCompleted(), object()):  # type: ignore[arg-type]
            if isinstance(bad, RunCompleted):
                continue
            with pytest.raises(InvalidAppendError):
                await store.append("t", [NodeEntered(node="ok"), bad], expected_seq=0)  # type: ignore[list-item]
        assert await store.last_seq("t") == 0

    async def test_returned_records_equal_what_readers_decode(self, store: EventStore) -> None:
        [written] = await store.append(
            "t", [InterruptRaised(node="n", reason="r", data={"pair": (1, 2)})], expected_seq=0
        )
        [read] = [r async for r in store.read("t")]
        assert written == read
        assert read.event == InterruptRaised(node="n", reason="r", data={"pair": [1, 2]})

    async def test_names_must_be_valid_text(self, store: EventStore) -> None:
        with pytest.raises(InvalidAppendError, match="UTF-8"):
            await store.append("bad\ud800", [NodeEntered(node="n")], expected_seq=0)
        with pytest.raises(InvalidAppendError, match="actor must be a string"):
            await store.append("t", [NodeEntered(node="n")], expected_seq=0, actor=5)  # type: ignore[arg-type]
        assert await store.threads() == []

    async def test_read_all_from_a_negative_position_reads_everything(
        self, store: EventStore
    ) -> None:
        await store.append("t", step_events(1), expected_seq=0)
        assert len([r async for r in store.read_all(-5)]) == 3

    async def test_seqs_of_kind_index_the_thread(self, store: EventStore) -> None:
        await store.append("t", step_events(1), expected_seq=0)
        await store.append("t", [NodeEntered(node="x")], expected_seq=3)
        await store.append("t", step_events(2), expected_seq=4)
        await store.append("u", step_events(1), expected_seq=0)
        assert await store.seqs_of_kind("t", "step_advanced") == [3, 7]
        assert await store.seqs_of_kind("t", "node_entered") == [1, 4, 5]
        assert await store.seqs_of_kind("t", "run_completed") == []
        with pytest.raises(UnknownEventKindError):
            await store.seqs_of_kind("t", "nope")
        with pytest.raises(ThreadNotFoundError):
            await store.seqs_of_kind("missing", "step_advanced")

    async def test_missing_thread_is_a_typed_error(self, store: EventStore) -> None:
        assert await store.last_seq("nope") == 0
        with pytest.raises(ThreadNotFoundError, match="'nope'"):
            [r async for r in store.read("nope")]
        with pytest.raises(ThreadNotFoundError):
            await store.verify("nope")

    async def test_snapshots_newest_at_or_before(self, store: EventStore) -> None:
        assert await store.load_snapshot("t") is None
        for seq in (3, 9, 6):
            await store.save_snapshot(
                Snapshot(thread_id="t", seq=seq, state={"n": seq, "nested": [1, {"a": None}]})
            )
        newest = await store.load_snapshot("t")
        assert newest is not None and newest.seq == 9 and newest.state["n"] == 9
        at7 = await store.load_snapshot("t", max_seq=7)
        assert (
            at7 is not None and at7.seq == 6 and at7.state == {"n": 6, "nested": [1, {"a": None}]}
        )
        assert await store.load_snapshot("t", max_seq=2) is None
        await store.save_snapshot(Snapshot(thread_id="t", seq=9, state={"n": "replaced"}))
        replaced = await store.load_snapshot("t")
        assert replaced is not None and replaced.state == {"n": "replaced"}
        assert await store.load_snapshot("other") is None

    async def test_snapshot_is_a_copy(self, store: EventStore) -> None:
        state = {"items": [1, 2]}
        await store.save_snapshot(Snapshot(thread_id="t", seq=1, state=state))
        state["items"].append(3)
        loaded = await store.load_snapshot("t")
        assert loaded is not None and loaded.state == {"items": [1, 2]}

    async def test_events_round_trip_their_payloads(self, store: EventStore) -> None:
        event = text_event("héllo ✓ " * 50, message_id="m1")
        [record] = await store.append("t", [event], expected_seq=0)
        [read] = [r async for r in store.read("t")]
        assert read.event == event == record.event

    async def test_closed_store_refuses_work(self, store: EventStore) -> None:
        await store.append("t", [NodeEntered(node="n")], expected_seq=0)
        await store.close()
        with pytest.raises(StoreClosedError):
            await store.append("t", [NodeEntered(node="n")], expected_seq=1)
        with pytest.raises(StoreClosedError):
            await store.last_seq("t")

    async def test_leaving_its_context_closes_the_store(self, store: EventStore) -> None:
        await store.append("t", [NodeEntered(node="n")], expected_seq=0)
        async with store as entered:
            assert entered is store
            assert await store.threads() == ["t"]
        with pytest.raises(StoreClosedError):
            await store.threads()
        with pytest.raises(StoreClosedError):
            [r async for r in store.read("t")]
        await store.close()  # closing again is harmless

    async def test_threads_are_listed_in_order_of_creation(self, store: EventStore) -> None:
        assert await store.threads() == []
        for thread_id in ("zeta", "alpha", "mid"):
            await store.append(thread_id, [NodeEntered(node="n")], expected_seq=0)
        await store.append("alpha", [NodeEntered(node="n")], expected_seq=1)
        assert await store.threads() == ["zeta", "alpha", "mid"]

    async def test_read_after_a_snapshot_checks_the_hash_it_names(self, store: EventStore) -> None:
        await store.append("t", step_events(1), expected_seq=0)
        written = await store.append("t", step_events(2), expected_seq=3)
        [third] = [r async for r in store.read("t", 3, 3)]
        anchor = bytes.fromhex(third.hash)
        read = [r async for r in store.read("t", 4, after_hash=anchor)]
        assert read == written
        # Nothing after the anchor yet is no error: the snapshot is the thread's latest state.
        assert [
            r async for r in store.read("t", 7, after_hash=bytes.fromhex(written[-1].hash))
        ] == []
        with pytest.raises(ChainBrokenError, match="snapshot") as info:
            [r async for r in store.read("t", 4, after_hash=b"\x00" * 32)]
        assert info.value.seq == 3

    async def test_snapshot_seqs_list_each_snapshot_once(self, store: EventStore) -> None:
        assert await store.snapshot_seqs("t") == []
        for seq in (6, 0, 3, 6):
            await store.save_snapshot(Snapshot(thread_id="t", seq=seq, state={"at": seq}))
        await store.save_snapshot(Snapshot(thread_id="u", seq=1, state={}))
        assert await store.snapshot_seqs("t") == [0, 3, 6]
        assert await store.snapshot_seqs("u") == [1]
        at0 = await store.load_snapshot("t", max_seq=2)
        assert at0 is not None and at0.seq == 0 and at0.state == {"at": 0}
        with pytest.raises(InvalidAppendError, match="snapshot seq"):
            await store.save_snapshot(Snapshot(thread_id="t", seq=-1, state={}))
        assert await store.snapshot_seqs("t") == [0, 3, 6]

    async def test_a_snapshot_keeps_its_type_time_and_hash(self, store: EventStore) -> None:
        [record] = await store.append("t", [NodeEntered(node="n")], expected_seq=0)
        saved = Snapshot(
            thread_id="t", seq=1, state={"k": [1, "two", None, 3.5, {"x": True}]},
            state_type="my.State", at=1234.5, hash=record.hash,
        )  # fmt: skip
        await store.save_snapshot(saved)
        loaded = await store.load_snapshot("t")
        assert loaded is not None and len(loaded.digest) == 64  # checked as it was read
        assert msgspec.structs.replace(loaded, digest="") == saved
        assert await store.load_snapshot("t", check=False) == loaded  # the digest stored
        with pytest.raises(InvalidAppendError, match="64 hex digits"):
            await store.save_snapshot(Snapshot(thread_id="t", seq=1, state={}, hash="beef"))

    async def test_a_referencing_snapshot_reads_its_context_from_the_log(
        self, store: EventStore
    ) -> None:
        first, second, kept = (text_message(t) for t in ("first", "second", "kept"))
        inline = text_message("held only by the snapshot")
        records = await store.append(
            "t",
            [
                MessageAppended(message=first),
                NodeEntered(node="agent"),
                MessageAppended(message=second),
                MessagesReplaced(messages=[second, kept]),
            ],
            expected_seq=0,
        )
        refs = encode_context_refs([(1, 0), (4, 1), inline, (3, 0)])
        snapshot = Snapshot(
            thread_id="t", seq=4, state={"step": 2}, hash=records[3].hash, context_refs=refs
        )
        await store.save_snapshot(snapshot)
        loaded = await store.load_snapshot("t")
        assert loaded is not None and loaded.seq == 4 and loaded.hash == records[3].hash
        assert loaded.state == {"step": 2, "context": [first, kept, inline, second]}
        bare = await store.load_snapshot("t", resolve=False)
        assert bare is not None and bare.state == {"step": 2} and bare.context_refs == refs
        assert await store.load_snapshot("t", max_seq=3) is None

        # A reference to a record that carries no message is damage, reported as such.
        wrong = Snapshot(
            thread_id="t", seq=4, state={}, hash=records[3].hash,
            context_refs=encode_context_refs([(2, 0)]),
        )  # fmt: skip
        await store.save_snapshot(wrong)
        with pytest.raises(CorruptSnapshotError, match="seq 2"):
            await store.load_snapshot("t")
        unresolved = await store.load_snapshot("t", resolve=False)
        assert unresolved is not None and unresolved.state == {}

    async def test_a_snapshot_checks_the_records_it_points_to(self, store: EventStore) -> None:
        """A payload changed behind the store is refused by every load of a snapshot that
        points to it (resolved or not), and so is one whose hash was made to match it."""
        records = await store.append(
            "t", [*step_events(1, "first"), *step_events(2, "second")], expected_seq=0
        )
        refs = encode_context_refs([(2, 0), (5, 0)])
        snapshot = Snapshot(
            thread_id="t", seq=6, state={"step": 2}, hash=records[-1].hash, context_refs=refs
        )
        await store.save_snapshot(snapshot)
        loaded = await store.load_snapshot("t", resolve=False)
        assert loaded is not None and loaded.digest
        assert loaded.record_hashes == {
            2: bytes.fromhex(records[1].hash),
            5: bytes.fromhex(records[4].hash),
        }
        payload = records[1].event
        assert isinstance(payload, MessageAppended)
        edited = {**payload.message, "content": [{"type": "text", "text": "first 1 EDITED"}]}
        await self.alter_record(store, "t", 2, MessageAppended(message=edited))
        for resolve in (True, False):
            with pytest.raises(ChainBrokenError) as broken:
                await store.load_snapshot("t", resolve=resolve)
            assert broken.value.seq == 2
        # The hash of the record made to match its new bytes: the snapshot's digest refuses.
        await self.alter_record(store, "t", 2, MessageAppended(message=edited), rehash=True)
        for resolve in (True, False):
            with pytest.raises(CorruptSnapshotError, match="digest"):
                await store.load_snapshot("t", resolve=resolve)
        unchecked = await store.load_snapshot("t", check=False)
        assert unchecked is not None and unchecked.state["context"][0] == edited

    async def test_a_referencing_snapshot_is_checked_before_it_is_stored(
        self, store: EventStore
    ) -> None:
        records = await store.append("t", [text_event("a"), text_event("b")], expected_seq=0)
        for refs, why in (([5], "outside records"), (["x"], "not a reference"), ({}, "list")):
            bad = Snapshot(
                thread_id="t", seq=2, state={}, hash=records[1].hash,
                context_refs=refs,  # type: ignore[arg-type]
            )  # fmt: skip
            with pytest.raises(InvalidAppendError, match=why):
                await store.save_snapshot(bad)
        with pytest.raises(InvalidAppendError, match="hash"):  # a reference needs an anchor
            await store.save_snapshot(Snapshot(thread_id="t", seq=2, state={}, context_refs=[1]))
        assert await store.snapshot_seqs("t") == []

    # ---- audit: heads, whole-store checks, exports -----------------------------------------

    async def test_heads_and_whole_store_verification(self, store: EventStore) -> None:
        await store.append("t", step_events(1), expected_seq=0)
        await store.append("u", [NodeEntered(node="n")], expected_seq=0)
        saved = await head(store, "t")
        assert saved.seq == 3 and saved.hash == (await store.verify("t")).head_hash
        assert (await verify_thread(store, "t", head=saved)).ok
        await store.append("t", step_events(2), expected_seq=3)
        assert (await verify_thread(store, "t", head=saved)).ok  # later appends are no damage
        reports = await verify_store(store)
        assert [(r.thread_id, r.ok, r.records_checked) for r in reports] == [
            ("t", True, 6),
            ("u", True, 1),
        ]
        with pytest.raises(ThreadNotFoundError):
            await head(store, "missing")

    async def test_an_export_verifies_on_its_own(self, store: EventStore) -> None:
        await store.append("t", step_events(1), expected_seq=0, run_id="r", actor="a")
        await store.append("u", [NodeEntered(node="elsewhere")], expected_seq=0)
        await store.append("t", [text_event("héllo ✓"), RunCompleted()], expected_seq=3)
        out = io.StringIO()
        exported = await export_jsonl(store, "t", out)
        assert exported == await head(store, "t") and exported.seq == 5
        lines = out.getvalue().splitlines()
        assert len(lines) == 5
        verdict = verify_export.verify(lines, (exported.thread_id, exported.seq, exported.hash))
        assert verdict.startswith("ok: 5 records")
        with pytest.raises(verify_export.Bad):  # the verifier is no rubber stamp
            verify_export.verify(lines[:2] + lines[3:], None)

    # ---- claims: one owner per thread ------------------------------------------------------

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
        for _ in range(200):  # the thread-safe form does not wait for the write
            if await store.holder("t") is None:
                break
            await asyncio.sleep(0.01)
        assert await store.holder("t") is None
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

        short = Holder("short-token", "farhost/boot-1", 1, "1", time.time(), 0.3, "short lease")
        await self.forge_holder(store, "u", short)
        with pytest.raises(ThreadBusyError):
            await store.claim("u")
        await asyncio.sleep(0.4)  # its host stopped beating: the lease runs out
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


def store_range(records: list[EventRecord], first: int, last: int) -> list[EventRecord]:
    """Records with first <= seq <= last."""
    return [r for r in records if first <= r.seq <= last]


async def _moved(store: EventStore) -> Claim:
    """A claim of thread "t2" that was released again: what a run holds after a takeover."""
    claim = await store.claim("t2")
    await store.release(claim)
    return claim


def _with_token(claim: Claim) -> Claim:
    """The same claim as a dead owner would still hold it (its old token)."""
    return dataclasses.replace(claim, token="dead-token")
