"""The kinds written beside a run's own state: the runtime's triggers, threads created and
hidden, the log's upkeep (erasure, pruning), facts of a run (model calls, outcomes, shared
writes, subgraphs, superseded runs) and the long-term store. `agentlog.events.kinds` is the
registry of every kind; import them from there."""

from __future__ import annotations

from typing import ClassVar, Literal

from agentlog.events.kinds_base import BaseEvent
from agentlog.events.statuses import JSON


class TriggerAccepted(BaseEvent, tag="trigger_accepted", frozen=True):
    """A runtime accepted a run to start: from an API call, an event, a timer or injected
    input. Recorded before `trigger` returns, so a restart neither loses nor repeats it.
    `input` is the run's input as builtins (`resume` True: the value answers an interrupt);
    `source_position` is the record an event trigger answered, `slot` a timer's slot and
    `missed` the earlier slots it stands for."""

    RUNTIME_ONLY: ClassVar[bool] = True

    trigger_id: str
    entry_point: str
    graph_id: str
    thread_id: str
    cause: Literal["api", "event", "timer", "input", "webhook"]
    input: JSON = None
    resume: bool = False
    idempotency_key: str | None = None
    priority: int = 0
    source_position: int | None = None
    slot: float | None = None
    missed: int = 0
    by: str | None = None
    new_thread: bool = False
    """The runtime named the thread itself (a fresh random id): nothing else writes to it."""
    correlation_id: str | None = None
    """The caller's id tying related runs together (hive's `correlation_id`)."""
    traceparent: str | None = None
    """The W3C trace context the request or webhook carried, handed to the run it starts."""
    subject: str | None = None
    """The data subject whose personal data `input` is: sealed under its key (though the
    runtime's thread has no subject of its own), and the run's thread is tagged with it."""
    due_at: float | None = None
    """The run waits until then (epoch seconds) before it is dispatched (`after_seconds`)."""
    webhook: str | None = None
    """Where the run's result is POSTed when it ends (`webhook_sent` records each attempt)."""
    interrupt_before: str | list[str] | None = None
    interrupt_after: str | list[str] | None = None
    """Breakpoints asked for this run only, beside the graph's: node names, or "*"."""


class TriggerDispatched(BaseEvent, tag="trigger_dispatched", frozen=True):
    """A runtime handed an accepted trigger to its graph; `thread_seq` is the thread's last
    seq at that moment (a restart that finds it unchanged knows the run never began)."""

    RUNTIME_ONLY: ClassVar[bool] = True

    trigger_id: str
    attempt: int
    thread_seq: int
    resumed: bool = False


class TriggerFinished(BaseEvent, tag="trigger_finished", frozen=True):
    """How a triggered run's attempt ended: `outcome` is a `Status` ("completed",
    "failed", "cancelled", "rejected"), or "interrupted" when the run paused; a failure with
    `retry_at` is tried again then, from the log."""

    RUNTIME_ONLY: ClassVar[bool] = True

    trigger_id: str
    outcome: str
    attempt: int = 1
    error_type: str | None = None
    message: str | None = None
    retry_at: float | None = None
    by: str | None = None
    rolled_back_to: int | None = None
    """A run cancelled by a rollback: the thread seq its state is set back to (the thread
    records `run_superseded` once done; a restart finishes one cut short)."""
    thread_seq: int | None = None
    """A completed or interrupted attempt: the thread's seq where its run left it, so the
    run's records are those after its dispatch's `thread_seq` up to this one."""


class TriggerListening(BaseEvent, tag="trigger_listening", frozen=True):
    """An event or timer entry point began to listen: events after `position`, timer slots
    after `slot`. Recorded once, so a restart before its first firing misses nothing."""

    RUNTIME_ONLY: ClassVar[bool] = True

    entry_point: str
    position: int | None = None
    slot: float | None = None


class WebhookSent(BaseEvent, tag="webhook_sent", frozen=True):
    """One attempt to POST run `run_id`'s result to the webhook its acceptance names:
    `outcome` "delivered" (a 2xx answer), "failed" (tried again after `retry_at`), or
    "given_up" (no more attempts). Delivered or given up, it is never sent again."""

    RUNTIME_ONLY: ClassVar[bool] = True

    run_id: str
    attempt: int
    outcome: Literal["delivered", "failed", "given_up"]
    status: int | None = None
    """The receiver's HTTP status (None: no answer)."""
    error: str | None = None
    retry_at: float | None = None


class ResourcesNamed(BaseEvent, tag="resources_named", frozen=True):
    """The names of what a runtime's programs share (hive's `llm`, `tools`, tool executor,
    accounts, `tool_provider_map`, checkpoint settings), recorded when a runtime starts with
    other names than the log last holds: names only, never a key or a token."""

    RUNTIME_ONLY: ClassVar[bool] = True

    names: dict[str, JSON]


class ThreadHidden(BaseEvent, tag="thread_hidden", frozen=True):
    """The thread was deleted through the HTTP API: hidden from listings, its log kept (it
    still verifies). A person's data is erased with `erased`."""

    by: str
    reason: str | None = None


