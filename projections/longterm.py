"""The long-term store as the log has it: items folded from a store thread's records.

A long-term store (LangGraph's `BaseStore`: values under keys in namespaces, kept across
threads) writes every `put` and `delete` as a record of its own thread
(`agentlog.events.kinds.StoreItemPut`, `StoreItemDeleted`). `StoreIndex` folds those records,
in seq order, into what a read answers (`get`, `search`, `list_namespaces`); it is pure, so
the same records always give the same answers, and a store reopened on the same log answers
as the one that wrote it.

Search is not semantic: there are no embeddings. `query` is a plain text match (see
`text_score`) and `filter` compares value fields (see `matches_filter`).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from agentlog.events.errors import InvalidArgumentError
from agentlog.events.kinds import StoreItemDeleted, StoreItemPut
from agentlog.events.record import EventRecord
from agentlog.projections.errors import ProjectionError

Namespace = tuple[str, ...]
"""A namespace: a path of labels, such as ("memories", "user-42")."""

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
"""The comparisons a filter value may hold instead of a plain value to equal."""


class LongTermStoreError(ProjectionError):
    """A long-term store was used wrongly; the message says what to change."""


class InvalidNamespaceError(LongTermStoreError, InvalidArgumentError):
    """A namespace, key, value or search argument the store cannot take (LangGraph's name);
    refused before anything is written."""


class Item:
    """One stored value and where it lives: `namespace`, `key`, `value`, and when it was
    first put (`created_at`) and last put (`updated_at`), from the commits' times (UTC)."""

    __slots__ = ("created_at", "key", "namespace", "updated_at", "value")

    def __init__(
        self,
        *,
        value: dict[str, Any],
        key: str,
        namespace: Namespace,
        created_at: datetime,
        updated_at: datetime,
    ) -> None:
        self.value, self.key, self.namespace = value, key, tuple(namespace)
        self.created_at, self.updated_at = created_at, updated_at

    def dict(self) -> dict[str, Any]:
        """The item as builtins (times in ISO 8601), as LangGraph's `Item.dict()` gives it."""
        return {
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Item):
            return NotImplemented
        return self.dict() == other.dict() and type(self) is type(other)

    def __hash__(self) -> int:
        return hash((self.namespace, self.key))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.dict().items())
        return f"{type(self).__name__}({fields})"


class SearchItem(Item):
    """An item found by `search`, with its `score`: the share of the query's words it holds
    (see `text_score`), None when the search had no query."""

    __slots__ = ("score",)

    def __init__(
        self,
        *,
        value: dict[str, Any],
        key: str,
        namespace: Namespace,
        created_at: datetime,
        updated_at: datetime,
        score: float | None = None,
    ) -> None:
        super().__init__(
            value=value, key=key, namespace=namespace, created_at=created_at,
            updated_at=updated_at,
        )  # fmt: skip
        self.score = score

    def dict(self) -> dict[str, Any]:
        return {**super().dict(), "score": self.score}


# ---- what a write may hold ------------------------------------------------------------------


def check_namespace(namespace: object, what: str = "namespace") -> Namespace:
    """`namespace` as a tuple of labels, or `InvalidNamespaceError` saying what is wrong (a
    namespace has a label at least; a prefix or path may have none)."""
    if isinstance(namespace, str) or not isinstance(namespace, tuple | list):
        raise InvalidNamespaceError(
            f"a {what} is a tuple of strings such as ('memories', 'user-42'), got "
            f"{type(namespace).__name__} {namespace!r:.60}"
            + (
                " (a one-label namespace needs a comma: ('memories',))"
                if isinstance(namespace, str)
                else ""
            )
        )
    labels = tuple(namespace)
    if not labels and what == "namespace":
        raise InvalidNamespaceError("a namespace has one label at least, such as ('memories',)")
    for label in labels:
        if not isinstance(label, str) or not label:
            raise InvalidNamespaceError(
                f"the labels of a {what} are non-empty strings, got {label!r} in {labels!r}"
            )
        if "." in label:
            raise InvalidNamespaceError(
                f"a {what} label cannot hold '.' (LangGraph refuses it too), got {label!r} "
                f"in {labels!r}"
            )
    return labels


def check_key(key: object) -> str:
    """`key` when it is a non-empty string."""
    if not isinstance(key, str) or not key:
        raise InvalidNamespaceError(f"an item's key is a non-empty string, got {key!r:.60}")
    return key


def check_index(index: object) -> list[str] | bool | None:
    """`put(index=...)`: None, False, or a list of field names a text query reads."""
    if index is None or isinstance(index, bool):
        return index
    if isinstance(index, list | tuple) and all(isinstance(f, str) and f for f in index):
        return list(index)
    raise InvalidNamespaceError(
        f"index is None (every text of the value), False (not searched by query) or a list of "
        f"field names such as ['text'], got {index!r:.60}"
    )


