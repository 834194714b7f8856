"""`journal_for`, kept for callers that still name it: the journal actor is gone.

Every write goes through the commit path (`agentlog.actors.engine.commit`) straight to the
store, which group-commits the appends made in one turn of the loop; an actor in front of it
added a queue hop per append and batched nothing. `journal_for(store).append` is the
store's own append.
"""

from __future__ import annotations

from agentlog.events import EventStore


def journal_for(store: EventStore) -> EventStore:
    """The store itself: `journal_for(store).append` is its append (kept for callers not
    yet moved to the commit path)."""
    return store
