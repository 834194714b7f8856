"""Rules a thread's state must keep, checked after the fact from the log.

The hash chain says the log was not altered; these say what it records makes sense. A
transcript must pair every tool call with exactly one result: a run that completed with a
call still open, or a result without its call, would be refused by a model provider on the
next turn. The engine refuses to record either; a log written by other means (an older
version, a tool appending records directly) may still hold one, and `verify` reports it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from agentlog.events import AgentlogError, EventStore
from agentlog.projections.generic import open_states
from agentlog.projections.state import AgentState, ExecutionStatus
from agentlog.projections.transcript import calls_of, open_calls, results_of, unpaired_results
from agentlog.projections.views import fold_at

FindingKind = Literal["open_call", "unpaired_result", "unreadable"]
"""What a finding is about: a completed run's call with no result, a result with no call
(or answering a second time), or a thread whose state cannot be replayed from its log."""


@dataclass(frozen=True)
class Finding:
    """One broken rule of one thread's state; `message` says it in a sentence.

    `call_id` and `tool` name the tool call concerned (`tool` is None when the context
    holds no call with that id). Both come from the log: show them inert.
    """

    kind: FindingKind
    message: str
    call_id: str | None = None
    tool: str | None = None

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ThreadFindings:
    """The findings of one thread, checked on its state after record `seq`."""

    thread_id: str
    seq: int
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        """True when the thread breaks no rule."""
        return not self.findings


def transcript_findings(state: AgentState) -> list[Finding]:
    """The tool-call rules `state` breaks, in context order.

    A completed run must leave no call open (a run paused, stopped or failed may wait on
    one: its tool node answers it on resume); at any status every result must answer
    exactly one earlier call.
    """
    context = state.context
    findings: list[Finding] = []
    if state.execution_meta.status == ExecutionStatus.COMPLETED:
        for call in open_calls(context):
            findings.append(
                Finding(
                    "open_call",
                    f"the run completed with tool call {call.id!r} ({call.name}) "
                    "left without a result",
                    call_id=call.id,
                    tool=call.name,
                )
            )
    names = {call.id: call.name for message in context for call in calls_of(message)}
    answers = Counter(r.call_id for message in context for r in results_of(message))
    for call_id in dict.fromkeys(unpaired_results(context)):
        if answers[call_id] > 1:
            why = f"is answered {answers[call_id]} times; a call takes exactly one result"
        elif call_id in names:
            why = "is answered before the call is made"
        else:
            why = "has a result but no call in the context"
        tool = names.get(call_id)
        named = f"tool call {call_id!r}" + (f" ({tool})" if tool else "")
        findings.append(Finding("unpaired_result", f"{named} {why}", call_id=call_id, tool=tool))
    return findings


async def thread_findings(
    store: EventStore, thread_id: str, state_cls: type[AgentState] | None = None
) -> ThreadFindings:
    """`transcript_findings` of the thread's latest state, folded from `store` (read-only)
    from its first record: the log's own state, whatever its snapshots say (they are
    `verify_snapshots`' to judge).

    Without `state_cls` the thread is folded with the open class its log describes, so a
    thread of a custom state class needs no user code. A log that cannot be replayed is one
    finding (`unreadable`) naming why, not an exception: the other threads still get checked.
    Raises `ThreadNotFoundError` when the thread has no records.
    """
    seq = await store.last_seq(thread_id)
    try:
        if state_cls is None:
            (point,) = await open_states(store, thread_id, [seq], use_snapshots=False)
            state = point.state
        else:
            state = (await fold_at(store, thread_id, seq, state_cls, use_snapshots=False)).state
    except (AgentlogError, ValueError) as exc:  # refused by the fold, or a record unreadable
        if seq == 0:
            raise
        why = f"the state cannot be replayed from the log ({type(exc).__name__}: {exc})"
        return ThreadFindings(thread_id, seq, [Finding("unreadable", why)])
    return ThreadFindings(thread_id, seq, transcript_findings(state))


__all__ = ["Finding", "FindingKind", "ThreadFindings", "thread_findings", "transcript_findings"]
