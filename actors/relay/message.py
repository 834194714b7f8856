"""What a relay sends for one record, and which records it sends.

A message is the record as one line of the JSON export (`agentlog export`'s format, which
`verify_export.py` checks with the standard library alone: the envelope, the payload bytes
in base64, the readable event, the previous record's hash and the record's own), plus its
envelope again as headers (stream fields on Redis) for routing and filtering without
parsing the body. Its id is the record's chain hash: 64 hex digits that commit to the
thread, the seq and every byte of the record, so the same record always gets the same id,
and two records never share one. The broker or the consumer drops a second copy by it.
"""

from __future__ import annotations

import collections
import fnmatch
import re
import string
from collections.abc import Collection
from dataclasses import dataclass
from urllib.parse import quote

from agentlog.events import AgentlogError, EventStore, InvalidArgumentError
from agentlog.events.audit import export_line
from agentlog.events.codec import GENESIS_HASH, Row
from agentlog.events.follow import check_kinds

__all__ = [
    "BrokerRefusedError",
    "Message",
    "RelayConfigError",
    "RelayError",
    "Selection",
    "Template",
]


class RelayError(AgentlogError):
    """Base of the relay's errors."""


class RelayConfigError(RelayError, InvalidArgumentError):
    """A relay was set up with something that cannot work (a URL, template or filter); it
    was refused before anything was read or sent."""


class BrokerRefusedError(RelayError):
    """The broker refuses what the relay sends for a reason that waiting will not fix (a
    key of another type, a stream holding entries the relay did not write): the relay stops,
    its cursor on the last record the broker confirmed."""


@dataclass(frozen=True, slots=True)
class Message:
    """One record, ready to send: where to, its id, its body and its headers."""

    destination: str
    id: str
    body: bytes
    headers: dict[str, str]
    position: int


_FIELDS = frozenset({"thread", "kind"})
_NATS_TOKEN = re.compile(r"[A-Za-z0-9_-]")


class Template:
    """Where a record goes: a Redis stream key, a NATS subject or an AMQP routing key, with
    `{thread}` and `{kind}` filled in from the record (`agentlog.{kind}`).

    In a NATS subject the thread id is one token: each character other than a letter,
    digit, '_' or '-' is written %XX (its UTF-8 bytes), since '.', '*', '>' and blanks
    mean something there.
    """

    def __init__(self, text: str, *, broker: str) -> None:
        if not isinstance(text, str) or not text.strip():
            raise RelayConfigError(
                f"the subject template must be a non-empty string, got {text!r}: "
                "like 'agentlog.{kind}'"
            )
        try:
            parts = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise RelayConfigError(
                f"the subject template {text!r} is malformed ({exc}): write "
                "placeholders as {thread} or {kind}, and a literal brace as {{ or }}"
            ) from None
        names = {name for _, name, _, _ in parts if name is not None}
        unknown = [
            name for _, name, spec, conv in parts
            if name is not None and (name not in _FIELDS or spec or conv)
        ]  # fmt: skip
        if unknown:
            raise RelayConfigError(
                f"the subject template {text!r} names {unknown[0]!r}: it may use only "
                "{thread} and {kind}, without format specs"
            )
        if broker == "nats" and (any(c in text for c in " \t*>") or ".." in text):
            raise RelayConfigError(
                f"the NATS subject template {text!r} holds a blank, a wildcard or an empty "
                "token: write tokens separated by single dots, like 'agentlog.{kind}'"
            )
        self.text, self.broker, self.names = text, broker, frozenset(names)

    def render(self, thread_id: str, kind: str) -> str:
        thread = _nats_token(thread_id) if self.broker == "nats" else thread_id
        return self.text.format(thread=thread, kind=kind)

    def wildcard(self) -> str:
        """The NATS subjects every rendering falls under (a stream's subject filter)."""
        tokens = self.text.split(".")
        return ".".join("*" if "{" in token else token for token in tokens)


def _nats_token(text: str) -> str:
    """`text` as one NATS subject token (quote() leaves '.' and '~' as they are)."""
    return "".join(
        c if _NATS_TOKEN.fullmatch(c) else quote(c, safe="").replace(".", "%2E") for c in text
    )


class Selection:
    """Which records a relay sends: of `kinds` (None: all) and of threads matching one of
    `threads` (exact ids or shell patterns like 'support-*'; None: all). A record left out
    still moves the cursor on."""

    def __init__(
        self, kinds: Collection[str] | None = None, threads: Collection[str] | None = None
    ) -> None:
        try:
            self.kinds = check_kinds(kinds)
        except InvalidArgumentError as exc:
            raise RelayConfigError(str(exc)) from None
        if threads is not None and (
            isinstance(threads, str | bytes)
            or not threads
            or not all(isinstance(t, str) and t for t in threads)
        ):
            raise RelayConfigError(
                f"threads is a non-empty list of thread ids or patterns, got {threads!r}"
            )
        self.threads = None if threads is None else tuple(threads)
        self.everything = self.kinds is None and self.threads is None

    def __call__(self, row: Row) -> bool:
        if self.kinds is not None and row.kind not in self.kinds:
            return False
        if self.threads is None:
            return True
        return any(fnmatch.fnmatchcase(row.thread_id, t) for t in self.threads)


class PrevHashes:
    """The hash of each thread's record before the one being sent, from the rows the relay
    saw go by; at most `size` threads are remembered (the least recent forgotten) and a
    thread not remembered is looked up in the store, one row. Memory stays bounded."""

    def __init__(self, store: EventStore, size: int = 10_000) -> None:
        self.store, self.size = store, size
        self.last: collections.OrderedDict[str, tuple[int, bytes]] = collections.OrderedDict()

    async def before(self, row: Row) -> bytes:
        known = self.last.get(row.thread_id)
        if known is not None and known[0] == row.seq - 1:
            return known[1]
        if row.seq == 1:
            return GENESIS_HASH
        async for before in self.store.read_rows(row.thread_id, row.seq - 1, row.seq - 1):
            return before.hash
        return GENESIS_HASH  # pruned away: the consumer's chain check says so

    def saw(self, row: Row) -> None:
        self.last[row.thread_id] = (row.seq, row.hash)
        self.last.move_to_end(row.thread_id)
        if len(self.last) > self.size:
            self.last.popitem(last=False)


_PLAIN = re.compile(r"[A-Za-z0-9_.~-]*")


def _quoted(text: str | None) -> str:
    """`text` percent-encoded (UTF-8), as a header may carry it; most ids need nothing."""
    text = text or ""
    return text if _PLAIN.fullmatch(text) else quote(text, safe="")


def message(row: Row, prev: bytes, template: Template) -> Message:
    """The message for `row`, whose thread's previous record hashes to `prev`."""
    headers = {
        "kind": row.kind,
        "thread": _quoted(row.thread_id),
        "seq": str(row.seq),
        "position": str(row.position),
        "run": _quoted(row.run_id),
        "actor": _quoted(row.actor),
        "time": repr(row.at),
        "hash": row.hash.hex(),
        "prev": prev.hex(),
    }
    body = export_line(row, prev).rstrip(b"\n")
    return Message(
        template.render(row.thread_id, row.kind), row.hash.hex(), body, headers, row.position
    )
