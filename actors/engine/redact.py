"""Credentials kept out of the log: error text is recorded (a tool's failed result, a run's
failure, a trigger's end) and shown to the model, and a library's error often quotes the URL
or command line it was given. `redact` is the one function every such text goes through.

It hides a URL's user-info (`https://***@host`), the values of query parameters and
`--flag value` / `name=value` pairs whose names say they are secret (token, key, password,
secret, auth, signature, credential, session), and any value marked secret (`Secret`) or
made known with `known_secret` (an MCP server's marked arguments, its URL's password and
token, its authorization headers).
"""

from __future__ import annotations

import re
import threading

__all__ = ["MASK", "Secret", "known_secret", "names_a_secret", "redact"]

MASK = "***"

_SECRET_NAME = (
    r"[A-Za-z0-9_.-]*(?:token|key|secret|passw|pwd|auth|signature|credential|session)"
    r"[A-Za-z0-9_.-]*"
)
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^\s/?#@'\"<>]+)@")
_QUERY = re.compile(rf"(?P<lead>[?&;])(?P<name>{_SECRET_NAME})=(?P<value>[^&;#\s'\"<>]*)", re.I)
_FLAG = re.compile(
    rf"(?P<flag>(?<![\w-])--?{_SECRET_NAME})(?P<sep>=|\s+)(?P<value>[^\s'\"]+)", re.I
)
_NAMED = re.compile(_SECRET_NAME, re.I)
_MIN_KNOWN = 4
"""Shorter known secrets are not searched for in text (they would mask ordinary words);
they are still hidden where they are marked (`Secret`) or sit in a URL or a flag."""

_known: set[str] = set()
_lock = threading.Lock()


class Secret(str):
    """A string marked secret (a command-line argument, a header value): `redact` hides it
    wherever it appears, and it shows as `***` in an MCP server's label."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(MASK)


def known_secret(*values: str | None) -> None:
    """Make `values` known: `redact` hides each wherever it appears, from now on."""
    with _lock:
        _known.update(v for v in values if v and len(v) >= _MIN_KNOWN)


def names_a_secret(name: str) -> bool:
    """Whether a parameter, flag or header called `name` holds a credential."""
    return _NAMED.fullmatch(name) is not None


def redact(text: str) -> str:
    """`text` with the credentials it quotes replaced by `***`."""
    if not text:
        return text
    with _lock:
        known = sorted(_known, key=len, reverse=True)
    for value in known:
        if value in text:
            text = text.replace(value, MASK)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _QUERY.sub(lambda m: f"{m['lead']}{m['name']}={MASK}", text)
    return _FLAG.sub(lambda m: f"{m['flag']}{m['sep']}{MASK}", text)
