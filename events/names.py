"""Checks of the names a caller gives the log: thread ids, run ids, actors."""

from __future__ import annotations

import re
import reprlib

from agentlog.events.errors import InvalidAppendError

_CONTROL = re.compile("[\x00-\x1f\x7f]")


def brief(value: object) -> str:
    """A value as an error message shows it: cut short, and safe for a value nested deeper
    than `repr` can follow (which would raise RecursionError instead of the error)."""
    return reprlib.repr(value)


def check_thread_id(thread_id: object) -> str:
    """A thread id is a non-empty string; anything else is a caller's mistake."""
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
