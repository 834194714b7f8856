"""Verify an agentlog JSONL export with the Python standard library alone.

    python verify_export.py FILE [--head THREAD@SEQ:HASH]
    python verify_export.py --evidence BUNDLE [--public-key PEM]   (needs `cryptography`)

Each line's hash must equal sha256(prev_hash + compact JSON of its envelope + payload bytes),
its prev_hash the previous line's hash (64 zeros for the first), its seq the next one from 1,
and its envelope the line's own fields. With --head (a head saved earlier), the file must
still hold that record, with that hash. Prints "ok: N records, head THREAD@SEQ:HASH" and
exits 0, or prints the first bad line and exits 1.

Only `envelope` and `payload_b64` are hashed. `event`, the payload in readable JSON, is
what a person reads, so it is checked too: the payload is decoded here (a small MessagePack
reader, below) and `event` must equal its readable form, exactly, or the line is bad.

The readable form of a MessagePack value (`readable`) is plain JSON where JSON can hold the
value exactly, and a one-key object naming the type where it cannot:

    nil, true/false, strings, arrays      as JSON
    integers within +/-2**53              JSON numbers
    integers beyond +/-2**53              {"$int": "123456789012345678901"}  (decimal)
    finite floats                         JSON numbers (shortest round-trip digits)
    NaN, +infinity, -infinity             {"$float": "nan"}, {"$float": "inf"}, {"$float": "-inf"}
    binary (bin 8/16/32)                  {"$bytes": "<standard base64>"}
    extension types                       {"$ext": [type, "<standard base64 of its data>"]}
    maps with string keys                 JSON objects, unless the map has exactly one key
                                          and it starts with "$"
    any other map                         {"$map": [[key, value], ...]} (in stored order)
    a sealed payload (first byte 0xC1)    {"$sealed": [format, subject, readable skeleton]}
                                          (personal fields blank; agentlog.events.sealing)

So a one-key object whose key starts with "$" is always a type name, never stored data, and
every payload has exactly one readable form. The comparison is strict: 1, 1.0 and true
differ, object keys must be unique, and the literals NaN and Infinity are not JSON.

This file imports nothing from agentlog, so an auditor can read and run it on its own.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import math
import struct
import sys
from collections.abc import Iterable, Iterator
from typing import Any

GENESIS = "0" * 64
FIELDS = ("thread_id", "seq", "run_id", "actor", "at", "kind", "version", "position")
TYPES: dict[str, tuple[type, ...]] = {
    "thread_id": (str,),
    "seq": (int,),
    "run_id": (str, type(None)),
    "actor": (str, type(None)),
    "at": (float, int, type(None)),  # agentlog writes an infinite time as null
    "kind": (str,),
    "version": (int,),
    "position": (int,),
    "payload_b64": (str,),
    "envelope": (list,),
    "prev_hash": (str,),
    "hash": (str,),
}
HEX = frozenset("0123456789abcdef")


class Bad(Exception):
    """What is wrong with one line."""


def json_float(value: float) -> str:
    """A float as agentlog's encoder (msgspec) writes it.

    Shortest round-trip digits, like repr(), but plain decimals from 1e-5 (repr switches to
    an exponent below 1e-4) and exponents written without '+' or leading zeros: "1e16".
    """
    if value != value or value in (float("inf"), float("-inf")):
        return "null"
    text = repr(value)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    if int(exponent) == -5:
        sign, digits = ("-", mantissa[1:]) if mantissa[0] == "-" else ("", mantissa)
        return f"{sign}0.0000{digits.replace('.', '')}"
    return f"{mantissa}e{int(exponent)}"


def compact_json(envelope: list[Any]) -> bytes:
    """The envelope's canonical bytes: compact JSON, UTF-8, floats as agentlog writes them."""
    parts = []
    for value in envelope:
        if isinstance(value, float):
            parts.append(json_float(value))
        elif value is None or isinstance(value, bool | int | str):
            parts.append(json.dumps(value, ensure_ascii=False))
        else:
            raise Bad(f"envelope holds a {type(value).__name__}, not a plain value")
    return ("[" + ",".join(parts) + "]").encode("utf-8")


# ---- the payload: a MessagePack reader and the readable form ---------------------------

