"""Opening a run: what a call's input makes of its thread (a new run, a resume, a run cut
short carried on, or nothing to do), checked before anything is written, and the events that
open it. The run's life (claim, steps, cut, abandon) is its `RunLoop`'s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from agentlog.actors.engine.command import Command
from agentlog.actors.engine.errors import (
    GraphError,
    NothingToResumeError,
    UnreadResumeValueError,
)
from agentlog.actors.tools.node import is_tool_node, pending_calls
from agentlog.events import (
    EventStore,
    Forked,
    InterruptRaised,
    MessageAppended,
    Resumed,
    RunStarted,
    TasksPlanned,
    ThreadNotFoundError,
)
from agentlog.events.kinds import ContextSummarized, Event, StateUpdated
from agentlog.projections import (
    START,
    AgentState,
    ExecutionState,
    ExecutionStatus,
    Fold,
    IllegalTransitionError,
    RemoteToolCallBlock,
    StopRequestStatus,
    open_calls,
    to_builtins,
)
from agentlog.projections.fold import before_first_run, decide
from agentlog.projections.generic import state_fields
from agentlog.projections.ids import new_run_id
from agentlog.projections.keys import AWAITING_KEY
from agentlog.projections.messages import normalize_input

if TYPE_CHECKING:
    from agentlog.actors.engine.graph import StateGraph
    from agentlog.actors.engine.loop import RunLoop
from agentlog.actors.engine.callbacks import call_hook
from agentlog.actors.engine.ending import answered_ids, closing_events, goes_past
from agentlog.actors.engine.fingerprint import CODE_CHANGE_KEY, check_policy, code_change
from agentlog.actors.engine.nodes import output_events
from agentlog.actors.engine.plan import plan
from agentlog.actors.engine.run import (
    Engine,
    S,
    _recursion_limit,
    breakpoints,
    scratch_records,
)

TRIGGER_KEY = "trigger_id"
"""The config key by which an agent runtime names the trigger a call carries out."""

SNAPSHOT_AT_REST = 64
"""A run that comes to rest this many records or more after its last snapshot takes one
(a fresh process then loads the thread from it instead of folding from the start)."""


_OVER = (ExecutionStatus.COMPLETED, ExecutionStatus.CANCELLED)
"""A run in these is over: new input starts a new run."""


def checked_input(input: Any) -> Any:
    """A call's input, normalized; `GraphError` when it is no input a run takes."""
    values = normalize_input(input)
    if values is not None and not isinstance(values, Mapping | AgentState | list):
        raise GraphError(
            f"ainvoke's input must be a message (a str, a Message, an OpenAI-style dict), "
            f"a list of messages, a dict of state fields, or None to resume; got "
            f"{type(values).__name__} {values!r:.60}"
        )
    return values


def _paused_at(meta: ExecutionState) -> str:
    """The node a paused or failed run stopped at, which a `resumed` record names."""
    failed = meta.internal_data.get("failed_node")
    return meta.interrupted_node or (failed if isinstance(failed, str) else meta.current_node)


def _run_id(config: Mapping[str, Any]) -> str:
    """The id of a run this call starts: the config's `run_id` (an agent runtime passes its
    trigger's id, so the log and the HTTP API name a run alike), else a fresh one."""
    given = config.get("run_id")
    if given is None:
        return new_run_id()
    if not isinstance(given, str) or not 1 <= len(given) <= 200 or not given.isprintable():
        raise GraphError(
            f"config['run_id'] names the run this call starts: printable text of 1 to 200 "
            f"characters, got {given!r:.60}"
        )
    return given


def check_input_fields(state_cls: type[AgentState], input: Any) -> None:
    """Refuse input no run of `state_cls` can take (a field the state lacks, a value its
    field refuses, a message that does not parse), so it is refused before it is recorded,
    not by every attempt of a run that can never succeed."""
    values = checked_input(input)
    if values is None:
        return
    state = state_cls()
    events = output_events("user", values, state, known=set())[0]
    # messages are checked against the thread as it stands when the run begins (a tool
    # result answers a call in it); fields against the state class alone
    decide(state, [e for e in events if isinstance(e, StateUpdated | ContextSummarized)], seq=0)


