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
from typing import Any, NamedTuple, NoReturn

import msgspec

from agentlog.events.errors import (
    CorruptRecordError,
    InvalidAppendError,
    SchemaVersionError,
    UnknownEventKindError,
)
from agentlog.events.kinds import (
    KINDS,
    BaseEvent,
    Event,
    MessageAppended,
    Resumed,
    RunCompleted,
    RunFailed,
    StepAdvanced,
    Stopped,
    StopRequested,
    ToolCallFinished,
    kind_of,
)
from agentlog.events.record import EventRecord
from agentlog.events.sealing import Keys, Sealer, open_sealed

GENESIS_HASH = bytes(32)
"""The `prev` hash of a thread's first record."""

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

_encoder = msgspec.msgpack.Encoder()
_header_encoder = msgspec.json.Encoder()
_decoders = {kind: msgspec.msgpack.Decoder(cls) for kind, cls in KINDS.items()}
_raw_decoder = msgspec.msgpack.Decoder(dict[str, Any])
_upcasters: dict[tuple[str, int], Upcaster] = {}


class _MessageId(msgspec.Struct, gc=False):
    message_id: str | int


class _AppendedId(msgspec.Struct, gc=False):
    message: _MessageId


_appended = msgspec.msgpack.Decoder(MessageAppended)
_appended_id = msgspec.msgpack.Decoder(_AppendedId)


def stored_message(payload: bytes) -> dict[str, Any]:
    """The message (builtins) of a plain `message_appended` payload of the current version,
    as `EventStore.load_snapshot(..., stored=True)` hands such a record's message out."""
    return _appended.decode(payload).message


def stored_message_id(payload: bytes) -> str | int:
    """The `message_id` of the message of such a payload, decoding nothing else."""
    return _appended_id.decode(payload).message.message_id


def _unchanged(payload: dict[str, Any]) -> dict[str, Any]:
    """Lift a payload whose new version only added fields whose defaults give its meaning."""
    return payload


_BUILT_IN_UPCASTERS: dict[tuple[str, int], Upcaster] = {
    (Stopped.KIND, 1): _unchanged,  # `when` added; version 1 stops were all "before"
    (Stopped.KIND, 2): _unchanged,  # `duration_ms` added; None: not measured
    (StepAdvanced.KIND, 1): _unchanged,  # `duration_ms` added; None: not measured
    (RunCompleted.KIND, 1): _unchanged,  # `duration_ms` added; None: not measured
    (RunFailed.KIND, 1): _unchanged,  # `status`, `duration_ms` added; version 1 was "failed"
    (ToolCallFinished.KIND, 1): _unchanged,  # `message`, `update`, `goto` added
    (StopRequested.KIND, 1): _unchanged,  # `between_nodes` added; version 1 cut nodes short
    (Resumed.KIND, 1): _unchanged,  # `node` added; None: not recorded
}
_upcasters.update(_BUILT_IN_UPCASTERS)
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
    """Forget an upcaster (for tests that register temporary ones); built-in ones stay."""
    if (kind, from_version) not in _BUILT_IN_UPCASTERS:
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
    sealer: Sealer | None = None
    """Seals the payload with its subject's key once its seq is known (None: stored plain)."""


