"""The one vocabulary of statuses every recorded execution (a node's step, a run, a tool
call) is drawn from, and what each means."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias, get_args

JSON = Any
"""A value made of builtins only (dict, list, str, int, float, bool, None)."""

Status: TypeAlias = Literal[
    "pending",
    "processing",
    "completed",
    "failed",
    "rejected",
    "cancelled",
    "abandoned",
    "timed_out",
    "answered_by_client",
    "interrupted",
]
"""How an execution (a node step, a run, a tool call) ended or stands: the one vocabulary
every recorded status is drawn from. `STATUS_MEANINGS` says what each one means."""

STATUS_MEANINGS: dict[str, str] = {
    "pending": "recorded as to be run, not yet handed to its node or tool",
    "processing": "handed to its node or tool and not yet finished",
    "completed": "ran to its end and its result was recorded",
    "failed": "raised, or broke a limit; a failed step is retried by the next invoke",
    "rejected": "refused before it ran (a person or a rule said no); it never ran",
    "cancelled": "ended on purpose by a person or program (cancel, double-texting): not retried",
    "abandoned": (
        "the caller went away or a stop cut it short while it ran; any result it still "
        "returns is discarded, whether it took effect is unknown"
    ),
    "timed_out": "ran past its time limit (node_timeout): failed, and retried like a failure",
    "answered_by_client": "a client tool call whose result the client sent back",
    "interrupted": (
        "paused: it waits for a person's answer or a resume, and the next invoke goes on "
        "from where it stood"
    ),
}
"""What each `Status` means (see "When a run ends early" in the design notes)."""

ToolCallStatus: TypeAlias = Literal["completed", "failed", "abandoned"]
"""The statuses a finished tool call records (a subset of `Status`)."""

RunFailedStatus: TypeAlias = Literal["failed", "timed_out"]
"""The statuses a failed run records (a subset of `Status`)."""

STATUSES: tuple[str, ...] = get_args(Status)
"""Every `Status`, in declared order."""
