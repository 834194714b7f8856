"""Checking stored snapshots against the log (`agentlog verify`, `verify_snapshots`): each
is compared with the state its thread's log folds to at its seq, and what differs is said
as a finding a person can act on.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentlog.events import (
    AgentlogError,
    EventStore,
    Snapshot,
    ThreadNotFoundError,
)
from agentlog.events.codec import encode_state
from agentlog.events.kinds import (
    Forked,
    RunStarted,
    StateUpdated,
)
from agentlog.events.store import (
    ContextEntry,
    CorruptSnapshotError,
    decode_context_refs,
    messages_of,
    snapshot_digest,
)
from agentlog.projections.edge import state_data, to_builtins
from agentlog.projections.fold import CONTEXT_FIELDS, Fold, gc_paused
from agentlog.projections.generic import library_reducer, open_state_class
from agentlog.projections.messages import Message
from agentlog.projections.names import current_name

__all__ = ["SnapshotFinding", "verify_snapshots"]
from agentlog.projections.state import AgentState
from agentlog.projections.views import _shares_context, state_type_name

# ---- checking -------------------------------------------------------------------------------

FindingKind = Literal[
    "hash", "content", "digest", "unreadable", "unanchored", "other_class", "unchecked"
]
"""What a snapshot finding says:

* "hash": the snapshot names a chain hash other than its record's (or a seq with no record):
  every reader refuses it;
* "content": its state differs from the state folded from the log at its seq (`path` says
  where it first differs; `message` whether readers believe it, or refuse it for its digest);
* "digest": it agrees with the log, not with the digest it was stored with: every reader
  refuses it;
* "unreadable": it, or the log up to it, cannot be read back;
* "unanchored" (no problem): it names no hash, so no reader ever uses it;
* "other_class" (no problem): it holds another state class than the one checked against;
* "unchecked" (no problem): fields that cannot be checked without the thread's state class.
"""

_PROBLEMS = frozenset({"hash", "content", "digest", "unreadable"})


@dataclass(frozen=True)
class SnapshotFinding:
    """One thing found about one snapshot of a thread; `message` says it in a sentence.

    Values quoted in `message` and `path` come from the log and the snapshot: show them
    inert.
    """

    thread_id: str
    seq: int
    kind: FindingKind
    message: str
    path: str | None = None

    @property
    def problem(self) -> bool:
        """True for a snapshot that is wrong ("hash", "content", "digest", "unreadable")."""
        return self.kind in _PROBLEMS

    def __str__(self) -> str:
        return self.message


@dataclass
class _Fields:
    """What the log says about a thread's custom fields, for checking without its class."""

    declared: dict[str, str | None]
    set_at: dict[str, int]

    def checkable(self, name: str, seq: int) -> bool:
        """Whether the open class reproduces field `name` exactly at `seq`."""
        if name in ("execution_meta", "context_summary"):
            return True
        if name == "context":
            reducer = self.declared.get("context")
            return reducer is None or library_reducer(reducer) is not None
        first = self.set_at.get(name)
        if first is None or first > seq or name not in self.declared:
            return False  # a default of the user's class, or reduced in a way not recorded
        reducer = self.declared[name]
        return reducer is None or library_reducer(reducer) is not None


async def _scan_fields(store: EventStore, thread_id: str, top: int) -> _Fields:
    fields = _Fields({}, {})
    bearing: list[int] = []
    for kind in (RunStarted.KIND, Forked.KIND, StateUpdated.KIND):  # FIELD_KINDS
        bearing += [s for s in await store.seqs_of_kind(thread_id, kind) if s <= top]
    for seq in sorted(bearing):
        async for record in store.read(thread_id, seq, seq):
            event = record.event
            if isinstance(event, RunStarted | Forked):
                for name, reducer in (event.fields or {}).items():
                    fields.declared.setdefault(name, reducer)
            names: Iterable[str] = ()
            if isinstance(event, Forked):
                names = event.state
            elif isinstance(event, StateUpdated):
                names = event.values
            for name in names:
                if name not in AgentState.model_fields and name not in CONTEXT_FIELDS:
                    fields.set_at.setdefault(name, seq)
    return fields


