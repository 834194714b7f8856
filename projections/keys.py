"""The keys of `ExecutionState.internal_data` the fold keeps, each with what it holds."""

from __future__ import annotations

from typing import Any

TOOL_CALLS_KEY = "pending_tool_calls"
"""`internal_data` key of tool calls started and not yet finished."""

RESUME_KEY = "resume"
"""`internal_data` key of the values a node's interrupts were resumed with during its step,
in order (`{"values": [...]}`; a superstep's by branch, `{"by_branch": {"0": [...]}}`),
until the step advances."""

AWAITING_KEY = "awaiting_resume"
"""`internal_data` key set while a node-raised interrupt waits for its resume value (True,
or `{"branch": i}` when branch i of a superstep asked)."""

STOP_KEY = "stop_request"
"""`internal_data` key of who asked for a stop not yet honoured, and why."""

CREATED_KEY = "created"
"""`internal_data` key of who created the thread before its first run, and its metadata."""

ENTERED_KEY = "entered"
"""`internal_data` key of the node whose step has begun and not yet advanced: node and seq."""

TASKS_KEY = "tasks"
"""`internal_data` key of the tasks planned for a step (`tasks_planned`): `{"step", "tasks"}`,
kept until that step advances."""

JOINS_KEY = "joins"
"""`internal_data` key of the nodes each join (`add_edge([...], node)`) has seen done."""


def resumed_with(earlier: Any, awaiting: Any, value: Any) -> dict[str, Any]:
    """`RESUME_KEY`'s value once the pause `awaiting` describes is answered with `value`:
    a branch's answer is kept for that branch alone."""
    earlier = earlier or {}
    values = list(earlier.get("values", [earlier["value"]] if "value" in earlier else []))
    if not isinstance(awaiting, dict):
        return {**earlier, "values": [*values, value]}
    by_branch = {**earlier.get("by_branch", {})}
    key = str(awaiting["branch"])
    by_branch[key] = [*by_branch.get(key, []), value]
    return {**earlier, "values": values, "by_branch": by_branch}


RUN_KEYS = (TOOL_CALLS_KEY, ENTERED_KEY, RESUME_KEY, AWAITING_KEY, STOP_KEY, TASKS_KEY, JOINS_KEY)
"""The keys a run keeps for itself: a new run (`run_started`) starts without them."""
