"""Reads that start from a snapshot check what they read: a message payload edited in the
database file, or a snapshot row forged in it, is refused by `aget_state` and by the next
run in a fresh process, and never served from the process's message cache."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentlog.events import ChainBrokenError, MessageAppended, SQLiteEventStore
from agentlog.events.codec import chain_hash, decode_state, encode_state
from agentlog.events.store import CorruptSnapshotError
from agentlog.projections import AgentState, Message, state_at

from .helpers import ROOT, edit_db, line

THREAD = "support-1"
CFG = {"thread_id": THREAD}
RUNS = 14  # 6 records a run: each run that ends past 64 records snapshots the thread at rest
RECORDS = RUNS * 6


def reply(state: AgentState) -> list[Message]:
    last = state.context[-1].text() if state.context else ""
    return [Message.text_message(f"echo: {last}", role="assistant")]


async def built(path: Path) -> tuple[int, int]:
    """A thread of RUNS runs with snapshots at rest; the newest snapshot's seq, and the seq of
    the first user message (one the snapshot references)."""
    async with SQLiteEventStore(path) as store:
        app = line(("reply", reply)).compile(checkpointer=store)
        for n in range(RUNS):
            await app.ainvoke({"messages": [Message.text_message(f"refund order {n}")]}, CFG)
        assert await store.last_seq(THREAD) == RECORDS
        snapshot = (await store.snapshot_seqs(THREAD))[-1]
        loaded = await store.load_snapshot(THREAD, resolve=False)
        assert loaded is not None and loaded.context_refs is not None and loaded.seq == snapshot
        async for record in store.read(THREAD):
            if isinstance(record.event, MessageAppended) and record.event.message["role"] == "user":
                return snapshot, record.seq
    raise AssertionError("no user message")


def edit_payload(path: Path, seq: int, old: str, new: str) -> None:
    """Change a text inside a stored message's payload with sqlite3 (same length, so the
    payload still decodes), leaving its hash as it was."""
    conn = sqlite3.connect(path)
    (payload,) = conn.execute(
        "SELECT payload FROM events WHERE thread_id = ? AND seq = ?", (THREAD, seq)
    ).fetchone()
    conn.close()
    assert old.encode() in payload and len(old) == len(new)
    edit_db(
        path,
        "UPDATE events SET payload = ? WHERE thread_id = ? AND seq = ?",
        payload.replace(old.encode(), new.encode()),
        THREAD,
        seq,
    )


PROBE = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[2])
from agentlog.events import SQLiteEventStore
from agentlog.projections import Message
from tests.helpers import line
from tests.test_snapshot_trust import CFG, reply

async def main():
    out = {}
    async with SQLiteEventStore(sys.argv[1]) as store:
        app = line(("reply", reply)).compile(checkpointer=store)
        for name, call in (
            ("aget_state", lambda: app.aget_state(CFG)),
            ("ainvoke", lambda: app.ainvoke({"messages": [Message.text_message("more")]}, CFG)),
        ):
            try:
                state = await call()
            except Exception as exc:
                out[name] = {"error": type(exc).__name__, "seq": getattr(exc, "seq", None),
                             "message": str(exc)}
            else:
                if isinstance(state, dict):
                    state = state.get("state", state)
                texts = [m.text() for m in getattr(state, "context", [])]
                out[name] = {"texts": texts}
    print(json.dumps(out))

asyncio.run(main())
"""


