"""Crypto-shredding: a subject's personal fields sealed under its key, erased by destroying it.

Every store kind (memory, SQLite, PostgreSQL at AGENTLOG_PG_DSN); the graph end to end; the
CLI; a ciphertext moved to another row; the bytes of the file after erasure and VACUUM.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.engine.erasure import ERASURE_THREAD, erase_subject, erasures
from agentlog.events import (
    EventStore,
    InvalidArgumentError,
    MemoryEventStore,
    MessageAppended,
    NodeEntered,
    SQLiteEventStore,
    ToolCallFinished,
    ToolCallStarted,
    export_jsonl,
)
from agentlog.events.keystore import (
    ThreadTaggedError,
    keyring,
    subject_of_thread,
    tag_thread,
    threads_of_subject,
)
from agentlog.events.sealing import (
    MASTER_KEY_ENV,
    MasterKeyMissingError,
    SealBrokenError,
    SubjectErasedError,
    is_sealed,
    load_master_key,
)

from .workers.pg_env import BACKENDS, backend_store

SECRET = "Alice Liddell lives at 7 Rabbit Hole Lane"
MASTER = base64.urlsafe_b64encode(bytes(range(32))).decode()


@pytest.fixture(autouse=True)
def master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, MASTER)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    async with backend_store(request.param, tmp_path) as opened:
        yield opened


def _message(text: str, message_id: str = "m1") -> dict[str, Any]:
    return {"message_id": message_id, "role": "user", "content": [{"type": "text", "text": text}]}


async def _personal_thread(store: EventStore, thread: str = "chat", subject: str = "alice") -> None:
    await tag_thread(store, thread, subject)
    await store.append(
        thread,
        [
            NodeEntered(node="agent"),
            MessageAppended(message=_message(SECRET)),
            ToolCallStarted(call_id="c1", name="lookup", args={"who": SECRET}),
            ToolCallFinished(call_id="c1", name="lookup", output=SECRET),
        ],
        expected_seq=await store.last_seq(thread),
    )


async def _texts(store: EventStore, thread: str = "chat") -> str:
    return json.dumps([json.loads(_json(r.event)) async for r in store.read(thread)])


def _json(value: Any) -> str:
    import msgspec

    return msgspec.json.encode(value).decode()


async def test_personal_fields_are_sealed_at_rest_and_read_in_clear(store: EventStore) -> None:
    await _personal_thread(store)
    rows = [row async for row in store.read_rows("chat")]
    assert [is_sealed(r.payload) for r in rows] == [False, True, True, True]
    assert all(SECRET.encode() not in r.payload for r in rows)
    assert SECRET in await _texts(store)
    assert (await store.verify("chat")).ok
    assert await subject_of_thread(store, "chat") == "alice"
    assert await threads_of_subject(store, "alice") == ["chat"]


async def test_erasure_shows_who_and_when_and_keeps_the_chain(store: EventStore) -> None:
    await _personal_thread(store)
    before = await store.verify("chat")
    report = await erase_subject(store, "alice", by="dpo", reason="GDPR Art. 17", at=86400.0)
    assert report.recorded and report.threads == ["chat"]
    after = await store.verify("chat")
    assert before.ok and after.ok and before.head_hash == after.head_hash
    text = await _texts(store)
    assert SECRET not in text
    assert "erased on 1970-01-02 by dpo" in text
    records = [r async for r in store.read("chat")]
    assert records[2].event.name == "lookup"  # what is not personal stays readable
    assert [e.subject for e in await erasures(store)] == ["alice"]
    assert (await store.verify(ERASURE_THREAD)).ok
    again = await erase_subject(store, "alice", by="someone", reason="twice")
    assert not again.recorded and again.erasure.by == "dpo"
    with pytest.raises(SubjectErasedError, match="erased on"):
        await tag_thread(store, "new", "alice")


async def test_a_reader_that_cached_the_key_sees_the_erasure(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    async with SQLiteEventStore(path) as first, SQLiteEventStore(path) as second:
        await _personal_thread(first)
        assert SECRET in await _texts(second)  # the second caches alice's key
        await erase_subject(first, "alice", by="dpo", reason="request")
        assert SECRET not in await _texts(second)


async def test_a_thread_takes_one_subject(store: EventStore) -> None:
    await tag_thread(store, "chat", "alice")
    await tag_thread(store, "chat", "alice")
    with pytest.raises(ThreadTaggedError, match="'alice'"):
        await tag_thread(store, "chat", "bob")
    with pytest.raises(InvalidArgumentError, match="data subject"):
        await tag_thread(store, "other", "no spaces please")


async def test_a_ciphertext_moved_to_another_row_does_not_open(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    async with SQLiteEventStore(path) as store:
        await _personal_thread(store, "a")
        await _personal_thread(store, "b")
    with sqlite3.connect(path) as conn:
        moved = conn.execute("SELECT payload FROM events WHERE thread_id='a' AND seq=2").fetchone()
        conn.execute("UPDATE events SET payload=? WHERE thread_id='b' AND seq=2", moved)
    async with SQLiteEventStore(path) as store:
        assert not (await store.verify("b")).ok  # the chain names the row changed
        # rechain the moved row so only the seal can tell
        from agentlog.events.codec import chain_hash

        rows = [r async for r in store.read_rows("b")]
    with sqlite3.connect(path) as conn:
        prev = bytes(32)
        for r in rows:
            envelope = (r.thread_id, r.seq, r.run_id, r.actor, r.at, r.kind, r.version, r.position)
            digest = chain_hash(prev, envelope, r.payload)
            conn.execute("UPDATE events SET hash=? WHERE thread_id='b' AND seq=?", (digest, r.seq))
            prev = digest
        conn.execute("UPDATE threads SET last_hash=? WHERE thread_id='b'", (prev,))
    async with SQLiteEventStore(path) as store:
        assert (await store.verify("b")).ok
        with pytest.raises(SealBrokenError, match=r"seq 2 of thread 'b'.*moved from another row"):
            await _texts(store, "b")


async def test_an_export_made_before_erasure_verifies_and_no_longer_opens(
    tmp_path: Path,
) -> None:
    from agentlog.events.verify_export import verify

    async with SQLiteEventStore(tmp_path / "log.db") as store:
        await _personal_thread(store)
        out = io.StringIO()
        await export_jsonl(store, "chat", out)
        await erase_subject(store, "alice", by="dpo", reason="request")
    text = out.getvalue()
    assert SECRET not in text
    assert verify(text.splitlines(), None).startswith("ok: 4 records")
    assert '"$sealed"' in text


async def test_the_file_and_wal_hold_no_plaintext_after_erasure_and_vacuum(
    tmp_path: Path,
) -> None:
    from agentlog.events.keystore import vacuum

    path = tmp_path / "log.db"
    async with SQLiteEventStore(path) as store:
        await _personal_thread(store)
        from agentlog.events import Snapshot

        last = [r async for r in store.read("chat")][-1]
        await store.save_snapshot(
            Snapshot(thread_id="chat", seq=last.seq, state={"context": [_message(SECRET)]},
                     hash=last.hash)
        )  # fmt: skip
        assert await store.load_snapshot("chat") is not None
        await erase_subject(store, "alice", by="dpo", reason="request")
        assert await store.load_snapshot("chat") is None  # the cache of plaintext went too
        await vacuum(store)
        files = [p for p in tmp_path.iterdir() if p.name.startswith("log.db")]
        for file in files:
            assert SECRET.encode() not in file.read_bytes(), file.name
            assert b"Rabbit Hole" not in file.read_bytes(), file.name


def test_the_master_key_is_required_and_checked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(MASTER_KEY_ENV)
    with pytest.raises(MasterKeyMissingError, match=MASTER_KEY_ENV):
        load_master_key()
    key_file = tmp_path / "master.key"
    key_file.write_text(MASTER + "\n")
    assert load_master_key({"AGENTLOG_MASTER_KEY_FILE": str(key_file)}) == bytes(range(32))
    with pytest.raises(MasterKeyMissingError, match="not 32 bytes"):
        load_master_key({MASTER_KEY_ENV: "c2hvcnQ="})


async def test_a_missing_master_key_refuses_before_writing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryEventStore()
    monkeypatch.delenv(MASTER_KEY_ENV)
    await tag_thread(store, "chat", "alice")
    with pytest.raises(MasterKeyMissingError):
        await store.append("chat", [MessageAppended(message=_message(SECRET))], expected_seq=0)
    assert await store.last_seq("chat") == 0
    assert os.environ.get(MASTER_KEY_ENV) is None
    assert keyring(store) is keyring(store)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_sigkill_during_erasure_leaves_each_subject_old_or_new(tmp_path: Path, seed: int) -> None:
    import asyncio
    import random
    import signal

    from .helpers import spawn_worker, wait_ready

    db, count = tmp_path / "log.db", 12

    async def prepare() -> None:
        async with SQLiteEventStore(db) as store:
            for i in range(count):
                await tag_thread(store, f"t{i}", f"s{i}")
                message = MessageAppended(message=_message(f"{SECRET} #{i:02d}"))
                await store.append(f"t{i}", [message], expected_seq=0)

    async def states() -> list[tuple[bool, bool, bool]]:
        """Per subject: key destroyed, erasure recorded, secret still readable."""
        async with SQLiteEventStore(db) as store:
            recorded = {e.subject for e in await erasures(store)}
            keys = await keyring(store).keys.get({f"s{i}" for i in range(count)})
            out = []
            for i in range(count):
                assert (await store.verify(f"t{i}")).ok
                shown = f"{SECRET} #{i:02d}" in await _texts(store, f"t{i}")
                out.append((not isinstance(keys[f"s{i}"], bytes), f"s{i}" in recorded, shown))
            assert (await store.verify(ERASURE_THREAD)).ok if recorded else True
            return out

    asyncio.run(prepare())
    proc = spawn_worker("erase_run", db, count)
    wait_ready(proc)
    kill_at = random.Random(seed).randrange(1, count)
    assert proc.stdout is not None
    while proc.stdout.readline().strip() != f"start s{kill_at}":
        pass
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    found = asyncio.run(states())
    for i, (destroyed, recorded, shown) in enumerate(found):
        assert shown != destroyed, (i, found)  # readable exactly while the key exists
        assert destroyed or not recorded, (i, found)  # never recorded with the key alive
    # in order: erased and recorded, then at most one cut short, then untouched
    cut = next(i for i, state in enumerate([*found, (False, False, True)]) if state[1] is False)
    assert cut >= kill_at, found  # s{kill_at} began only once the ones before were done
    assert all(state == (False, False, True) for state in found[cut + 1 :]), found
    finish = spawn_worker("erase_run", db, count)
    _, err = finish.communicate(timeout=120)
    assert finish.returncode == 0, err
    assert asyncio.run(states()) == [(True, True, False)] * count

    async def once_each() -> list[str]:
        async with SQLiteEventStore(db) as store:
            return sorted(e.subject for e in await erasures(store))

    assert asyncio.run(once_each()) == sorted(f"s{i}" for i in range(count))


async def test_a_store_wrapping_another_shares_its_keys(tmp_path: Path) -> None:
    from agentlog.actors.testing import FaultyStore

    async with SQLiteEventStore(tmp_path / "log.db") as inner:
        wrapper = FaultyStore(inner)
        await tag_thread(wrapper, "chat", "alice")  # type: ignore[arg-type]
        assert keyring(wrapper) is keyring(inner)
        await _personal_thread(inner)
        assert SECRET in await _texts(wrapper)  # type: ignore[arg-type]


async def test_a_claim_learns_the_tag_another_store_gave_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim reads its thread's tag in its own transaction: a thread tagged through
    another store of the file is sealed from the first record written under the claim,
    which reads the tag no more (nor for a thread of a file that never tagged one)."""
    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as store:
        untagged = await store.claim("plain")  # no thread of the file is tagged yet
        async with SQLiteEventStore(db) as other:
            await tag_thread(other, "chat", "alice")
        tables = keyring(store).tables
        reads: list[str] = []

        async def get_tag(thread_id: str) -> str | None:
            reads.append(thread_id)
            return None

        monkeypatch.setattr(tables, "get_tag", get_tag)
        claim = await store.claim("chat")
        for thread, held in (("chat", claim), ("plain", untagged)):
            message = MessageAppended(message=_message(SECRET))
            await store.append(thread, [message], expected_seq=0, claim=held)
        assert reads == []
        sealed = [
            [is_sealed(r.payload) async for r in store.read_rows(t)] for t in ("chat", "plain")
        ]
        assert sealed == [[True], [False]]
