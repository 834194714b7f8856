"""The agent runtime: many runs of many graphs on one log, started by API calls, committed
events and timers, with live subscriptions, injected input, cancellation and statistics;
double-texting, state shared between runs, and goals."""

from agentlog.actors.engine.retention import Retention
from agentlog.actors.runtime.facts import SharedStateError
from agentlog.actors.runtime.goals import Constraint, Goal, SuccessCriterion, record_outcome
from agentlog.actors.runtime.listeners import event_input, timer_input
from agentlog.actors.runtime.resources import CheckpointConfig, Resources
from agentlog.actors.runtime.runtime import AgentRuntime, create_agent_runtime
from agentlog.actors.runtime.shared import SharedState, shared_state
from agentlog.actors.runtime.spec import (
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
from agentlog.actors.runtime.timers import Schedule

__all__ = [
    "AgentRuntime",
    "AgentRuntimeError",
    "CheckpointConfig",
    "Constraint",
    "EntryPoint",
    "Goal",
    "IdempotencyKeyMismatchError",
    "InvalidTriggerInputError",
    "RegistrationError",
    "Resources",
    "Retention",
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