SAFE_INT = 2**53
MAX_DEPTH = 1000
"""Deepest nesting read: beyond what agentlog's encoder stores (Python's recursion limit)."""


@contextlib.contextmanager
def deep_enough() -> Iterator[None]:
    """Room on the stack for MAX_DEPTH levels of the recursive reader and `readable`."""
    old, need = sys.getrecursionlimit(), 4 * MAX_DEPTH + 200
    if old < need:
        sys.setrecursionlimit(need)
    try:
        yield
    finally:
        if old < need:
            sys.setrecursionlimit(old)


class Map(list[tuple[Any, Any]]):
    """A decoded MessagePack map: its (key, value) pairs in stored order."""


class Ext:
    """A MessagePack extension value: its type code and data bytes."""

    def __init__(self, code: int, data: bytes) -> None:
        self.code, self.data = code, data


class Reader:
    """Decodes one MessagePack value from `data`, refusing anything malformed."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise Bad(f"payload ends early (byte {self.at} of {len(self.data)})")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def text(self, n: int) -> str:
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise Bad("payload holds a string that is not UTF-8") from None

    def value(self, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise Bad(f"payload nests deeper than {MAX_DEPTH} levels")
        b = self.uint(1)
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        if 0x80 <= b <= 0x8F:
            return self.map(b & 0x0F, depth)
        if 0x90 <= b <= 0x9F:
            return [self.value(depth + 1) for _ in range(b & 0x0F)]
        if 0xA0 <= b <= 0xBF:
            return self.text(b & 0x1F)
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if b in simple:
            return simple[b]
        sizes = {0xC4: 1, 0xC5: 2, 0xC6: 4}  # bin
        if b in sizes:
            return self.take(self.uint(sizes[b]))
        sizes = {0xC7: 1, 0xC8: 2, 0xC9: 4}  # ext
        if b in sizes:
            n = self.uint(sizes[b])
            code = int.from_bytes(self.take(1), "big", signed=True)
            return Ext(code, self.take(n))
        if b == 0xCA:
            return float(struct.unpack(">f", self.take(4))[0])
        if b == 0xCB:
            return float(struct.unpack(">d", self.take(8))[0])
        sizes = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}  # uint
        if b in sizes:
            return self.uint(sizes[b])
        sizes = {0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}  # int
        if b in sizes:
            return int.from_bytes(self.take(sizes[b]), "big", signed=True)
        sizes = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}  # fixext
        if b in sizes:
            code = int.from_bytes(self.take(1), "big", signed=True)
            return Ext(code, self.take(sizes[b]))
        sizes = {0xD9: 1, 0xDA: 2, 0xDB: 4}  # str
        if b in sizes:
            return self.text(self.uint(sizes[b]))
        if b in (0xDC, 0xDD):
            return [self.value(depth + 1) for _ in range(self.uint(2 if b == 0xDC else 4))]
        if b in (0xDE, 0xDF):
            return self.map(self.uint(2 if b == 0xDE else 4), depth)
        raise Bad(f"payload byte {self.at - 1} is 0x{b:02x}, which MessagePack never uses")

    def map(self, n: int, depth: int) -> Map:
        pairs = Map()
        for _ in range(n):
            key = self.value(depth + 1)
            pairs.append((key, self.value(depth + 1)))
        return pairs


def unpack(data: bytes) -> Any:
    """The one MessagePack value `data` holds (maps as `Map`, bin as bytes, ext as `Ext`)."""
    reader = Reader(data)
    with deep_enough():
        value = reader.value()
    if reader.at != len(data):
        raise Bad(f"payload has {len(data) - reader.at} byte(s) after its value")
    return value


def readable(value: Any) -> Any:
    """The readable JSON form of a decoded MessagePack value (see the module docstring)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if -SAFE_INT <= value <= SAFE_INT else {"$int": str(value)}
    if isinstance(value, float):
        if math.isnan(value):
            return {"$float": "nan"}
        if math.isinf(value):
            return {"$float": "inf" if value > 0 else "-inf"}
        return value
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Ext):
        return {"$ext": [value.code, base64.b64encode(value.data).decode("ascii")]}
    if isinstance(value, Map):
        keys = [k for k, _ in value]
        plain = all(isinstance(k, str) for k in keys) and len(set(keys)) == len(keys)
        if plain and not (len(keys) == 1 and keys[0].startswith("$")):
            return {k: readable(v) for k, v in value}
        return {"$map": [[readable(k), readable(v)] for k, v in value]}
    if isinstance(value, list):
        return [readable(v) for v in value]
    raise Bad(f"payload holds a {type(value).__name__}, which MessagePack cannot")


