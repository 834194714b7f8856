"""A referencing snapshot's context read back: the records it names, checked and resolved."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec

from agentlog.events.codec import GENESIS_HASH, Row, decode_event
from agentlog.events.errors import ChainBrokenError, CorruptRecordError
from agentlog.events.kinds import (
    ContextSummarized,
    Event,
    Forked,
    MessageAppended,
    MessageReplaced,
    MessagesReplaced,
)
from agentlog.events.sealing import SEALED_PREFIX, Keys
from agentlog.events.snapshot_refs import ContextEntry, CorruptSnapshotError

Linked = tuple[int, str | None, str | None, float, str, int, int, bytes, bytes, bytes | None]
"""A stored record that carries messages, flat, as a store's `_fetch_carriers` reads it:
`(seq, run_id, actor, at, kind, version, position, payload, hash, prev)`, the first seven
its envelope but for the thread id (which the caller knows), `prev` the chain hash of the
record before it (None when there is none: the first record, or a record missing). One tuple
per record, no thread id in it: the first read of a past state reads thousands of them."""

CHECKED_ROWS_KEPT = 20_000
"""Rows a store remembers having checked against their hash (`check_linked`): `state_at`
keeps as many messages by default."""

_header = msgspec.json.Encoder().encode  # envelope_bytes, without a call per record
_sha256 = hashlib.sha256


def check_linked(
    thread_id: str, linked: Sequence[Linked], seen: dict[tuple[str, int], Linked] | None = None
) -> None:
    """Check each of `linked`'s bytes against its chain hash (from the hash of the record
    before it): `ChainBrokenError` naming the first that does not match.

    `seen` holds rows checked before, exactly as they were read: a row read again with the
    very same bytes (a comparison, no hashing) is not hashed again; any change of its bytes
    is checked anew.
    """
    known: dict[tuple[str, int], Linked] = {} if seen is None else seen
    get = known.get
    kept: dict[tuple[str, int], Linked] = {}
    for item in linked:
        seq = item[0]
        key = (thread_id, seq)
        if get(key) == item:
            continue
        prev = item[9]
        if seq == 1:
            prev = GENESIS_HASH
        elif prev is None:
            raise ChainBrokenError(thread_id, seq - 1, "the record is missing")
        h = _sha256(prev)
        h.update(_header((thread_id, *item[:7])))
        h.update(item[7])
        if h.digest() != item[8]:
            raise ChainBrokenError(thread_id, seq, "its bytes do not match its hash")
        kept[key] = item
    if seen is not None and kept:
        if len(seen) + len(kept) > CHECKED_ROWS_KEPT:
            seen.clear()
        seen.update(kept)


def sealed_rows(thread_id: str, linked: Sequence[Linked]) -> list[Row]:
    """The rows of `linked` whose payload is sealed (what needs a key to read)."""
    return [
        Row(thread_id, *item[:6], item[7], item[8], item[6])
        for item in linked
        if item[7][:1] == SEALED_PREFIX
    ]


def messages_of(event: Event) -> list[Any] | None:
    """The messages (builtins) an event carries in the order a snapshot counts them, or None
    for a kind that carries none."""
    if isinstance(event, MessageAppended | MessageReplaced):
        return [event.message]
    if isinstance(event, MessagesReplaced):
        return list(event.messages)
    if isinstance(event, ContextSummarized):
        return list(event.messages or ())
    if isinstance(event, Forked):
        context = event.state.get("context")
        return list(context) if isinstance(context, list) else []
    return None


_CARRIERS: dict[str, Any] = {
    str(kind.__struct_config__.tag): (kind, msgspec.msgpack.Decoder(kind))
    for kind in (MessageAppended, MessageReplaced, MessagesReplaced, ContextSummarized, Forked)
}


_APPENDED = _CARRIERS[MessageAppended.KIND][1]
_APPENDED_KIND = MessageAppended.KIND


def _carried(
    thread_id: str, seq: int, kind: str, version: int, payload: bytes, keys: Keys | None = None
) -> list[Any]:
    """The messages a stored record carries (decoded as `decode_event` would)."""
    carrier = _CARRIERS.get(kind)
    if carrier is not None and version == carrier[0].VERSION and payload[:1] != SEALED_PREFIX:
        try:
            event = carrier[1].decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise CorruptRecordError(thread_id, seq, f"{kind} payload: {exc}") from exc
    else:
        event = decode_event(thread_id, seq, kind, version, payload, keys)
    messages = messages_of(event)
    return [] if messages is None else messages


def context_messages(
    thread_id: str,
    seq: int,
    entries: Sequence[ContextEntry],
    linked: Sequence[Linked],
    keys: Keys | None,
    payloads: bool = False,
) -> list[Any]:
    """The messages `entries` name, from `linked` (the records they point to), each record
    decoded once (with `payloads`, a plain `message_appended` one not at all)."""
    carried: dict[int, Any] = {}
    decode, current = _APPENDED.decode, MessageAppended.VERSION
    row_seq = 0
    try:
        for item in linked:
            row_seq, kind, version, payload = item[0], item[4], item[5], item[7]
            if kind == _APPENDED_KIND and version == current and payload[:1] != SEALED_PREFIX:
                carried[row_seq] = (payload if payloads else decode(payload).message,)
            else:
                carried[row_seq] = _carried(thread_id, row_seq, kind, version, payload, keys)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptRecordError(thread_id, row_seq, f"message_appended payload: {exc}") from exc
    try:
        return [
            entry if type(entry) is dict else carried[entry[0]][entry[1]]  # type: ignore[index]
            for entry in entries
        ]
    except (KeyError, IndexError, TypeError):
        pass
    for entry in entries:  # say which reference is wrong
        if isinstance(entry, tuple):
            target, index = entry
            messages = carried.get(target)
            if messages is None or index >= len(messages):
                held = (
                    "which is no record carrying messages"
                    if messages is None
                    else f"a record carrying {len(messages)}"
                )
                raise CorruptSnapshotError(
                    thread_id, seq, f"it names message {index} of seq {target}, {held}"
                )
    raise CorruptSnapshotError(thread_id, seq, "its context cannot be resolved")
