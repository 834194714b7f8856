"""Crypto-shredding: a data subject's personal fields sealed with a key of its own.

A thread tagged with a subject (`agentlog.events.keystore.tag_thread`) has the personal fields
of its records (message contents, tool arguments and results, run input and resume values,
custom state fields marked personal) stored sealed: the record's payload as written is

    0xC1 + MessagePack [1, subject, nonce, ciphertext, skeleton]

where `ciphertext` is AES-GCM of the plain payload under the subject's key, with the record's
thread, seq, kind and version (and the subject) as associated data, so a ciphertext moved to
another row does not open; `skeleton` is the payload with every personal field blanked, what
a reader sees once the key is gone. 0xC1 is the one byte MessagePack never uses, so a sealed
payload is never mistaken for a plain one. The chain hash covers the sealed bytes: erasing a
subject destroys its key and changes no record, so `verify` holds before and after.

Reading opens a sealed payload with the subject's key when the key store still has it; when
the subject was erased its personal fields read "erased on DATE by WHO".
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from agentlog.events.errors import CorruptRecordError, InvalidArgumentError, StoreError
from agentlog.events.kinds import (
    ContextSummarized,
    Forked,
    InterruptRaised,
    MessageAppended,
    MessageReplaced,
    MessagesReplaced,
    Resumed,
    RunFailed,
    RunStarted,
    StateUpdated,
    ToolCallFinished,
    ToolCallStarted,
    TriggerAccepted,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SEALED = 0xC1
"""The first byte of a sealed payload (a byte MessagePack never writes)."""
SEALED_PREFIX = bytes([SEALED])
FORMAT = 1
NONCE_BYTES = 12
KEY_BYTES = 32
MASTER_KEY_ENV = "AGENTLOG_MASTER_KEY"
MASTER_KEY_FILE_ENV = "AGENTLOG_MASTER_KEY_FILE"
NO_KEY = "sealed (the subject's key is not available here)"

_SUBJECT = re.compile(r"[A-Za-z0-9._:@+-]{1,200}")
_encode = msgspec.msgpack.encode
_raw = msgspec.msgpack.Decoder(dict[str, Any])
_sealed = msgspec.msgpack.Decoder(tuple[int, str, bytes, bytes, bytes])
_aad = msgspec.json.Encoder()

PERSONAL_FIELDS: set[str] = set()
"""Names of custom state fields whose values are personal (`mark_personal`)."""


class SealingError(StoreError):
    """Personal data could not be sealed or opened; the message says what to do."""


class MasterKeyMissingError(SealingError):
    """No master key is configured, so no subject key can be made or read."""


class SealBrokenError(CorruptRecordError):
    """A sealed payload does not open under its row: moved from another row, or altered."""


@dataclass(frozen=True)
class Erasure:
    """A subject whose key was destroyed: when, by whom, why."""

    subject: str
    at: float
    by: str
    reason: str

    @property
    def mark(self) -> str:
        """What a reader sees in place of each personal field."""
        day = time.strftime("%Y-%m-%d", time.gmtime(self.at))
        return f"erased on {day} by {self.by}"


SubjectKey = bytes | Erasure
"""A subject's data key (32 bytes), or the record that it was destroyed."""
Keys = Mapping[str, SubjectKey]


class KeyStore(Protocol):
    """Where subject keys live (a table of the database by default; a KMS can stand in).

    Keys handed out and taken in are the plain 32-byte data keys: wrapping them under a master
    key is the store's business."""

    async def create(self, subject: str) -> bytes:
        """The subject's data key, made and stored durably the first time it is asked for;
        `SubjectErasedError` when the subject was erased (its data is never sealed again)."""

    async def get(self, subjects: set[str]) -> dict[str, SubjectKey]:
        """The key, or the erasure, of each subject known (unknown ones are left out)."""

    async def destroy(self, erasure: Erasure) -> bool:
        """Destroy the key for good, durably, keeping `erasure` in its place; False when the
        subject was already erased."""


class SubjectErasedError(SealingError, InvalidArgumentError):
    """A write was asked for a subject that was erased: nothing was written."""

    def __init__(self, erasure: Erasure) -> None:
        super().__init__(
            f"subject {erasure.subject!r} was {erasure.mark} ({erasure.reason}): its key is "
            "gone, so nothing more can be stored for it; tag new data with a new subject id"
        )
        self.erasure = erasure


def check_subject(subject: object) -> str:
    """A subject id: 1 to 200 letters, digits or `._:@+-`; anything else is refused."""
    if not isinstance(subject, str) or not _SUBJECT.fullmatch(subject):
        raise InvalidArgumentError(
            f"a data subject is 1 to 200 letters, digits or '._:@+-', got {subject!r:.80}: "
            "use a stable id of the person, such as 'user-42' or an e-mail address"
        )
    return subject


def mark_personal(*fields: str) -> None:
    """Declare custom state fields personal: on a tagged thread their values are sealed."""
    for name in fields:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a personal field is named by a str, got {name!r}")
        PERSONAL_FIELDS.add(name)


