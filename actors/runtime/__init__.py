"""The agent runtime: many runs of many graphs on one log, started by API calls, committed
events and timers, with live subscriptions, injected input, cancellation and statistics;
double-texting, state shared between runs, and goals."""

from .facts import SharedStateError
from .goals import Constraint, Goal, SuccessCriterion, record_outcome
from .listeners import event_input, timer_input
from .runtime import AgentRuntime, create_agent_runtime
from .shared import SharedState, shared_state
from .spec import (
    AgentRuntimeError,
    EntryPoint,
    IdempotencyKeyMismatchError,
    InvalidTriggerInputError,
    RegistrationError,
    RetryPolicy,
    RunCancelledError,
    RunNotWaitingError,
    RuntimeConfig,
    RuntimeNotStartedError,
    RuntimeRunFailedError,
    ThreadBusyRunError,
    UnknownEntryPointError,
    UnknownRunError,
)
from .timers import Schedule

__all__ = [
    "AgentRuntime",
    "AgentRuntimeError",
    "Constraint",
    "EntryPoint",
    "Goal",
    "IdempotencyKeyMismatchError",
    "InvalidTriggerInputError",
    "RegistrationError",
    "RetryPolicy",
    "RunCancelledError",
    "RunNotWaitingError",
    "RuntimeConfig",
    "RuntimeNotStartedError",
    "RuntimeRunFailedError",
    "Schedule",
    "SharedState",
    "SharedStateError",
    "SuccessCriterion",
    "ThreadBusyRunError",
    "UnknownEntryPointError",
    "UnknownRunError",
    "create_agent_runtime",
    "event_input",
    "record_outcome",
    "shared_state",
    "timer_input",
]
