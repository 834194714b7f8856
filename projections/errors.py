"""Typed errors of the projections: transitions the state machine refuses."""

from __future__ import annotations

from events.errors import AgentlogError, InvalidArgumentError


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


class ForkPointInCommitError(ProjectionError, InvalidArgumentError):
    """A fork point inside a commit: the thread never stood there (nothing was written).

    `before` and `after` are the nearest seqs that are fork points (None: there is none)."""

    def __init__(self, message: str, *, seq: int, before: int | None, after: int | None) -> None:
        self.seq, self.before, self.after = seq, before, after
        super().__init__(message)
