"""The log's part of the store contract: appends, reads, the hash chain, audits and exports."""

from __future__ import annotations

import asyncio
import io

import pytest

from agentlog.events import verify_export
from agentlog.events.audit import export_jsonl, head, verify_store, verify_thread
from agentlog.events.codec import GENESIS_HASH
from agentlog.events.errors import (
    ConcurrencyError,
    InvalidAppendError,
    StoreClosedError,
    ThreadNotFoundError,
    UnknownEventKindError,
)
from agentlog.events.kinds import (
    InterruptRaised,
    MessageAppended,
    NodeEntered,
    Resumed,
    RunCompleted,
    StepAdvanced,
)
from agentlog.events.record import EventRecord
from agentlog.events.store import EventStore
from agentlog.events.testing.base import ConformanceBase, step_events, text_event

__all__ = ["LogConformance"]


class LogConformance(ConformanceBase):
    """What every store does with records: numbering, reading back, refusing bad appends, chaining
    hashes, and the audits and exports built on them."""

    async def test_is_an_event_store(self, store: EventStore) -> None:
        assert isinstance(store, EventStore)

    async def test_append_numbers_records_from_one(self, store: EventStore) -> None:
        records = await store.append("t", step_events(1), expected_seq=0, run_id="r1", actor="a")
        assert [r.seq for r in records] == [1, 2, 3]
        assert [r.kind for r in records] == [
            NodeEntered.KIND,
            MessageAppended.KIND,
            StepAdvanced.KIND,
        ]
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
        with pytest.raises(InvalidAppendError, match=repr(Resumed.KIND)):
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
        assert await store.seqs_of_kind("t", StepAdvanced.KIND) == [3, 7]
        assert await store.seqs_of_kind("t", NodeEntered.KIND) == [1, 4, 5]
        assert await store.seqs_of_kind("t", RunCompleted.KIND) == []
        with pytest.raises(UnknownEventKindError):
            await store.seqs_of_kind("t", "nope")
        with pytest.raises(ThreadNotFoundError):
            await store.seqs_of_kind("missing", StepAdvanced.KIND)

    async def test_missing_thread_is_a_typed_error(self, store: EventStore) -> None:
        assert await store.last_seq("nope") == 0
        with pytest.raises(ThreadNotFoundError, match="'nope'"):
            [r async for r in store.read("nope")]
        with pytest.raises(ThreadNotFoundError):
            await store.verify("nope")

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


def store_range(records: list[EventRecord], first: int, last: int) -> list[EventRecord]:
    """Records with first <= seq <= last."""
    return [r for r in records if first <= r.seq <= last]