async def verify_snapshots(
    store: EventStore, thread_id: str, state_cls: type[AgentState] | None = None
) -> list[SnapshotFinding]:
    """Replay the thread once and compare each of its snapshots with the state folded from
    the log at the snapshot's seq, and with the digest it was stored with; the findings in
    seq order (none: every snapshot agrees).

    Linear in the thread: the log is read once, and a snapshot's context is compared where
    it differs from the previous snapshot's (a message two snapshots reference alike, held
    alike by the fold, is compared once), so a long thread with many snapshots costs its
    records plus the bytes of its snapshots, not its context once per snapshot.

    Without `state_cls` the thread is folded with the open class its log describes (see
    `agentlog.projections.generic`); fields that class cannot reproduce (reduced by a user's
    function,
    or never set in the log, so holding the user's default) are left out of the comparison
    and named in one "unchecked" finding. Only findings whose `problem` is true mean a
    snapshot is wrong. Raises `ThreadNotFoundError` for a thread with no records.
    """
    last = await store.last_seq(thread_id)
    if last == 0:
        raise ThreadNotFoundError(thread_id)
    seqs = await store.snapshot_seqs(thread_id)
    findings: list[SnapshotFinding] = []
    for seq in seqs:
        if not 1 <= seq <= last:
            findings.append(
                SnapshotFinding(
                    thread_id,
                    seq,
                    "hash",
                    f"the snapshot at seq {seq} names a point the thread does not have "
                    f"(records 1..{last}): no record anchors it",
                )
            )
    todo = [seq for seq in seqs if 1 <= seq <= last]
    if not todo:
        return findings
    fields: _Fields | None = None
    cls: type[AgentState]
    if state_cls is None:
        fields = await _scan_fields(store, thread_id, todo[-1])
        unrecorded = sorted(set(fields.set_at) - set(fields.declared))
        cls = open_state_class(fields.declared, unrecorded)
    else:
        cls = state_cls
    check = _Verifier(store, thread_id, cls, fields)
    pending = iter(todo)
    upcoming = next(pending, None)
    fold = check.fold
    try:
        with gc_paused():
            async for record in store.read(thread_id, 1, todo[-1]):
                fold.apply(record)
                carried = messages_of(record.event)
                if carried is not None:
                    check.carriers[record.seq] = bytes.fromhex(record.hash)
                    check.recent[record.seq] = carried
                while upcoming == record.seq:
                    findings += await check.snapshot()
                    upcoming = next(pending, None)
    except (AgentlogError, ValueError) as exc:
        findings.append(
            SnapshotFinding(
                thread_id,
                fold.seq + 1,
                "unreadable",
                f"the log cannot be folded past seq {fold.seq} to check the snapshots after "
                f"it ({type(exc).__name__}: {exc})",
            )
        )
    findings.sort(key=lambda f: f.seq)
    if check.skipped:
        names = ", ".join(sorted(check.skipped))
        findings.append(
            SnapshotFinding(
                thread_id,
                todo[-1],
                "unchecked",
                f"field(s) {names} were not compared: without the state class their values "
                "cannot be rebuilt from the log (a user's reducer, or the class's default); "
                "check again with the state class to cover them",
            )
        )
    return findings


@dataclass
class _Compared:
    """A referencing snapshot as it was compared: its references, the fold's context then,
    and how many of its first messages were found to be the fold's."""

    seq: int
    refs: list[Any]
    context: list[Message]
    agreed: int


