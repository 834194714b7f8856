"""The event vocabulary: one frozen msgspec struct per kind of state change.

Payloads hold plain builtins (messages and state values as dicts) so that the log knows
nothing of agents; the projections validate them into models once, at the edge.
"""

from __future__ import annotations

from typing import ClassVar, Literal, TypeAlias

import msgspec

from agentlog.events.statuses import JSON, RunFailedStatus, ToolCallStatus


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


class RunStarted(BaseEvent, tag="run_started", frozen=True):
    """A run began on the thread, at `entry_node`, with the caller's input. `fields` maps
    each custom state field to its reducer's qualified name (None: replace), so the thread
    can be read without the state class (`agentlog.projections.generic`); None: not recorded."""

    OPENS_RUN: ClassVar[bool] = True
    SETS_FIELDS: ClassVar[bool] = True

    entry_node: str = "__start__"
    input: JSON = None
    graph: str | None = None
    fields: dict[str, str | None] | None = None
    trigger_id: str | None = None
    """The agent runtime's trigger this run carries out (None: not started by a runtime)."""


class NodeEntered(BaseEvent, tag="node_entered", frozen=True):
    """A node is about to run: committed before the node does anything."""

    node: str


class StepAdvanced(BaseEvent, tag="step_advanced", frozen=True):
    """The step counter moved to `step`; `next_node` is where the run goes next;
    `duration_ms` (version 2) is how long the step took, from its node being handed its input
    to its commit being built (None: not measured, as for a human edit)."""

    TIMED: ClassVar[bool] = True

    VERSION: ClassVar[int] = 2

    step: int
    next_node: str | None = None
    duration_ms: float | None = None


class BranchEntered(BaseEvent, tag="branch_entered", frozen=True):
    """One branch of a superstep is about to run: node `node` as branch `branch` (its place
    in the step's planned tasks, `tasks_planned`) of step `step`. A superstep's branches are
    entered together, in one commit before any of them runs, and its outputs are committed
    together, in branch order, with its one `step_advanced`. A branch is named by (thread,
    step, branch); a nested graph's namespace would be one more field beside them."""

    node: str
    branch: int
    step: int


class TasksPlanned(BaseEvent, tag="tasks_planned", frozen=True):
    """What step `step` runs when it is not one node alone: `tasks`, in branch order, each
    `{"node": name}` or, for a `Send`, `{"node": name, "arg": input}`; `joins` holds, for each
    node waiting for several nodes (`add_edge(["a", "b"], "c")`), the ones done so far.
    Written in the commit of the step before, ahead of its `step_advanced` (or of the run's
    opening); a one-node step is planned by `step_advanced.next_node` alone, as before."""

    STEP_OUTPUT: ClassVar[bool] = True

    step: int
    tasks: list[dict[str, JSON]]
    joins: dict[str, list[str]] = {}


class MessageAppended(BaseEvent, tag="message_appended", frozen=True):
    """One message joined the context (through the `add_messages` reducer)."""

    CARRIES_MESSAGES: ClassVar[bool] = True
    STEP_OUTPUT: ClassVar[bool] = True

    message: dict[str, JSON]
    reason: str | None = None


class MessageReplaced(BaseEvent, tag="message_replaced", frozen=True):
    """The message with the same `message_id` was replaced in place (a human's correction)."""

    CARRIES_MESSAGES: ClassVar[bool] = True
    STEP_OUTPUT: ClassVar[bool] = True

    message: dict[str, JSON]
    reason: str | None = None


class MessagesReplaced(BaseEvent, tag="messages_replaced", frozen=True):
    """The whole context was replaced (a trim, a summary, a human edit)."""

    CARRIES_MESSAGES: ClassVar[bool] = True
    STEP_OUTPUT: ClassVar[bool] = True

    messages: list[dict[str, JSON]]


class MessagesRemoved(BaseEvent, tag="messages_removed", frozen=True):
    """The messages with these ids left the context (`RemoveMessage`); the log keeps them."""

    STEP_OUTPUT: ClassVar[bool] = True

    message_ids: list[str | int]
    reason: str | None = None


