"""The snapshots' part of the store contract: saving, loading, and checking against the log."""

from __future__ import annotations

import msgspec
import pytest

from agentlog.events.errors import (
    ChainBrokenError,
    InvalidAppendError,
)
from agentlog.events.kinds import (
    MessageAppended,
    MessagesReplaced,
    NodeEntered,
)
from agentlog.events.record import Snapshot
from agentlog.events.store import CorruptSnapshotError, EventStore, encode_context_refs
from agentlog.events.testing.base import ConformanceBase, step_events, text_event, text_message

__all__ = ["SnapshotConformance"]


class SnapshotConformance(ConformanceBase):
    """What every store does with snapshots: newest at or before a seq, copies, references into
    the log checked by hash before they are trusted. Needs the `alter_record` hook."""

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

    async def test_a_snapshot_checks_each_record_against_the_one_before_it_in_its_thread(
        self, store: EventStore
    ) -> None:
        """Another thread's records between a thread's own in the file (two threads written
        in turn): each record a snapshot points to is still checked against its thread's
        record before it, so one changed there, hash redone, is refused at the next."""
        records = []
        for step in (1, 2):
            for thread in ("t", "u"):
                written = await store.append(thread, step_events(step), expected_seq=3 * (step - 1))
                records += written if thread == "t" else []
        refs = encode_context_refs([(2, 0), (5, 0)])
        await store.save_snapshot(
            Snapshot(thread_id="t", seq=6, state={}, hash=records[-1].hash, context_refs=refs)
        )
        loaded = await store.load_snapshot("t")
        assert loaded is not None and loaded.digest
        assert [m["content"][0]["text"] for m in loaded.state["context"]] == ["hello 1", "hello 2"]
        await self.alter_record(store, "t", 4, NodeEntered(node="elsewhere"), rehash=True)
        with pytest.raises(ChainBrokenError) as broken:
            await store.load_snapshot("t")
        assert broken.value.seq == 5

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
