"""Reading a thread without its state class: the stored fields are data.

A thread run with a user's subclass of `AgentState` records custom fields the library does
not know. The engine records, in `RunStarted` and `Forked`, each custom field's reducer by
qualified name (`state_fields`); from that record this module builds an open state class
(the fields typed `Any`, the library's own reducers resolved by name) so the one fold
replays the thread with no user code imported.

What cannot be reproduced is said, never guessed silently: a field reduced by a user's own
function shows its last recorded update (or a snapshot's exact value when no update follows
the snapshot), and a field of a thread written before reducers were recorded is taken as
replaced by each update. Each such field gets a note (`OpenState.notes`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, cast

from pydantic import create_model

from agentlog.events import (
    EventRecord,
    EventStore,
    Forked,
    RunStarted,
    StateUpdated,
    ThreadNotFoundError,
)
from agentlog.events.kinds import FIELD_KINDS
from agentlog.projections.fold import CONTEXT_FIELDS, Fold, gc_paused
from agentlog.projections.messages import Message
from agentlog.projections.names import current_name
from agentlog.projections.reducers import (
    add_messages,
    append_items,
    replace_messages,
    replace_value,
)
from agentlog.projections.state import AgentState
from agentlog.projections.views import PointOutOfRangeError, state_at

__all__ = [
    "LIBRARY_REDUCERS",
    "OpenState",
    "library_reducer",
    "open_state_class",
    "open_states",
    "reducer_name",
    "state_fields",
]

_OWN = ("context_summary", "execution_meta")
"""AgentState's fields that are never custom (the context is, when its reducer changes)."""

ORIGIN_KEY = "__agentlog_fields__"
"""Attribute of an open class: the recorded field map it was built from."""


