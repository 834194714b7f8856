"""The threads a runtime keeps for itself beside its users' threads, by name: its record of
triggers (`RuntimeConfig.runtime_thread`, "__runtime__" by default, with the lease and worker
threads under it), the shared keys' threads ("__shared__/<key>"), the long-term stores'
("__store__" unless named) and the background tasks' ("__tasks__/<thread>"). No run, fork or
client may create one (`RuntimeConfig.is_internal` asks here), and listings of the users'
threads (`agentlog threads`, `POST /threads/search`) leave them out. A reader that does not
know the configured name tells such a thread by the log itself: it opens with a runtime
record (`RUNTIME_KINDS`) or a store write (`STORE_KINDS`). A light module: the command line
reads it without loading the runtime."""

from __future__ import annotations

from collections.abc import Iterable

from agentlog.events.errors import AgentlogError
from agentlog.events.kinds import RUNTIME_KINDS, STORE_KINDS
from agentlog.events.store import EventStore

RUNTIME_THREAD = "__runtime__"
"""The default name of the thread where an agent runtime records its triggers."""

SHARED_THREAD_PREFIX = "__shared__/"
"""Synchronized shared keys live on threads named by this prefix and the key."""

TASKS_THREAD_PREFIX = "__tasks__/"
"""The background tasks a run's nodes start are recorded on this prefix and the run's thread."""

STORE_THREAD = "__store__"
"""A long-term store's thread (`agentlog.actors.engine.longterm.LogStore`), unless named."""


def internal_thread(
    thread_id: str, runtime_thread: str = RUNTIME_THREAD, first_kind: str | None = None
) -> bool:
    """Whether `thread_id` is one of the runtime's own threads, not a user's: by its name, or
    by the kind of its first record (`first_kind`, when the caller has read it)."""
    return (
        thread_id.startswith(runtime_thread + "/")
        or thread_id.startswith((SHARED_THREAD_PREFIX, STORE_THREAD + "/", TASKS_THREAD_PREFIX))
        or thread_id in (runtime_thread, STORE_THREAD)
        or first_kind in RUNTIME_KINDS | STORE_KINDS
    )


async def internal_threads(
    store: EventStore, thread_ids: Iterable[str], runtime_thread: str = RUNTIME_THREAD
) -> set[str]:
    """The runtime's own threads among `thread_ids` (`internal_thread`), reading a thread's
    first record only when its name does not already say (one that cannot be read is left
    to the listing, which reports it)."""
    found: set[str] = set()
    for thread_id in thread_ids:
        first = None
        if not internal_thread(thread_id, runtime_thread):
            try:
                async for record in store.read(thread_id, 1, 1):
                    first = record.kind
            except AgentlogError:  # listed, as the user's: its reader says what is wrong
                continue
            if first is None:
                continue
        if internal_thread(thread_id, runtime_thread, first):
            found.add(thread_id)
    return found