# ---- the master key and wrapping --------------------------------------------------------------


def _aesgcm(key: bytes) -> AESGCM:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - the extra is a dependency of sealing
        raise SealingError(
            "sealing personal data needs the 'cryptography' package: pip install 'agentlog[crypto]'"
        ) from exc
    return AESGCM(key)


def load_master_key(environ: Mapping[str, str] | None = None) -> bytes:
    """The master key: `AGENTLOG_MASTER_KEY` (32 random bytes, URL-safe base64), or the file
    `AGENTLOG_MASTER_KEY_FILE` names (the same text); `MasterKeyMissingError` otherwise."""
    env = os.environ if environ is None else environ
    text, where = env.get(MASTER_KEY_ENV), MASTER_KEY_ENV
    if not text and env.get(MASTER_KEY_FILE_ENV):
        where = env[MASTER_KEY_FILE_ENV]
        try:
            with open(where, encoding="ascii") as file:
                text = file.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise MasterKeyMissingError(f"cannot read the master key file {where}: {exc}") from exc
    if not text:
        raise MasterKeyMissingError(
            f"personal data of a subject is sealed under a master key: set {MASTER_KEY_ENV} to "
            '32 random bytes in URL-safe base64 (python -c "import os, base64; '
            'print(base64.urlsafe_b64encode(os.urandom(32)).decode())"), or name a file '
            f"holding it in {MASTER_KEY_FILE_ENV}"
        )
    try:
        key = base64.urlsafe_b64decode(text.strip().encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise MasterKeyMissingError(
            f"the master key in {where} is not 32 bytes in URL-safe base64: make a new one "
            "(base64.urlsafe_b64encode(os.urandom(32)))"
        )
    return key


def _wrap_aad(subject: str) -> bytes:
    return b"agentlog subject key\0" + subject.encode()


def wrap_key(master: bytes, subject: str, key: bytes) -> bytes:
    """`key` sealed under the master key, bound to its subject."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + _aesgcm(master).encrypt(nonce, key, _wrap_aad(subject))


def unwrap_key(master: bytes, subject: str, wrapped: bytes) -> bytes:
    """The data key `wrap_key` sealed; `SealingError` under another master key."""
    try:
        return _aesgcm(master).decrypt(
            wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], _wrap_aad(subject)
        )
    except Exception as exc:
        raise SealingError(
            f"the key of subject {subject!r} does not open under this master key: it was "
            f"wrapped under another one; set {MASTER_KEY_ENV} to the key the store was used with"
        ) from exc


def new_key() -> bytes:
    """A fresh random data key."""
    return os.urandom(KEY_BYTES)


# ---- what is personal in each kind, as raw payload dicts ------------------------------------

_MESSAGE_KEEP = ("message_id", "role", "delta", "timestamp", "usages")


_CALL_KEEP = ("type", "id", "name", "tool_type")
_RESULT_KEEP = ("type", "call_id", "is_error", "status")


def _block(block: Any, mark: str) -> Any:
    """A content block blanked: a tool call keeps its id and name (its arguments read
    `mark`), a tool result its call id and status (its output reads `mark`), so the calls
    and their answers still pair up; any other block becomes the text `mark`."""
    kind = block.get("type") if isinstance(block, dict) else None
    if kind in ("tool_call", "remote_tool_call"):
        return {**{k: block[k] for k in _CALL_KEEP if k in block}, "args": {"erased": mark}}
    if kind == "tool_result":
        return {**{k: block[k] for k in _RESULT_KEEP if k in block}, "output": mark}
    return {"type": "text", "text": mark}


def _message(message: Any, mark: str) -> Any:
    if not isinstance(message, dict):
        return message
    kept = {k: message[k] for k in _MESSAGE_KEEP if k in message}
    content = message.get("content")
    blocks = [_block(b, mark) for b in content] if isinstance(content, list) else []
    texts = [b for b in blocks if b.get("type") == "text"]
    others = [b for b in blocks if b.get("type") != "text"]
    return {**kept, "content": ([texts[0]] if texts else [{"type": "text", "text": mark}]) + others}


def _messages(messages: Any, mark: str) -> Any:
    return [_message(m, mark) for m in messages] if isinstance(messages, list) else messages


def _fields(values: Any, mark: str) -> Any:
    if not isinstance(values, dict):
        return values
    return {k: (mark if k in PERSONAL_FIELDS else v) for k, v in values.items()}


def _state(state: Any, mark: str) -> Any:
    if not isinstance(state, dict):
        return state
    out = _fields(state, mark)
    if "context" in out:
        out["context"] = _messages(out["context"], mark)
    if isinstance(out.get("context_summary"), str):
        out["context_summary"] = mark
    return out


def _erased_dict(value: Any, mark: str) -> Any:
    return None if value is None else {"erased": mark}


def _text(value: Any, mark: str) -> Any:
    return None if value is None else mark


_Redact = Callable[[Any, str], Any]
PERSONAL: dict[str, dict[str, _Redact]] = {
    MessageAppended.KIND: {"message": _message},
    MessageReplaced.KIND: {"message": _message},
    MessagesReplaced.KIND: {"messages": _messages},
    ContextSummarized.KIND: {"summary": _text, "messages": _messages},
    ToolCallStarted.KIND: {"args": lambda v, m: {"erased": m}},
    ToolCallFinished.KIND: {
        "output": _text, "error": _text, "message": _message, "update": _erased_dict,
    },
    StateUpdated.KIND: {"values": _fields},
    RunStarted.KIND: {"input": _text},
    RunFailed.KIND: {"message": _text},  # an error's text often quotes what it was given
    TriggerAccepted.KIND: {"input": _text},
    Resumed.KIND: {"value": _text},
    InterruptRaised.KIND: {"data": _erased_dict},
    Forked.KIND: {"state": _state},
}  # fmt: skip
"""Per kind: each personal field and how it reads once blanked."""


SNAPSHOT = "snapshot"
"""The kind a sealed snapshot's state is bound to (a state dict, redacted as a fork's)."""


def redact(data: dict[str, Any], mark: str, kind: str | None = None) -> dict[str, Any]:
    """A payload dict (or, for `SNAPSHOT`, a state dict) with every personal field of its
    kind replaced by `mark`."""
    if kind == SNAPSHOT:
        return dict(_state(data, mark))
    fields = PERSONAL.get(str(data.get("kind")), {})
    return {k: (fields[k](v, mark) if k in fields else v) for k, v in data.items()}


# ---- sealing and opening ------------------------------------------------------------------------


def _record_aad(thread_id: str, seq: int, kind: str, version: int, subject: str) -> bytes:
    return _aad.encode(["agentlog sealed record", thread_id, seq, kind, version, subject])


class Sealer:
    """Seals the payloads of one subject's records under its key (one cipher for all)."""

    def __init__(self, subject: str, key: bytes) -> None:
        self.subject, self.key = subject, key
        self._cipher = _aesgcm(key)

    def seal(self, thread_id: str, seq: int, kind: str, version: int, payload: bytes) -> bytes:
        """The sealed form of `payload` written as record `seq` of `thread_id`."""
        nonce = os.urandom(NONCE_BYTES)
        aad = _record_aad(thread_id, seq, kind, version, self.subject)
        ciphertext = self._cipher.encrypt(nonce, payload, aad)
        skeleton = _encode(redact(_raw.decode(payload), "", kind))
        return SEALED_PREFIX + _encode((FORMAT, self.subject, nonce, ciphertext, skeleton))


