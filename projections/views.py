"""Reading state out of a store: the state at a point, and snapshots that make it cheap."""

from __future__ import annotations

import logging
from typing import TypeVar

import msgspec
from pydantic import ValidationError

from events.errors import ThreadNotFoundError
from events.record import EventRecord, Snapshot
from events.store import EventStore

from .edge import state_data, to_builtins
from .errors import ProjectionError
from .fold import Fold, gc_paused
from .state import AgentState

S = TypeVar("S", bound=AgentState)

_log = logging.getLogger("agentlog.snapshots")


class PointOutOfRangeError(ProjectionError, IndexError):
    """A seq or step beyond what the thread has recorded."""


def state_type_name(state_cls: type[AgentState]) -> str:
    """The name a snapshot records for its state class."""
    return f"{state_cls.__module__}.{state_cls.__qualname__}"


async def fold_at(
    store: EventStore,
    thread_id: str,
    seq: int | None = None,
    state_cls: type[S] = AgentState,  # type: ignore[assignment]
    *,
    use_snapshots: bool = True,
) -> Fold[S]:
    """A fold positioned after record `seq` (the last one when None).

    It starts from the newest snapshot at or before `seq` and reads only the records after it.
    A snapshot whose hash is not the chain's at its seq raises `ChainBrokenError` naming that
    seq (`use_snapshots=False` reads the log alone); a damaged one, `CorruptSnapshotError`;
    one the class cannot validate is passed over for the log.
    """
    if seq is not None and seq < 0:
        raise PointOutOfRangeError(f"seq must be >= 0, got {seq}")
    last = await store.last_seq(thread_id)
    if last == 0:
        raise ThreadNotFoundError(thread_id)
    if seq is not None and seq > last:
        raise PointOutOfRangeError(
            f"thread {thread_id!r} has {last} records; seq {seq} does not exist yet"
        )
    target = last if seq is None else seq
    with gc_paused():
        return await _fold_from_snapshot(store, thread_id, target, state_cls, use_snapshots)


async def _fold_from_snapshot(
    store: EventStore, thread_id: str, target: int, state_cls: type[S], use_snapshots: bool
) -> Fold[S]:
    fold: Fold[S] | None = None
    anchor: bytes | None = None
    if use_snapshots and target > 0:
        snapshot = await store.load_snapshot(thread_id, target)
        if (
            snapshot is not None
            and snapshot.hash
            and snapshot.state_type == state_type_name(state_cls)
        ):
            try:
                state = state_cls.model_validate(snapshot.state)
            except ValidationError as exc:
                # A snapshot this class cannot hold (the class changed since, or the row was
                # altered): the log is the truth, so fold it instead; verify reports the row.
                _log.warning(
                    "snapshot at seq %d of thread %r does not validate as %s (%s): folding "
                    "the log instead",
                    snapshot.seq,
                    thread_id,
                    state_cls.__name__,
                    exc.errors()[0]["msg"] if exc.errors() else exc,
                )
            else:
                fold = Fold(state, seq=snapshot.seq, copy=False)
                fold.hash, anchor = snapshot.hash, bytes.fromhex(snapshot.hash)
    if fold is None:
        fold = Fold.new(state_cls)
    if fold.seq < target or anchor is not None:
        # Reading from the snapshot on checks every link, starting with the record the
        # snapshot names: a snapshot whose hash is not the chain's at its seq is refused
        # with `ChainBrokenError` naming that seq. Not folded around: either the snapshot
        # or the log was rewritten, and only a check of both (`verify`) can say which.
        chunk: list[EventRecord] = []
        async for record in store.read(thread_id, fold.seq + 1, target, after_hash=anchor):
            chunk.append(record)
            if len(chunk) >= 4096:
                fold.apply_all(chunk)
                chunk.clear()
        fold.apply_all(chunk)
    return fold


async def state_at(
    store: EventStore,
    thread_id: str,
    seq: int | None = None,
    state_cls: type[S] = AgentState,  # type: ignore[assignment]
    *,
    use_snapshots: bool = True,
) -> S:
    """The thread's state after record `seq` (after its last record when None)."""
    fold = await fold_at(store, thread_id, seq, state_cls, use_snapshots=use_snapshots)
    return fold.state


def snapshot_of(
    thread_id: str, seq: int, state: AgentState, at: float = 0.0, *, hash: str = ""
) -> Snapshot:
    """A whole-state snapshot of `state` after record `seq`, whose chain hash is `hash`.

    Its data is `state_data(state)`: exact builtins, so the snapshot folds back to `state`.
    A snapshot without the hash is never used by a reader (nothing would anchor it). It
    costs every message's bytes again: `projections.snapshots.SnapshotWriter` writes the
    form that references the log instead.
    """
    data = state_data(state)
    return Snapshot(
        thread_id=thread_id,
        seq=seq,
        state=data,
        state_type=state_type_name(type(state)),
        at=at,
        hash=hash,
    )


async def take_snapshot(
    store: EventStore,
    thread_id: str,
    seq: int | None = None,
    state_cls: type[AgentState] = AgentState,
) -> Snapshot:
    """Fold the thread up to `seq` (the end by default) and store a snapshot of it there.

    The snapshot stored references its messages in the log (`projections.snapshots`); the
    one returned holds the whole state, as `load_snapshot` gives it back.
    """
    from .snapshots import write_snapshot  # snapshots builds on this module

    if seq == 0:
        raise PointOutOfRangeError(
            f"seq 0 of thread {thread_id!r} lies before its first record: there is no state "
            "to take a snapshot of"
        )
    fold = await fold_at(store, thread_id, seq, state_cls)
    if not fold.hash:
        async for record in store.read(thread_id, fold.seq, fold.seq):
            fold.hash = record.hash
    stored = await write_snapshot(store, thread_id, fold.seq, fold.state, hash=fold.hash)
    context = [to_builtins(m) for m in fold.state.context]
    return msgspec.structs.replace(stored, state={**stored.state, "context": context})
