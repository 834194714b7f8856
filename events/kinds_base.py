"""The base of every event kind: a frozen msgspec struct tagged by its `kind`, with the
class-level traits that say what a kind is for (`agentlog.events.kinds` holds the kinds)."""

from __future__ import annotations

from typing import ClassVar

import msgspec


class BaseEvent(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", gc=False):
    """Common base: the `kind` tag is the class's snake-case name; VERSION is its schema.

    Events are values that never form reference cycles, so the cyclic GC skips them.

    The class-level traits below say what a kind is for, so a reader asks the kind
    (`type(event).ENDS_RUN`, or the sets of kind names at the end of this module) instead of
    listing kind names of its own. A kind sets the traits that hold for it.
    """

    VERSION: ClassVar[int] = 1
    KIND: ClassVar[str] = ""
    """The kind's name, its `kind` tag (set for each kind from its `tag`)."""
    CARRIES_MESSAGES: ClassVar[bool] = False
    """Its payload carries whole messages (see `agentlog.events.store.messages_of`)."""
    SETS_FIELDS: ClassVar[bool] = False
    """It declares or sets custom state fields (their reducers, or their values)."""
    OPENS_RUN: ClassVar[bool] = False
    """It starts or resumes a run: a run's commit that holds the run's input."""
    RUN_INPUT: ClassVar[bool] = False
    """It may carry a run's input: written in the commit that opens the run, after its
    `OPENS_RUN` record (a replay reads such records as what came from outside)."""
    ENDS_RUN: ClassVar[bool] = False
    """It ends a run or pauses it (completed, failed, interrupted, stopped, cancelled)."""
    TIMED: ClassVar[bool] = False
    """It records one execution and how long it took: a node's step, a tool call."""
    STEP_OUTPUT: ClassVar[bool] = False
    """A node's output or a fact a run records: written in the same commit as the record
    that closes (or opens) the run's step, never on its own by a run."""
    RUNTIME_ONLY: ClassVar[bool] = False
    """An agent runtime writes it only to its own thread, never to a run's thread."""
    STORE_WRITE: ClassVar[bool] = False
    """It changes the long-term store (`agentlog.actors.engine.longterm`): written only to
    the store's own thread, never to a run's thread, each write a commit of its own."""
    ABOUT_LOG: ClassVar[bool] = False
    """It records what was done to the log itself (a prune): the thread's state is unchanged."""


__all__ = ["BaseEvent"]