def encode_payloads(thread_id: str, events: Sequence[Event]) -> list[Encoded]:
    """Encode events for storage; anything that cannot be stored is refused here, up front."""
    encoded: list[Encoded] = []
    for event in events:
        if not isinstance(event, BaseEvent):
            raise InvalidAppendError(
                f"cannot append {type(event).__name__} to thread {thread_id!r}: "
                "only event structs from agentlog.events.kinds can be stored"
            )
        kind = kind_of(event)
        try:
            payload = _encoder.encode(event)
            # Structs do not check types when built: decoding the bytes back both checks
            # them and yields exactly the event every later reader will see.
            stored = _decoders[kind].decode(payload)
        except RecursionError as exc:
            raise UnstorableValueError(
                f"{kind!r} on thread {thread_id!r}", "a value", TOO_DEEP
            ) from exc
        except (TypeError, ValueError, OverflowError, msgspec.DecodeError) as exc:
            found = _unstorable_field(event)
            if found is not None:
                raise UnstorableValueError(
                    f"{kind!r} on thread {thread_id!r}", found[0], found[1]
                ) from exc
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
    actor: str | tuple[str | None, ...] | None,
    at: float,
    first_position: int,
) -> list[Row]:
    """Number encoded events from `first_seq` / `first_position`, each chained to the last.

    `actor` is the one who wrote them all, or a tuple naming each event's own."""
    rows: list[Row] = []
    for i, (kind, version, payload, _, sealer) in enumerate(encoded):
        seq, position = first_seq + i, first_position + i
        who = actor[i] if isinstance(actor, tuple) else actor
        if sealer is not None:
            payload = sealer.seal(thread_id, seq, kind, version, payload)
        envelope = (thread_id, seq, run_id, who, at, kind, version, position)
        digest = chain_hash(prev_hash, envelope, payload)
        rows.append(Row(thread_id, seq, run_id, who, at, kind, version, payload, digest, position))
        prev_hash = digest
    return rows


def decode_event(
    thread_id: str, seq: int, kind: str, version: int, payload: bytes, keys: Keys | None = None
) -> Event:
    """Decode one payload, upcasting it when it was written by an older version of its kind.

    A sealed payload (`agentlog.events.sealing`) is opened with its subject's key from `keys`;
    without it, its personal fields read as erased (or as sealed, when no key is at hand)."""
    cls = KINDS.get(kind)
    if cls is None:
        raise UnknownEventKindError(kind, thread_id, seq)
    if version > cls.VERSION:
        raise SchemaVersionError(
            f"record seq {seq} of thread {thread_id!r} holds {kind!r} version {version}, "
            f"newer than this agentlog knows ({cls.VERSION}): upgrade agentlog to read it"
        )
    data: dict[str, Any] | None = None
    if payload[:1] == b"\xc1":
        opened = open_sealed(thread_id, seq, kind, version, payload, keys)
        if isinstance(opened, bytes):
            payload = opened
        else:
            data = opened
    try:
        if data is None and version == cls.VERSION:
            return _decoders[kind].decode(payload)
        if data is None:
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
        return msgspec.convert(data, cls)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptRecordError(thread_id, seq, f"{kind} payload: {exc}") from exc


def record_of(row: Row, event: Event) -> EventRecord:
    """The public record of a stored row carrying `event`."""
    thread_id, seq, run_id, actor, at, kind, version, _, digest, position = row
    return EventRecord(
        thread_id=thread_id, seq=seq, position=position, run_id=run_id, actor=actor, at=at,
        kind=kind, version=version, event=event, hash=digest.hex(),
    )  # fmt: skip


def decode_row(row: Row, keys: Keys | None = None) -> EventRecord:
    """Build the public record from a stored row (sealed fields opened with `keys`)."""
    event = decode_event(row.thread_id, row.seq, row.kind, row.version, row.payload, keys)
    return record_of(row, event)


def encode_json(obj: Any) -> bytes:
    """JSON bytes of an event, record or snapshot, for export and for people."""
    return msgspec.json.encode(obj)


BIG_INT_EXT = 1
"""MessagePack extension code of a snapshot int beyond 64 bits: signed, big-endian bytes."""

INT_RANGE = (-(2**63), 2**64 - 1)
"""The ints MessagePack stores natively; events refuse any other, snapshots use an extension."""


TOO_DEEP = (
    "nests lists and dicts deeper than the codec can follow (Python's recursion limit, "
    "about 1000 levels): flatten it"
)


class UnstorableValueError(InvalidAppendError):
    """A value has no exact MessagePack form, so it was refused before anything was written."""

    def __init__(self, where: str, path: str, why: str) -> None:
        self.path = path
        super().__init__(f"cannot store {where}: {path} {why}")


