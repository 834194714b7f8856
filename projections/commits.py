"""Where a run's commits begin and end in its thread's log.

A run writes a step's outputs (messages, facts, calls closed as not run) and the record that
closes or opens a commit (`step_advanced`, a run's end, `run_started`) in one append; a
point between them is inside a commit, where no state was ever live. Time travel marks such
points, and a fork refuses them.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentlog.events import (
    EventRecord,
)
from agentlog.events.kinds import (
    ENDING_KINDS,
    OPENING_KINDS,
    OUTPUT_KINDS,
    RunCancelled,
    StepAdvanced,
    ToolCallFinished,
    ToolCallStarted,
)

COMMIT_PARTS = OUTPUT_KINDS
"""Kinds a run writes in the same commit as the record that closes or opens it: a node's
outputs and facts, a trim, the answers of calls closed as not run, a run's input."""

COMMIT_CLOSERS = frozenset({StepAdvanced.KIND, *ENDING_KINDS} - {RunCancelled.KIND})
"""Kinds that end a commit of a run holding the records of its kinds `COMMIT_PARTS` before them."""

COMMIT_OPENERS = OPENING_KINDS
"""Kinds that open a run's commit, with the answers before and the input after them."""


def inside_commits(records: Sequence[EventRecord]) -> set[int]:
    """The seqs of `records` (a whole thread, in order) after which the thread never stood:
    a later record was written in the same atomic commit, so a state there is half a commit.

    Derived from what the log says of its commits: a step's outputs (and the facts its node
    recorded, its trim, the calls answered as not run) commit with its `step_advanced`; a
    run's end, stop, failure or a node's own pause commit with what closes its calls; a run
    starts or resumes in one commit with its input; a tool node starts its calls in one
    commit. `node_entered`, each tool call's `tool_call_finished` of a tool node (but a
    closing as abandoned), edits and requests from outside are commits of their own. A
    record of one commit carries its run. Not told apart (none runs a node again): an edit
    of several messages, a cancel's closing of the calls, a step's tail entering the next
    node.
    """
    inside: set[int] = set()
    started: set[str] = set()  # the calls a tool node began: each one's end is its own commit
    for i, record in enumerate(records):
        if isinstance(record.event, ToolCallStarted):
            started.add(record.event.call_id)
            if i and isinstance(records[i - 1].event, ToolCallStarted):
                inside.add(records[i - 1].seq)

    def part(other: EventRecord, of: EventRecord) -> bool:
        event = other.event  # a call's result, not its closing as abandoned, commits alone
        own_end = isinstance(event, ToolCallFinished) and (
            event.call_id in started and event.status != "abandoned"
        )
        return other.kind in COMMIT_PARTS and other.run_id == of.run_id and not own_end

    for i, record in enumerate(records):
        if record.kind in COMMIT_CLOSERS or record.kind in COMMIT_OPENERS:
            j = i - 1
            while j >= 0 and part(records[j], record):
                inside.add(records[j].seq)
                j -= 1
        if record.kind in COMMIT_OPENERS:
            j = i + 1
            while j < len(records) and part(records[j], record):
                inside.add(records[j - 1].seq)
                j += 1
    return inside
