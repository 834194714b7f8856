"""Verify an agentlog JSONL export with the Python standard library alone.

    python verify_export.py FILE [--head THREAD@SEQ:HASH]

Each line's hash must equal sha256(prev_hash + compact JSON of its envelope + payload bytes),
its prev_hash the previous line's hash (64 zeros for the first), its seq the next one from 1,
and its envelope the line's own fields. With --head (a head saved earlier), the file must
still hold that record, with that hash. Prints "ok: N records, head THREAD@SEQ:HASH" and
exits 0, or prints the first bad line and exits 1.

Only `envelope` and `payload_b64` are hashed: `event`, a readable rendering of the
MessagePack payload, is not checked here.

This file imports nothing from agentlog, so an auditor can read and run it on its own.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from collections.abc import Iterable
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
        line = json.loads(text)
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
    return line


def verify(lines: Iterable[str], head: tuple[str, int, str] | None) -> str:
    """'ok: ...' for a whole, intact export; raises Bad with 'line K (seq S): ...' if not."""
    thread, prev, count = (head[0] if head else None), GENESIS, 0
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
    return f"ok: {count} records, head {thread}@{count}:{prev}"


def main(argv: list[str] | None = None) -> int:
    """Verify FILE; print the verdict; 0 when intact, 1 when not, 2 when unreadable."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a JSONL export of one agentlog thread")
    parser.add_argument("--head", type=parse_head, help="a saved head: THREAD@SEQ:HASH")
    args = parser.parse_args(argv)
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