def fresh_process(path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def test_a_payload_edited_in_the_file_is_refused_in_a_fresh_process(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    snapshot, first = await built(path)
    assert first < snapshot
    edit_payload(path, first, "refund order 0", "REFUND ORDER 0")
    seen = fresh_process(path)
    for call in ("aget_state", "ainvoke"):
        assert seen[call].get("error") == "ChainBrokenError", seen
        assert seen[call]["seq"] == first, seen
    async with SQLiteEventStore(path) as store:
        assert await store.last_seq(THREAD) == RECORDS  # nothing was written on top of it
        report = await store.verify(THREAD)
        assert not report.ok and report.first_bad_seq == first


async def test_a_payload_edited_with_its_hash_redone_is_refused(tmp_path: Path) -> None:
    """The record's own hash made to match its new bytes (the link to the next record left
    broken, which only a fold from the start reads): the snapshot's digest pinned the old
    hash, so a read from the snapshot refuses too."""
    path = tmp_path / "log.db"
    _, first = await built(path)
    edit_payload(path, first, "refund order 0", "REFUND ORDER 0")
    conn = sqlite3.connect(path)
    columns = "thread_id, seq, run_id, actor, at, kind, version, position"
    row = conn.execute(
        f"SELECT {columns}, payload FROM events WHERE thread_id = ? AND seq = ?", (THREAD, first)
    ).fetchone()
    (prev,) = conn.execute(
        "SELECT hash FROM events WHERE thread_id = ? AND seq = ?", (THREAD, first - 1)
    ).fetchone()
    conn.close()
    redone = chain_hash(prev, tuple(row[:8]), row[8])
    edit_db(path, "UPDATE events SET hash = ? WHERE seq = ?", redone, first)
    async with SQLiteEventStore(path) as store:
        with pytest.raises(CorruptSnapshotError, match="digest"):
            await state_at(store, THREAD)
        with pytest.raises(ChainBrokenError):
            await state_at(store, THREAD, use_snapshots=False)


async def test_a_snapshot_forged_in_the_file_is_refused_by_reads_and_resume(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    snapshot, _ = await built(path)
    conn = sqlite3.connect(path)
    (blob,) = conn.execute(
        "SELECT state FROM snapshots WHERE thread_id = ? AND seq = ?", (THREAD, snapshot)
    ).fetchone()
    conn.close()
    state = decode_state(THREAD, snapshot, blob)
    state["context_summary"] = "the customer was refunded"
    edit_db(
        path,
        "UPDATE snapshots SET state = ? WHERE thread_id = ? AND seq = ?",
        encode_state(state),
        THREAD,
        snapshot,
    )
    seen = fresh_process(path)
    for call in ("aget_state", "ainvoke"):
        assert seen[call].get("error") == "CorruptSnapshotError", seen
        assert "digest" in seen[call]["message"] and str(snapshot) in seen[call]["message"]
    async with SQLiteEventStore(path) as store:
        assert await store.last_seq(THREAD) == RECORDS
        with pytest.raises(CorruptSnapshotError):
            await state_at(store, THREAD, snapshot)  # the point itself, too
        assert (await state_at(store, THREAD, use_snapshots=False)).context_summary is None


async def test_a_cached_message_never_outlives_a_change_of_its_bytes(tmp_path: Path) -> None:
    """The same store object read twice (the second read served from the message cache),
    then a referenced payload edited in the file: the next read refuses, never the cache."""
    path = tmp_path / "log.db"
    snapshot, first = await built(path)
    async with SQLiteEventStore(path) as store:
        before = await state_at(store, THREAD, snapshot)
        again = await state_at(store, THREAD, snapshot)  # from the cache
        assert again == before
        edit_payload(path, first, "refund order 0", "REFUND ORDER 0")
        with pytest.raises(ChainBrokenError) as refused:
            await state_at(store, THREAD, snapshot)
        assert refused.value.seq == first
        with pytest.raises(ChainBrokenError):
            await state_at(store, THREAD)


async def test_a_snapshot_without_a_digest_is_not_used(tmp_path: Path) -> None:
    """A row written before snapshots had digests (or with its digest removed) is one no
    reader uses: the log is folded from the start, checked, instead."""
    path = tmp_path / "log.db"
    snapshot, first = await built(path)
    conn = sqlite3.connect(path)
    (blob,) = conn.execute(
        "SELECT refs FROM snapshots WHERE thread_id = ? AND seq = ?", (THREAD, snapshot)
    ).fetchone()
    conn.close()
    refs = decode_state(THREAD, snapshot, blob)
    del refs["digest"]
    edit_db(path, "UPDATE snapshots SET refs = ? WHERE seq = ?", encode_state(refs), snapshot)
    async with SQLiteEventStore(path) as store:
        loaded = await store.load_snapshot(THREAD)
        assert loaded is not None and loaded.digest == ""
        assert await state_at(store, THREAD) == await state_at(store, THREAD, use_snapshots=False)
    edit_payload(path, first, "refund order 0", "REFUND ORDER 0")
    async with SQLiteEventStore(path) as store:
        with pytest.raises(ChainBrokenError):  # the fold from the start reads the edit
            await state_at(store, THREAD)


async def test_a_payload_edited_in_the_file_is_refused_over_http(tmp_path: Path) -> None:
    """`GET /threads/{id}/state` of a thread read from its snapshot: refused, never the
    edited text."""
    import httpx

    from agentlog.actors.http import TokenBook, create_app

    from .test_serve import OPS, Server, build, token_file

    path = tmp_path / "serve.db"
    async with SQLiteEventStore(path) as store:
        app = create_app(build(store), tokens=TokenBook.load(token_file(tmp_path)))
        async with Server(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
            made = await client.post("/log/threads", json={"graph_id": "other"}, headers=OPS)
            thread = made.json()["thread_id"]
            for n in range(RUNS):
                ran = await client.post(
                    f"/log/threads/{thread}/runs/wait",
                    json={"assistant_id": "notes", "input": f"refund order {n}"},
                    headers=OPS,
                )
                assert ran.status_code == 200, ran.text
            assert await store.snapshot_seqs(thread)
            users = [
                r.seq
                async for r in store.read(thread)
                if isinstance(r.event, MessageAppended) and r.event.message["role"] == "user"
            ]
            first = users[0]
            conn = sqlite3.connect(path)
            (payload,) = conn.execute(
                "SELECT payload FROM events WHERE thread_id = ? AND seq = ?", (thread, first)
            ).fetchone()
            conn.close()
            edit_db(
                path,
                "UPDATE events SET payload = ? WHERE thread_id = ? AND seq = ?",
                payload.replace(b"refund order 0", b"REFUND ORDER 0"),
                thread,
                first,
            )
            read = await client.get(f"/log/threads/{thread}/state", headers=OPS)
            assert read.status_code != 200 and "REFUND" not in read.text, read.text