class StateUpdated(BaseEvent, tag="state_updated", frozen=True):
    """Custom state fields changed, merged through each field's reducer; with `replace`
    (a rollback) set to the values as they are, reducers bypassed."""

    SETS_FIELDS: ClassVar[bool] = True
    STEP_OUTPUT: ClassVar[bool] = True

    values: dict[str, JSON]
    source: str = "node"
    reason: str | None = None
    replace: bool = False


class InterruptRaised(BaseEvent, tag="interrupt_raised", frozen=True):
    """The run paused at `node`, before or after it ran. `by_node`: the node asked (and waits
    for a resume value), not a compiled breakpoint; `branch`: which branch of a superstep
    asked (its answer reaches it alone)."""

    ENDS_RUN: ClassVar[bool] = True

    node: str
    reason: str
    when: Literal["before", "after"] = "before"
    data: dict[str, JSON] | None = None
    by_node: bool = False
    branch: int | None = None


class Resumed(BaseEvent, tag="resumed", frozen=True):
    """A paused run was resumed, optionally with a value handed to the paused node; `node`
    is the node it paused at (interrupted, stopped or failed at), added in version 2."""

    OPENS_RUN: ClassVar[bool] = True

    VERSION: ClassVar[int] = 2

    value: JSON = None
    by: str | None = None
    node: str | None = None
    trigger_id: str | None = None
    """The agent runtime's trigger that resumed it (None: not resumed by a runtime)."""


class StopRequested(BaseEvent, tag="stop_requested", frozen=True):
    """Someone asked the run to stop at the next node boundary. With `between_nodes`
    (version 2), a node already running is let finish and commit (an agent runtime shutting
    down); otherwise a node still running is cut short."""

    VERSION: ClassVar[int] = 2

    by: str | None = None
    reason: str | None = None
    between_nodes: bool = False


class Stopped(BaseEvent, tag="stopped", frozen=True):
    """The run honoured a stop request and is paused at `node`. `when` is "after" when the
    stop landed between nodes (`node` had finished; the run goes on where it was routed),
    "before" when it cancelled `node` mid-step (the node runs again on resume). When the
    caller went away mid-step (abandoned), `reason` says why; a stop that cut a step short
    names in `in_flight` the sync work still running on worker threads, whose results will
    be discarded. `duration_ms` is how long the call that stopped had run (None: not
    measured). Version 2 added `when` (version 1 was "before"), version 3 `duration_ms`."""

    ENDS_RUN: ClassVar[bool] = True

    VERSION: ClassVar[int] = 3

    node: str | None = None
    when: Literal["before", "after"] = "before"
    reason: str | None = None
    in_flight: list[str] = []
    duration_ms: float | None = None


class ToolCallStarted(BaseEvent, tag="tool_call_started", frozen=True):
    """A tool call began."""

    call_id: str
    name: str
    args: dict[str, JSON] = {}
    node: str | None = None


class ToolCallFinished(BaseEvent, tag="tool_call_finished", frozen=True):
    """A tool call ended with an output or an error; its result is final.

    A tool that returns like a node is recorded as it returned: `message` is the tool
    message it gave as its result; `update` and `goto` are its `Command`'s, applied with
    the tool node's step. Version 2 added these three; version 1 records have none."""

    TIMED: ClassVar[bool] = True
    STEP_OUTPUT: ClassVar[bool] = True

    VERSION: ClassVar[int] = 2

    call_id: str
    name: str
    status: ToolCallStatus = "completed"
    output: JSON = None
    error: str | None = None
    duration_ms: float = 0.0
    message: dict[str, JSON] | None = None
    update: dict[str, JSON] | None = None
    goto: str | None = None


class ContextSummarized(BaseEvent, tag="context_summarized", frozen=True):
    """The context was condensed: a new summary, and optionally the context that remains."""

    CARRIES_MESSAGES: ClassVar[bool] = True
    STEP_OUTPUT: ClassVar[bool] = True

    summary: str
    messages: list[dict[str, JSON]] | None = None