def find_unstorable(
    value: Any, path: str = "value", *, big_ints: bool = False
) -> tuple[str, str] | None:
    """Where `value` holds something MessagePack cannot store exactly, and why; None if nothing.

    Stored exactly: None, bool, int in `INT_RANGE` (any int when `big_ints`), float (NaN,
    infinities and -0.0 included), valid Unicode str, bytes, and dicts and lists of these.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return path, (
                f"is a str holding a lone surrogate ({value[exc.start]!r} at index {exc.start}), "
                "which is not valid Unicode: fix the text, or store raw data as bytes"
            )
        return None
    if isinstance(value, bool | float | bytes | bytearray | memoryview) or value is None:
        return None
    if isinstance(value, int):
        if big_ints or INT_RANGE[0] <= value <= INT_RANGE[1]:
            return None
        return path, (
            f"is an int of {value.bit_length()} bits, outside the 64-bit range the log stores "
            "(-2**63 to 2**64-1): store it as a str and convert it back in the field's validator"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            found = find_unstorable(key, f"{path} key {key!r}", big_ints=big_ints)
            found = found or find_unstorable(item, f"{path}[{key!r}]", big_ints=big_ints)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = find_unstorable(item, f"{path}[{index}]", big_ints=big_ints)
            if found is not None:
                return found
        return None
    try:
        _encoder.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:
        return path, (
            f"is of type {type(value).__name__}, which the log cannot store ({exc}): "
            "stored values must be plain JSON-like builtins (dict, list, str, int, float, "
            "bool, None) or bytes; convert it first"
        )
    return None


def _unstorable_field(event: BaseEvent) -> tuple[str, str] | None:
    """The first field path of `event` holding a value MessagePack cannot store exactly."""
    for name in event.__struct_fields__:
        found = find_unstorable(getattr(event, name), name)
        if found is not None:
            return found
    return None


def _big_ints_as_ext(value: Any) -> Any:
    """A copy of `value` with every int beyond 64 bits wrapped in the `BIG_INT_EXT` extension."""
    if isinstance(value, int) and not isinstance(value, bool):
        if INT_RANGE[0] <= value <= INT_RANGE[1]:
            return value
        size = value.bit_length() // 8 + 1  # one spare bit for the sign
        return msgspec.msgpack.Ext(BIG_INT_EXT, value.to_bytes(size, "big", signed=True))
    if isinstance(value, dict):
        return {key: _big_ints_as_ext(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_big_ints_as_ext(item) for item in value]
    return value


def _state_ext(code: int, data: memoryview) -> Any:
    if code != BIG_INT_EXT:
        raise ValueError(f"unknown MessagePack extension code {code}")
    return int.from_bytes(data, "big", signed=True)


_state_decoder = msgspec.msgpack.Decoder(dict[str, Any], ext_hook=_state_ext)


def encode_state(state: dict[str, Any]) -> bytes:
    """MessagePack bytes of a snapshot's state, every value exact.

    NaN, infinities, -0.0 and bytes are native MessagePack; an int beyond 64 bits (a reducer
    can sum past it) is kept in the `BIG_INT_EXT` extension. Anything else without an exact
    form is refused with `UnstorableValueError` naming where it is.
    """
    try:
        return _encoder.encode(state)
    except RecursionError as exc:
        raise UnstorableValueError("a snapshot", "state", TOO_DEEP) from exc
    except OverflowError:
        try:
            return _encoder.encode(_big_ints_as_ext(state))
        except (TypeError, ValueError, OverflowError) as exc:
            _refuse_state(state, exc)
    except (TypeError, ValueError) as exc:
        _refuse_state(state, exc)


def _refuse_state(state: dict[str, Any], exc: Exception) -> NoReturn:
    found = find_unstorable(state, "state", big_ints=True) or (
        "state",
        f"cannot be encoded ({exc})",
    )
    raise UnstorableValueError("a snapshot", found[0], found[1]) from exc


def decode_state(thread_id: str, seq: int, data: bytes) -> dict[str, Any]:
    """The state dict of a stored snapshot, with the exact values `encode_state` was given."""
    try:
        return _state_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError) as exc:
        raise CorruptRecordError(thread_id, seq, f"snapshot: {exc}") from exc