def check_ttl(ttl: object) -> float | None:
    """`put(ttl=...)`: minutes the item lives (a number > 0), or None for ever."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
        raise InvalidNamespaceError(f"ttl is minutes (a number > 0) or None, got {ttl!r:.60}")
    return float(ttl)


def check_page(limit: object, offset: object) -> tuple[int, int]:
    """A search's or a listing's `limit` (>= 0) and `offset` (>= 0)."""
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidNamespaceError(f"{name} must be an int >= 0, got {value!r:.60}")
    return limit, offset  # type: ignore[return-value]


# ---- what a read matches ----------------------------------------------------------------


def matches_filter(value: Mapping[str, Any], conditions: Mapping[str, Any]) -> bool:
    """Whether `value` meets every condition: a field equal to the condition's value, or,
    for a condition that is a dict of operators (`{"$gte": 3}`), each comparison
    (`OPERATORS`; an ordering between values that cannot be ordered is false)."""
    for name, wanted in conditions.items():
        found = value.get(name)
        if isinstance(wanted, Mapping) and wanted and all(k in OPERATORS for k in wanted):
            if not all(_compare(found, op, operand) for op, operand in wanted.items()):
                return False
        elif found != wanted:
            return False
    return True


def check_filter(conditions: object) -> dict[str, Any] | None:
    """A search's `filter`: None or a dict from field names to values (or operator dicts)."""
    if conditions is None:
        return None
    if not isinstance(conditions, Mapping) or not all(isinstance(k, str) for k in conditions):
        raise InvalidNamespaceError(
            f"filter is a dict from field names to values, such as {{'kind': 'note'}}, got "
            f"{conditions!r:.60}"
        )
    for name, wanted in conditions.items():
        if isinstance(wanted, Mapping):
            odd = [
                k for k in wanted if isinstance(k, str) and k.startswith("$") and k not in OPERATORS
            ]
            if odd:
                raise InvalidNamespaceError(
                    f"filter on {name!r} uses {odd[0]!r}; the operators are {', '.join(OPERATORS)}"
                )
    return dict(conditions)


def _compare(found: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(found == operand)
    if op == "$ne":
        return bool(found != operand)
    try:
        if op == "$gt":
            return bool(found > operand)
        if op == "$gte":
            return bool(found >= operand)
        if op == "$lt":
            return bool(found < operand)
        return bool(found <= operand)
    except TypeError:
        return False


def texts(value: Any, fields: Sequence[str] | None) -> Iterator[str]:
    """The strings of `value` a text query reads: every one, or those under `fields`."""
    if fields is not None:
        for name in fields:
            if isinstance(value, Mapping) and name in value:
                yield from texts(value[name], None)
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for inner in value.values():
            yield from texts(inner, None)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from texts(inner, None)


def text_score(query: str, value: Any, index: list[str] | bool | None) -> float:
    """The share of the query's words (split on white space, case-folded) found in the item's
    text as substrings: 1.0 when all are, 0.0 when none is or the item is not searchable
    (`index=False`). No embeddings, no stemming: a documented, exact rule."""
    words = query.casefold().split()
    if not words or index is False:
        return 0.0
    text = "\n".join(texts(value, index if isinstance(index, list) else None)).casefold()
    return sum(1 for word in words if word in text) / len(words)


def namespace_matches(namespace: Namespace, path: Namespace, *, suffix: bool = False) -> bool:
    """Whether `namespace` starts (ends, with `suffix`) with `path`; "*" in `path` matches
    any one label."""
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(reversed(namespace), reversed(path), strict=False)
        if suffix
        else zip(namespace, path, strict=False)
    )
    return all(want == "*" or label == want for label, want in pairs)


# ---- the fold -------------------------------------------------------------------------------


def op_digest(event: StoreItemPut | StoreItemDeleted) -> str:
    """What a write says, without who made it: a write a step makes again is the one it
    made before only when this is the same."""
    said = msgspec.structs.replace(event, node=None, op_id=None)
    return hashlib.sha256(msgspec.msgpack.encode(said)).hexdigest()


@dataclass
class _Entry:
    value: dict[str, Any]
    created: float
    updated: float
    index: list[str] | bool | None
    expires: float | None

    def alive(self, now: float | None) -> bool:
        return self.expires is None or now is None or now < self.expires


def _when(at: float) -> datetime:
    return datetime.fromtimestamp(at, tz=UTC)