def readable_stored(payload: bytes) -> Any:
    """The readable form of a stored payload: a sealed one (first byte 0xC1, then
    [format, subject, nonce, ciphertext, skeleton]) as {"$sealed": [format, subject,
    readable skeleton]}, the personal fields blank in the skeleton; any other as `readable`."""
    if payload[:1] != b"\xc1":
        return readable(unpack(payload))
    parts = unpack(payload[1:])
    if not (
        isinstance(parts, list) and len(parts) == 5 and isinstance(parts[0], int)
        and isinstance(parts[1], str) and all(isinstance(p, bytes) for p in parts[2:])
    ):  # fmt: skip
        raise Bad("sealed payload is not [format, subject, nonce, ciphertext, skeleton]")
    return {"$sealed": [parts[0], parts[1], readable(unpack(parts[4]))]}


def readable_payload(payload: bytes) -> Any:
    """The readable form of a stored payload; ValueError when it is not MessagePack."""
    try:
        with deep_enough():
            return readable_stored(payload)
    except Bad as exc:
        raise ValueError(str(exc)) from None


def same(a: Any, b: Any, *, ordered: bool = False) -> bool:
    """Exact equality, the project's one: types match (1, 1.0 and true differ, bytes are not
    a bytearray), -0.0 differs from 0.0 and NaN equals NaN; lists, tuples and objects deeply,
    object keys in the same order when `ordered` (a round trip keeps it); pydantic models
    of the same class field by field. It lives here because this file imports nothing from
    agentlog; the package imports it from here (`agentlog.events.verify_export.same`)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, dict):
        keys = list(a) == list(b) if ordered else a.keys() == b.keys()
        return keys and all(same(a[k], b[k], ordered=ordered) for k in a)
    if isinstance(a, list | tuple):
        pairs = zip(a, b, strict=False)
        return len(a) == len(b) and all(same(x, y, ordered=ordered) for x, y in pairs)
    fields = getattr(type(a), "model_fields", None)
    if isinstance(fields, dict):  # a pydantic model (this file does not import pydantic)
        return all(same(getattr(a, k), getattr(b, k), ordered=ordered) for k in fields)
    return bool(a == b)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise Bad(f"an object holds the key {key!r} twice")
        obj[key] = value
    return obj


def _no_constant(name: str) -> Any:
    raise Bad(f"{name} is not JSON")


def loads(text: str) -> Any:
    """Strict JSON: unique object keys, no NaN or Infinity literals."""
    return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)


def where_differs(shown: Any, stored: Any, path: str = "event") -> str:
    """The first place (a JSON path) where `shown` is not `stored`."""
    if isinstance(shown, dict) and isinstance(stored, dict):
        for key in [*stored, *(k for k in shown if k not in stored)]:
            if key not in shown or key not in stored or not same(shown[key], stored[key]):
                if key in shown and key in stored:
                    return where_differs(shown[key], stored[key], f"{path}.{key}")
                return f"{path}.{key}"
    if isinstance(shown, list) and isinstance(stored, list) and len(shown) == len(stored):
        for i, (x, y) in enumerate(zip(shown, stored, strict=True)):
            if not same(x, y):
                return where_differs(x, y, f"{path}[{i}]")
    return path


def is_hash(text: str) -> bool:
    """64 lowercase hex digits."""
    return len(text) == 64 and set(text) <= HEX


def parse_head(text: str) -> tuple[str, int, str]:
    """THREAD@SEQ:HASH as (thread, seq, hash); the last '@' splits."""
    thread, at, rest = text.rpartition("@")
    seq, colon, digest = rest.partition(":")
    digest = digest.lower()
    if not (thread and at and colon and seq.isascii() and seq.isdigit() and is_hash(digest)):
        raise argparse.ArgumentTypeError(
            f"malformed head {text!r}: expected THREAD@SEQ:HASH (seq >= 1, 64 hex digits)"
        )
    if int(seq) < 1:
        raise argparse.ArgumentTypeError(f"malformed head {text!r}: seq must be >= 1")
    return thread, int(seq), digest


def check_line(text: str, thread: str | None, seq: int, prev: str) -> dict[str, Any]:
    """The parsed line, when it is record `seq` of `thread` chained after `prev`."""
    try:
        line = loads(text)
    except json.JSONDecodeError as exc:
        raise Bad(f"not valid JSON ({exc})") from None
    if not isinstance(line, dict):
        raise Bad("not a JSON object")
    missing = [name for name in TYPES if name not in line]
    if missing:
        raise Bad(f"missing field(s) {', '.join(missing)}")
    for name, types in TYPES.items():
        value = line[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise Bad(f"field {name!r} is {value!r}, of the wrong type")
    if thread is not None and line["thread_id"] != thread:
        raise Bad(f"thread {line['thread_id']!r} in an export of thread {thread!r}")
    if line["seq"] != seq:
        raise Bad(f"seq {line['seq']} where {seq} was expected (a record missing or moved)")
    if not (is_hash(line["prev_hash"]) and is_hash(line["hash"])):
        raise Bad("prev_hash and hash must be 64 lowercase hex digits")
    envelope = line["envelope"]
    own = compact_json([line[name] for name in FIELDS])
    if len(envelope) != len(FIELDS) or compact_json(envelope) != own:
        raise Bad("envelope does not match the record's own fields")
    if line["prev_hash"] != prev:
        raise Bad(f"prev_hash {line['prev_hash']} is not the previous record's hash {prev}")
    try:
        payload = base64.b64decode(line["payload_b64"], validate=True)
    except ValueError:
        raise Bad("payload_b64 is not valid base64") from None
    digest = hashlib.sha256(bytes.fromhex(prev) + own + payload).hexdigest()
    if digest != line["hash"]:
        raise Bad(f"hash {line['hash']} does not match the record's bytes ({digest})")
    if "event" not in line:
        raise Bad("missing field(s) event")
    with deep_enough():
        stored = readable_stored(payload)
        differs = not same(line["event"], stored)
    if differs:
        where = where_differs(line["event"], stored)
        raise Bad(f"the readable event differs from the hashed payload at {where}")
    return line


def _pruned_start(lines: list[str]) -> tuple[int, str]:
    """Where an export of a pruned thread starts: the seq before its first line and that
    line's prev_hash, when a `pruned` record of the file names both; else (0, GENESIS)."""
    try:
        first = loads(lines[0])
        floor = (int(first["seq"]) - 1, str(first["prev_hash"]))
        for text in lines:
            if '"kind":"pruned"' in text:
                event = loads(text)["event"]
                if floor[0] > 0 and (event["through_seq"], event["last_hash"]) == floor:
                    return floor
    except (Bad, json.JSONDecodeError, IndexError, KeyError, TypeError, ValueError):
        pass  # check_line says what is wrong with it
    return 0, GENESIS