class _Verifier:
    """The state of one `verify_snapshots` pass: the fold of the log, the chain hash of each
    record that carries messages (for the digests), the messages carried by the records
    read since the last snapshot, and what that snapshot was found to hold."""

    def __init__(
        self, store: EventStore, thread_id: str, cls: type[AgentState], fields: _Fields | None
    ) -> None:
        self.store = store
        self.thread_id = thread_id
        self.cls = cls
        self.fields = fields
        self.fold: Fold[Any] = Fold.new(cls)
        self.carriers: dict[int, bytes] = {}
        self.recent: dict[int, list[Any]] = {}
        self.last: _Compared | None = None
        self.skipped: set[str] = set()
        self.by_reference = _shares_context(cls)

    def finding(self, kind: FindingKind, message: str, path: str | None = None) -> SnapshotFinding:
        return SnapshotFinding(self.thread_id, self.fold.seq, kind, message, path)

    async def snapshot(self) -> list[SnapshotFinding]:
        """The findings about the snapshot at `fold.seq`, the fold being the log's state there.

        The snapshot is compared as readers see it: validated into the class (so a row written
        before a model gained a field reads with its default), then as exact builtins.
        """
        last, self.last = self.last, None
        try:
            return await self._snapshot(last)
        finally:
            self.recent.clear()

    async def _snapshot(self, last: _Compared | None) -> list[SnapshotFinding]:
        seq, fold, cls = self.fold.seq, self.fold, self.cls
        try:
            snapshot = await self.store.load_snapshot(
                self.thread_id, seq, resolve=False, check=False
            )
        except (AgentlogError, ValueError) as exc:
            return [self.finding("unreadable", f"the snapshot at seq {seq} cannot be read: {exc}")]
        if snapshot is None or snapshot.seq != seq:
            return []  # removed while being checked
        if not snapshot.hash:
            return [
                self.finding(
                    "unanchored",
                    f"the snapshot at seq {seq} names no chain hash, so no reader uses it",
                )
            ]
        if snapshot.hash != fold.hash:
            return [
                self.finding(
                    "hash",
                    f"the snapshot at seq {seq} names hash {snapshot.hash[:16]}..., but the "
                    f"record at that seq hashes to {fold.hash[:16]}...: every reader refuses it",
                )
            ]
        if self.fields is None and current_name(snapshot.state_type) != state_type_name(cls):
            return [
                self.finding(
                    "other_class",
                    f"the snapshot at seq {seq} holds a {snapshot.state_type!r}, not a "
                    f"{state_type_name(cls)!r}: readers of that class ignore it",
                )
            ]
        by_reference = snapshot.context_refs is not None and self.by_reference
        context_checked = self.fields is None or self.fields.checkable("context", seq)
        if snapshot.context_refs is not None and not by_reference:
            try:  # a context of another shape than a list of messages: compared whole
                snapshot = await self.store.load_snapshot(self.thread_id, seq, check=False)
            except (AgentlogError, ValueError) as exc:
                why = f"the snapshot at seq {seq} cannot be read: {exc}"
                return [self.finding("unreadable", why)]
            if snapshot is None or snapshot.seq != seq:
                return []
        try:
            digest = self.digest_of(snapshot)
            rest = snapshot.state
            if by_reference:
                rest = {k: v for k, v in rest.items() if k != "context"}
            found = state_data(cls.model_validate(rest))
        except CorruptSnapshotError as exc:
            return [self.finding("unreadable", f"the snapshot at seq {seq} cannot be read: {exc}")]
        except ValueError as exc:  # pydantic's ValidationError among them
            return [
                self.finding(
                    "unreadable",
                    f"the snapshot at seq {seq} does not validate as {cls.__name__} "
                    f"({str(exc).splitlines()[0]}): readers fold the log instead",
                )
            ]
        if by_reference:
            expected = state_data(fold.state.model_copy(update={"context": []}))
            expected.pop("context", None)
            found.pop("context", None)
        else:
            expected = state_data(fold.state)
        if self.fields is not None:
            names = set(expected) | set(snapshot.state)
            left_out = {name for name in names if not self.fields.checkable(name, seq)}
            self.skipped |= left_out
            expected = {k: v for k, v in expected.items() if k not in left_out}
            found = {k: v for k, v in found.items() if k not in left_out}
        difference = None
        if by_reference and context_checked:
            try:
                difference = await self.context(snapshot, last)
            except CorruptSnapshotError as exc:
                why = f"the snapshot at seq {seq} cannot be read: {exc}"
                return [self.finding("unreadable", why)]
        elif by_reference:
            self.skipped.add("context")
        if difference is None:
            difference = _difference(expected, found, "")
        stored = snapshot.digest
        if difference is not None:
            path, why = difference
            if not stored:
                belief = "readers do not use it (it was stored before snapshots had digests)"
            elif stored != digest.hex():
                belief = "readers refuse it (its digest is not its content's)"
            else:
                belief = "readers would believe it"
            return [
                self.finding(
                    "content",
                    f"the snapshot at seq {seq} differs from the state folded from the log: "
                    f"{why}; {belief}",
                    path,
                )
            ]
        if stored and stored != digest.hex():
            return [
                self.finding(
                    "digest",
                    f"the snapshot at seq {seq} agrees with the log but not with the digest "
                    "it was stored with: every reader refuses it (CorruptSnapshotError); take "
                    "a new one",
                )
            ]
        return []

    def digest_of(self, snapshot: Snapshot) -> bytes:
        """The digest the snapshot's content should carry (`snapshot_digest`), from the chain
        hashes this pass read."""
        anchor = bytes.fromhex(snapshot.hash)
        refs = snapshot.context_refs
        if refs is None:
            return snapshot_digest(anchor, encode_state(snapshot.state), None, ())
        if set(map(type, refs)) <= {int}:
            targets: Iterable[int] = sorted(set(itertools.accumulate(refs)))
        else:
            entries = decode_context_refs(refs, self.thread_id, snapshot.seq)
            targets = sorted({e[0] for e in entries if isinstance(e, tuple)})
        rest = {k: v for k, v in snapshot.state.items() if k != "context"}
        hashes = list(filter(None, map(self.carriers.get, targets)))
        return snapshot_digest(anchor, encode_state(rest), encode_state({"context": refs}), hashes)

    async def context(self, snapshot: Snapshot, last: _Compared | None) -> tuple[str, str] | None:
        """Where the snapshot's referenced context first differs from the fold's, and how;
        only the positions that changed since `last` are compared one by one."""
        refs = snapshot.context_refs or []
        context = list(self.fold.state.context)
        start = 0
        if last is not None:
            start = min(
                _common_prefix(refs, last.refs, operator.eq),
                _common_prefix(context, last.context, operator.is_),
                last.agreed,
            )
        if set(map(type, refs)) <= {int}:
            seqs = list(itertools.accumulate(refs))
            entries: list[ContextEntry] = [(seq, 0) for seq in seqs[start:]]
        else:
            entries = decode_context_refs(refs, self.thread_id, snapshot.seq)[start:]
        compared = _Compared(snapshot.seq, refs, context, start)
        self.last = compared
        carried = await self.messages({e[0] for e in entries if isinstance(e, tuple)})
        messages: list[Any] = []
        for entry in entries:  # every reference must lead to a message, as for a reader
            if isinstance(entry, dict):
                messages.append(entry)
                continue
            held = carried.get(entry[0])
            if held is None or not 0 <= entry[1] < len(held):
                what = "no record carrying messages" if held is None else "a shorter list"
                raise CorruptSnapshotError(
                    self.thread_id,
                    snapshot.seq,
                    f"it names message {entry[1]} of seq {entry[0]}, {what}",
                )
            messages.append(held[entry[1]])
        if len(refs) != len(context):
            return "context", f"context has {len(refs)} items, the log gives {len(context)}"
        for position, message in enumerate(messages, start):
            try:
                found = to_builtins(Message.model_validate(message))
            except ValueError as exc:
                return f"context[{position}]", (
                    f"context[{position}] is no message ({str(exc).splitlines()[0]})"
                )
            difference = _difference(to_builtins(context[position]), found, f"context[{position}]")
            if difference is not None:
                return difference
            compared.agreed = position + 1
        compared.agreed = len(context)
        return None

    async def messages(self, targets: set[int]) -> dict[int, list[Any]]:
        """The messages carried by the records at `targets`: those read since the last
        snapshot, the others read again (one by one, or as one stretch when many)."""
        found = {seq: self.recent[seq] for seq in targets if seq in self.recent}
        missing = sorted(targets.difference(found))
        if not missing:
            return found
        stretches = [(missing[0], missing[-1])] if len(missing) > 64 else [(s, s) for s in missing]
        wanted = set(missing)
        for low, high in stretches:
            async for record in self.store.read(self.thread_id, low, high):
                carried = messages_of(record.event)
                if record.seq in wanted and carried is not None:
                    found[record.seq] = carried
        return found


