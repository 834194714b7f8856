"""Checks of the names a caller gives the log: thread ids, run ids, actors; and `inert`, how
stored text (which came from models, tools and users) is shown to a person."""

from __future__ import annotations

import re
import reprlib

from agentlog.events.errors import InvalidAppendError

_CONTROL = re.compile("[\x00-\x1f\x7f]")


def brief(value: object) -> str:
    """A value as an error message shows it: cut short, and safe for a value nested deeper
    than `repr` can follow (which would raise RecursionError instead of the error)."""
    return reprlib.repr(value)


_CHECKED: set[str] = set()
"""Thread ids that passed `check_thread_id` (cleared when large): a writer's next append
to its thread skips the checks."""


def check_thread_id(thread_id: object) -> str:
    """A thread id is a non-empty string; anything else is a caller's mistake."""
    if type(thread_id) is str and thread_id in _CHECKED:
        return thread_id
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InvalidAppendError(
            f"thread id must be a non-blank string, got {brief(thread_id)}: name the thread "
            "with printable text such as 'chat-42'"
        )
    check_text("thread id", thread_id)
    if thread_id.startswith("-"):
        raise InvalidAppendError(
            f"thread id {thread_id!r} begins with '-', which a command line reads as an "
            "option: choose an id that starts with a letter or digit"
        )
    if _CONTROL.search(thread_id):
        raise InvalidAppendError(
            f"thread id {thread_id!r} holds control characters: use printable text"
        )
    if type(thread_id) is str:  # a subclass could compare equal yet differ
        if len(_CHECKED) >= 4096:
            _CHECKED.clear()
        _CHECKED.add(thread_id)
    return thread_id


def readable_thread_id(thread_id: object) -> str:
    """A thread id to look up: any non-empty string, so that a thread an older version let in
    (control characters, a leading '-') can still be read and verified, never written to."""
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidAppendError(f"thread id must be a non-empty string, got {brief(thread_id)}")
    return thread_id


def check_text(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidAppendError(f"{name} must be a string, got {type(value).__name__}")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidAppendError(f"{name} {value!r} is not valid UTF-8 text: {exc}") from exc


_FORMAT = (
    "\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f"
    "\ufeff\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f\ud800-\udfff"
)
_BODY_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f{_FORMAT}]")
_LINE_UNSAFE = re.compile(f"[\\\\\x00-\x1f{_FORMAT}]")
_SHORT = {0x5C: "\\\\", 0x0A: "\\n", 0x09: "\\t", 0x0D: "\\r"}


def _escape_char(found: re.Match[str]) -> str:
    code = ord(found.group())
    if code in _SHORT:
        return _SHORT[code]
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def inert(text: str, *, body: bool = False) -> str:
    """`text` safe to print: every control, bidi and invisible format character escaped.

    C0 and C1 controls, DEL, bidi embeddings, overrides and isolates (U+202A-202E,
    U+2066-2069), zero-width and other format characters, line and paragraph separators
    become `\\n`, `\\t`, `\\r`, `\\xNN`, `\\uNNNN` or `\\UNNNNNNNN`. In a message `body`,
    newlines and tabs stay; in a one-line field (a thread id, node, actor, summary) they are
    escaped too, and a backslash is doubled, so that stored text can neither forge a line
    nor pose as an escape. Every view of the log for people shows stored text through it
    (the command line, a replay test's report).
    """
    pattern = _BODY_UNSAFE if body else _LINE_UNSAFE
    return pattern.sub(_escape_char, text)