def verify(lines: Iterable[str], head: tuple[str, int, str] | None) -> str:
    """'ok: ...' for a whole, intact export; raises Bad with 'line K (seq S): ...' if not.

    An export of a pruned thread starts after seq 1: its first record links to the hash of
    the last record pruned, and a `pruned` record in the file must name that seq and hash."""
    lines = list(lines)
    floor = _pruned_start(lines)
    thread, prev, count = (head[0] if head else None), floor[1], floor[0]
    for number, text in enumerate(lines, start=1):
        try:
            line = check_line(text.removesuffix("\n"), thread, count + 1, prev)
        except Bad as exc:
            raise Bad(f"line {number} (seq {count + 1}): {exc}") from None
        thread, prev, count = line["thread_id"], line["hash"], count + 1
        if head is not None and count == head[1] and (thread, prev) != (head[0], head[2]):
            raise Bad(
                f"line {number} (seq {count}): record {thread}@{count}:{prev} is not "
                f"the saved head {head[0]}@{head[1]}:{head[2]}: the history was rewritten"
            )
    if count == 0:
        raise Bad("line 1 (seq 1): the file holds no records")
    if head is not None and count < head[1]:
        raise Bad(
            f"line {count + 1} (seq {count + 1}): the tail after seq {count} was truncated "
            f"(head says {head[1]})"
        )
    kept = f"records {floor[0] + 1}..{count} (pruned through {floor[0]})" if floor[0] else (
        f"{count} records")  # fmt: skip
    return f"ok: {kept}, head {thread}@{count}:{prev}"


