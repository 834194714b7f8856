"""`open_store`: the one place an address (a path or a URL) becomes a store.

The CLI and applications name a store by a string; which backend serves it is decided here
alone, so a new backend (as Postgres was) is one more branch, not a change at every caller.

Accepted addresses:

- a plain path (`agentlog.db`, `/var/lib/agentlog/log.db`, a `pathlib.Path`): a SQLite file;
- `sqlite:///relative/path.db` (three slashes: relative to the working directory) and
  `sqlite:////absolute/path.db` (four: absolute); the path is percent-decoded, so a name
  holding `?` or `#` is written `%3F`, `%23`;
- `memory://`, `sqlite://`, `sqlite://:memory:`, `sqlite:///:memory:` or `:memory:`: a new,
  empty store in this process's memory (`MemoryEventStore`);
- `postgresql://user@host:5432/database` (or `postgres://`, `postgresql+driver://`): a
  `PostgresEventStore` (needs `pip install 'agentlog[postgres]'`); `?schema=name` picks the
  PostgreSQL schema (default "agentlog"), which `agentlog db upgrade --dsn ...` creates: a
  Postgres store is never created on open.

The store comes back unopened, as `SQLiteEventStore(path)` does: use it as
`async with open_store(url) as store: ...` (entering opens it, and reports a file it cannot
use), or let it open on first use and close it yourself.
"""

from __future__ import annotations

import os
import re
import stat
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from agentlog.events.errors import (
    InvalidArgumentError,
    NotAnAgentlogDatabaseError,
    StoreError,
    StoreUnavailableError,
)
from agentlog.events.store import EventStore
from agentlog.events.stores.memory import MemoryEventStore
from agentlog.events.stores.sqlite import APPLICATION_ID, SQLITE_MAGIC, SQLiteEventStore

__all__ = [
    "ACCEPTED_FORMS",
    "StoreNotFoundError",
    "StoreURLError",
    "UnsupportedBackendError",
    "open_store",
]

