"""A snapshot's context stored as references into the log: the encoding and its checks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from agentlog.events.errors import CorruptRecordError, StoreError

ContextEntry = tuple[int, int] | dict[str, Any]
"""One message of a snapshot's context: `(seq, index)` of the message in the list that record
`seq` carries (see `messages_of`), or the message's builtins when no record carries it as is."""


class CorruptSnapshotError(CorruptRecordError):
    """A stored snapshot cannot be read back: its bytes or its references are damaged."""

    def __init__(self, thread_id: str, seq: int, why: str) -> None:
        StoreError.__init__(
            self,
            f"the snapshot at seq {seq} of thread {thread_id!r} is damaged ({why}); the log "
            "itself may be intact: read the thread without snapshots (use_snapshots=False), "
            "run `agentlog verify --snapshots` to list every bad snapshot, and take a new one",
        )
        self.thread_id = thread_id
        self.seq = seq


def encode_context_refs(entries: Iterable[ContextEntry]) -> list[Any]:
    """The stored form of a context: per message, the distance in seqs from the previous
    reference (an int when the index is 0, else `[distance, index]`), or an inline message.

    A context of N messages referenced in order costs about N bytes of MessagePack.
    """
    encoded: list[Any] = []
    prev = 0
    for entry in entries:
        if isinstance(entry, dict):
            encoded.append(entry)
            continue
        seq, index = entry
        encoded.append(seq - prev if index == 0 else [seq - prev, index])
        prev = seq
    return encoded


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def decode_context_refs(encoded: object, thread_id: str, seq: int) -> list[ContextEntry]:
    """The entries `encode_context_refs` stored, each reference within records 1..`seq`;
    `CorruptSnapshotError` for anything else."""
    if not isinstance(encoded, list):
        raise CorruptSnapshotError(thread_id, seq, "its context is not a list")
    entries: list[ContextEntry] = []
    add = entries.append
    prev = 0
    for position, item in enumerate(encoded):
        kind = type(item)
        if kind is int:
            target, index = prev + item, 0
        elif kind is dict:
            add(item)
            continue
        elif kind is list and len(item) == 2 and type(item[0]) is int and type(item[1]) is int:
            target, index = prev + item[0], item[1]
        else:
            raise CorruptSnapshotError(
                thread_id, seq, f"context entry {position} is {item!r:.60}, not a reference"
            )
        if not 0 < target <= seq or index < 0:
            raise CorruptSnapshotError(
                thread_id,
                seq,
                f"context entry {position} points to message {index} of seq {target}, "
                f"outside records 1..{seq}",
            )
        add((target, index))
        prev = target
    return entries


def ref_targets(entries: Sequence[ContextEntry]) -> list[int]:
    """The seqs the references among `entries` point to, ascending, each once."""
    return sorted({entry[0] for entry in entries if type(entry) is tuple})
