"""The event vocabulary: one frozen msgspec struct per kind of state change.

Payloads hold plain builtins (messages and state values as dicts) so that the log knows
nothing of agents; the projections validate them into models once, at the edge.
"""

from __future__ import annotations

from typing import ClassVar, Literal, TypeAlias

from agentlog.events.kinds_base import BaseEvent
from agentlog.events.kinds_beside import (
    BESIDE_TYPES,
    Erased,
    ModelCalled,
    OutcomeRecorded,
    Pruned,
    ResourcesNamed,
    RunSuperseded,
    SharedWritten,
    StoreItemDeleted,
    StoreItemPut,
    SubgraphRan,
    ThreadCreated,
    ThreadHidden,
    TriggerAccepted,
    TriggerDispatched,
    TriggerFinished,
    TriggerListening,
    WebhookSent,
)
from agentlog.events.statuses import JSON, RunFailedStatus, ToolCallStatus


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
    fingerprint: dict[str, JSON] | None = None
    """The graph's code as it ran (`agentlog.actors.engine.fingerprint`); None: unrecorded."""
    traceparent: str | None = None
    """The caller's W3C trace context (HTTP header, ainvoke config): the run span's parent."""


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

    RUN_INPUT: ClassVar[bool] = True
    STEP_OUTPUT: ClassVar[bool] = True

    step: int
    tasks: list[dict[str, JSON]]
    joins: dict[str, list[str]] = {}


class MessageAppended(BaseEvent, tag="message_appended", frozen=True):
    """One message joined the context (through the `add_messages` reducer)."""

    RUN_INPUT: ClassVar[bool] = True
    CARRIES_MESSAGES: ClassVar[bool] = True
    STEP_OUTPUT: ClassVar[bool] = True

    message: dict[str, JSON]
    reason: str | None = None


class MessageReplaced(BaseEvent, tag="message_replaced", frozen=True):
    """The message with the same `message_id` was replaced in place (a human's correction)."""

    RUN_INPUT: ClassVar[bool] = True
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

    RUN_INPUT: ClassVar[bool] = True
    STEP_OUTPUT: ClassVar[bool] = True

    message_ids: list[str | int]
    reason: str | None = None


class StateUpdated(BaseEvent, tag="state_updated", frozen=True):
    """Custom state fields changed, merged through each field's reducer; with `replace`
    (a rollback) set to the values as they are, reducers bypassed."""

    RUN_INPUT: ClassVar[bool] = True
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
    is the node it paused at (interrupted, stopped or failed at). Version 2 added it."""

    OPENS_RUN: ClassVar[bool] = True

    VERSION: ClassVar[int] = 2

    value: JSON = None
    by: str | None = None
    node: str | None = None
    trigger_id: str | None = None
    """The agent runtime's trigger that resumed it (None: not resumed by a runtime)."""
    code_change: dict[str, JSON] | None = None
    """The run began under other code: the `on_code_change` policy applied and what changed."""
    traceparent: str | None = None
    """The caller's W3C trace context (HTTP header, ainvoke config): the run span's parent."""


class StopRequested(BaseEvent, tag="stop_requested", frozen=True):
    """Someone asked the run to stop at the next node boundary. With `between_nodes`
    (version 2), a node already running is let finish and commit (an agent runtime shutting
    down); otherwise a node still running is cut short."""

    VERSION: ClassVar[int] = 2

    by: str | None = None
    reason: str | None = None
    between_nodes: bool = False


class Stopped(BaseEvent, tag="stopped", frozen=True):
    """The run honoured a stop request and is paused at `node`.

    `when` is "after" when the stop landed between nodes (`node` had finished; the run goes
    on where it was routed), "before" when it cancelled `node` mid-step (the node runs again
    on resume). When the caller went away mid-step (abandoned), `reason` says why; a stop
    that cut a step short names in `in_flight` the sync work still running on worker
    threads, whose results will be discarded. `duration_ms` is how long the call that stopped
    had run, from its start (None: not measured).

    Version 2 added `when` (a version 1 record was always "before"), version 3 `duration_ms`.
    """

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
    its start (None: not measured). Version 2 added it."""

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


FACT_KINDS = (ModelCalled, OutcomeRecorded, SharedWritten, SubgraphRan)
Event: TypeAlias = BaseEvent  # any event; narrow it by class (isinstance, match)

RUN_TYPES: tuple[type[BaseEvent], ...] = tuple(
    t for t in BaseEvent.__subclasses__() if t.__module__ == __name__
)
EVENT_TYPES: tuple[type[BaseEvent], ...] = (*RUN_TYPES, *BESIDE_TYPES)
"""Every event kind: a run's own here, in the order declared, then the kinds beside a run's
state (`agentlog.events.kinds_beside`); a kind is declared once, by its class."""

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
INPUT_KINDS = kinds_where("RUN_INPUT")
"""Kinds that may carry a run's input in the commit that opens it."""
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


__all__ = [
    "BESIDE_TYPES",
    "ENDING_KINDS",
    "EVENT_TYPES",
    "FACT_KINDS",
    "FIELD_KINDS",
    "INPUT_KINDS",
    "KINDS",
    "MESSAGE_KINDS",
    "OPENING_KINDS",
    "OUTPUT_KINDS",
    "RUNTIME_KINDS",
    "RUN_TYPES",
    "STORE_KINDS",
    "TIMED_KINDS",
    "BaseEvent",
    "BranchEntered",
    "ContextSummarized",
    "Erased",
    "Event",
    "Forked",
    "InterruptRaised",
    "MessageAppended",
    "MessageReplaced",
    "MessagesRemoved",
    "MessagesReplaced",
    "ModelCalled",
    "NodeEntered",
    "OutcomeRecorded",
    "Pruned",
    "ResourcesNamed",
    "Resumed",
    "RunCancelled",
    "RunCompleted",
    "RunFailed",
    "RunStarted",
    "RunSuperseded",
    "SharedWritten",
    "StateUpdated",
    "StepAdvanced",
    "StopRequested",
    "Stopped",
    "StoreItemDeleted",
    "StoreItemPut",
    "SubgraphRan",
    "TasksPlanned",
    "ThreadCreated",
    "ThreadHidden",
    "ToolCallFinished",
    "ToolCallStarted",
    "TriggerAccepted",
    "TriggerDispatched",
    "TriggerFinished",
    "TriggerListening",
    "WebhookSent",
    "kind_of",
    "kinds_where",
]