def is_sealed(payload: bytes) -> bool:
    """Whether a stored payload is sealed."""
    return payload[:1] == SEALED_PREFIX


def _parts(thread_id: str, seq: int, payload: bytes) -> tuple[int, str, bytes, bytes, bytes]:
    try:
        return _sealed.decode(payload[1:])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CorruptRecordError(thread_id, seq, f"sealed payload: {exc}") from exc


def subject_of(thread_id: str, seq: int, payload: bytes) -> str:
    """The subject a sealed payload belongs to."""
    return _parts(thread_id, seq, payload)[1]


_CIPHERS: dict[bytes, AESGCM] = {}


def open_sealed(
    thread_id: str, seq: int, kind: str, version: int, payload: bytes, keys: Keys | None
) -> bytes | dict[str, Any]:
    """The plain payload bytes when the subject's key is in `keys`; else the skeleton as a
    dict, its personal fields reading "erased on DATE by WHO" (or that no key is at hand).

    `SealBrokenError` when the key is there but the ciphertext does not open under this row.
    """
    fmt, subject, nonce, ciphertext, skeleton = _parts(thread_id, seq, payload)
    if fmt != FORMAT:
        raise CorruptRecordError(thread_id, seq, f"sealed payload of unknown format {fmt}")
    key = None if keys is None else keys.get(subject)
    if isinstance(key, bytes):
        cipher = _CIPHERS.get(key)
        if cipher is None:
            if len(_CIPHERS) > 1024:
                _CIPHERS.clear()
            cipher = _CIPHERS[key] = _aesgcm(key)
        try:
            return cipher.decrypt(nonce, ciphertext, _record_aad(thread_id, seq, kind, version,
                                                                 subject))  # fmt: skip
        except Exception as exc:
            raise SealBrokenError(
                thread_id,
                seq,
                f"its sealed payload of subject {subject!r} does not open as this row: it was "
                "moved from another row or altered",
            ) from exc
    try:
        data = _raw.decode(skeleton)
    except msgspec.DecodeError as exc:
        raise CorruptRecordError(thread_id, seq, f"sealed skeleton: {exc}") from exc
    return redact(data, key.mark if isinstance(key, Erasure) else NO_KEY, kind)