def canonical(body: dict[str, Any]) -> bytes:
    """What an evidence bundle's signature covers: every field but `signature`, as JSON with
    sorted keys, no spaces, ASCII only (agentlog.events.evidence writes it the same way)."""
    fields = {k: v for k, v in body.items() if k != "signature"}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def verify_evidence(text: str, pinned_pem: bytes | None = None) -> str:
    """'ok: ...' for an intact evidence bundle (`agentlog export --evidence`): its Ed25519
    signature (by the key `pinned_pem` names, when given), then its records' chain up to the
    head it states. Needs `cryptography`; raises Bad saying what does not hold."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            PublicFormat,
            load_pem_public_key,
        )
    except ImportError:
        raise Bad("checking a signature needs the 'cryptography' package") from None
    body = loads(text)
    if not isinstance(body, dict) or body.get("format") != "agentlog-evidence/1":
        raise Bad("not an agentlog evidence bundle (format agentlog-evidence/1)")
    try:
        public = base64.b64decode(body["public_key"], validate=True)
        key = Ed25519PublicKey.from_public_bytes(public)
        key.verify(base64.b64decode(body["signature"], validate=True), canonical(body))
    except (KeyError, TypeError, ValueError, InvalidSignature):
        raise Bad(
            "the signature does not match the bundle: it was altered, or not signed"
        ) from None
    if pinned_pem is not None:
        try:
            pinned = load_pem_public_key(pinned_pem).public_bytes(Encoding.Raw, PublicFormat.Raw)
        except (ValueError, TypeError) as exc:
            raise Bad(f"the public key given is not an Ed25519 PEM key ({exc})") from None
        if pinned != public:
            raise Bad("the bundle is signed by another key than the one given")
    head, lines = body.get("head"), body.get("export")
    if not isinstance(head, dict) or not isinstance(lines, list):
        raise Bad("the bundle lacks its head or its records")
    seq, digest = head.get("seq"), head.get("hash")
    if not isinstance(seq, int) or not isinstance(digest, str):
        raise Bad("the bundle's head is not a seq and a hash")
    verdict = verify(lines, (str(body.get("thread_id")), seq, digest))
    if not verdict.endswith(f"@{head.get('seq')}:{head.get('hash')}"):
        raise Bad(f"the records end elsewhere than the head the bundle states ({verdict})")
    fingerprint = hashlib.sha256(public).hexdigest()[:16]
    return f"{verdict}; signed by Ed25519 key {fingerprint}"


def main(argv: list[str] | None = None) -> int:
    """Verify FILE; print the verdict; 0 when intact, 1 when not, 2 when unreadable."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a JSONL export of one agentlog thread")
    parser.add_argument("--head", type=parse_head, help="a saved head: THREAD@SEQ:HASH")
    parser.add_argument("--evidence", action="store_true", help="FILE is a signed evidence bundle")
    parser.add_argument("--public-key", help="with --evidence: the PEM key it must be signed by")
    args = parser.parse_args(argv)
    if args.evidence:
        try:
            with open(args.file, encoding="utf-8") as f:
                text = f.read()
            pinned = None
            if args.public_key:
                with open(args.public_key, "rb") as k:
                    pinned = k.read()
            print(verify_evidence(text, pinned))
        except (OSError, UnicodeDecodeError) as exc:
            print(f"cannot read {args.file}: {exc}")
            return 2
        except Bad as exc:
            print(exc)
            return 1
        return 0
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:  # print any thread id, whatever the terminal's encoding
        reconfigure(errors="backslashreplace")
    try:
        with open(args.file, encoding="utf-8", newline="\n") as f:
            verdict = verify(f, args.head)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"cannot read {args.file}: {exc}")
        return 2
    except Bad as exc:
        print(exc)
        return 1
    print(verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())
