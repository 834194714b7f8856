"""Saved heads, store-wide verification, and JSONL exports checked by the standalone script."""

from __future__ import annotations

import base64
import io
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.events import (
    CorruptRecordError,
    Head,
    MemoryEventStore,
    SQLiteEventStore,
    ThreadNotFoundError,
    VerifyReport,
    audit,
    export_jsonl,
    head,
    verify_export,
    verify_store,
    verify_thread,
)
from agentlog.events.audit import ExportError
from agentlog.events.codec import GENESIS_HASH, chain_hash, encode_payloads, envelope_bytes

from .helpers import edit_db, step_events, text_event

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4  # 12 records on thread "t"
H = "ab" * 32
ODD_TEXT = 'héllo — 世界 🧵 "quoted" \\ tab\t line\u2028sep\x85nel \x00 end'


async def build(db: Path, thread: str = "t", *, steps: int = STEPS, **kwargs: Any) -> None:
    """`steps` agent steps on `thread` (three records each), plus a short thread "other"."""
    async with SQLiteEventStore(db, **kwargs) as store:
        seq = 0
        for step in range(1, steps + 1):
            records = await store.append(
                thread, step_events(step), expected_seq=seq, actor="agent", run_id="r1"
            )
            seq = records[-1].seq
        await store.append("other", step_events(1), expected_seq=0)


async def check(db: Path, thread: str = "t", saved: Head | None = None) -> VerifyReport:
    async with SQLiteEventStore(db) as store:
        return await verify_thread(store, thread, head=saved)


async def saved_head(db: Path, thread: str = "t") -> Head:
    async with SQLiteEventStore(db) as store:
        return await head(store, thread)


def rechain(db: Path, thread: str = "t") -> None:
    """What an intruder who knows the algorithm does: re-hash the rows and fix the head."""
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT thread_id, seq, run_id, actor, at, kind, version, position, payload "
        "FROM events WHERE thread_id = ? ORDER BY seq",
        (thread,),
    ).fetchall()
    prev = GENESIS_HASH
    with conn:
        for *envelope, payload in rows:
            prev = chain_hash(prev, tuple(envelope), payload)
            conn.execute("UPDATE events SET hash = ? WHERE position = ?", (prev, envelope[7]))
        conn.execute(
            "UPDATE threads SET last_seq = ?, last_hash = ? WHERE thread_id = ?",
            (rows[-1][1], prev, thread),
        )
    conn.close()


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    path = tmp_path / "log.db"
    await build(path)
    return path


# ---- Head ----------------------------------------------------------------------------------


@pytest.mark.parametrize("thread", ["t", "a@b:c", "x@3:" + H, "スレッド 🧵", "line\nbreak"])
def test_a_head_round_trips_through_its_text(thread: str) -> None:
    saved = Head(thread, 12, H)
    assert str(saved) == f"{thread}@12:{H}"
    assert Head.parse(str(saved)) == saved


@given(
    thread=st.text(min_size=1),
    seq=st.integers(1, 2**63),
    digest=st.binary(min_size=32, max_size=32),
)
def test_any_head_round_trips(thread: str, seq: int, digest: bytes) -> None:
    saved = Head(thread, seq, digest.hex())
    assert Head.parse(str(saved)) == saved


def test_a_head_parses_upper_case_hex() -> None:
    assert Head.parse(f"t@3:{H.upper()}") == Head("t", 3, H)


@pytest.mark.parametrize(
    ("text", "why"),
    [("", "no '@'"), ("t", "no '@'"), (f"@1:{H}", "thread id"), (f"t@1{H}", "no ':'"),
     (f"t@x:{H}", "seq"), (f"t@0:{H}", "seq"), (f"t@-1:{H}", "seq"), (f"t@:{H}", "seq"),
     (f"t@ 1:{H}", "seq"), (f"t@\u0661:{H}", "seq"), ("t@1:abc", "hash"), (f"t@1:{H}0", "hash"),
     (f"t@1:{'g' * 64}", "hash"), ("t@1:", "hash")],
)  # fmt: skip
def test_a_malformed_head_is_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="THREAD@SEQ:HASH") as info:
        Head.parse(text)
    assert why in str(info.value) and repr(text) in str(info.value)


@pytest.mark.parametrize(
    ("thread", "seq", "digest"), [("", 1, H), ("t", 0, H), ("t", True, H), ("t", 1, H.upper())]
)
def test_a_head_cannot_be_built_malformed(thread: str, seq: int, digest: str) -> None:
    with pytest.raises(ValueError, match="head"):
        Head(thread, seq, digest)


