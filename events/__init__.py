"""The log: typed events, the record envelope, the codec and the stores (`open_store`
turns a path or URL into one; `agentlog.events.testing` holds the suite every store must pass), and
`follow`, a live subscription to what they commit.

This package knows nothing of agents: it stores and chains events, and reads them back.
"""

from agentlog.events.audit import (
    Head,
    export_jsonl,
    head,
    verify_store,
    verify_thread,
    verify_tree,
)
from agentlog.events.codec import (
    GENESIS_HASH,
    UnstorableValueError,
    register_upcaster,
    unregister_upcaster,
)
from agentlog.events.cursors import (
    Cursor,
    CursorMovedBackError,
    CursorsUnsupportedError,
    list_cursors,
    load_cursor,
    save_cursor,
)
from agentlog.events.errors import (
    AgentlogError,
    ChainBrokenError,
    ClaimLostError,
    ConcurrencyError,
    CorruptDatabaseError,
    CorruptRecordError,
    InvalidAppendError,
    InvalidArgumentError,
    InvalidClaimError,
    NotAnAgentlogDatabaseError,
    ReadOnlyStoreError,
    SchemaVersionError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    ThreadBusyError,
    ThreadNotFoundError,
    UnknownEventKindError,
)
from agentlog.events.follow import CommitSignal, UnknownKindFilterError, follow, last_position
from agentlog.events.keystore import (
    ThreadTaggedError,
    subject_of_thread,
    tag_thread,
    use_key_store,
)
from agentlog.events.kinds import (
    EVENT_TYPES,
    KINDS,
    BaseEvent,
    BranchEntered,
    ContextSummarized,
    Erased,
    Event,
    Forked,
    InterruptRaised,
    MessageAppended,
    MessageReplaced,
    MessagesRemoved,
    MessagesReplaced,
    ModelCalled,
    NodeEntered,
    OutcomeRecorded,
    Pruned,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunSuperseded,
    SharedWritten,
    StateUpdated,
    StepAdvanced,
    Stopped,
    StopRequested,
    StoreItemDeleted,
    StoreItemPut,
    SubgraphRan,
    TasksPlanned,
    ToolCallFinished,
    ToolCallStarted,
    kind_of,
)
from agentlog.events.record import EventRecord, Snapshot, VerifyReport
from agentlog.events.sealing import (
    KeyStore,
    MasterKeyMissingError,
    SealBrokenError,
    SubjectErasedError,
    mark_personal,
)
from agentlog.events.store import (
    AppendRequest,
    BaseEventStore,
    Claim,
    CorruptSnapshotError,
    EventStore,
)
from agentlog.events.stores.memory import MemoryEventStore
from agentlog.events.stores.postgres_schema import SchemaUpgradeRequiredError
from agentlog.events.stores.sqlite import SQLiteEventStore
from agentlog.events.urls import (
    StoreNotFoundError,
    StoreURLError,
    UnsupportedBackendError,
    open_store,
)
from agentlog.lazy import LazyExports

_LAZY = {"PostgresEventStore": "agentlog.events.stores.postgres"}
"""Names imported on first use (`agentlog.events.PostgresEventStore`), so `import events` works
without asyncpg installed; left out of `__all__` so a star import never needs it."""


_lazy = LazyExports(__name__, _LAZY, globals())


def __getattr__(name: str) -> object:
    return _lazy.load(name)


def __dir__() -> list[str]:
    return _lazy.names()


__all__ = [
    "EVENT_TYPES",
    "GENESIS_HASH",
    "KINDS",
    "AgentlogError",
    "AppendRequest",
    "BaseEvent",
    "BaseEventStore",
    "BranchEntered",
    "ChainBrokenError",
    "Claim",
    "ClaimLostError",
    "CommitSignal",
    "ConcurrencyError",
    "ContextSummarized",
    "CorruptDatabaseError",
    "CorruptRecordError",
    "CorruptSnapshotError",
    "Cursor",
    "CursorMovedBackError",
    "CursorsUnsupportedError",
    "Erased",
    "Event",
    "EventRecord",
    "EventStore",
    "Forked",
    "Head",
    "InterruptRaised",
    "InvalidAppendError",
    "InvalidArgumentError",
    "InvalidClaimError",
    "KeyStore",
    "MasterKeyMissingError",
    "MemoryEventStore",
    "MessageAppended",
    "MessageReplaced",
    "MessagesRemoved",
    "MessagesReplaced",
    "ModelCalled",
    "NodeEntered",
    "NotAnAgentlogDatabaseError",
    "OutcomeRecorded",
    "Pruned",
    "ReadOnlyStoreError",
    "Resumed",
    "RunCompleted",
    "RunFailed",
    "RunStarted",
    "RunSuperseded",
    "SQLiteEventStore",
    "SchemaUpgradeRequiredError",
    "SchemaVersionError",
    "SealBrokenError",
    "SharedWritten",
    "Snapshot",
    "StateUpdated",
    "StepAdvanced",
    "StopRequested",
    "Stopped",
    "StoreClosedError",
    "StoreError",
    "StoreItemDeleted",
    "StoreItemPut",
    "StoreNotFoundError",
    "StoreURLError",
    "StoreUnavailableError",
    "SubgraphRan",
    "SubjectErasedError",
    "TasksPlanned",
    "ThreadBusyError",
    "ThreadNotFoundError",
    "ThreadTaggedError",
    "ToolCallFinished",
    "ToolCallStarted",
    "UnknownEventKindError",
    "UnknownKindFilterError",
    "UnstorableValueError",
    "UnsupportedBackendError",
    "VerifyReport",
    "export_jsonl",
    "follow",
    "head",
    "kind_of",
    "last_position",
    "list_cursors",
    "load_cursor",
    "mark_personal",
    "open_store",
    "register_upcaster",
    "save_cursor",
    "subject_of_thread",
    "tag_thread",
    "unregister_upcaster",
    "use_key_store",
    "verify_store",
    "verify_thread",
    "verify_tree",
]