async def open_run(run: RunLoop[S], input: Any) -> list[Event]:
    """Make `run` (its thread claimed) the run this call opens or resumes, from the thread as
    the log has it, and return the events that open it (to be committed); none when there is
    nothing new to do (`run.idle`)."""
    engine, config, thread_id = run.engine, run.config, run.thread_id
    command = input if isinstance(input, Command) else None
    if command is not None and command.goto is not None:
        raise GraphError("Command(goto=...) is for nodes to return, not an input to invoke")
    values = checked_input(command.update if command is not None else input)
    hooks = engine.callbacks
    if values is not None and hooks is not None and "validate_input" in engine.hooked:
        await call_hook(hooks, "validate_input", thread_id, values)  # before any write
    fold = await engine.load(thread_id, run.claim)
    if fold.seq == 0 and values is None:
        raise ThreadNotFoundError(thread_id)
    meta = fold.state.execution_meta
    user = str(config.get("user", "user"))
    trigger = config.get(TRIGGER_KEY)  # the runtime's trigger: its opening names it
    traceparent = config.get("traceparent")  # checked by `run_config`: the caller's trace
    run.run_id = str(meta.internal_data.get("run_id") or "")
    run.fold = fold
    run.recursion_limit = _recursion_limit(config, engine.recursion_limit)
    run.interrupt_before = breakpoints(engine, config, "interrupt_before")
    run.interrupt_after = breakpoints(engine, config, "interrupt_after")
    run.last_snapshot = fold.snapshot_seq  # the thread's latest, not 0 for every run
    resume = command.resume if command is not None else None
    paused = meta.is_interrupted() or meta.stop_current_execution == StopRequestStatus.STOPPED
    if meta.status == ExecutionStatus.CANCELLED and values is None and resume is None:
        cancelled = meta.internal_data.get("cancelled") or {}
        why = f": {cancelled['reason']}" if cancelled.get("reason") else ""
        raise NothingToResumeError(
            f"the run on thread {thread_id!r} was cancelled by "
            f"{cancelled.get('by') or 'someone'}{why}; there is nothing to resume: send "
            "new input to start a new run"
        )
    if before_first_run(meta) and values is None and resume is None:
        raise NothingToResumeError(
            f"thread {thread_id!r} was created and has not run yet: there is nothing to "
            "resume; send input to start its first run"
        )
    if meta.status == ExecutionStatus.COMPLETED and values is None and resume is None:
        run.idle = True  # nothing new to do: a finished thread stays as it is
        return []
    resuming = paused or meta.status == ExecutionStatus.ERROR
    if resume is not None and not resuming:
        raise IllegalTransitionError(
            Resumed.KIND,
            f"thread {thread_id!r} is not paused or failed: there is nothing to resume",
        )
    check_resume_value(engine.graph, thread_id, fold.state, resume)
    inputs = (
        output_events("user", values, fold.state, known=fold.message_ids)[0]
        if values is not None
        else []
    )
    waiting = _waiting_remote(fold.state) if paused else []
    if waiting and _answers_any(inputs, waiting):
        # The client ran its tool calls: their results resume the run where it paused.
        run.own.update(_appended_ids(inputs))
        # the calls it left unanswered are not run, answered right after its results
        # and before any other message it sends (`closing_events`, as every early end)
        remote = {c.id for c in waiting}
        skip = answered_ids(inputs) | {c.id for c in open_calls(fold.state.context)} - remote
        why = "the client answered other calls of this message but not this one"
        closing = await closing_events(engine.store, fold, why, over=True, skip=skip)
        cut = next((i for i, e in enumerate(inputs) if goes_past([e])), len(inputs))
        resumed: list[Event] = [
            Resumed(
                value=None,
                by=user,
                node=_paused_at(meta),
                trigger_id=trigger,
                traceparent=traceparent,
            ),
            *inputs[:cut],
            *closing,
            *inputs[cut:],
        ]
        return resumed
    if waiting and not inputs:
        names = ", ".join(f"{c.name} ({c.id})" for c in waiting)
        raise GraphError(
            f"thread {thread_id!r} waits for the results of client tool call(s) {names}: "
            "invoke it with tool messages answering them, such as {'role': 'tool', "
            "'tool_call_id': <id>, 'content': <result>}; other input rejects them and "
            "starts a new run"
        )
    answers = await _answer_pending(engine, fold, inputs) if resume is None and inputs else []
    # plain input on a run whose node asked a person (`interrupt()`) is a new request,
    # never the answer: resuming with it would let the node go on as if approved (its
    # `interrupt()` returning None). A breakpoint's pause takes new input and goes on.
    superseded = (
        command is None
        and bool(inputs)
        and meta.is_interrupted()
        and bool(meta.internal_data.get(AWAITING_KEY))
    )
    events: list[Event] = []
    # the answers supersede a paused or failed run; a run cut short goes on after them
    superseded = superseded or (bool(answers) and resuming)
    if fold.seq == 0 or meta.status in _OVER or superseded or before_first_run(meta):
        run.run_id = _run_id(config)
        events.extend(answers)
        events.append(
            RunStarted(
                entry_node=_entry_node(engine.graph, config),
                graph=engine.graph.name,
                fields=state_fields(engine.graph.state_cls),
                trigger_id=trigger,
                fingerprint=engine.fingerprint,
                traceparent=traceparent,
            )
        )
    elif resuming:
        changed = await _code_change(engine, thread_id, config)
        events.append(
            Resumed(
                value=to_builtins(resume),
                by=user,
                node=_paused_at(meta),
                trigger_id=trigger,
                code_change=changed,
                traceparent=traceparent,
            )
        )
        if meta.status == ExecutionStatus.INTERRUPTED_BEFORE:
            run.skip_interrupt_before = meta.interrupted_node
    else:
        await _code_change(engine, thread_id, config)  # warned or refused; nothing to record
        run.cut_short = True  # a run that was cut short: carry on where the log stops
        run.skip_interrupt_before = await _released_breakpoint(engine.store, fold)
        events.extend(answers)  # its open calls answered before the input's message
    events.extend(inputs)
    if not run.run_id:
        run.run_id = _run_id(config)
    if _fans_out_at_start(engine.graph) and "entry_node" not in config:
        events = _entry_planned(engine.graph, fold, events)
    return events


