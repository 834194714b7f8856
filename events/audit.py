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
import contextlib
import os
import re
import secrets
import socket
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

import msgspec

from agentlog.events.codec import GENESIS_HASH, Row, decode_event, encode_json
from agentlog.events.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    StoreError,
    ThreadNotFoundError,
)
from agentlog.events.keystore import pruned_floor
from agentlog.events.kinds import SubgraphRan
from agentlog.events.record import VerifyReport
from agentlog.events.store import READ_CHUNK, EventStore
from agentlog.events.verify_export import Bad, Map, readable, readable_payload

__all__ = [
    "ExportError",
    "ExportFile",
    "Head",
    "export_jsonl",
    "export_line",
    "head",
    "verify_store",
    "verify_thread",
    "verify_tree",
]

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
            raise InvalidArgumentError(
                f"a head needs a non-empty thread id, got {self.thread_id!r}"
            )
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 1:
            raise InvalidArgumentError(f"a head's seq is an int >= 1, got {self.seq!r}")
        if not isinstance(self.hash, str) or not _HASH.fullmatch(self.hash):
            raise InvalidArgumentError(
                f"a head's hash is 64 lowercase hex digits, got {self.hash!r}"
            )

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
        raise InvalidArgumentError(
            f"head {head} is of thread {head.thread_id!r}, not {thread_id!r}"
        )
    report = await store.verify(thread_id)
    if head is None:
        return report
    if not report.ok and report.first_bad_seq is not None and report.first_bad_seq <= head.seq:
        return report  # the chain already breaks at or before the saved head
    if report.ok and head.seq <= report.pruned_through:
        return report  # pruned: an archive of the removed records proves it (verify_archive)
    if report.ok and report.records_checked + report.pruned_through < head.seq:
        last = report.records_checked + report.pruned_through
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


async def verify_tree(
    store: EventStore, thread_id: str, *, head: Head | None = None
) -> list[VerifyReport]:
    """`verify_thread`, and the same for every subgraph thread the thread's records link
    to (`subgraph_ran`), depth first: each linked thread must chain intact and still hold
    the record, with the hash, that its parent's step saw. The thread's report comes first."""
    reports = [await verify_thread(store, thread_id, head=head)]
    if not reports[0].ok:
        return reports
    seen: set[str] = set()
    async for record in store.read(thread_id):
        event = record.event
        if not isinstance(event, SubgraphRan) or event.thread_id in seen:
            continue
        seen.add(event.thread_id)
        linked = Head(event.thread_id, event.seq, event.hash) if event.hash else None
        try:
            reports += await verify_tree(store, event.thread_id, head=linked)
        except StoreError as exc:
            problem = f"subgraph thread linked at seq {record.seq} cannot be read: {exc}"
            reports.append(
                VerifyReport(
                    thread_id=event.thread_id, ok=False, records_checked=0, problem=problem
                )
            )
    return reports


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
    """Verify every thread, in `threads()` order; `progress(done, total)` after each.

    A thread the store lists but cannot read is reported as failed, with the reason.
    """
    thread_ids = await store.threads()
    reports: list[VerifyReport] = []
    for thread_id in thread_ids:
        try:
            reports.append(await store.verify(thread_id))
        except (StoreError, ValueError) as exc:  # one unreadable thread fails, not the whole run
            problem = f"the thread cannot be read: {exc}"
            bad = VerifyReport(thread_id=thread_id, ok=False, records_checked=0, problem=problem)
            reports.append(bad)
        if progress is not None:
            progress(len(reports), len(thread_ids))
    return reports