async def test_head_is_the_last_record_of_the_thread(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        first = await store.append("t", step_events(1), expected_seq=0)
        assert await head(store, "t") == Head("t", 3, first[-1].hash)
        second = await store.append("t", step_events(2), expected_seq=3)
        assert await head(store, "t") == Head("t", 6, second[-1].hash)
        with pytest.raises(ThreadNotFoundError):
            await head(store, "nope")


# ---- verify_thread -------------------------------------------------------------------------


async def test_an_intact_thread_verifies_with_and_without_its_head(db: Path) -> None:
    saved = await saved_head(db)
    assert saved.seq == STEPS * 3
    plain, against_head = await check(db), await check(db, saved=saved)
    assert plain.ok and against_head == plain and against_head.records_checked == STEPS * 3


async def test_appends_after_a_saved_head_are_not_tampering(db: Path) -> None:
    saved = await saved_head(db)
    async with SQLiteEventStore(db) as store:
        await store.append("t", step_events(9), expected_seq=saved.seq)
    report = await check(db, saved=saved)
    assert report.ok and report.records_checked == saved.seq + 3


async def test_a_head_of_another_thread_is_refused(db: Path) -> None:
    with pytest.raises(ValueError, match="other"):
        await check(db, "t", await saved_head(db, "other"))
    with pytest.raises(ThreadNotFoundError):
        await check(db, "nope")


def flip_payload_byte(db: Path) -> None:
    conn = sqlite3.connect(db)
    (payload,) = conn.execute("SELECT payload FROM events WHERE thread_id='t' AND seq=5").fetchone()
    conn.close()
    changed = bytes([payload[0] ^ 1]) + payload[1:]
    edit_db(db, "UPDATE events SET payload = ? WHERE thread_id='t' AND seq=5", changed)


def swap_4_and_5(db: Path) -> None:
    edit_db(db, "UPDATE events SET seq = -seq WHERE thread_id='t' AND seq IN (4, 5)")
    edit_db(db, "UPDATE events SET seq = CASE seq WHEN -4 THEN 5 ELSE 4 END WHERE seq < 0")


def truncate(db: Path) -> None:
    edit_db(db, "DELETE FROM events WHERE thread_id='t' AND seq > 9")


def truncate_and_rewrite_head(db: Path) -> None:
    truncate(db)
    rechain(db)


def forge_and_rechain(db: Path) -> None:
    (forged,) = encode_payloads("t", [text_event("forged")])
    edit_db(db, "UPDATE events SET payload = ? WHERE thread_id='t' AND seq=5", forged.payload)
    rechain(db)


@pytest.mark.parametrize(
    ("tamper", "plain_bad_seq", "bad_seq", "problem"),
    [(flip_payload_byte, 5, 5, "does not match its hash"),
     (lambda db: edit_db(db, "DELETE FROM events WHERE thread_id='t' AND seq=7"), 7, 7,
      "seq 7 is missing"),
     (swap_4_and_5, 4, 4, "hash"),
     (truncate, 10, 10, "head says 12 records, found 9"),
     (truncate_and_rewrite_head, None, 10, "the tail after seq 9 was truncated (head says 12)"),
     (forge_and_rechain, None, 12, "the history up to it was rewritten")],
)  # fmt: skip
async def test_tampering_with_the_file_is_reported_at_the_first_bad_record(
    db: Path,
    tamper: Callable[[Path], None],
    plain_bad_seq: int | None,
    bad_seq: int,
    problem: str,
) -> None:
    saved = await saved_head(db)
    tamper(db)
    plain = await check(db)
    # None: the intruder rewrote the threads table too, so the store's own verify passes.
    assert plain.ok is (plain_bad_seq is None) and plain.first_bad_seq == plain_bad_seq, plain
    report = await check(db, saved=saved)
    assert not report.ok and report.first_bad_seq == bad_seq, report
    assert problem in (report.problem or ""), report
    assert (await check(db, "other")).ok


# ---- verify_store --------------------------------------------------------------------------


async def test_verify_store_checks_every_thread_and_reports_progress(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as store:
        for thread in ("a", "b", "c"):
            await store.append(thread, step_events(1), expected_seq=0)
    edit_db(db, "UPDATE events SET actor = 'mallory' WHERE thread_id = 'b' AND seq = 2")
    calls: list[tuple[int, int]] = []
    async with SQLiteEventStore(db) as store:
        reports = await verify_store(
            store, progress=lambda done, total: calls.append((done, total))
        )
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert [(r.thread_id, r.ok, r.first_bad_seq) for r in reports] == [
        ("a", True, None), ("b", False, 2), ("c", True, None)
    ]  # fmt: skip


async def test_verify_store_of_an_empty_store_reports_nothing() -> None:
    calls: list[tuple[int, int]] = []
    assert await verify_store(MemoryEventStore(), progress=lambda *a: calls.append(a)) == []
    assert calls == []


# ---- export --------------------------------------------------------------------------------


def run_verifier(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "events/verify_export.py", str(path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        timeout=60,
        check=False,
    )


def assert_ok(path: Path, exported: Head, count: int, *args: str) -> None:
    result = run_verifier(path, *args)
    assert (result.returncode, result.stdout) == (0, f"ok: {count} records, head {exported}\n")


def assert_bad(path: Path, line: int, seq: int, problem: str, *args: str) -> None:
    result = run_verifier(path, *args)
    assert result.returncode == 1, result.stdout
    assert result.stdout.startswith(f"line {line} (seq {seq}): "), result.stdout
    assert problem in result.stdout, result.stdout


async def export(db: Path, out: Path, thread: str = "t", overwrite: bool = False) -> Head:
    async with SQLiteEventStore(db) as store:
        return await export_jsonl(store, thread, out, overwrite=overwrite)


KEYS = ["thread_id", "seq", "position", "run_id", "actor", "at", "kind", "version", "event",
        "payload_b64", "envelope", "prev_hash", "hash"]  # fmt: skip


async def test_an_export_holds_the_stored_bytes_and_verifies(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    exported = await export(db, out)
    assert exported == await saved_head(db)
    lines = read_export(out)
    async with SQLiteEventStore(db) as store:
        records = [r async for r in store.read("t")]
    conn = sqlite3.connect(db)
    stored = conn.execute("SELECT payload, hash FROM events WHERE thread_id='t' ORDER BY seq")
    prev = GENESIS_HASH
    for line, record, (payload, digest) in zip(lines, records, stored, strict=True):
        assert list(line) == KEYS
        assert base64.b64decode(line["payload_b64"]) == payload
        assert line["hash"] == digest.hex() == record.hash
        assert line["prev_hash"] == prev.hex()
        assert line["event"] == msgspec.to_builtins(record.event)
        fields = [line[k] for k in ("thread_id", "seq", "run_id", "actor", "at", "kind")]
        assert line["envelope"] == [*fields, line["version"], line["position"]]
        assert (line["seq"], line["position"], line["actor"]) == (
            record.seq, record.position, record.actor
        )  # fmt: skip
        assert chain_hash(prev, tuple(line["envelope"]), payload) == digest
        prev = digest
    conn.close()
    assert_ok(out, exported, STEPS * 3)
    assert_ok(out, exported, STEPS * 3, "--head", str(exported))


async def test_an_export_to_a_stream_equals_the_file(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    stream = io.StringIO()
    async with SQLiteEventStore(db) as store:
        assert await export_jsonl(store, "t", stream) == await export_jsonl(store, "t", out)
    assert stream.getvalue() == out.read_text("utf-8")
    assert stream.getvalue().count("\n") == STEPS * 3


async def test_an_export_of_a_missing_thread_raises_and_writes_nothing(
    db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "nope.jsonl"
    with pytest.raises(ThreadNotFoundError):
        await export(db, out, "nope")
    assert list(tmp_path.iterdir()) == [db]


async def test_an_export_that_fails_midway_leaves_the_old_file_alone(
    db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "t.jsonl"
    out.write_text("an older export\n", "utf-8")
    edit_db(db, "UPDATE events SET payload = x'c1' WHERE thread_id='t' AND seq=5")
    with pytest.raises(ExportError, match="already exists"):
        await export(db, out)
    with pytest.raises(CorruptRecordError, match="seq 5"):
        await export(db, out, overwrite=True)
    assert out.read_text("utf-8") == "an older export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.db", "t.jsonl"]


async def test_an_export_read_in_small_chunks_is_the_same(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, chunked = tmp_path / "whole.jsonl", tmp_path / "chunked.jsonl"
    exported = await export(db, whole)
    monkeypatch.setattr(audit, "READ_CHUNK", 5)
    assert await export(db, chunked) == exported
    assert chunked.read_text("utf-8") == whole.read_text("utf-8")


async def test_a_memory_store_exports_too(tmp_path: Path) -> None:
    store = MemoryEventStore()
    for step in (1, 2):
        await store.append("m", step_events(step), expected_seq=(step - 1) * 3)
    out = tmp_path / "m.jsonl"
    exported = await export_jsonl(store, "m", out)
    assert exported == await head(store, "m")
    assert_ok(out, exported, 6, "--head", str(exported))


# ---- tampering with an export --------------------------------------------------------------


Edit = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def read_export(path: Path) -> list[dict[str, Any]]:
    """The lines of an export (split on "\n" only: text may hold U+2028 or U+0085)."""
    return [json.loads(text) for text in path.read_text("utf-8").split("\n")[:-1]]


def edit_export(path: Path, edit: Edit) -> None:
    """Rewrite the file through `edit`; untouched lines come out re-encoded but equal."""
    lines = read_export(path)
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in edit(lines))
    path.write_text(text, "utf-8")


def at(index: int, **changes: Any) -> Edit:
    return lambda lines: [
        {**line, **changes} if i == index else line for i, line in enumerate(lines)
    ]


def rehash_from(index: int) -> Edit:
    """Re-chain the lines from `index` on, as someone who knows the algorithm would."""

    def edit(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        prev = bytes.fromhex(lines[index]["prev_hash"])
        for line in lines[index:]:
            payload = base64.b64decode(line["payload_b64"])
            line["prev_hash"] = prev.hex()
            prev = chain_hash(prev, tuple(line["envelope"]), payload)
            line["hash"] = prev.hex()
        return lines

    return edit


def both(*edits: Edit) -> Edit:
    def edit(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in edits:
            lines = e(lines)
        return lines

    return edit


def envelope_actor(index: int, actor: str) -> Edit:
    def edit(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines[index]["actor"] = actor
        lines[index]["envelope"][3] = actor
        return lines

    return edit


FORGED = base64.b64encode(encode_payloads("t", [text_event("forged")])[0].payload).decode()


@pytest.mark.parametrize(
    ("edit", "line", "seq", "problem"),
    [(at(4, actor="mallory"), 5, 5, "envelope does not match"),
     (at(4, at=1.0), 5, 5, "envelope does not match"),
     (at(4, position=999), 5, 5, "envelope does not match"),
     (envelope_actor(4, "mallory"), 5, 5, "does not match the record's bytes"),
     (at(4, payload_b64=FORGED), 5, 5, "does not match the record's bytes"),
     (at(4, payload_b64="!!"), 5, 5, "not valid base64"),
     (at(4, hash="0" * 64), 5, 5, "does not match the record's bytes"),
     (at(4, prev_hash="0" * 64), 5, 5, "is not the previous record's hash"),
     (at(4, seq=True), 5, 5, "wrong type"),
     (at(4, thread_id="other"), 5, 5, "in an export of thread 't'"),
     (lambda lines: [{k: v for k, v in line.items() if k != "hash"} for line in lines],
      1, 1, "missing field(s) hash"),
     (lambda lines: lines[:6] + lines[7:], 7, 7, "seq 8 where 7 was expected"),
     (lambda lines: lines[1:], 1, 1, "seq 2 where 1 was expected"),
     (lambda lines: [*lines[:3], lines[4], lines[3], *lines[5:]], 4, 4, "seq 5 where 4"),
     (lambda lines: [*lines, lines[-1]], 13, 13, "seq 12 where 13"),
     (lambda lines: [], 1, 1, "no records")],
)  # fmt: skip
async def test_a_tampered_export_is_caught_at_its_first_bad_line(
    db: Path, tmp_path: Path, edit: Edit, line: int, seq: int, problem: str
) -> None:
    out = tmp_path / "t.jsonl"
    exported = await export(db, out)
    edit_export(out, lambda lines: lines)
    assert_ok(out, exported, STEPS * 3)  # re-encoding alone changes nothing
    edit_export(out, edit)
    assert_bad(out, line, seq, problem)


async def test_a_line_that_is_not_json_is_caught(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    await export(db, out)
    lines = out.read_text("utf-8").split("\n")
    out.write_text("\n".join([*lines[:2], "{not json", *lines[2:]]), "utf-8")
    assert_bad(out, 3, 3, "not valid JSON")


async def test_a_truncated_export_is_caught_only_against_a_saved_head(
    db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "t.jsonl"
    exported = await export(db, out)
    edit_export(out, lambda lines: lines[:9])
    truncated = Head("t", 9, read_export(out)[-1]["hash"])
    assert_ok(out, truncated, 9)
    assert_bad(
        out, 10, 10, "the tail after seq 9 was truncated (head says 12)", "--head", str(exported)
    )


async def test_a_rechained_export_is_caught_only_against_a_saved_head(
    db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "t.jsonl"
    exported = await export(db, out)
    edit_export(out, both(envelope_actor(4, "mallory"), rehash_from(4)))
    forged_head = Head("t", 12, read_export(out)[-1]["hash"])
    assert forged_head != exported
    assert_ok(out, forged_head, 12)
    assert_bad(out, 12, 12, "is not the saved head", "--head", str(exported))
    assert_bad(out, 1, 1, "in an export of thread 'other'", "--head", f"other@1:{H}")


def test_the_verifier_refuses_a_malformed_head_and_a_missing_file(tmp_path: Path) -> None:
    result = run_verifier(tmp_path / "none.jsonl", "--head", "t@0:abc")
    assert result.returncode == 2 and "malformed head" in result.stderr
    result = run_verifier(tmp_path / "none.jsonl")
    assert result.returncode == 2 and "cannot read" in result.stdout


# ---- floats and non-ASCII text -------------------------------------------------------------

# Clock readings whose JSON differs between json.dumps and agentlog's encoder, or is close.
# (Not -0.0: SQLite hands it back as 0.0, so the store itself cannot verify such a record.)
ODD_CLOCK = [1e-05, 1.5e-05, -2.5e-05, 1.5e-07, 1e16, 1.2345678901234567e300, 5e-324,
             1712345678.123456, 0.0, 0.1, 123456789012345678.0, 1e-4, 9.99e15]  # fmt: skip
ODD_FLOATS = [*ODD_CLOCK, -0.0, float("nan"), float("inf"), float("-inf")]


def test_the_verifiers_envelope_bytes_are_agentlogs_for_odd_floats_and_text() -> None:
    for value in ODD_FLOATS:
        envelope = (ODD_TEXT, 1, "运行", None, value, "kind", 1, 2)
        assert verify_export.compact_json(list(envelope)) == envelope_bytes(envelope), value
    # Why the verifier cannot simply use json.dumps: it writes exponents differently.
    naive = json.dumps(["t", 1e16], separators=(",", ":"), ensure_ascii=False).encode()
    assert naive != envelope_bytes(("t", 1e16))


@given(
    envelope=st.tuples(
        st.text(min_size=1), st.integers(1, 2**62), st.none() | st.text(), st.none() | st.text(),
        st.floats(allow_nan=False, allow_infinity=False), st.text(), st.integers(1, 99),
        st.integers(1, 2**62),
    )
)  # fmt: skip
def test_the_verifiers_envelope_bytes_are_agentlogs_for_any_envelope(
    envelope: tuple[Any, ...],
) -> None:
    assert verify_export.compact_json(list(envelope)) == envelope_bytes(envelope)


async def test_non_ascii_threads_and_odd_clocks_export_and_verify(tmp_path: Path) -> None:
    db, out = tmp_path / "log.db", tmp_path / "t.jsonl"
    thread = "журнал-ü-世界-🧵@1:x"
    clock = iter(ODD_CLOCK)
    async with SQLiteEventStore(db, clock=lambda: next(clock)) as store:
        seq = 0
        for step, _ in enumerate(ODD_CLOCK, start=1):
            events = step_events(step, text=ODD_TEXT, role="user")
            records = await store.append(
                thread, events, expected_seq=seq, actor="agent-é", run_id="运行-1"
            )
            seq = records[-1].seq
        exported = await export_jsonl(store, thread, out)
        assert exported == await head(store, thread)
        assert (await verify_thread(store, thread, head=exported)).ok
    text = out.read_text("utf-8")
    assert "héllo — 世界 🧵" in text and text.count("\n") == seq  # raw UTF-8, one line each
    assert Head.parse(str(exported)) == exported
    assert_ok(out, exported, seq, "--head", str(exported))
    edit_export(out, envelope_actor(7, "agent-e"))
    assert_bad(out, 8, 8, "does not match the record's bytes", "--head", str(exported))
