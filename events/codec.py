"""Encoding of events: MessagePack at rest, JSON for export, a SHA-256 chain per thread.

A stored row is `(thread_id, seq, run_id, actor, at, kind, version, payload, hash,
position)`. The hash is SHA-256 over the previous record's hash, the envelope
`[thread_id, seq, run_id, actor, at, kind, version, position]` as compact JSON, and the
payload bytes exactly as stored, so any altered byte, dropped record or swapped pair
breaks the chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

import msgspec

from .errors import (
    CorruptRecordError,
    InvalidAppendError,
    SchemaVersionError,
    UnknownEventKindError,
)
from .kinds import KINDS, BaseEvent, Event, kind_of
from .record import EventRecord

GENESIS_HASH = bytes(32)
"""The `prev` hash of a thread's first record."""

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

_encoder = msgspec.msgpack.Encoder()
_header_encoder = msgspec.json.Encoder()
_decoders = {kind: msgspec.msgpack.Decoder(cls) for kind, cls in KINDS.items()}
_raw_decoder = msgspec.msgpack.Decoder(dict[str, Any])
_upcasters: dict[tuple[str, int], Upcaster] = {}
_sha256 = hashlib.sha256


class Row(NamedTuple):
    """A record as stored, before decoding, in the column order of the stores."""

    thread_id: str
    seq: int
    run_id: str | None
    actor: str | None
    at: float
    kind: str
    version: int
    payload: bytes
    hash: bytes
    position: int


def register_upcaster(kind: str, from_version: int, upcaster: Upcaster) -> None:
    """Teach the decoder to lift a `kind` payload written at `from_version` one version up."""
    if kind not in KINDS:
        raise UnknownEventKindError(kind)
    _upcasters[(kind, from_version)] = upcaster


def unregister_upcaster(kind: str, from_version: int) -> None:
    """Forget an upcaster (for tests that register temporary ones)."""
    _upcasters.pop((kind, from_version), None)


def envelope_bytes(row_head: tuple[Any, ...]) -> bytes:
    """The canonical bytes of an envelope: compact JSON of its fields, UTF-8.

    JSON, so that anyone can rebuild them from an export with a standard library alone.
    """
    return _header_encoder.encode(row_head)


def chain_hash(prev: bytes, row_head: tuple[Any, ...], payload: bytes) -> bytes:
    """SHA-256 over the previous hash, the canonical envelope and the payload bytes."""
    h = _sha256(prev)
    h.update(envelope_bytes(row_head))
    h.update(payload)
    return h.digest()


class Encoded(NamedTuple):
    """An event as it will be stored, and as a reader will decode it, before it is chained."""

    kind: str
    version: int
    payload: bytes
    event: Event


def encode_payloads(thread_id: str, events: Sequence[Event]) -> list[Encoded]:
    """Encode events for storage; anything that cannot be stored is refused here, up front."""
    encoded: list[Encoded] = []
    for event in events:
        if not isinstance(event, BaseEvent):
            raise InvalidAppendError(
                f"cannot append {type(event).__name__} to thread {thread_id!r}: "
                "only event structs from events.kinds can be stored"
            )
        kind = kind_of(event)
        try:
            payload = _encoder.encode(event)
            # Structs do not check types when built: decoding the bytes back both checks
            # them and yields exactly the event every later reader will see.
            stored = cast(Event, _decoders[kind].decode(payload))
        except (TypeError, ValueError, OverflowError, msgspec.DecodeError) as exc:
            raise InvalidAppendError(
                f"cannot store {kind!r} on thread {thread_id!r}: {exc}; "
                "event fields must have their declared types and plain JSON-like values"
            ) from exc
        encoded.append(Encoded(kind, event.VERSION, payload, stored))
    return encoded


def chain_rows(
    thread_id: str,
    first_seq: int,
    prev_hash: bytes,
    encoded: Sequence[Encoded],
    run_id: str | None,
    actor: str | None,
    at: float,
    first_position: int,
) -> list[Row]:
    """Number encoded events from `first_seq` / `first_position`, each chained to the last."""
    rows: list[Row] = []
    for i, (kind, version, payload, _) in enumerate(encoded):
        seq, position = first_seq + i, first_position + i
        envelope = (thread_id, seq, run_id, actor, at, kind, version, position)
        digest = chain_hash(prev_hash, envelope, payload)
        rows.append(
            Row(thread_id, seq, run_id, actor, at, kind, version, payload, digest, position)
        )
        prev_hash = digest
    return rows


def decode_event(thread_id: str, seq: int, kind: str, version: int, payload: bytes) -> Event:
    """Decode one payload, upcasting it when it was written by an older version of its kind."""
    cls = KINDS.get(kind)
    if cls is None:
        raise UnknownEventKindError(kind, thread_id, seq)
    if version > cls.VERSION:
        raise SchemaVersionError(
            f"record seq {seq} of thread {thread_id!r} holds {kind!r} version {version}, "
            f"newer than this agentlog knows ({cls.VERSION}): upgrade agentlog to read it"
        )
    try:
        if version == cls.VERSION:
            return cast(Event, _decoders[kind].decode(payload))
        data = _raw_decoder.decode(payload)
        while version < cls.VERSION:
            upcaster = _upcasters.get((kind, version))
            if upcaster is None:
                raise SchemaVersionError(
                    f"record seq {seq} of thread {thread_id!r} holds {kind!r} version "
                    f"{version} and no upcaster lifts it to {version + 1}: register one "
                    "with events.register_upcaster"
                )
            data = upcaster(data)
            version += 1
        data["kind"] = kind
        return cast(Event, msgspec.convert(data, cls))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptRecordError(thread_id, seq, f"{kind} payload: {exc}") from exc


def record_of(row: Row, event: Event) -> EventRecord:
    """The public record of a stored row carrying `event`."""
    return EventRecord(
        thread_id=row.thread_id,
        seq=row.seq,
        position=row.position,
        run_id=row.run_id,
        actor=row.actor,
        at=row.at,
        kind=row.kind,
        version=row.version,
        event=event,
        hash=row.hash.hex(),
    )


def decode_row(row: Row) -> EventRecord:
    """Build the public record from a stored row."""
    return record_of(row, decode_event(row.thread_id, row.seq, row.kind, row.version, row.payload))


def encode_json(obj: Any) -> bytes:
    """JSON bytes of an event, record or snapshot, for export and for people."""
    return msgspec.json.encode(obj)


def encode_state(state: dict[str, Any]) -> bytes:
    """MessagePack bytes of a snapshot's state."""
    return _encoder.encode(state)


def decode_state(thread_id: str, seq: int, data: bytes) -> dict[str, Any]:
    """The state dict of a stored snapshot."""
    try:
        return _raw_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptRecordError(thread_id, seq, f"snapshot: {exc}") from exc
