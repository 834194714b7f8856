"""Audit: saved heads, whole-store verification and a self-verifying JSONL export.

`store.verify` proves a thread's records chain up to the head the store itself records; an
intruder who truncates the log *and* rewrites that head, or re-chains a rewritten history,
passes it. A `Head` saved outside the store (a ticket, a printout, another system) closes
that gap: `verify_thread(..., head=saved)` checks the log still holds exactly that record.

`export_jsonl` writes a thread as one JSON object per line with everything needed to
recompute its chain; `events/verify_export.py` does so with the standard library alone.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import msgspec

from .codec import GENESIS_HASH, Row, decode_event, encode_json
from .errors import CorruptRecordError, ThreadNotFoundError
from .record import VerifyReport
from .store import READ_CHUNK, BaseEventStore, EventStore

__all__ = ["Head", "export_jsonl", "head", "verify_store", "verify_thread"]

_HEAD_FORM = "THREAD@SEQ:HASH (a thread id, its last seq, that record's 64 hex digit hash)"
_SEQ = re.compile(r"[0-9]+")
_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Head:
    """A thread's last record as `seq` and hex `hash`: save it to detect later rewrites."""

    thread_id: str
    seq: int
    hash: str

    def __post_init__(self) -> None:
        if not isinstance(self.thread_id, str) or not self.thread_id:
            raise ValueError(f"a head needs a non-empty thread id, got {self.thread_id!r}")
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 1:
            raise ValueError(f"a head's seq is an int >= 1, got {self.seq!r}")
        if not isinstance(self.hash, str) or not _HASH.fullmatch(self.hash):
            raise ValueError(f"a head's hash is 64 lowercase hex digits, got {self.hash!r}")

    def __str__(self) -> str:
        return f"{self.thread_id}@{self.seq}:{self.hash}"

    @classmethod
    def parse(cls, text: str) -> Head:
        """Read the `str()` form back; the last '@' splits, so thread ids may contain one."""

        def malformed(why: str) -> ValueError:
            return ValueError(f"malformed head {text!r}: {why}; expected {_HEAD_FORM}")

        thread_id, at, rest = text.rpartition("@")
        if not at:
            raise malformed("no '@' after the thread id")
        if not thread_id:
            raise malformed("the thread id before '@' is empty")
        seq_text, colon, hash_text = rest.partition(":")
        if not colon:
            raise malformed("no ':' between the seq and the hash")
        if not _SEQ.fullmatch(seq_text) or int(seq_text) < 1:
            raise malformed(f"the seq {seq_text!r} is not a whole number >= 1")
        hash_text = hash_text.lower()
        if not _HASH.fullmatch(hash_text):
            raise malformed(f"the hash {hash_text!r} is not 64 hex digits")
        return cls(thread_id, int(seq_text), hash_text)


async def _hash_at(store: EventStore, thread_id: str, seq: int) -> str | None:
    """The stored hash of one record, or None when there is no record at `seq`."""
    async for record in store.read(thread_id, seq, seq):
        return record.hash
    return None


async def head(store: EventStore, thread_id: str) -> Head:
    """The thread's current head: the seq and hash of its last record."""
    last = await store.last_seq(thread_id)
    if last == 0:
        raise ThreadNotFoundError(thread_id)
    digest = await _hash_at(store, thread_id, last)
    if digest is None:
        raise CorruptRecordError(thread_id, last, "the thread's head names it, none is stored")
    return Head(thread_id, last, digest)