class Erased(BaseEvent, tag="erased", frozen=True):
    """Subject `subject`'s key was destroyed, so its sealed fields in `threads` read as erased."""

    RUNTIME_ONLY: ClassVar[bool] = True  # written to the erasures' own thread alone

    subject: str
    by: str
    reason: str
    erased_at: float
    threads: list[str] = []


class Pruned(BaseEvent, tag="pruned", frozen=True):
    """Records up to `through_seq` (`removed` of them) left the store from behind the whole
    snapshot at `through_seq` of digest `snapshot_digest`; `last_hash` is record
    `through_seq`'s chain hash, the one the first record kept links to (retention)."""

    ABOUT_LOG: ClassVar[bool] = True

    through_seq: int
    removed: int
    last_hash: str
    snapshot_digest: str
    by: str
    reason: str | None = None


class ThreadCreated(BaseEvent, tag="thread_created", frozen=True):
    """The thread was created before its first run (`POST /threads`), by `by`, for graph
    `graph_id`, with the caller's `metadata`. Always the thread's first record; the state
    stays a fresh thread's."""

    by: str
    graph_id: str | None = None
    metadata: dict[str, JSON] = {}


class ModelCalled(BaseEvent, tag="model_called", frozen=True):
    """A node called a model once (one attempt), recorded in the node's step commit beside
    the message it produced, so a step's tokens and latency are in the log. `request_hash`
    is a SHA-256 of the request as sent (messages, tools, params), so a replay can find the
    answer to the same request; `message_id` names the message this call produced (None for
    a failed attempt); `usage` holds token counts."""

    STEP_OUTPUT: ClassVar[bool] = True

    node: str
    provider: str
    model: str
    request_hash: str
    attempt: int = 1
    status: Literal["completed", "failed"] = "completed"
    params: dict[str, JSON] = {}
    message_id: str | int | None = None
    usage: dict[str, JSON] | None = None
    latency_ms: float = 0.0
    finish_reason: str | None = None
    response_id: str | None = None
    error_type: str | None = None
    error: str | None = None
    streamed: bool = False


class OutcomeRecorded(BaseEvent, tag="outcome_recorded", frozen=True):
    """A node recorded an outcome towards a goal: `metric` (a criterion's metric name)
    reached `value` (a number, or a bool for a pass/fail criterion)."""

    STEP_OUTPUT: ClassVar[bool] = True

    metric: str
    value: JSON
    node: str | None = None
    goal_id: str | None = None


class SharedWritten(BaseEvent, tag="shared_written", frozen=True):
    """A run wrote a shared key (the runtime's state shared between runs): `op` applied to
    `value`, in commit order. `key` is namespaced (`graph/name`, or `*/name` when global)."""

    STEP_OUTPUT: ClassVar[bool] = True

    key: str
    op: Literal["set", "increment", "append", "merge"]
    value: JSON = None
    node: str | None = None
    isolation: Literal["shared", "synchronized"] = "shared"
    run_id: str | None = None
    """The run that asked for the write (the key's own thread records it for that run)."""
    op_id: str | None = None
    """A synchronized write's identity (thread, step, index): a step run again after a
    crash finds its write applied already and does not apply it twice."""


class SubgraphRan(BaseEvent, tag="subgraph_ran", frozen=True):
    """A node ran a subgraph on thread `thread_id`, left at `seq` with hash `hash` (a link)."""

    STEP_OUTPUT: ClassVar[bool] = True

    node: str
    namespace: str
    thread_id: str
    seq: int
    hash: str
    status: str = "completed"


class RunSuperseded(BaseEvent, tag="run_superseded", frozen=True):
    """Run `run_id` was cancelled and rolled back (double-texting's `rollback`) by `by`: the
    events after this one set the state back to what it was before that run began. Its
    tools' side effects are not undone."""

    run_id: str
    by: str
    reason: str | None = None
    started_seq: int = 0
    """The seq of the superseded run's `run_started`: the state goes back to just before it."""


class StoreItemPut(BaseEvent, tag="store_item_put", frozen=True):
    """`value` was put under `key` in `namespace` of the long-term store (`BaseStore.put`).

    `index`: what a text query reads (None: all its text, False: nothing, a list: those
    fields); `ttl`: minutes it lives. A node's write names it, and `op_id` its step (thread,
    seq of `node_entered`) and place in it: a step run again after a crash skips it."""

    STORE_WRITE: ClassVar[bool] = True

    namespace: list[str]
    key: str
    value: dict[str, JSON]
    index: list[str] | bool | None = None
    ttl: float | None = None
    node: str | None = None
    op_id: str | None = None


class StoreItemDeleted(BaseEvent, tag="store_item_deleted", frozen=True):
    """The item under `key` in `namespace` of the long-term store was deleted (LangGraph's
    `BaseStore.delete`); the log keeps the values it held. `node` and `op_id` as for
    `StoreItemPut`."""

    STORE_WRITE: ClassVar[bool] = True

    namespace: list[str]
    key: str
    node: str | None = None
    op_id: str | None = None


BESIDE_TYPES: tuple[type[BaseEvent], ...] = tuple(
    t for t in BaseEvent.__subclasses__() if t.__module__ == __name__
)
"""The kinds of this module, in the order declared."""