def _pairs(value: Any) -> Any:
    """A value msgspec decoded, in the verifier's terms (maps as `Map`)."""
    if isinstance(value, dict):
        return Map((k, _pairs(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_pairs(v) for v in value]
    if isinstance(value, msgspec.msgpack.Ext):
        raise TypeError("an extension value: the verifier's reader names it")
    return value


def _readable(payload: bytes) -> Any:
    """`readable_payload(payload)`, the verifier's own, found faster: msgspec decodes it and,
    when encoding that again gives back exactly these bytes (so no key was merged, no width
    or type changed), it is the very value the verifier's reader finds; else that reader."""
    try:
        value = msgspec.msgpack.decode(payload)
        if msgspec.msgpack.encode(value) == payload:
            return readable(_pairs(value))
    except (msgspec.DecodeError, TypeError, ValueError, RecursionError, Bad):
        pass
    return readable_payload(payload)


def export_line(row: Row, prev: bytes) -> bytes:
    """One record as a JSON line carrying all it takes to recompute its hash."""
    envelope = [
        row.thread_id, row.seq, row.run_id, row.actor,
        row.at, row.kind, row.version, row.position,
    ]  # fmt: skip
    decode_event(row.thread_id, row.seq, row.kind, row.version, row.payload)  # refuse corrupt
    try:
        event = _readable(row.payload)
    except ValueError as exc:
        raise CorruptRecordError(row.thread_id, row.seq, f"{row.kind} payload: {exc}") from exc
    line: dict[str, Any] = {
        "thread_id": row.thread_id,
        "seq": row.seq,
        "position": row.position,
        "run_id": row.run_id,
        "actor": row.actor,
        "at": row.at,
        "kind": row.kind,
        "version": row.version,
        "event": event,
        "payload_b64": base64.b64encode(row.payload).decode("ascii"),
        "envelope": envelope,
        "prev_hash": prev.hex(),
        "hash": row.hash.hex(),
    }
    return encode_json(line) + b"\n"


async def export_jsonl(
    store: EventStore,
    thread_id: str,
    out: IO[str] | str | os.PathLike[str],
    *,
    progress: Callable[[int, int], None] | None = None,
    overwrite: bool = False,
) -> Head:
    """Write the thread as JSON lines in seq order, exactly as stored; return its head.

    Rows are exported as they are, tampered or not: `verify_export.py` is the judge. `event`
    is the payload in readable form (see `verify_export.readable`); `envelope` and
    `payload_b64` are hashed, and the verifier checks `event` against the payload. A path is
    written through `ExportFile`: a new file of its own, renamed into place once whole.
    `progress(done, total)` is called every so often with the count of lines written. An
    existing file is replaced only with `overwrite=True`.
    """
    last = await store.last_seq(thread_id)
    if last == 0:
        raise ThreadNotFoundError(thread_id)
    if not isinstance(out, str | os.PathLike):
        return await _export(store, thread_id, last, out, progress)
    with ExportFile(out, protect=store.files(), overwrite=overwrite) as f:
        return await _export(store, thread_id, last, f, progress)


async def _export(
    store: EventStore,
    thread_id: str,
    last: int,
    out: IO[str],
    progress: Callable[[int, int], None] | None,
) -> Head:
    floor = await pruned_floor(store, thread_id)  # pruned: the first row links to its hash
    prev, final = GENESIS_HASH if floor is None else floor[1], None
    # Raw rows, as `verify` reads them: the payload bytes exactly as stored.
    async for row in store.read_rows(thread_id, 1, last):
        out.write(export_line(row, prev).decode("utf-8"))
        prev, final = row.hash, row
        if progress is not None and (row.seq % READ_CHUNK == 0 or row.seq == last):
            progress(row.seq, last)
    if final is None:
        raise CorruptRecordError(thread_id, 1, f"the thread's head says {last} records, none")
    return Head(thread_id, final.seq, final.hash.hex())


# ---- writing an export file ---------------------------------------------------------------

DATABASE_SUFFIXES = ("", "-wal", "-shm", "-journal")
"""A SQLite database's own files: the database, its write-ahead log, shared memory, journal."""

_TMP_MARK = "agentlog-export"
_TMP_NAME = re.compile(
    r"\.(?P<name>.*)\." + _TMP_MARK + r"-(?P<host>[A-Za-z0-9-]*)-(?P<pid>[0-9]+)-[0-9a-f]{16}\.tmp"
)
_NAME_KEEP = 100  # of the target's name in a temporary file's name, to stay under NAME_MAX


class ExportError(StoreError):
    """An export cannot be written where it was asked to go; nothing there was changed."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(f"cannot write {path}: {why}")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32]


def _alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (one we may not signal counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError):
        return False
    return True


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ExportFile:
    """A text file that appears at `path` whole or not at all, and harms nothing else.

    The text goes to a new temporary file in the target's directory, created exclusively
    (O_EXCL) under a name no one else uses (`.NAME.agentlog-export-HOST-PID-RANDOM.tmp`);
    when the block ends without an error it is flushed, fsynced, renamed over `path`, and
    the directory is fsynced: an export is an audit artefact. On an error only that
    temporary file is removed. `path` may not be one of the `protect`ed databases' own
    files (the database, `-wal`, `-shm`, `-journal`), nor an existing non-regular file, nor
    an existing file at all unless `overwrite` says to replace it.
    Leftovers of exports to the same target whose process is gone are removed first.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        protect: Iterable[str] = (),
        overwrite: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self.overwrite = overwrite
        self.target = os.path.realpath(self.path)  # a symlink is written through
        self.directory = os.path.dirname(self.target)
        self._protect = [os.fspath(p) for p in protect]
        self._tmp: str | None = None
        self._file: IO[str] | None = None

    def _refuse(self, why: str) -> ExportError:
        return ExportError(self.path, why)

    def _check_target(self) -> None:
        for database in self._protect:
            real = os.path.realpath(database)
            for suffix in DATABASE_SUFFIXES:
                own = real + suffix
                same = self.target == own
                if not same and os.path.exists(own) and os.path.exists(self.target):
                    same = os.path.samefile(own, self.target)
                if same:
                    what = "the database itself" if not suffix else f"the database's {suffix} file"
                    raise self._refuse(
                        f"it is {what} ({database}{suffix}); nothing was written: "
                        "pick another file for the export"
                    )
        try:
            mode = os.stat(self.target).st_mode
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._refuse(f"{exc.strerror}; nothing was written") from None
        if stat.S_ISDIR(mode):
            raise self._refuse("it is a directory; name a file inside it")
        if not stat.S_ISREG(mode):
            raise self._refuse(
                "it exists and is not a regular file (a FIFO, device or socket); "
                "it was left untouched: pick a regular file"
            )
        if not self.overwrite:
            raise self._refuse(
                "it already exists and was left untouched: pick a new file, or ask to replace "
                "it (--overwrite, or overwrite=True)"
            )

    def _tmp_name(self) -> str:
        name = os.path.basename(self.target)[:_NAME_KEEP]
        token = secrets.token_hex(8)
        return f".{name}.{_TMP_MARK}-{_host()}-{os.getpid()}-{token}.tmp"

    def sweep(self) -> list[str]:
        """Remove what killed exports to this target left; return the paths removed.

        Only a regular file of ours with the export's own name pattern, for this target
        name, made on this host by a process that no longer exists.
        """
        removed: list[str] = []
        name, host = os.path.basename(self.target)[:_NAME_KEEP], _host()
        try:
            entries = os.listdir(self.directory)
        except OSError:
            return removed
        for entry in entries:
            found = _TMP_NAME.fullmatch(entry)
            if not found or found["name"] != name or found["host"] != host:
                continue
            if _alive(int(found["pid"])):
                continue
            path = os.path.join(self.directory, entry)
            try:
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                    continue
                os.unlink(path)
            except OSError:
                continue
            removed.append(path)
        return removed

    def __enter__(self) -> IO[str]:
        self._check_target()
        self.sweep()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        flags |= getattr(os, "O_NOFOLLOW", 0)
        for _ in range(8):  # a clash of 64 random bits is a retry, not an error
            tmp = os.path.join(self.directory, self._tmp_name())
            try:
                fd = os.open(tmp, flags, 0o666)
            except FileExistsError:
                continue
            except OSError as exc:
                raise self._refuse(f"{exc.strerror}; nothing was written") from None
            break
        else:
            raise self._refuse("no unused temporary name in its directory; nothing was written")
        self._tmp = tmp
        self._file = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        return self._file

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._file is not None and self._tmp is not None
        f, tmp = self._file, self._tmp
        renamed = False
        try:
            if exc_type is None:
                try:
                    f.flush()
                    os.fsync(f.fileno())
                    f.close()
                    self._check_target()  # it may have changed while the export ran
                    os.replace(tmp, self.target)
                    renamed = True
                    _fsync_directory(self.directory)
                except OSError as error:
                    if renamed:
                        why = f"written, but its directory could not be synced: {error.strerror}"
                        raise self._refuse(why) from None
                    raise self._refuse(f"{error.strerror}; nothing was written") from None
        finally:
            if not f.closed:
                f.close()
            if not renamed:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)  # ours: created with O_EXCL, never renamed
