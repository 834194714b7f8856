"""Typed errors of the event log: each names what is wrong and what to do about it."""

from __future__ import annotations


class AgentlogError(Exception):
    """Base of every error agentlog raises on purpose."""


class InvalidArgumentError(AgentlogError, ValueError):
    """A call was given an argument it cannot take; the message names it and what it takes."""


class StoreError(AgentlogError):
    """Something about an event store or its contents is wrong."""


class ConcurrencyError(StoreError):
    """Another writer appended to the thread first: re-read it and decide again."""

    def __init__(self, thread_id: str, expected_seq: int, actual_seq: int) -> None:
        self.thread_id = thread_id
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        super().__init__(
            f"thread {thread_id!r} is at seq {actual_seq}, not the expected {expected_seq}: "
            "another writer appended first; re-read the thread and decide again"
        )


class ThreadNotFoundError(StoreError, LookupError):
    """The thread has no events in this store."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"thread {thread_id!r} does not exist in this store: check the thread id "
            "(list them with store.threads())"
        )


class InvalidAppendError(StoreError, ValueError):
    """An append was asked with arguments that can never be stored."""


class NotAnAgentlogDatabaseError(StoreError):
    """The file exists but is not an agentlog database; it was not modified."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(
            f"{path} is not an agentlog database ({why}); it was left untouched: "
            "point the store at an agentlog database or at a new path"
        )


class SchemaVersionError(StoreError):
    """The data was written by a newer agentlog than this one."""


class CorruptRecordError(StoreError):
    """A stored record cannot be decoded: its bytes were damaged or altered."""

    def __init__(self, thread_id: str, seq: int, why: str) -> None:
        self.thread_id = thread_id
        self.seq = seq
        super().__init__(
            f"record seq {seq} of thread {thread_id!r} is corrupt ({why}); "
            "run verify() on the thread to locate every damaged record"
        )


class UnknownEventKindError(StoreError):
    """A stored record names an event kind this version of agentlog does not know."""

    def __init__(self, kind: str, thread_id: str | None = None, seq: int | None = None) -> None:
        self.kind = kind
        where = f" at seq {seq} of thread {thread_id!r}" if thread_id is not None else ""
        super().__init__(
            f"unknown event kind {kind!r}{where}: it was written by a newer or foreign "
            "program; upgrade agentlog or register the kind"
        )


class CorruptDatabaseError(StoreError):
    """The database file itself is damaged beyond a single record."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(
            f"{path} is damaged ({why}); it was not written to: restore it from a backup "
            f"or run `sqlite3 {path} .recover` on a copy"
        )


class StoreUnavailableError(StoreError):
    """The store could not complete an operation for a passing reason (locked, disk full)."""


class StoreClosedError(StoreError):
    """The store was closed; open a new one to keep working."""


class ThreadBusyError(StoreError):
    """Another run (in this process or another) owns the thread: wait for it, or stop it."""


class ClaimLostError(ThreadBusyError):
    """This run's claim on a thread was taken over (it looked dead): it may no longer write."""


class ChainBrokenError(CorruptRecordError):
    """A record read does not match its hash link: the log was altered behind the store."""

    def __init__(self, thread_id: str, seq: int, why: str) -> None:
        StoreError.__init__(
            self,
            f"record seq {seq} of thread {thread_id!r} fails its hash check ({why}); the log "
            "was changed outside agentlog, so nothing built from it is trusted: run "
            "`agentlog verify` and restore the file from a verified copy",
        )
        self.thread_id = thread_id
        self.seq = seq


class InvalidClaimError(StoreError, ValueError):
    """A claim was asked for with a value that cannot work (a lease that is not positive)."""


class ReadOnlyStoreError(StoreError):
    """A write was asked of a store opened read-only, or a read needs a write it cannot do."""
