"""Value objects of the log: the record envelope, snapshots and verification reports."""

from __future__ import annotations

from typing import Any

import msgspec

from agentlog.events.kinds import Event


class EventRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One committed event with its envelope.

    `seq` counts 1, 2, 3 ... within a thread with no gap; `position` orders every record of
    the store in commit order; `hash` (hex SHA-256) chains the record to its predecessor.
    """

    thread_id: str
    seq: int
    position: int
    run_id: str | None
    actor: str | None
    at: float
    kind: str
    version: int
    event: Event
    hash: str


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A thread's state as plain builtins, valid after the record `seq`.

    Two forms share this value. A whole-state snapshot (`context_refs` None) holds every
    field, the context's messages included. A referencing snapshot holds the context as
    `context_refs`: pointers to the records of the log whose payloads carry its messages
    (see `agentlog.events.store.encode_context_refs`), so it costs bytes per message, not per
    character. `EventStore.load_snapshot` resolves the references by default, so `state`
    then holds the whole state either way; with `resolve=False`, `state` lacks "context".
    """

    thread_id: str
    seq: int
    state: dict[str, Any]
    state_type: str = ""
    at: float = 0.0
    hash: str = ""
    """The chain hash of record `seq` (hex): a reader uses the snapshot only when it matches."""
    context_refs: list[Any] | None = None
    """The context as encoded references into the thread's records, or None (whole state)."""
    digest: str = ""
    """The content hash (hex) the snapshot was stored with
    (`agentlog.events.store.snapshot_digest`):
    over its chain hash, its bytes and the chain hash of every record its context references.
    `load_snapshot` fills it only once it has recomputed it from what it read; a reader uses
    a snapshot only then. Given to `save_snapshot`, it must be the content's (a snapshot
    loaded and then changed is refused)."""
    record_hashes: dict[int, bytes] | None = None
    """The chain hash of each record the context references, by seq: as `load_snapshot`
    checked it against the record's bytes, or, given to `save_snapshot`, as the writer knows
    it from the commits it followed (the store pins those in the digest instead of reading
    the records back; a wrong one makes every load refuse the snapshot)."""


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of re-computing a thread's hash chain.

    `ok` is false when a record's stored hash does not match its bytes, a seq is missing or
    out of order, or the thread's head does not match its last record; `first_bad_seq` and
    `problem` then say where and what.
    """

    thread_id: str
    ok: bool
    records_checked: int
    head_hash: str | None = None
    first_bad_seq: int | None = None
    problem: str | None = None
    pruned_through: int = 0
    """The seq records were pruned through (retention): the chain checked starts after it."""
