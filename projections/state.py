"""The state of a thread: `AgentState` and its execution metadata.

These models are projections: the runtime never mutates them directly but folds events
into them (see `agentlog.projections.fold`). The transition methods below are the vocabulary of
that fold: every event is the record of one of them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
)

from agentlog.projections.errors import StateKeyError, StateMethodError
from agentlog.projections.messages import Message
from agentlog.projections.reducers import add_messages

START = "__start__"
END = "__end__"


class ExecutionStatus(StrEnum):
    """Where a run stands."""

    IDLE = "idle"
    """Created (`thread_created`, as `POST /threads` records it) and no run begun yet."""
    RUNNING = "running"
    INTERRUPTED_BEFORE = "interrupted_before"
    INTERRUPTED_AFTER = "interrupted_after"
    COMPLETED = "completed"
    ERROR = "error"
    CANCELLED = "cancelled"
    """Ended on purpose (a runtime's `cancel`): over, not retried; new input starts anew."""


class StopRequestStatus(StrEnum):
    """Whether someone asked the run to stop, and whether it has."""

    NONE = "none"
    STOP_REQUESTED = "stop_requested"
    STOPPED = "stopped"


class ExecutionState(BaseModel):
    """Progress, interrupt and stop status of a thread's current run."""

    current_node: str
    step: int = 0
    status: ExecutionStatus = ExecutionStatus.RUNNING
    interrupted_node: str | None = None
    interrupt_reason: str | None = None
    interrupt_data: dict[str, Any] | None = None
    thread_id: str | None = None
    stop_current_execution: StopRequestStatus = StopRequestStatus.NONE
    internal_data: dict[str, Any] = Field(default_factory=dict)
    _requests: list[tuple[str, tuple[Any, ...]]] | None = PrivateAttr(default=None)
    """Set on the copy a node sees: its calls of `complete`, `error` and `set_interrupt`,
    which the engine records as the events they stand for once the node returns."""

    def _asked(self, method: str, *args: Any) -> bool:
        """Inside a node, note a request for the engine and say so; elsewhere, False."""
        if self._requests is None:
            return False
        self._requests.append((method, args))
        return True

    def _refuse_in_node(self, method: str, instead: str) -> None:
        if self._requests is not None:
            raise StateMethodError(
                f"state.{method}() inside a node changes nothing the run reads: {instead}"
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionState:
        """Build from a dict (accepts `_internal_data` as well as `internal_data`)."""
        return cls.model_validate(
            {
                "current_node": data["current_node"],
                "step": data.get("step", 0),
                "status": ExecutionStatus(data.get("status", "running")),
                "interrupted_node": data.get("interrupted_node"),
                "interrupt_reason": data.get("interrupt_reason"),
                "interrupt_data": data.get("interrupt_data"),
                "thread_id": data.get("thread_id"),
                "stop_current_execution": data.get("stop_current_execution", "none"),
                "internal_data": data.get("internal_data", data.get("_internal_data", {})),
            }
        )

    def set_interrupt(
        self, node: str, reason: str, status: ExecutionStatus, data: dict[str, Any] | None = None
    ) -> None:
        """Pause at `node` with `status` (interrupted before or after it).

        Inside a node, the run pauses once the node's step commits: after the node for
        INTERRUPTED_AFTER, before the next node for INTERRUPTED_BEFORE.
        """
        if self._requests is not None and status not in (
            ExecutionStatus.INTERRUPTED_BEFORE,
            ExecutionStatus.INTERRUPTED_AFTER,
        ):
            raise StateMethodError(
                f"state.set_interrupt(..., status={status!r}) inside a node: the status must "
                "be ExecutionStatus.INTERRUPTED_BEFORE or INTERRUPTED_AFTER"
            )
        if self._asked("set_interrupt", node, reason, ExecutionStatus(status), data):
            return
        self.interrupted_node = node
        self.interrupt_reason = reason
        self.status = status
        self.interrupt_data = data

    def clear_interrupt(self) -> None:
        """Leave the interrupt and run again."""
        self._refuse_in_node(
            "clear_interrupt",
            "a paused run is resumed from outside, with ainvoke(Command(resume=...)) or "
            "ainvoke(None, config)",
        )
        self.interrupted_node = None
        self.interrupt_reason = None
        self.interrupt_data = None
        self.status = ExecutionStatus.RUNNING

    def is_interrupted(self) -> bool:
        """True while paused by an interrupt."""
        return self.status in (
            ExecutionStatus.INTERRUPTED_BEFORE,
            ExecutionStatus.INTERRUPTED_AFTER,
        )

    def advance_step(self) -> None:
        """Count one more step."""
        self._refuse_in_node(
            "advance_step", "the engine counts steps: the step advances when the node returns"
        )
        self.step += 1

    def set_current_node(self, node: str) -> None:
        """Record the node being run (or about to run)."""
        self._refuse_in_node(
            "set_current_node",
            f"to go to {node!r} next, return Command(goto={node!r}) or give the node an edge",
        )
        self.current_node = node

    def complete(self) -> None:
        """Mark the run completed; inside a node, the run ends when the node's step commits."""
        if self._asked("complete"):
            return
        self.status = ExecutionStatus.COMPLETED

    def error(self, error_msg: str) -> None:
        """Mark the run failed, keeping the message in `internal_data['error']`.

        Inside a node, the node fails with `error_msg` once it returns, as if it had raised:
        the failure is recorded, the node's output is discarded and a later invoke retries it.
        """
        if self._asked("error", error_msg):
            return
        self.status = ExecutionStatus.ERROR
        self.internal_data["error"] = error_msg

    def is_running(self) -> bool:
        """True while the run is running (not paused, finished or failed)."""
        return self.status == ExecutionStatus.RUNNING

    def is_stopped_requested(self) -> bool:
        """True when a stop was requested and not yet honoured."""
        return self.stop_current_execution == StopRequestStatus.STOP_REQUESTED


def _new_execution_state() -> ExecutionState:
    return ExecutionState(current_node=START)


class AgentState(BaseModel):
    """A thread's state: the message context, its summary, and execution metadata.

    Subclass it to add fields; give a field a reducer with `Annotated[T, reducer]` and a
    node's update of that field is merged through it instead of replacing it.
    """

    context: Annotated[list[Message], add_messages] = Field(default_factory=list)
    context_summary: str | None = None
    execution_meta: ExecutionState = Field(default_factory=_new_execution_state)

    @field_validator("context", mode="before")
    @classmethod
    def _own_shared_messages(cls, value: Any) -> Any:
        """A context read from time travel shares its unread messages with the process's
        cache: a new state built from it takes copies, so changing it reaches no one else."""
        from agentlog.projections.shared import SharedContext

        if isinstance(value, SharedContext):
            return list(value)  # iterating hands out each message as one of its own
        return value

    @field_serializer("context", mode="wrap")
    def _dump_messages(self, value: Any, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """A context read from time travel may hold messages not validated yet: they are
        validated before it is dumped, so it dumps as a context of messages. (No return
        annotation: the context's schema stays a list of messages.)"""
        from agentlog.projections.shared import settle

        settle(value)
        return handler(value)

    def set_interrupt(
        self, node: str, reason: str, status: ExecutionStatus, data: dict[str, Any] | None = None
    ) -> None:
        """See `ExecutionState.set_interrupt`."""
        self.execution_meta.set_interrupt(node, reason, status, data)

    def clear_interrupt(self) -> None:
        """See `ExecutionState.clear_interrupt`."""
        self.execution_meta.clear_interrupt()

    def is_running(self) -> bool:
        """See `ExecutionState.is_running`."""
        return self.execution_meta.is_running()

    def is_interrupted(self) -> bool:
        """See `ExecutionState.is_interrupted`."""
        return self.execution_meta.is_interrupted()

    def advance_step(self) -> None:
        """See `ExecutionState.advance_step`."""
        self.execution_meta.advance_step()

    def set_current_node(self, node: str) -> None:
        """See `ExecutionState.set_current_node`."""
        self.execution_meta.set_current_node(node)

    def complete(self) -> None:
        """See `ExecutionState.complete`."""
        self.execution_meta.complete()

    def error(self, error_msg: str) -> None:
        """See `ExecutionState.error`."""
        self.execution_meta.error(error_msg)

    def is_stopped_requested(self) -> bool:
        """See `ExecutionState.is_stopped_requested`."""
        return self.execution_meta.is_stopped_requested()


class MessagesState(AgentState):
    """An `AgentState` that also answers to LangGraph's name for its messages: `messages`
    reads the context, as `state.messages` and as `state["messages"]`; `state["x"]` reads
    any other field. A node updates it as any state, `{"messages": [...]}` included.

    Subclass it to add fields, as LangGraph's `MessagesState` is subclassed.
    """

    @property
    def messages(self) -> list[Message]:
        """The message context (`self.context`)."""
        return self.context

    def __getitem__(self, key: str) -> Any:
        """`state["messages"]` is the context; `state[name]` any other field's value."""
        if key == "messages":
            return self.context
        if key in type(self).model_fields:
            return getattr(self, key)
        raise StateKeyError(
            f"{type(self).__name__} has no field {key!r}: its fields are 'messages' and "
            f"{', '.join(map(repr, type(self).model_fields))}"
        )

    def __contains__(self, key: object) -> bool:
        return key == "messages" or key in type(self).model_fields

    def get(self, key: str, default: Any = None) -> Any:
        """`state[key]`, or `default` when the state has no such field."""
        if key not in self:
            return default
        return self[key]
