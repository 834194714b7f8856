"""The agent runtime: many runs of many graphs on one log, started by API calls, committed
events and timers, with live subscriptions, injected input, cancellation and statistics."""

from .listeners import event_input, timer_input
from .runtime import AgentRuntime
from .spec import (
    AgentRuntimeError,
    EntryPoint,
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
    "EntryPoint",
    "InvalidTriggerInputError",
    "RegistrationError",
    "RetryPolicy",
    "RunCancelledError",
    "RunNotWaitingError",
    "RuntimeConfig",
    "RuntimeNotStartedError",
    "RuntimeRunFailedError",
    "Schedule",
    "ThreadBusyRunError",
    "UnknownEntryPointError",
    "UnknownRunError",
    "event_input",
    "timer_input",
]