def _common_prefix(a: Sequence[Any], b: Sequence[Any], same: Any) -> int:
    """How many first items `a` and `b` share (`same` compares two items), in C-speed
    slices: each probe of the binary search is one comparison of two slices."""
    n = min(len(a), len(b))
    if all(map(same, a[:n], b[:n])):
        return n
    low, high = 0, n  # a[:low] and b[:low] agree; a[:high] and b[:high] do not
    while high - low > 1:
        middle = (low + high) // 2
        if all(map(same, a[low:middle], b[low:middle])):
            low = middle
        else:
            high = middle
    return low


def _difference(expected: Any, found: Any, path: str) -> tuple[str, str] | None:
    """Where two states of builtins first differ, and how; None when they are the same.

    Exact: 1, 1.0 and True differ, -0.0 is not 0.0, NaN equals NaN, dict order is ignored.
    """
    where = path or "the state"
    if type(expected) is not type(found):
        return where, (
            f"{where} is {_shown(found)} ({type(found).__name__}), the log gives "
            f"{_shown(expected)} ({type(expected).__name__})"
        )
    if isinstance(expected, dict):
        for key in expected:
            if key not in found:
                return f"{path}.{key}".lstrip("."), f"{where} lacks {key!r}"
        for key in found:
            if key not in expected:
                return f"{path}.{key}".lstrip("."), f"{where} holds {key!r}, the log does not"
        for key, value in expected.items():
            inner = _difference(value, found[key], f"{path}.{key}".lstrip("."))
            if inner is not None:
                return inner
        return None
    if isinstance(expected, list):
        if len(expected) != len(found):
            return where, f"{where} has {len(found)} items, the log gives {len(expected)}"
        for index, (a, b) in enumerate(zip(expected, found, strict=True)):
            inner = _difference(a, b, f"{path}[{index}]")
            if inner is not None:
                return inner
        return None
    if isinstance(expected, float):
        if math.isnan(expected) and math.isnan(found):
            return None
        if expected == found and math.copysign(1.0, expected) == math.copysign(1.0, found):
            return None
    elif expected == found:
        return None
    return where, f"{where} is {_shown(found)}, the log gives {_shown(expected)}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
