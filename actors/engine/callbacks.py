"""Callbacks: hooks around a graph's node and tool invocations, and at its runs' lifecycle.

`compile(callbacks=MyCallbacks())`. Subclass `Callbacks` and override what you need; a hook
may be a plain method or a coroutine. A hook that changes something (an output it replaces,
a recovery message after an error) changes it through the step's own commit, recorded with
the hook's `name` as the actor, so replay == live and the audit trail says who changed what.
A hook that raises fails the run with `HookError` naming it (recorded when the run can still
record a failure). Lifecycle hooks run once per occurrence, after the event that records it
has committed: a run resumed after a crash does not call the hooks of steps that had
committed. With no callbacks the engine does no hook work at all.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agentlog.events import EventRecord
from agentlog.events.errors import AgentlogError
from agentlog.events.kinds import (
    InterruptRaised,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    Stopped,
)
from agentlog.projections import AgentState, Message

__all__ = [
    "LIFECYCLE_HOOKS",
    "Callbacks",
    "HookError",
    "InputRejectedError",
    "Invocation",
    "InvocationType",
    "Occurrence",
    "call_hook",
]


class InvocationType(StrEnum):
    """What a hook is invoked around; model calls join as `MODEL` when model nodes land."""

    NODE = "node"
    TOOL = "tool"
    MODEL = "model"


@dataclass(frozen=True)
class Invocation:
    """One call a hook sees: what is called, on which thread and run, with what.

    `state` is the copy the callee sees; `input` is a tool's arguments; `call_id` a tool
    call's id.
    """

    type: InvocationType
    name: str
    thread_id: str
    run_id: str
    state: AgentState
    input: Any = None
    call_id: str | None = None


@dataclass(frozen=True)
class Occurrence:
    """A moment of a run's life, handed to its hook once the event recording it committed."""

    hook: str
    thread_id: str
    run_id: str | None
    record: EventRecord


LIFECYCLE_HOOKS = {
    RunStarted.KIND: "on_run_start",
    RunCompleted.KIND: "on_run_end",
    RunFailed.KIND: "on_run_error",
    InterruptRaised.KIND: "on_interrupt",
    Resumed.KIND: "on_resume",
    Stopped.KIND: "on_stop",
}
"""The lifecycle hook each kind of event calls (a stop, and a caller going away, are stops)."""


class InputRejectedError(AgentlogError, ValueError):
    """An input validator refused a run's input; nothing was written."""


class HookError(AgentlogError):
    """A hook raised; the message names the hook, and the original error is the cause."""

    def __init__(self, hook: str, error: BaseException) -> None:
        self.hook = hook
        super().__init__(f"hook {hook} raised {type(error).__name__}: {error}")


class Callbacks:
    """Hooks a compiled graph calls; every one is optional. Override, never call `super()`.

    `name` is the actor of the events a hook's changes commit (default: the class name).
    """

    name: str = ""

    def __init__(self) -> None:
        if not self.name:
            self.name = type(self).__name__

    # ---- input -------------------------------------------------------------------------

    def validate_input(self, thread_id: str, values: Any) -> Any:
        """Raise `InputRejectedError` to refuse a run's input before anything is written."""
        return None

    # ---- invocations ---------------------------------------------------------------------

    def before(self, invocation: Invocation) -> Any:
        """Called before a node or a tool runs."""
        return None

    def after(self, invocation: Invocation, output: Any) -> Any:
        """Called with what a node or tool returned; return a replacement, or None to keep it."""
        return None

    def on_error(self, invocation: Invocation, error: Exception) -> Any:
        """Called when a node or tool raised; return a `Message` to recover with (the call
        succeeds with it, recorded as a recovery), or None to let the error stand."""
        return None

    # ---- lifecycle -------------------------------------------------------------------------

    def on_run_start(self, occurrence: Occurrence) -> Any:
        """A run started (its `run_started` committed)."""
        return None

    def on_run_end(self, occurrence: Occurrence) -> Any:
        """A run completed."""
        return None

    def on_run_error(self, occurrence: Occurrence) -> Any:
        """A run failed (a node raised, a limit was reached, a hook raised)."""
        return None

    def on_interrupt(self, occurrence: Occurrence) -> Any:
        """A run paused at an interrupt."""
        return None

    def on_resume(self, occurrence: Occurrence) -> Any:
        """A paused or failed run was resumed."""
        return None

    def on_stop(self, occurrence: Occurrence) -> Any:
        """A run stopped: asked to, or abandoned by its caller (the record's reason says)."""
        return None


INVOCATION_HOOKS = frozenset({"before", "after", "on_error"})
"""The hooks called around each node or tool invocation."""


def overridden(callbacks: Callbacks | None) -> frozenset[str]:
    """The hooks `callbacks` defines itself: the engine calls only those (an empty
    `Callbacks` object costs nothing)."""
    if callbacks is None:
        return frozenset()
    names = {*INVOCATION_HOOKS, "validate_input", *LIFECYCLE_HOOKS.values()}
    return frozenset(name for name in names if overrides(callbacks, name))


def overrides(callbacks: Callbacks, hook: str) -> bool:
    """Whether `callbacks` defines `hook` itself (so the engine skips the others for free)."""
    return getattr(type(callbacks), hook, None) is not getattr(Callbacks, hook, None)


async def call_hook(callbacks: Callbacks, hook: str, *args: Any) -> Any:
    """Call `hook` (plain or coroutine); any error but a refused input becomes `HookError`."""
    try:
        result = getattr(callbacks, hook)(*args)
        if inspect.isawaitable(result):
            result = await result
    except InputRejectedError:
        raise
    except Exception as exc:
        raise HookError(f"{callbacks.name}.{hook}", exc) from exc
    return result


def recovered(message: Any, hook: str) -> Message:
    """The recovery message an `on_error` hook returned, checked."""
    if not isinstance(message, Message):
        raise HookError(
            hook,
            TypeError(f"on_error returned {type(message).__name__}: return a Message or None"),
        )
    return message