@dataclass
class StoreIndex:
    """A store thread's records folded into its items, up to `seq` (whose chain hash is
    `hash`). Namespaces and keys keep the order they were first put in (a key deleted
    and put again goes last), which is the order of a search without a query.

    `applied` maps the op id of each write a node made (see `StoreItemPut.op_id`) to what it
    said (`op_digest`), so a step run again after a crash finds its writes made.
    """

    items: dict[Namespace, dict[str, _Entry]] = field(default_factory=dict)
    applied: dict[str, str] = field(default_factory=dict)
    seq: int = 0
    hash: str | None = None

    def apply(self, record: EventRecord) -> None:
        """Fold the record that follows `seq`; records of other kinds change nothing."""
        if record.seq != self.seq + 1:
            raise LongTermStoreError(
                f"the store index of thread {record.thread_id!r} stands at seq {self.seq} and "
                f"was handed seq {record.seq}: records are folded in order, once"
            )
        event = record.event
        if isinstance(event, StoreItemPut):
            self._put(event, record.at)
        elif isinstance(event, StoreItemDeleted):
            self._delete(event)
        if isinstance(event, StoreItemPut | StoreItemDeleted) and event.op_id is not None:
            self.applied[event.op_id] = op_digest(event)
        self.seq, self.hash = record.seq, record.hash

    def _put(self, event: StoreItemPut, at: float) -> None:
        namespace = tuple(event.namespace)
        keys = self.items.setdefault(namespace, {})
        old = keys.get(event.key)
        created = old.created if old is not None and old.alive(at) else at
        if old is not None and not old.alive(at):
            del keys[event.key]  # it had expired: this put makes a new item, placed last
        expires = None if event.ttl is None else at + event.ttl * 60.0
        keys[event.key] = _Entry(event.value, created, at, event.index, expires)

    def _delete(self, event: StoreItemDeleted) -> None:
        keys = self.items.get(tuple(event.namespace))
        if keys is not None:
            keys.pop(event.key, None)

    # ---- reads ------------------------------------------------------------------------------

    def get(self, namespace: Namespace, key: str, now: float | None = None) -> Item | None:
        """The item under `key` in `namespace`, None when there is none (or it expired by
        `now`). Items hold copies: changing one changes nothing stored."""
        entry = self.items.get(namespace, {}).get(key)
        if entry is None or not entry.alive(now):
            return None
        return Item(
            value=copy.deepcopy(entry.value), key=key, namespace=namespace,
            created_at=_when(entry.created), updated_at=_when(entry.updated),
        )  # fmt: skip

    def search(
        self,
        prefix: Namespace,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        now: float | None = None,
    ) -> list[SearchItem]:
        """Items under namespaces starting with `prefix` that meet `filter`; with `query`,
        only those with a text score above 0, best first (ties in written order)."""
        found: list[tuple[float | None, Namespace, str, _Entry]] = []
        for namespace, keys in self.items.items():
            if namespace[: len(prefix)] != prefix:
                continue
            for key, entry in keys.items():
                if not entry.alive(now) or (filter and not matches_filter(entry.value, filter)):
                    continue
                score = None if query is None else text_score(query, entry.value, entry.index)
                if score is not None and score <= 0:
                    continue
                found.append((score, namespace, key, entry))
        if query is not None:
            found.sort(key=lambda hit: -(hit[0] or 0.0))  # stable: ties keep written order
        return [
            SearchItem(
                value=copy.deepcopy(entry.value),
                key=key,
                namespace=namespace,
                score=score,
                created_at=_when(entry.created),
                updated_at=_when(entry.updated),
            )
            for score, namespace, key, entry in found[offset : offset + limit]
        ]

    def list_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        suffix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
        now: float | None = None,
    ) -> list[Namespace]:
        """The namespaces holding at least one item, sorted, matching `prefix` and `suffix`
        ("*" matches any label), cut to `max_depth` labels (then without repeats)."""
        names = [
            namespace
            for namespace, keys in self.items.items()
            if any(entry.alive(now) for entry in keys.values())
            and (prefix is None or namespace_matches(namespace, prefix))
            and (suffix is None or namespace_matches(namespace, suffix, suffix=True))
        ]
        if max_depth is not None:
            names = list({namespace[:max_depth] for namespace in names})
        return sorted(names)[offset : offset + limit]


__all__ = [
    "OPERATORS",
    "InvalidNamespaceError",
    "Item",
    "LongTermStoreError",
    "Namespace",
    "SearchItem",
    "StoreIndex",
    "check_filter",
    "check_index",
    "check_key",
    "check_namespace",
    "check_page",
    "check_ttl",
    "matches_filter",
    "namespace_matches",
    "op_digest",
    "text_score",
]
