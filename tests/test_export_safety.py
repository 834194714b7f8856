"""Exports never harm a file they did not create, and the verifier checks what people read.

The command line runs as real subprocesses on real files (one export is killed with
SIGKILL while it writes); the library's file handling is checked in process where the
order of fsync and rename is the point.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.actors.testing import until_blocking
from agentlog.events import SQLiteEventStore, StateUpdated, audit, export_jsonl, verify_export
from agentlog.events.audit import ExportError, ExportFile

from .helpers import agentlog, edit_db, step_events

ROOT = Path(__file__).resolve().parents[1]
VERIFY = ROOT / "events" / "verify_export.py"
TMP_PATTERN = re.compile(r"\..*\.agentlog-export-[A-Za-z0-9-]*-[0-9]+-[0-9a-f]{16}\.tmp")


def spawn(*args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "from agentlog.actors.cli import main; main()", *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )


def verifier(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(VERIFY), str(path)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )


def build(db: Path, steps: int = 4, thread: str = "t") -> int:
    """`steps` agent steps on `thread`; returns the last seq."""

    async def write() -> int:
        async with SQLiteEventStore(db) as store:
            seq = 0
            for step in range(1, steps + 1):
                seq = (await store.append(thread, step_events(step), expected_seq=seq))[-1].seq
            return seq

    return asyncio.run(write())


def build_long(db: Path, records: int, thread: str = "t") -> int:
    """A thread of about `records` records with ~1 kB messages, appended in large batches."""

    async def write() -> int:
        async with SQLiteEventStore(db) as store:
            seq, step = 0, 0
            while seq < records:
                batch = []
                for _ in range(300):
                    step += 1
                    batch += step_events(step, text="x" * 1000)
                seq = (await store.append(thread, batch, expected_seq=seq))[-1].seq
            return seq

    return asyncio.run(write())


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if TMP_PATTERN.fullmatch(p.name))


def one_error(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# ---- files the export did not create are never touched ------------------------------------


def test_a_database_named_like_the_old_temporary_file_survives(tmp_path: Path) -> None:
    db = tmp_path / "audit.tmp"
    last = build(db)
    before = db.read_bytes()
    done = agentlog("export", "t", "--db", db, "--out", tmp_path / "audit")
    assert done.returncode == 0, done.stderr
    assert db.read_bytes() == before
    assert verifier(tmp_path / "audit").stdout.startswith(f"ok: {last} records")
    assert leftovers(tmp_path) == []


def test_an_unrelated_tmp_file_is_left_alone_on_success_and_failure(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    build(db)
    mine = tmp_path / "report.tmp"
    mine.write_text("my notes\n")
    assert agentlog("export", "t", "--db", db, "--out", tmp_path / "report").returncode == 0
    assert mine.read_text() == "my notes\n"

    (tmp_path / "report").write_text("the previous export\n")
    refused = agentlog("export", "t", "--db", db, "--out", tmp_path / "report")
    one_error(refused, "already exists", "--overwrite")  # never replaced unasked
    assert (tmp_path / "report").read_text() == "the previous export\n"
    edit_db(db, "UPDATE events SET payload = x'c1' WHERE thread_id = 't' AND seq = 5")
    report = tmp_path / "report"
    one_error(agentlog("export", "t", "--db", db, "--out", report, "--overwrite"), "seq 5")
    assert mine.read_text() == "my notes\n"
    assert (tmp_path / "report").read_text() == "the previous export\n"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal"])
def test_the_databases_own_files_are_refused_as_targets(tmp_path: Path, suffix: str) -> None:
    db = tmp_path / "demo.db"
    last = build(db)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    done = agentlog("export", "t", "--db", db, "--out", f"{db}{suffix}")
    line = one_error(done, f"cannot write {db}{suffix}", "nothing was written")
    assert ("the database itself" if not suffix else f"the database's {suffix} file") in line
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files
    assert agentlog("verify", "t", "--db", db).returncode == 0
    assert json.loads(agentlog("threads", "--db", db, "--json").stdout)[0]["records"] == last


def test_a_symlink_or_hard_link_to_the_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    build(db)
    before = db.read_bytes()
    (tmp_path / "alias").symlink_to(db)
    os.link(db, tmp_path / "hard")
    one_error(agentlog("export", "t", "--db", db, "--out", tmp_path / "alias"), "database itself")
    one_error(agentlog("export", "t", "--db", db, "--out", tmp_path / "hard"), "database itself")
    assert db.read_bytes() == before and (tmp_path / "alias").is_symlink()


def test_the_library_refuses_its_stores_files_and_odd_targets(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    build(db)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    async def refused() -> None:
        async with SQLiteEventStore(db) as store:
            for target, why in (
                (Path(f"{db}-wal"), "-wal file"),
                (db, "database itself"),
                (fifo, "not a regular file"),
                (tmp_path, "is a directory"),
            ):
                with pytest.raises(ExportError, match=re.escape(why)):
                    await export_jsonl(store, "t", target)

    asyncio.run(refused())
    assert fifo.exists() and not fifo.is_file()
    assert leftovers(tmp_path) == []


# ---- durable, exclusive, and cleaned up after a crash -------------------------------------


def test_the_file_is_fsynced_before_and_its_directory_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, out = tmp_path / "log.db", tmp_path / "t.jsonl"
    build(db)
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        assert Path(src).parent == Path(dst).parent == tmp_path
        assert TMP_PATTERN.fullmatch(Path(src).name), src
        calls.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(audit.os, "fsync", fsync)
    monkeypatch.setattr(audit.os, "replace", replace)

    async def export() -> None:
        async with SQLiteEventStore(db) as store:
            await export_jsonl(store, "t", out)

    asyncio.run(export())
    assert calls == ["fsync file", "rename", "fsync dir"]


def test_the_temporary_file_is_created_exclusively(tmp_path: Path) -> None:
    opened: list[int] = []
    real_open = os.open

    def spy(path: str, flags: int, mode: int = 0o777) -> int:
        opened.append(flags)
        return real_open(path, flags, mode)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(audit.os, "open", spy)
        with ExportFile(tmp_path / "out.txt") as f:
            f.write("whole\n")
    assert opened and opened[0] & os.O_EXCL and opened[0] & os.O_CREAT
    assert (tmp_path / "out.txt").read_text() == "whole\n"
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_two_exports_to_one_file_at_once_both_finish_whole(tmp_path: Path) -> None:
    db, out = tmp_path / "log.db", tmp_path / "t.jsonl"
    last = build_long(db, 6000)
    runs = [spawn("export", "t", "--db", db, "--out", out, "--overwrite") for _ in range(2)]
    for run in runs:
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
    assert verifier(out).stdout.startswith(f"ok: {last} records")
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_a_killed_exports_leftover_is_removed_by_the_next_run_and_no_other(
    tmp_path: Path,
) -> None:
    db, out = tmp_path / "log.db", tmp_path / "t.jsonl"
    last = build_long(db, 30000)
    out.write_text("the previous export\n")
    run = spawn("export", "t", "--db", db, "--out", out, "--overwrite")

    def partly_written() -> bool:  # kill it once it has written part of the file
        found = leftovers(tmp_path)
        return bool(found) and (tmp_path / found[0]).stat().st_size > 100_000

    until_blocking(partly_written)
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=30)
    assert run.returncode == -signal.SIGKILL
    (killed,) = leftovers(tmp_path)
    assert str(run.pid) in killed
    assert out.read_text() == "the previous export\n"  # untouched until an export is whole

    host = audit._host()
    alive = tmp_path / f".t.jsonl.agentlog-export-{host}-{os.getpid()}-{'0' * 16}.tmp"
    other = tmp_path / killed.replace(".t.jsonl.", ".other.jsonl.")
    alive.write_text("an export in progress (this process is alive)\n")
    other.write_text("a leftover of another target\n")
    done = agentlog("export", "t", "--db", db, "--out", out, "--overwrite")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / killed).exists()
    assert alive.exists() and other.exists()
    assert verifier(out).stdout.startswith(f"ok: {last} records")


# ---- the readable event is checked against the hashed payload -----------------------------


def export_lines(db: Path, out: Path) -> list[dict[str, Any]]:
    assert agentlog("export", "t", "--db", db, "--out", out).returncode == 0
    return [json.loads(line) for line in out.read_text("utf-8").split("\n")[:-1]]


def rewrite(out: Path, lines: list[dict[str, Any]]) -> None:
    out.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), "utf-8")


def test_an_edited_readable_event_fails_verification(tmp_path: Path) -> None:
    db, out = tmp_path / "log.db", tmp_path / "t.jsonl"
    build(db)
    lines = export_lines(db, out)
    assert verifier(out).returncode == 0
    said = lines[4]["event"]["message"]["content"][0]
    assert said["text"] == "hello 2"
    said["text"] = "I approve the refund"
    rewrite(out, lines)
    checked = verifier(out)
    assert checked.returncode == 1
    assert checked.stdout.startswith("line 5 (seq 5): the readable event differs")
    assert "event.message.content" in checked.stdout


@pytest.mark.parametrize(
    "edit",
    [
        lambda e: e.update(kind="stop_requested"),
        lambda e: e.pop("next_node"),
        lambda e: e.update(step=3.0),  # 3 as a float is not the stored int
        lambda e: e.update(step=True),
        lambda e: e.update(extra=1),
    ],
)
def test_any_change_of_the_readable_event_is_caught(tmp_path: Path, edit: Any) -> None:
    db, out = tmp_path / "log.db", tmp_path / "t.jsonl"
    build(db)
    lines = export_lines(db, out)
    assert lines[5]["kind"] == "step_advanced" and lines[5]["event"]["step"] == 2
    edit(lines[5]["event"])
    rewrite(out, lines)
    checked = verifier(out)
    assert checked.returncode == 1 and checked.stdout.startswith("line 6 (seq 6): the readable")


def test_a_duplicated_key_cannot_show_one_value_and_hash_another(tmp_path: Path) -> None:
    db, out = tmp_path / "log.db", tmp_path / "t.jsonl"
    build(db)
    export_lines(db, out)
    raw = out.read_text("utf-8").split("\n")
    assert '"event":{"kind":"node_entered","node":"agent"}' in raw[0]
    raw[0] = raw[0].replace('"event":{', '"event":{"node":"forged",', 1)
    out.write_text("\n".join(raw), "utf-8")
    checked = verifier(out)
    assert checked.returncode == 1
    assert (
        checked.stdout.startswith("line 1 (seq 1): ") and "the key 'node' twice" in checked.stdout
    )


ODD = {
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "neg_zero": -0.0,
    "bytes": b"\x00\xffraw",
    "big": 2**64 - 1,
    "low": -(2**63),
    "edge": 2**53,
    "past": 2**53 + 1,
    "tag_like": {"$bytes": "not bytes"},
    "int_keys": {1: "one"},
    "nested": [{"$float": "nan"}, [b"", 1.5]],
}
STATED = {
    "nan": {"$float": "nan"},
    "inf": {"$float": "inf"},
    "-inf": {"$float": "-inf"},
    "neg_zero": -0.0,
    "bytes": {"$bytes": base64.b64encode(b"\x00\xffraw").decode()},
    "big": {"$int": str(2**64 - 1)},
    "low": {"$int": str(-(2**63))},
    "edge": 2**53,
    "past": {"$int": str(2**53 + 1)},
    "tag_like": {"$map": [["$bytes", "not bytes"]]},
    "int_keys": {"$map": [[1, "one"]]},
    "nested": [{"$map": [["$float", "nan"]]}, [{"$bytes": ""}, 1.5]],
}


def test_values_json_cannot_hold_have_one_stated_form_that_verifies(tmp_path: Path) -> None:
    db, out = tmp_path / "log.db", tmp_path / "t.jsonl"

    async def write() -> None:
        async with SQLiteEventStore(db) as store:
            await store.append("t", [StateUpdated(values=ODD)], expected_seq=0)

    asyncio.run(write())
    (line,) = export_lines(db, out)
    assert line["event"]["values"] == STATED
    assert math.copysign(1.0, line["event"]["values"]["neg_zero"]) == -1.0
    assert verifier(out).returncode == 0, verifier(out).stdout

    for key, forged in (("nan", None), ("bytes", "AP9yYXc="), ("past", 2**53 + 1), ("big", 1.0)):
        changed = json.loads(json.dumps(line))
        changed["event"]["values"][key] = forged
        rewrite(out, [changed])
        checked = verifier(out)
        assert checked.returncode == 1, key
        assert f"event.values.{key}" in checked.stdout


json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text()
    | st.binary(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=8) | st.integers(-5, 5), inner, max_size=5)
    ),
    max_leaves=30,
)


def plain(value: Any) -> Any:
    """A decoded value with the reader's maps as dicts, for comparing with msgspec's."""
    if isinstance(value, verify_export.Map):
        return {plain(k): plain(v) for k, v in value}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@given(json_like)
def test_the_standard_library_reader_decodes_what_msgspec_encodes(value: Any) -> None:
    data = msgspec.msgpack.encode(value)
    assert equal(plain(verify_export.unpack(data)), msgspec.msgpack.decode(data))
    shown = verify_export.readable(verify_export.unpack(data))
    reread = verify_export.loads(json.dumps(shown))  # the readable form is plain JSON
    assert verify_export.same(reread, shown)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\xc1", "never uses"),
        (b"\x92\x01", "ends early"),
        (b"\x01\x02", "after its value"),
        (b"\xa2\xff\xfe", "not UTF-8"),
        (b"\x91" * 1001 + b"\x01", "deeper than"),
    ],
)
def test_the_reader_refuses_malformed_payloads(data: bytes, problem: str) -> None:
    with pytest.raises(verify_export.Bad, match=problem):
        verify_export.unpack(data)


def test_the_verifier_imports_nothing_but_the_standard_library() -> None:
    source = VERIFY.read_text()
    imported = set(re.findall(r"^(?:from|import) ([a-z_0-9]+)", source, re.MULTILINE))
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
