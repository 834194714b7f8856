"""Who may do what over HTTP: bearer tokens, stored hashed, each with its graphs and rights.

A token file (JSON) lists the tokens by name; the secret itself is never stored, only its
SHA-256 (`agentlog serve --hash-token` prints it):

    {"tokens": [
        {"name": "alice", "sha256": "<hex>", "graphs": ["support"], "rights": ["read", "run"]},
        {"name": "ops", "sha256": "<hex>", "graphs": ["*"], "rights": ["admin"]}
    ]}

Rights: "read" (state, history, search, streams), "run" (start, wait for, answer and cancel
runs), "edit" (fork, edit state), "admin" (everything, and deleting threads). A token's name
is the `actor` of every event its requests cause, so the log says who did what.

Entry points that start by themselves (a webhook's signed deliveries, a timer, committed
events) are not started through `POST /threads/{id}/runs`, whatever the rights, unless a
token names them: `"entry_points": ["nightly"]` lets it start those with input of its own.
Answering a paused run of one (a resume) starts nothing and needs no grant.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentlog.events.errors import AgentlogError

Right = Literal["read", "run", "edit", "admin"]
RIGHTS: tuple[str, ...] = ("read", "run", "edit", "admin")
TOKENS_FILE_ENV = "AGENTLOG_TOKENS_FILE"
"""The environment variable naming the token file when `--tokens` is not given."""


class TokenFileError(AgentlogError, ValueError):
    """The token file is missing, unreadable or malformed; the message says where."""


class Unauthorized(AgentlogError):
    """No token, or one that is not known (HTTP 401)."""


class Forbidden(AgentlogError):
    """A known token without the right, or the graph, a request needs (HTTP 403)."""


def hash_token(secret: str) -> str:
    """The hex SHA-256 a token file stores for `secret`."""
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Whoever a request acts as: its name (the events' actor), graphs and rights."""

    name: str
    graphs: frozenset[str]
    rights: frozenset[str]
    entry_points: frozenset[str] = frozenset()
    """Entry points not triggered by the API (webhook, timer, event) it may start anyway."""

    def may(self, right: Right, graph: str | None = None) -> bool:
        if "admin" not in self.rights and right not in self.rights:
            return False
        return graph is None or "*" in self.graphs or graph in self.graphs

    def require(self, right: Right, graph: str | None = None) -> None:
        """Raise `Forbidden` unless this principal may do `right` on `graph`."""
        if not self.may(right, graph):
            where = f" on graph {graph!r}" if graph else ""
            raise Forbidden(f"token {self.name!r} lacks the {right!r} right{where}")

    def require_start(self, entry_id: str, trigger: str) -> None:
        """Raise `Forbidden` for an entry point that starts by itself (its webhook, its
        timer, its events) unless this principal is granted it by name: a run started
        over the API brings input its signature or schedule never vouched for."""
        if trigger == "api" or entry_id in self.entry_points:
            return
        how = {
            "webhook": "its webhook's signed deliveries",
            "timer": "its timer",
            "event": "the records it answers",
        }.get(trigger, f"its {trigger} trigger")
        raise Forbidden(
            f"entry point {entry_id!r} is started by {how}, not through the runs API; a "
            f'token may be granted it in the token file: "entry_points": {json.dumps([entry_id])}'
        )


LOCAL = Principal("local", frozenset({"*"}), frozenset(RIGHTS))
"""Who acts when a loopback server runs without tokens."""
READER = Principal("local", frozenset({"*"}), frozenset({"read"}))
"""Who acts on a read-only server without tokens (`agentlog ui`): it may read everything."""


class TokenBook:
    """The known tokens, by hash."""

    def __init__(self, principals: dict[str, Principal]) -> None:
        self._by_hash = principals

    @classmethod
    def load(cls, path: str | Path) -> TokenBook:
        """Read a token file (see the module docstring); refuse anything malformed."""
        try:
            data: Any = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise TokenFileError(
                f"cannot read the token file {str(path)!r}: {exc.strerror}"
            ) from exc
        except ValueError as exc:
            raise TokenFileError(f"the token file {str(path)!r} is not JSON: {exc}") from exc
        entries = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(entries, list) or not entries:
            raise TokenFileError(
                f"the token file {str(path)!r} must hold one token or more, as "
                '{"tokens": [{"name": "alice", "sha256": "<agentlog serve --hash-token>", '
                '"graphs": ["*"], "rights": ["read", "run"]}]}'
            )
        book: dict[str, Principal] = {}
        for i, entry in enumerate(entries):
            book.update([_principal(entry, f"{path}: tokens[{i}]", book)])
        return cls(book)

    @classmethod
    def from_environment(cls) -> TokenBook | None:
        """The token file `AGENTLOG_TOKENS_FILE` names, or None when it is unset."""
        path = os.environ.get(TOKENS_FILE_ENV)
        return cls.load(path) if path else None

    def check(self, header: str | None) -> Principal:
        """The principal of an `Authorization: Bearer ...` header, or `Unauthorized`."""
        if not header or not header.startswith("Bearer "):
            raise Unauthorized("send Authorization: Bearer <token>")
        digest = hash_token(header[len("Bearer ") :].strip())
        found: Principal | None = None
        for known, principal in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                found = principal
        if found is None:
            raise Unauthorized("the token is not known")
        return found

    def __len__(self) -> int:
        return len(self._by_hash)


def _principal(entry: Any, where: str, seen: dict[str, Principal]) -> tuple[str, Principal]:
    if not isinstance(entry, dict):
        raise TokenFileError(f"{where} must be an object")
    name, digest = entry.get("name"), entry.get("sha256")
    graphs, rights = entry.get("graphs", ["*"]), entry.get("rights", [])
    entry_points = entry.get("entry_points", [])
    if not isinstance(name, str) or not name.strip():
        raise TokenFileError(f"{where}: name must be a non-empty string")
    if not isinstance(digest, str) or len(digest) != 64 or not _hex(digest):
        raise TokenFileError(f"{where} ({name}): sha256 must be 64 hex digits (the token's hash)")
    if not isinstance(graphs, list) or not all(isinstance(g, str) and g for g in graphs):
        raise TokenFileError(f"{where} ({name}): graphs must be a list of graph ids or ['*']")
    if not isinstance(rights, list) or not rights or not set(rights) <= set(RIGHTS):
        raise TokenFileError(f"{where} ({name}): rights must be some of {', '.join(RIGHTS)}")
    if not isinstance(entry_points, list) or not all(
        isinstance(e, str) and e for e in entry_points
    ):
        raise TokenFileError(
            f"{where} ({name}): entry_points must be a list of entry point ids (those started "
            "by a webhook, timer or event that this token may start through the runs API)"
        )
    if digest.lower() in seen:
        raise TokenFileError(f"{where} ({name}): the same token is listed twice")
    if any(p.name == name for p in seen.values()):
        raise TokenFileError(f"{where}: the name {name!r} is used twice")
    principal = Principal(name, frozenset(graphs), frozenset(rights), frozenset(entry_points))
    return digest.lower(), principal


def _hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True