ACCEPTED_FORMS = (
    "a file path (agentlog.db), sqlite:///relative/path.db, sqlite:////absolute/path.db, "
    "memory:// (an in-memory store), or postgresql://user@host/database[?schema=name]"
)
"""The addresses `open_store` takes, as error messages name them."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_USERINFO = re.compile(r"//[^/@]*@")
_MEMORY_NAMES = frozenset({"", ":memory:", "/:memory:"})
"""What may follow `sqlite://` to name an in-memory database."""


class StoreURLError(InvalidArgumentError):
    """An address `open_store` cannot read as any store it knows; the message names the forms
    it takes."""


class UnsupportedBackendError(StoreUnavailableError):
    """The address names a kind of store this agentlog recognises but cannot open yet."""


class StoreNotFoundError(StoreError, LookupError):
    """An existing store was asked for (`create=False`, or read-only) and there is none."""

    def __init__(self, target: str, why: str = "") -> None:
        self.target = target
        super().__init__(
            f"no database at {target}{f' ({why})' if why else ''}: nothing was created; "
            "name an existing agentlog database, or allow creating one (create=True)"
        )


def _shown(address: str) -> str:
    """The address as a message may show it: no password of a DSN, and quoted inert."""
    return repr(_USERINFO.sub("//***@", address, count=1))


def open_store(
    address: str | os.PathLike[str], *, readonly: bool = False, create: bool | None = None
) -> EventStore:
    """The store `address` names (see the module for the forms), not yet opened.

    `readonly=True` opens an existing database for reading only: nothing is created or
    changed, and any write raises `ReadOnlyStoreError`. `create` says whether a missing
    database may be created; by default it may, unless the store is read-only. With
    `create=False` the address must name an existing agentlog database: a missing file, a
    directory, a pipe, an empty file or another program's file is refused before anything
    opens it (`StoreNotFoundError`, `NotAnAgentlogDatabaseError`), so it is left untouched.
    """
    if create is None:
        create = not readonly
    elif create and readonly:
        raise InvalidArgumentError(
            "open_store(readonly=True, create=True) asks a read-only store to create its "
            "database: pass create=False to read an existing one, or readonly=False"
        )
    if isinstance(address, os.PathLike):
        address = os.fspath(address)
    if not isinstance(address, str):
        raise StoreURLError(
            f"a store address is a str or a path, got {type(address).__name__}: pass "
            f"{ACCEPTED_FORMS}"
        )
    if not address:
        raise StoreURLError(f"the store address is empty: pass {ACCEPTED_FORMS}")
    match = _SCHEME.match(address)
    if match is None:
        if address == ":memory:":
            return _memory(address, create)
        return _sqlite(address, address, readonly=readonly, create=create)
    scheme = match.group(1).lower()
    rest = address[match.end() :]
    if scheme == "sqlite":
        if rest in _MEMORY_NAMES:
            return _memory(address, create)
        return _sqlite(address, _sqlite_path(address, rest), readonly=readonly, create=create)
    if scheme == "memory":
        if rest:
            raise StoreURLError(
                f"{_shown(address)}: memory:// takes nothing after it (each one is a new, "
                "empty store); pass memory://"
            )
        return _memory(address, create)
    if scheme in ("postgresql", "postgres") or scheme.startswith(("postgresql+", "postgres+")):
        return _postgres(address, scheme, rest, readonly=readonly)
    raise StoreURLError(f"unknown store address scheme {scheme!r}: pass {ACCEPTED_FORMS}")


def _postgres(address: str, scheme: str, rest: str, *, readonly: bool) -> EventStore:
    """A `PostgresEventStore` for a postgresql:// URL; `?schema=` is ours, the rest asyncpg's."""
    try:
        from agentlog.events.stores.postgres import PostgresEventStore
    except ImportError as exc:
        raise UnsupportedBackendError(
            f"{_shown(address)} names a PostgreSQL store, which needs asyncpg ({exc}): "
            "pip install 'agentlog[postgres]'"
        ) from None
    parts = urlsplit(f"postgresql://{rest}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    if len(schemas) > 1:
        raise StoreURLError(f"{_shown(address)} names a schema more than once: name it once")
    kept = urlencode([(key, value) for key, value in query if key != "schema"])
    dsn = urlunsplit(parts._replace(query=kept))
    if schemas:
        return PostgresEventStore(dsn, schema=schemas[0], readonly=readonly)
    return PostgresEventStore(dsn, readonly=readonly)


def _sqlite_path(address: str, rest: str) -> str:
    """The file a `sqlite://` URL names: after the third slash, relative or absolute."""
    if not rest.startswith("/"):
        raise StoreURLError(
            f"{_shown(address)} names a host, which a SQLite file has none of: write "
            "sqlite:///relative/path.db (three slashes) or sqlite:////absolute/path.db (four)"
        )
    if "?" in rest or "#" in rest:
        raise StoreURLError(
            f"{_shown(address)} carries options ('?' or '#'), which open_store does not take: "
            "name the file alone (write a '?' or '#' in its name as %3F or %23)"
        )
    try:
        path = unquote(rest[1:], errors="strict")
    except UnicodeDecodeError:
        raise StoreURLError(
            f"{_shown(address)} percent-encodes bytes that are not UTF-8 text: encode the "
            "file name's UTF-8 bytes"
        ) from None
    if not path or path.endswith("/"):
        raise StoreURLError(
            f"{_shown(address)} names no file: write sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    return path


def _memory(address: str, create: bool) -> MemoryEventStore:
    """A new in-memory store; refused where an existing store was asked for."""
    if not create:
        raise StoreNotFoundError(
            address, "an in-memory store is new and empty each time, so none exists yet"
        )
    return MemoryEventStore()


def _sqlite(address: str, path: str, *, readonly: bool, create: bool) -> SQLiteEventStore:
    """A SQLite store at `path`; with `create=False`, only an existing agentlog database."""
    if "\x00" in path:
        raise StoreURLError(f"{_shown(address)} holds a NUL character, which no file name can")
    if not create:
        _check_existing(address, path)
    return SQLiteEventStore(path, readonly=readonly)


def _check_existing(address: str, path: str) -> None:
    """Refuse, reading at most its first 100 bytes, what is not an existing agentlog database.

    SQLite would create a missing file and the store would set up an empty one; a caller
    that asked for an existing database wants neither.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise StoreNotFoundError(address) from None
    except OSError as exc:
        raise NotAnAgentlogDatabaseError(path, f"it cannot be examined: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise NotAnAgentlogDatabaseError(path, "it is a directory")
    if not stat.S_ISREG(mode):  # a FIFO or a device would block the read below
        raise NotAnAgentlogDatabaseError(
            path, "it is not a regular file (a pipe, socket or device)"
        )
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise NotAnAgentlogDatabaseError(path, f"it cannot be read: {exc.strerror}") from None
    if not header:
        raise NotAnAgentlogDatabaseError(path, "it is an empty file")
    if not header.startswith(SQLITE_MAGIC) or len(header) < 72:
        raise NotAnAgentlogDatabaseError(path, "it is not a SQLite file")
    if int.from_bytes(header[68:72], "big") != APPLICATION_ID:
        raise NotAnAgentlogDatabaseError(path, "a SQLite file without agentlog's mark")