def reducer_name(fn: Callable[..., Any]) -> str:
    """The qualified name a reducer is recorded under: `module.qualname`."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def state_fields(state_cls: type[AgentState]) -> dict[str, str | None]:
    """Each custom field of `state_cls` and its reducer's qualified name (None: replace).

    This is what the engine records in `RunStarted.fields` and `Forked.fields`. The
    context is listed only when a subclass gives it a reducer other than `add_messages`.
    An open class answers with the map it was built from.
    """
    recorded = state_cls.__dict__.get(ORIGIN_KEY)
    if isinstance(recorded, dict):
        return dict(recorded)
    fields: dict[str, str | None] = {}
    for name, info in state_cls.model_fields.items():
        if name in _OWN:
            continue
        reducer = next((m for m in info.metadata if callable(m)), None)
        if name == "context" and reducer in (None, add_messages):
            continue
        fields[name] = None if reducer is None else reducer_name(reducer)
    return fields


# ---- the library's reducers, over stored data ------------------------------------------------


def _messages(value: Any) -> list[Message]:
    return [m if isinstance(m, Message) else Message.model_validate(m) for m in value or []]


def _add_messages(left: Any, right: Any) -> list[Message]:
    return add_messages(_messages(left), _messages(right))


def _replace_messages(left: Any, right: Any) -> list[Message]:
    return replace_messages(_messages(left), _messages(right))


class _Keyed:
    """A stored item seen by `append_items`: its `id` is the item's "id" key or attribute."""

    __slots__ = ("id", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        key = value.get("id") if isinstance(value, dict) else getattr(value, "id", value)
        try:
            hash(key)
        except TypeError:
            key = repr(key)
        self.id = key


def _append_items(left: Any, right: Any) -> list[Any]:
    merged = append_items([_Keyed(v) for v in left or []], [_Keyed(v) for v in right or []])
    return [item.value for item in merged]


def _replace(left: Any, right: Any) -> Any:
    return right


LIBRARY_REDUCERS: dict[str, Callable[[Any, Any], Any]] = {
    reducer_name(add_messages): _add_messages,
    reducer_name(append_items): _append_items,
    reducer_name(replace_messages): _replace_messages,
    reducer_name(replace_value): _replace,
}
"""The library's reducers by recorded name, as functions of stored (builtin) values."""


def library_reducer(recorded: str | None) -> Callable[[Any, Any], Any] | None:
    """The library reducer a record names (by today's name or a legacy one), or None."""
    return None if recorded is None else LIBRARY_REDUCERS.get(current_name(recorded))


# ---- the open class ----------------------------------------------------------------------------


def _note_user(reducer: str) -> str:
    return (
        f"reduced by {reducer}, which cannot run without its code: shown is the last "
        "recorded update, the real value may differ"
    )


NOTE_UNRECORDED = (
    "how this field is reduced was not recorded (the thread predates that record): "
    "each update is shown as replacing the value"
)
NOTE_UNSET = "never set in the log: its value is the state class's default, not recorded"


def open_state_class(
    fields: Mapping[str, str | None],
    unrecorded: Sequence[str] = (),
    *,
    origin: Mapping[str, str | None] | None = None,
) -> type[AgentState]:
    """A dynamic `AgentState` subclass with each field of `fields` typed `Any` (default None).

    Library reducers are resolved by name; a user's reducer, `None` and the `unrecorded`
    names (fields seen in the log but not in any record of `fields`) become replace.
    `state_fields` of the class answers `origin` (default: `fields`), so a fork made with it
    records the source's reducers, not the open class's.
    """
    definitions: dict[str, Any] = {}
    for name, reducer in fields.items():
        fn = library_reducer(reducer) or _replace
        if name == "context":
            context_fn = add_messages if fn is _add_messages else replace_messages
            definitions[name] = (Annotated[list[Message], context_fn], [])
        else:
            definitions[name] = (Annotated[Any, fn], None)
    for name in unrecorded:
        definitions.setdefault(name, (Annotated[Any, _replace], None))
    cls = cast(
        type[AgentState],
        create_model("OpenState", __base__=AgentState, **definitions),
    )
    setattr(cls, ORIGIN_KEY, dict(fields if origin is None else origin))
    return cls


@dataclass
class OpenState:
    """A thread's state at one point, folded with an open class, and what to say about it.

    `notes` maps a field name to why its shown value may not be the real one; `unset` are
    the fields declared in the record but never given a value up to this point (shown
    without a value: their default lives in the user's class).
    """

    seq: int
    state: AgentState
    notes: dict[str, str] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """True when every shown value is the value the user's class would hold."""
        return not self.notes


@dataclass
class _Scan:
    """What the records up to a point say about the thread's fields."""

    declared: dict[str, str | None] = field(default_factory=dict)
    set_at: dict[str, int] = field(default_factory=dict)  # first seq giving a value

    def read(self, record: EventRecord) -> None:
        event = record.event
        if isinstance(event, RunStarted | Forked):
            for name, reducer in (getattr(event, "fields", None) or {}).items():
                self.declared.setdefault(name, reducer)
        if isinstance(event, Forked):
            for name in event.state:
                if name not in AgentState.model_fields:
                    self.set_at.setdefault(name, record.seq)
        elif isinstance(event, StateUpdated):
            for name in event.values:
                if name not in CONTEXT_FIELDS and name not in AgentState.model_fields:
                    self.set_at.setdefault(name, record.seq)


async def _read(store: EventStore, thread_id: str, first: int, last: int) -> list[EventRecord]:
    return [record async for record in store.read(thread_id, first, last)]


SCAN_BY_KIND = 256
"""Up to this many field-bearing records, they are read one by one rather than the thread."""


async def open_states(
    store: EventStore, thread_id: str, seqs: Sequence[int], *, use_snapshots: bool = True
) -> list[OpenState]:
    """The thread's state after each of `seqs`, folded with one open class built from the log.

    A thread without custom fields is read as `state_at` reads it (snapshot and tail). One
    with them is read once up to the largest seq; each point starts from the newest snapshot
    at or before it when one validates, so a user-reduced field not updated since that
    snapshot shows its exact value. `use_snapshots=False` reads the log alone.
    """
    last = await store.last_seq(thread_id)
    if last == 0:
        raise ThreadNotFoundError(thread_id)
    for seq in seqs:
        if not 0 <= seq <= last:
            raise PointOutOfRangeError(
                f"thread {thread_id!r} has {last} records; seq {seq} does not exist"
            )
    top = max(seqs, default=0)
    bearing: set[int] = set()
    for kind in FIELD_KINDS:
        bearing.update(s for s in await store.seqs_of_kind(thread_id, kind) if s <= top)
    records: list[EventRecord] | None = None
    scan = _Scan()
    if len(bearing) <= SCAN_BY_KIND:
        for seq in sorted(bearing):
            for record in await _read(store, thread_id, seq, seq):
                scan.read(record)
    else:
        with gc_paused():
            records = await _read(store, thread_id, 1, top)
        for record in records:
            scan.read(record)
    snapshots = {
        seq: await store.load_snapshot(thread_id, seq) if use_snapshots else None
        for seq in set(seqs)
        if seq
    }
    snapshot_fields = {
        name
        for snap in snapshots.values()
        if snap is not None
        for name in snap.state
        if name not in AgentState.model_fields
    }
    seen = set(scan.set_at) | snapshot_fields
    if not seen and "context" not in scan.declared:
        return [
            OpenState(
                seq,
                await state_at(store, thread_id, seq, use_snapshots=use_snapshots),
                unset=sorted(scan.declared),
            )
            for seq in seqs
        ]
    if records is None:
        with gc_paused():
            records = await _read(store, thread_id, 1, top)
    unrecorded = sorted(name for name in seen if name not in scan.declared)
    cls = open_state_class(
        {name: r for name, r in scan.declared.items() if name in seen or name == "context"},
        unrecorded,
        origin=scan.declared,
    )
    return [_fold_point(cls, scan, records, seq, snapshots.get(seq)) for seq in seqs]


def _fold_point(
    cls: type[AgentState],
    scan: _Scan,
    records: Sequence[EventRecord],
    seq: int,
    snapshot: Any,
) -> OpenState:
    fold: Fold[AgentState] | None = None
    anchored = (
        snapshot is not None
        and 0 < snapshot.seq <= min(seq, len(records))
        and bool(snapshot.hash)
        and bool(snapshot.digest)  # its content checked by the store as it was loaded
        and snapshot.hash == records[snapshot.seq - 1].hash  # records are chain-checked
    )
    if anchored:
        try:
            fold = Fold(cls.model_validate(copy.deepcopy(snapshot.state)), seq=snapshot.seq)
        except ValueError:
            fold = None  # a snapshot this class cannot hold: fold from the start instead
    exact_from = fold.seq if fold is not None else 0
    from_snapshot = set(snapshot.state) if fold is not None else set()
    if fold is None:
        fold = Fold.new(cls)
    with gc_paused():
        fold.apply_all(records[fold.seq : seq])
    point = OpenState(seq=seq, state=fold.state)
    for name in cls.model_fields:
        if name in AgentState.model_fields:
            continue
        first = scan.set_at.get(name)
        if (first is None or first > seq) and name not in from_snapshot:
            point.unset.append(name)
            continue
        if name not in scan.declared:
            note = NOTE_UNRECORDED
        else:
            reducer = scan.declared[name]
            if reducer is None or library_reducer(reducer) is not None:
                continue
            note = _note_user(reducer)
        # Exact when nothing reduced it since the last whole value (a snapshot or a fork).
        if _updated_between(records, name, exact_from, seq):
            point.notes[name] = note
    point.unset += [n for n in scan.declared if n not in cls.model_fields and n != "context"]
    return point


def _updated_between(records: Sequence[EventRecord], name: str, after: int, upto: int) -> bool:
    """Whether a state update of `name` lies in records (after, upto] and no fork follows it."""
    for record in reversed(records[after:upto]):
        event = record.event
        if isinstance(event, Forked) and name in event.state:
            return False
        if isinstance(event, StateUpdated) and name in event.values:
            return True
    return False