async def verify_thread(
    store: EventStore, thread_id: str, *, head: Head | None = None
) -> VerifyReport:
    """`store.verify`, and when `head` is given, that the log still holds that record."""
    if head is not None and head.thread_id != thread_id:
        raise ValueError(f"head {head} is of thread {head.thread_id!r}, not {thread_id!r}")
    report = await store.verify(thread_id)
    if head is None:
        return report
    if not report.ok and report.first_bad_seq is not None and report.first_bad_seq <= head.seq:
        return report  # the chain already breaks at or before the saved head
    if report.ok and report.records_checked < head.seq:
        last = report.records_checked
        problem = f"the tail after seq {last} was truncated (head says {head.seq})"
        return _bad(report, last + 1, problem)
    # Records 1..head.seq chain correctly, so a different hash there is a re-chained history.
    digest = await _hash_at(store, thread_id, head.seq)
    if digest != head.hash:
        problem = (
            f"record seq {head.seq} has hash {digest}, but the saved head says {head.hash}: "
            "the history up to it was rewritten"
        )
        return _bad(report, head.seq, problem)
    return report


def _bad(report: VerifyReport, seq: int, problem: str) -> VerifyReport:
    return VerifyReport(
        thread_id=report.thread_id,
        ok=False,
        records_checked=report.records_checked,
        head_hash=report.head_hash,
        first_bad_seq=seq,
        problem=problem,
    )


async def verify_store(
    store: EventStore, *, progress: Callable[[int, int], None] | None = None
) -> list[VerifyReport]:
    """Verify every thread, in `threads()` order; `progress(done, total)` after each."""
    thread_ids = await store.threads()
    reports: list[VerifyReport] = []
    for thread_id in thread_ids:
        reports.append(await store.verify(thread_id))
        if progress is not None:
            progress(len(reports), len(thread_ids))
    return reports


def _export_line(row: Row, prev: bytes) -> bytes:
    """One record as a JSON line carrying all it takes to recompute its hash."""
    envelope = [
        row.thread_id, row.seq, row.run_id, row.actor,
        row.at, row.kind, row.version, row.position,
    ]  # fmt: skip
    event = decode_event(row.thread_id, row.seq, row.kind, row.version, row.payload)
    line: dict[str, Any] = {
        "thread_id": row.thread_id,
        "seq": row.seq,
        "position": row.position,
        "run_id": row.run_id,
        "actor": row.actor,
        "at": row.at,
        "kind": row.kind,
        "version": row.version,
        "event": msgspec.to_builtins(event),
        "payload_b64": base64.b64encode(row.payload).decode("ascii"),
        "envelope": envelope,
        "prev_hash": prev.hex(),
        "hash": row.hash.hex(),
    }
    return encode_json(line) + b"\n"


async def export_jsonl(
    store: EventStore, thread_id: str, out: IO[str] | str | os.PathLike[str]
) -> Head:
    """Write the thread as JSON lines in seq order, exactly as stored; return its head.

    Rows are exported as they are, tampered or not: `verify_export.py` is the judge. `event`
    is the decoded event for people to read; only `envelope` and `payload_b64` are hashed.
    A path is written to a temporary file first and only replaced once the export is whole.
    """
    if not isinstance(store, BaseEventStore):
        raise TypeError(f"export_jsonl reads raw rows; {type(store).__name__} has none")
    last = await store.last_seq(thread_id)
    if last == 0:
        raise ThreadNotFoundError(thread_id)
    if not isinstance(out, str | os.PathLike):
        return await _export(store, thread_id, last, out)
    path = os.fspath(out)
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            exported = await _export(store, thread_id, last, f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return exported


async def _export(store: BaseEventStore, thread_id: str, last: int, out: IO[str]) -> Head:
    prev, seq, final = GENESIS_HASH, 1, None
    while seq <= last:
        # Raw rows, as `verify` reads them: the payload bytes exactly as stored.
        rows = await store._fetch(thread_id, seq, last, READ_CHUNK)
        if not rows:
            break
        for row in rows:
            out.write(_export_line(row, prev).decode("utf-8"))
            prev, final = row.hash, row
        seq = rows[-1].seq + 1
    if final is None:
        raise CorruptRecordError(thread_id, 1, f"the thread's head says {last} records, none")
    return Head(thread_id, final.seq, final.hash.hex())
