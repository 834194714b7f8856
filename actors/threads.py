"""The threads a runtime keeps for itself beside its users' threads, by name: its record of
triggers (`RuntimeConfig.runtime_thread`, "__runtime__" by default, with the lease and worker
threads under it) and the shared keys' threads ("__shared__/<key>"). No run, fork or client
may create one (`RuntimeConfig.is_internal` asks here), and listings of the users' threads
(`agentlog threads`, `POST /threads/search`) leave them out. A light module: the command
line reads it without loading the runtime."""

from __future__ import annotations

RUNTIME_THREAD = "__runtime__"
"""The default name of the thread where an agent runtime records its triggers."""

SHARED_THREAD_PREFIX = "__shared__/"
"""Synchronized shared keys live on threads named by this prefix and the key."""


def internal_thread(thread_id: str, runtime_thread: str = RUNTIME_THREAD) -> bool:
    """Whether `thread_id` is one of the runtime's own threads, not a user's."""
    return (
        thread_id == runtime_thread
        or thread_id.startswith(runtime_thread + "/")
        or thread_id.startswith(SHARED_THREAD_PREFIX)
    )
