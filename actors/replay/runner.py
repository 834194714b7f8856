"""Replaying recorded threads under today's code, each into a fresh in-memory log.

A thread's records are read as what came from outside (a run's input, a resume, a human
edit, a cancel, a fork) and what the code wrote. The outside is played again at the point
it happened, through the graph's own calls (`ainvoke`, `acancel`; an edit or a fork is
written as recorded), while a `LoggedThread` answers every tool call and model call from the
log (`agentlog.actors.engine.replaying`): no tool runs, no model is called. After each piece
of outside input, what the new code wrote is compared with what the log holds, step by
step (`agentlog.actors.replay.compare`); the first difference ends the thread's replay.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentlog.actors.engine.command import Command
from agentlog.actors.engine.compiled import CompiledGraph
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.fingerprint import CODE_CHANGE_KEY, changed_parts
from agentlog.actors.engine.graph import StateGraph
from agentlog.actors.engine.replaying import answering
from agentlog.actors.replay.compare import (
    CAUSES,
    Allowed,
    IdMap,
    chunks,
    comparable,
    first_difference,
)
from agentlog.actors.replay.session import LoggedThread
from agentlog.events import Claim, EventRecord, MemoryEventStore
from agentlog.events.errors import AgentlogError
from agentlog.events.kinds import (
    ENDING_KINDS,
    INPUT_KINDS,
    OPENING_KINDS,
    Event,
    MessageAppended,
    Resumed,
    RunCancelled,
    RunStarted,
    RunSuperseded,
    StateUpdated,
    StepAdvanced,
    StopRequested,
)
from agentlog.projections import Message

__all__ = ["Divergence", "ThreadResult", "bind_graph", "replay_records"]

UNSUPPORTED = frozenset({RunSuperseded.KIND})
"""Outside input a replay cannot place: a thread holding one is reported as skipped."""


class _ReplayLog(MemoryEventStore):
    """The fresh log of one replay: it writes each recorded stop request right after the
    record it followed in the log, as the caller's `astop` did (a stop request may land on
    a thread a run holds)."""

    def __init__(self) -> None:
        super().__init__()
        self.stops: dict[int, EventRecord] = {}
        """A recorded `stop_requested`, by the seq of the record it followed."""

    async def append(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        run_id: str | None = None,
        actor: str | Sequence[str | None] | None = None,
        claim: Claim | None = None,
    ) -> list[EventRecord]:
        written = await super().append(
            thread_id, events, expected_seq=expected_seq, run_id=run_id, actor=actor, claim=claim
        )
        stop = self.stops.pop(written[-1].seq, None) if written else None
        if stop is not None:
            await super().append(
                thread_id,
                [stop.event],
                expected_seq=written[-1].seq,
                run_id=stop.run_id,
                actor=stop.actor,
            )
        return written


def _placeable(records: Sequence[EventRecord], index: int) -> bool:
    """Whether the stop request at `index` lands where a replay puts it again: between two
    steps (after a step's commit, or the run's opening), or at any point when it lets the
    running node finish (`between_nodes`). One that cut a node short mid-step raced it."""
    event = records[index].event
    if isinstance(event, StopRequested) and event.between_nodes:
        return True
    before = records[index - 1] if index else None
    return before is None or before.kind in (StepAdvanced.KIND, *INPUT_KINDS, *OPENING_KINDS)


@dataclass(frozen=True)
class Divergence:
    """Where the new code first did something other than the log: the run (its id, and its
    place among the thread's runs, from 1), the step and node, both sides as comparable
    records, a readable diff, the cause class (`compare.CAUSES`) and what the graph's
    fingerprint says changed since the log was written."""

    thread_id: str
    run_id: str | None
    run: int
    step: int | None
    node: str
    cause: str
    detail: str
    log: list[dict[str, Any]]
    produced: list[dict[str, Any]]
    diff: str
    changed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ThreadResult:
    """One thread's replay: "same", "diverged" (with `divergence`) or "skipped" (`reason`)."""

    thread_id: str
    status: Literal["same", "diverged", "skipped"]
    steps: int = 0
    divergence: Divergence | None = None
    reason: str | None = None


@dataclass
class _Action:
    kind: Literal["open", "resume", "copy", "cancel", "carry"]
    outside: list[EventRecord]
    written: list[EventRecord] = field(default_factory=list)
    """What the code wrote after it in the log, up to the next outside input."""


def bind_graph(target: Any, store: MemoryEventStore) -> CompiledGraph[Any]:
    """The graph `target` names (a `StateGraph`, a compiled graph, or a function returning
    one, given `store` when it takes an argument), compiled onto `store` with the same
    breakpoints and limits, without hooks (they may have side effects)."""
    if callable(target) and not isinstance(target, StateGraph | CompiledGraph):
        takes = len(inspect.signature(target).parameters)
        target = target(store) if takes else target()
    if isinstance(target, CompiledGraph):
        engine = target.engine
        return engine.graph.compile(
            checkpointer=store,
            interrupt_before=sorted(engine.interrupt_before),
            interrupt_after=sorted(engine.interrupt_after),
            recursion_limit=engine.recursion_limit,
            snapshot_every=None,
            node_timeout=engine.node_timeout,
            node_timeouts=engine.node_timeouts,
            context_manager=engine.context_manager,
        )
    if isinstance(target, StateGraph):
        return target.compile(checkpointer=store, snapshot_every=None)
    raise GraphError(
        f"the app to replay must be a StateGraph, a compiled graph or a function returning "
        f"one, got {type(target).__name__}"
    )


def _actions(records: Sequence[EventRecord]) -> list[_Action] | str:
    """The thread's outside input, each with what the code wrote after it; or why the
    thread cannot be replayed."""
    out: list[_Action] = []
    running = False
    held: list[EventRecord] = []  # outside records of the next opening or cancel
    index = 0
    while index < len(records):
        record = records[index]
        kind = record.kind
        if kind in UNSUPPORTED or (running and isinstance(record.event, RunCancelled)):
            return f"a {kind} record at seq {record.seq} landed inside a run"
        if isinstance(record.event, StopRequested) and not _placeable(records, index):
            return f"the stop request at seq {record.seq} cut a node short mid-step"
        if running:
            out[-1].written.append(record)
            running = kind not in ENDING_KINDS
            index += 1
            continue
        if kind in OPENING_KINDS:
            action = _Action("open" if isinstance(record.event, RunStarted) else "resume", held)
            held = []
            action.outside.append(record)
            index += 1
            while index < len(records) and records[index].kind in INPUT_KINDS:
                action.outside.append(records[index])
                index += 1
            out.append(action)
            running = True
            continue
        if isinstance(record.event, RunCancelled):
            out.append(_Action("cancel", [*held, record]))
            held = []
        elif record.run_id is None:
            if out and out[-1].kind == "copy" and out[-1].outside[-1].actor == record.actor:
                out[-1].outside.append(record)
            else:
                out.append(_Action("copy", [record]))
        else:
            held.append(record)  # closing records an opening or a cancel writes first
        index += 1
    return out


def _input_of(action: _Action) -> Any:
    """What the call that made `action` was given."""
    at = next(i for i, r in enumerate(action.outside) if r.kind in OPENING_KINDS)
    opener, given = action.outside[at].event, action.outside[at + 1 :]
    messages = [
        Message.model_validate(r.event.message)
        for r in given
        if isinstance(r.event, MessageAppended)
    ]
    fields: dict[str, Any] = {}
    for record in given:
        if isinstance(record.event, StateUpdated):
            fields.update(record.event.values)
    if isinstance(opener, Resumed) and not messages and not fields:
        return None if opener.value is None else Command(resume=opener.value)
    return {**({"messages": messages} if messages else {}), **fields}


def _from_step(
    records: Sequence[EventRecord], actions: list[_Action], step: int
) -> tuple[list[EventRecord], list[_Action]] | str:
    """The records up to step `step` (written as they are), and the outside input after
    them: a run the step leaves going carries on from the log, as after a crash."""
    cut = next(
        (i for i, r in enumerate(records) if isinstance(r.event, StepAdvanced)
         and r.event.step == step),
        None,
    )  # fmt: skip
    if cut is None:
        return f"it has no step {step}"
    last = records[cut].seq
    rest: list[_Action] = []
    for action in actions:
        if action.outside and action.outside[0].seq > last:
            rest.append(action)
        elif later := [r for r in action.written if r.seq > last]:
            rest.append(_Action("carry", [], later))
    return list(records[: cut + 1]), rest


async def _write_as_recorded(store: MemoryEventStore, records: Sequence[EventRecord]) -> None:
    """Append `records` as they were written, a commit per run."""
    start = 0
    while start < len(records):
        end = start + 1
        while end < len(records) and records[end].run_id == records[start].run_id:
            end += 1
        group = records[start:end]
        await store.append(
            group[0].thread_id,
            [r.event for r in group],
            expected_seq=group[0].seq - 1,
            run_id=group[0].run_id,
            actor=[r.actor for r in group],
        )
        start = end


async def _perform(app: CompiledGraph[Any], thread_id: str, action: _Action) -> None:
    if action.kind == "carry":
        with contextlib.suppress(AgentlogError):
            await app.ainvoke(None, {"thread_id": thread_id, CODE_CHANGE_KEY: "allow"})
        return
    opener = next(
        (r for r in action.outside if r.kind in OPENING_KINDS or r.kind == RunCancelled.KIND),
        action.outside[0],
    )
    config = {"thread_id": thread_id, "user": opener.actor or "user", CODE_CHANGE_KEY: "allow"}
    if action.kind == "copy":
        events: list[Event] = [r.event for r in action.outside]
        await app.awrite_claimed(
            thread_id, lambda _: events, actor=opener.actor or "user", what="a replayed record"
        )
    elif action.kind == "cancel":
        event = opener.event
        assert isinstance(event, RunCancelled)
        await app.acancel(config, by=event.by, reason=event.reason)
    else:
        if isinstance(opener.event, Resumed) and opener.event.by:
            config["user"] = opener.event.by
        started = opener.event
        if isinstance(started, RunStarted) and started.trigger_id is not None:
            config["entry_node"] = started.entry_node  # a runtime's entry point chose it
        # a node that failed, or a request the log could not answer, is in the log
        with contextlib.suppress(AgentlogError):
            await app.ainvoke(_input_of(action), config)


async def replay_records(
    target: Any,
    records: Sequence[EventRecord],
    allowed: Allowed | None = None,
    *,
    from_step: int | None = None,
) -> ThreadResult:
    """Replay one recorded thread (its records, in seq order) under the code `target`
    builds, and say whether it did the same, or where it first did not; with `from_step`,
    the thread as the log has it after that step is the start (a thread without that
    step is skipped)."""
    allowed = allowed or Allowed()
    thread_id = records[0].thread_id if records else ""
    actions = _actions(records)
    if isinstance(actions, str):
        return ThreadResult(thread_id, "skipped", reason=actions)
    store = _ReplayLog()
    store.stops = {r.seq - 1: r for r in records if isinstance(r.event, StopRequested)}
    app = bind_graph(target, store)
    started = next((r.event for r in records if isinstance(r.event, RunStarted)), None)
    if started and started.graph and app.graph.name and started.graph != app.graph.name:
        why = f"recorded by graph {started.graph!r}, not {app.graph.name!r}"
        return ThreadResult(thread_id, "skipped", reason=why)
    session = LoggedThread(records)
    ids = (IdMap(), IdMap())
    steps, runs = 0, 0
    if from_step is not None:
        cut = _from_step(records, actions, from_step)
        if isinstance(cut, str):
            return ThreadResult(thread_id, "skipped", reason=cut)
        prefix, actions = cut
        store.stops = {k: r for k, r in store.stops.items() if r.seq > prefix[-1].seq}
        await _write_as_recorded(store, prefix)
        runs = sum(isinstance(r.event, RunStarted) for r in prefix)
        for record in prefix:  # both sides name the ids the prefix holds alike
            comparable(record, ids[0], allowed)
            comparable(record, ids[1], allowed)
    for action in actions:
        runs += action.kind == "open"
        before = await store.last_seq(thread_id)
        with answering(session):
            await _perform(app, thread_id, action)
        produced = [r async for r in store.read(thread_id, before + 1)]
        log_chunks = chunks([*action.outside, *action.written])
        new_chunks = chunks(produced)
        found = first_difference(log_chunks, new_chunks, ids, allowed)
        if found is None:
            steps += sum(1 for c in log_chunks if c.step is not None)
            continue
        steps += sum(1 for c in log_chunks[: found.index] if c.step is not None)
        where = found.log or found.produced
        assert where is not None
        step = where.step if where.step is not None else _last_step(log_chunks, found.index)
        note = session.note_at(step) or (session.note_at(None) if session.notes else None)
        node = ",".join(dict.fromkeys(where.nodes)) or "(the run's opening)"
        cause, detail = found.cause, CAUSES[found.cause]
        if note is not None:
            cause, detail, node = note.cause, note.detail, note.node
        changed = changed_parts(started.fingerprint if started else None, app.engine.fingerprint)
        divergence = Divergence(
            thread_id=thread_id,
            run_id=where.run_id,
            run=max(runs, 1),
            step=step,
            node=node,
            cause=cause,
            detail=detail,
            log=found.log_view if note is None else [*found.log_view, *note.log],
            produced=found.produced_view
            if note is None
            else [*found.produced_view, *note.produced],
            diff=found.diff(),
            changed=changed,
        )
        return ThreadResult(thread_id, "diverged", steps, divergence)
    return ThreadResult(thread_id, "same", steps)


def _last_step(log_chunks: Sequence[Any], index: int) -> int | None:
    """The step a chunk without its own `step_advanced` follows: the one before it, + 1."""
    for chunk in reversed(log_chunks[:index]):
        if chunk.step is not None:
            return int(chunk.step) + 1
    return None