class RunCompleted(BaseEvent, tag="run_completed", frozen=True):
    """The run reached END; `duration_ms` is how long the call that completed it ran, from
    its start (None: not measured), added in version 2."""

    ENDS_RUN: ClassVar[bool] = True

    VERSION: ClassVar[int] = 2

    duration_ms: float | None = None


class RunFailed(BaseEvent, tag="run_failed", frozen=True):
    """A node raised, or the run broke a limit; a later invoke retries from `node`.

    `status` is "timed_out" when the node ran past its time limit, else "failed";
    `duration_ms` is how long the call that failed had run, from its start (None: not
    measured). Version 2 added both; a version 1 record is "failed"."""

    ENDS_RUN: ClassVar[bool] = True

    VERSION: ClassVar[int] = 2

    node: str | None
    error_type: str
    message: str
    status: RunFailedStatus = "failed"
    duration_ms: float | None = None


class Forked(BaseEvent, tag="forked", frozen=True):
    """This thread starts as a copy of `source_thread` at `source_seq`, holding `state`;
    `fields` is as in `RunStarted`: the custom fields' reducers, when recorded."""

    CARRIES_MESSAGES: ClassVar[bool] = True
    SETS_FIELDS: ClassVar[bool] = True

    source_thread: str
    source_seq: int
    state: dict[str, JSON]
    fields: dict[str, str | None] | None = None


class RunCancelled(BaseEvent, tag="run_cancelled", frozen=True):
    """The run was ended on purpose by `by` (a runtime `cancel`): it is over and not
    retried; the thread takes new input, and `ainvoke(None)` has nothing to resume.
    `node` is where it stood; `in_flight` names the node or tool calls cut short."""

    ENDS_RUN: ClassVar[bool] = True

    by: str
    reason: str | None = None
    node: str | None = None
    in_flight: list[str] = []


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


FACT_KINDS = (ModelCalled, OutcomeRecorded, SharedWritten, SubgraphRan)
Event: TypeAlias = BaseEvent
"""Any event; narrow it by class (`isinstance`, `match event: case RunStarted(): ...`)."""

EVENT_TYPES: tuple[type[BaseEvent], ...] = tuple(BaseEvent.__subclasses__())
"""Every event kind, in the order declared above: a kind is declared once, by its class."""

for _type in EVENT_TYPES:
    _type.KIND = str(_type.__struct_config__.tag)

KINDS: dict[str, type[BaseEvent]] = {
    t.__struct_config__.tag: t  # type: ignore[misc]
    for t in EVENT_TYPES
}
"""Event class by its `kind` string."""


def kinds_where(trait: str) -> frozenset[str]:
    """The names of the kinds for which the class-level `trait` (say "ENDS_RUN") holds."""
    if not isinstance(getattr(BaseEvent, trait, None), bool):
        raise AttributeError(f"{trait!r} is not a trait of event kinds")
    return frozenset(t.KIND for t in EVENT_TYPES if getattr(t, trait))


MESSAGE_KINDS: tuple[str, ...] = tuple(t.KIND for t in EVENT_TYPES if t.CARRIES_MESSAGES)
"""Kinds whose payloads carry whole messages a snapshot's context may point to."""
FIELD_KINDS = kinds_where("SETS_FIELDS")
"""Kinds that declare or set custom state fields."""
OPENING_KINDS = kinds_where("OPENS_RUN")
"""Kinds that start or resume a run."""
ENDING_KINDS = kinds_where("ENDS_RUN")
"""Kinds that end or pause a run."""
TIMED_KINDS = kinds_where("TIMED")
"""Kinds that record one execution with its duration: node steps and tool calls."""
OUTPUT_KINDS = kinds_where("STEP_OUTPUT")
"""Kinds a run writes in the commit of the record that closes or opens its step."""
RUNTIME_KINDS = kinds_where("RUNTIME_ONLY")
"""Kinds an agent runtime writes only to its own thread."""
STORE_KINDS = kinds_where("STORE_WRITE")
"""Kinds a long-term store writes to its own thread."""


def kind_of(event: BaseEvent) -> str:
    """The `kind` string of an event instance."""
    return type(event).KIND