async def _code_change(
    engine: Engine[Any], thread_id: str, config: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The caller's `on_code_change` policy applied to a run going on under code other than
    the code its `run_started` recorded (`agentlog.actors.engine.fingerprint.code_change`)."""
    policy = check_policy(config.get(CODE_CHANGE_KEY))
    seqs = await engine.store.seqs_of_kind(thread_id, RunStarted.KIND)
    if not seqs:
        return None
    started = [r.event async for r in engine.store.read(thread_id, seqs[-1], seqs[-1])]
    first = started[0] if started else None
    recorded = first.fingerprint if isinstance(first, RunStarted) else None
    return code_change(engine, thread_id, recorded, policy)


def _fans_out_at_start(graph: StateGraph[Any]) -> bool:
    """Whether a run's first step may be other than the one node of `add_edge(START, node)`."""
    return START in graph.fanout or START in graph.branches


def _entry_planned(graph: StateGraph[Any], fold: Fold[Any], events: list[Event]) -> list[Event]:
    """The opening `events` of a run whose first step fans out or is chosen by a condition on
    its input: its `run_started` names the first task, and a `tasks_planned` after the input
    records them all (the condition sees the state the input leaves)."""
    index = next((i for i, e in enumerate(events) if isinstance(e, RunStarted)), None)
    if index is None:
        return events
    scratch = Fold(fold.state)
    scratch.apply_decided(scratch_records(fold.state.execution_meta.thread_id, events, fold.seq))
    tasks, joins, recorded = plan(graph, [(START, None)], scratch.state)
    if not tasks:
        raise GraphError("the graph's entry chose END: a run must start at a node")
    opened = [*events]
    opened[index] = msgspec.structs.replace(events[index], entry_node=tasks[0].node)
    if recorded:
        step = scratch.state.execution_meta.step + 1
        opened.append(TasksPlanned(step=step, tasks=[t.record() for t in tasks], joins=joins))
    return opened


def check_resume_value(
    graph: StateGraph[Any], thread_id: str, state: AgentState, value: Any
) -> None:
    """Refuse a resume value that nothing would read: only a node paused in `interrupt()`
    receives one. At a breakpoint, a stop or a failure the run would go on as if
    approved, so `UnreadResumeValueError` says what works instead (nothing is written)."""
    meta = state.execution_meta
    if value is None or meta.internal_data.get(AWAITING_KEY):
        return
    before = meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    if meta.status == ExecutionStatus.ERROR:
        where = f"failed at node {meta.internal_data.get('failed_node')!r}"
    elif meta.stop_current_execution == StopRequestStatus.STOPPED:
        side = "before" if before else "after"
        where = f"stopped {side} node {meta.interrupted_node!r}"
    else:
        side = "before" if before else "after"
        why = f" ({meta.interrupt_reason})" if meta.interrupt_reason else ""
        where = f"paused {side} node {meta.interrupted_node!r}{why}"
    # new input answers calls the run owes or that its message would pass (`_answer_pending`)
    waiting = _owes_calls(graph, state) or bool(open_calls(state.context))
    reject = (
        "send new input instead: the pending tool calls are answered as not run and a "
        "new run starts with it"
        if waiting
        else "cancel the run (acancel, or the runtime's cancel: new input here would go "
        "on into the node with it)"
    )
    raise UnreadResumeValueError(
        f"thread {thread_id!r} is {where}, where no node asked for a value: the resume "
        f"value {value!r:.80} would be read by nothing and the run would go on as if "
        "approved, so nothing was written. To approve, resume with None (ainvoke(None, "
        'config), Command(resume=None), a run with command {"resume": null}); to reject, '
        f"{reject}; for a node to receive a value, call interrupt() inside it and answer "
        "that with Command(resume=value)"
    )


def _entry_node(graph: StateGraph[Any], config: Mapping[str, Any]) -> str:
    """Where a new run starts: the graph's entry, or the node the config names
    (`entry_node`, as an agent runtime's entry point asks)."""
    node = config.get("entry_node")
    if node is None:
        return str(graph.edges.get(START, START))  # a condition at START: `_entry_planned`
    if node not in graph.nodes:
        known = ", ".join(sorted(graph.nodes))
        raise GraphError(f"entry_node {node!r} is not a node of the graph (nodes: {known})")
    return str(node)


async def _released_breakpoint(store: EventStore, fold: Fold[Any]) -> str | None:
    """The node a resume let past its `interrupt_before`, when the run that resumed was
    cut short (a crash) right after recording it: the log says that pause was answered,
    so carrying on must not pause there again."""
    if fold.seq < 2:
        return None
    thread_id = fold.state.execution_meta.thread_id or ""
    last = [r.event async for r in store.read(thread_id, fold.seq - 1, fold.seq)]
    match last:
        case [InterruptRaised(when="before", by_node=False, node=node), Resumed()]:
            return node
        case [
            Forked(state={"execution_meta": {"status": "interrupted_before"} as at}),
            Resumed(),
        ]:
            return str(at.get("interrupted_node"))  # a fork's pause, answered
    return None


async def _answer_pending(engine: Engine[S], fold: Fold[S], inputs: Sequence[Event]) -> list[Event]:
    """Results for the tool calls a paused, stopped, failed or crashed run still owes,
    when new input (`inputs`) supersedes it.

    New input while a run waits at its tool node means the person answered instead of
    letting the calls run; new input whose message would come after calls still open at
    any other pause, or in a run a crash cut short, would split them from their results,
    an order no provider takes. Either way each call is answered as `closing_events`
    decides (a committed result kept, a started one abandoned, else "not run", naming
    the new input) before the input's message, and a new run starts from the entry node
    with it (a run cut short goes on after them, as it does with any input): the
    transcript stays valid for every model provider. Calls the input answers itself are
    left to it.
    """
    meta = fold.state.execution_meta
    resting = (
        meta.is_interrupted()
        or meta.stop_current_execution == StopRequestStatus.STOPPED
        or meta.status == ExecutionStatus.ERROR
    )
    # this call holds the claim: a run the log shows running was cut short by a crash
    crashed = meta.status == ExecutionStatus.RUNNING and not before_first_run(meta)
    if not resting and not crashed:
        return []
    skip = answered_ids(inputs)
    if meta.is_interrupted() and _waiting_remote(fold.state):
        why = "the user replied instead of the client answering this call"
        return await closing_events(engine.store, fold, why, over=True, skip=skip)
    if resting and _owes_calls(engine.graph, fold.state):
        why = "the user replied before it was approved"
        return await closing_events(engine.store, fold, why, over=True, skip=skip)
    if goes_past(inputs) and open_calls(fold.state.context):
        why = "the user sent new input instead of letting the run go on"
        return await closing_events(engine.store, fold, why, over=True, skip=skip)
    return []


def _owes_calls(graph: StateGraph[Any], state: AgentState) -> bool:
    """Whether the paused run would go on into its tool node with calls to run."""
    meta = state.execution_meta
    before = meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    node = meta.interrupted_node if before else meta.current_node  # where it would go on
    return node in graph.nodes and is_tool_node(graph.nodes[node]) and bool(pending_calls(state))


def _waiting_remote(state: AgentState) -> list[RemoteToolCallBlock]:
    """The client's tool calls the context still waits for."""
    return [c for c in open_calls(state.context) if isinstance(c, RemoteToolCallBlock)]


def _answers_any(events: Sequence[Event], calls: Sequence[RemoteToolCallBlock]) -> bool:
    return bool(answered_ids(events) & {c.id for c in calls})


def _appended_ids(events: Sequence[Event]) -> list[Any]:
    return [e.message.get("message_id") for e in events if isinstance(e, MessageAppended)]
