"""Typed errors of the projections: transitions the state machine refuses."""

from __future__ import annotations

from pydantic import ValidationError

from agentlog.events.errors import (
    AgentlogError,
    CorruptRecordError,
    InvalidArgumentError,
    StoreError,
)
from agentlog.events.kinds import kind_of
from agentlog.events.record import EventRecord


class ProjectionError(AgentlogError):
    """A state change was refused before anything was written."""


class IllegalTransitionError(ProjectionError):
    """The event is not a legal next step from the current state (nothing was written)."""

    def __init__(self, kind: str, why: str) -> None:
        self.kind = kind
        super().__init__(f"cannot record {kind!r}: {why}")


class InvalidStateUpdateError(ProjectionError, ValueError):
    """A state update names an unknown field or holds a value its field rejects."""


class StateMethodError(ProjectionError, RuntimeError):
    """A node called a state method the engine does the work of; the message says what to do."""


class UnfoldableRecordError(CorruptRecordError, InvalidStateUpdateError):
    """A committed record's payload does not fit the thread's state (a message without its
    fields, a value its field rejects): the thread was written with another state class, or
    the log was written or edited outside agentlog. Raised by the fold, naming thread and seq;
    readers answer it as other damaged data (an `InvalidStateUpdateError` too, so a reader
    that retries with a class built from the log still does)."""

    def __init__(self, thread_id: str, seq: int, kind: str, why: str) -> None:
        StoreError.__init__(
            self,
            f"record seq {seq} of thread {thread_id!r} ({kind!r}) does not fit the thread's "
            f"state ({why}); if the thread was written with another state class replay with "
            "it (state_cls=...), otherwise the log was written outside agentlog: run "
            "`agentlog verify` and restore the file from a verified copy",
        )
        self.thread_id = thread_id
        self.seq = seq
        self.kind = kind


class ForkPointInCommitError(ProjectionError, InvalidArgumentError):
    """A fork point inside a commit: the thread never stood there (nothing was written).

    `before` and `after` are the nearest seqs that are fork points (None: there is none)."""

    def __init__(self, message: str, *, seq: int, before: int | None, after: int | None) -> None:
        self.seq, self.before, self.after = seq, before, after
        super().__init__(message)


class StateKeyError(ProjectionError, KeyError):
    """`state[key]` names no field of the state (the message lists the fields)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _loc_part(part: int | str) -> str:
    """One step of a validation error's location: a stored key quoted when it is not plain
    printable text, so the message carries no control character from the log."""
    return part if isinstance(part, str) and part.isprintable() else repr(part)


def unfoldable(record: EventRecord, exc: ValueError) -> UnfoldableRecordError:
    """The typed error of a committed record the fold cannot take, naming thread and seq; a
    validation error says where and what, never the stored value itself."""
    if isinstance(exc, UnfoldableRecordError):
        return exc
    if isinstance(exc, ValidationError):
        why = "; ".join(
            f"{'.'.join(map(_loc_part, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()[:3]
        )
    else:
        why = str(exc)
    return UnfoldableRecordError(record.thread_id, record.seq, kind_of(record.event), why)
