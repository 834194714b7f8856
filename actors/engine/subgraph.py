"""Subgraphs: a compiled graph run inside a node of another, its steps in the parent's log.

Two ways in, as in LangGraph: a compiled graph added as a node (`add_node("sub", child)`:
the fields the two state classes share go in and come back), or a node that calls
`child.ainvoke(mapped_input)` / `child.invoke(...)` itself. Either way the call is seen to
come from inside a running node (`current_context()`), and the child runs on a thread of
the parent's log named after where it ran: the parent's thread, `|`, a namespace segment
`node:step` (the number of the parent's step: the same when the step runs again after a
crash, a pause or a failure, and in a fork of the parent made before it; `.b` for branch
b of a step of several, `+n` for a node's n-th subgraph call in one step), so a nested
child's namespace reads as LangGraph's `checkpoint_ns`.

Why a thread of its own and not the parent's thread: the child is a whole run (its own
steps, interrupts, tool calls, claim), and the engine already knows how to take a run
through a crash, a pause and a resume; written into the parent's thread, its records
would have to be told apart from the parent's by every fold and reader. The link is in
the parent's log all the same: the parent's step commits a `subgraph_ran` record naming
the child's thread and the seq and chain hash it stood at, so verifying the parent
(`verify_tree`) checks every child's chain and that the record the parent saw is still
there; one commit path writes all of it.

A fork reaches a child's step (`fork_nested`): the parent is forked before the step that
ran the child, the child at the point asked, under the fork's namespace; running the fork
runs that step again, which finds the child's fork and carries it on.

What that gives: a crash mid-child re-runs the parent's step, which finds the child's
thread and carries its run on from its last commit (a committed tool call inside it is
answered from its log); a child that completed before the crash is not run again, its
state is read back. An interrupt in the child pauses the child and then the parent (the
parent's pause carries the child's reason and data); `Command(resume=v)` on the parent
runs the parent's node again, whose subgraph call takes `v` as the child's resume value.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import copy
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from agentlog.actors.engine.command import Command
from agentlog.actors.engine.commit import fork_thread
from agentlog.actors.engine.context import NodeContext, _current
from agentlog.actors.engine.errors import GraphError, GraphInterrupt
from agentlog.actors.engine.loop import RunLoop
from agentlog.actors.engine.nodes import take_resume
from agentlog.actors.engine.run import Engine
from agentlog.actors.engine.stream import END_OF_STREAM, RunStream
from agentlog.events import EventStore, Forked, RunStarted, SubgraphRan
from agentlog.projections import AgentState
from agentlog.projections.forks import fork_event
from agentlog.projections.generic import open_state_class, state_fields
from agentlog.projections.keys import AWAITING_KEY

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph

SEPARATOR = "|"
"""Between a thread and the namespace segment of a subgraph run on it (LangGraph's)."""

BASE_FIELDS = ("context_summary", "execution_meta")
"""`AgentState`'s own fields that never pass between a parent and its child."""


class SubgraphStateError(GraphError):
    """A compiled graph added as a node whose state does not share its fields by name."""


class SubgraphForkError(GraphError):
    """A fork asked of a thread named as a subgraph run's that is not one this engine made."""


def target_thread(config: Mapping[str, Any], thread_id: str) -> str:
    """The thread a reading call names: the config's thread, or, with a `checkpoint_ns`
    (LangGraph's name, `node:step|node:step`), the subgraph run's thread under it."""
    configurable = config.get("configurable")
    ns = config.get("checkpoint_ns") or (
        configurable.get("checkpoint_ns") if isinstance(configurable, Mapping) else None
    )
    return f"{thread_id}{SEPARATOR}{ns}" if ns else thread_id


async def state_class_of(graph: CompiledGraph[Any], thread_id: str) -> type[AgentState]:
    """The state class of a thread of `graph`'s log: `known_class`, or else (a graph a node
    called, read through another graph) an open class built from the fields the thread
    recorded (`agentlog.projections.generic`: a user's reducer shows its last update)."""
    known, fields = await known_class(graph, thread_id)
    return known if known is not None else open_state_class(fields or {})


async def known_class(
    graph: CompiledGraph[Any], thread_id: str
) -> tuple[type[AgentState] | None, dict[str, str | None] | None]:
    """The class a thread was run with when `graph` knows it (a subgraph node's, or its
    own when the thread recorded its fields or none), else None; and the fields recorded."""
    found: CompiledGraph[Any] | None = graph
    for segment in namespace_of(thread_id):
        node = found.graph.nodes.get(segment.partition(":")[0]) if found is not None else None
        found = node.graph if isinstance(node, SubgraphNode) else None
    if found is not None and found is not graph:
        return found.graph.state_cls, None
    own = graph.graph.state_cls
    async for record in graph.store.read(thread_id, 1, 1):
        event = record.event
        fields = event.fields if isinstance(event, RunStarted | Forked) else None
        if fields is not None and fields != state_fields(own):
            return None, dict(fields)
    return own, None


async def _fork_class(graph: CompiledGraph[Any], thread_id: str) -> type[AgentState]:
    """The class a fork of a thread of the tree writes its state with: one `graph` knows."""
    known, _ = await known_class(graph, thread_id)
    if known is None:
        root = thread_id.partition(SEPARATOR)[0]
        raise SubgraphForkError(
            f"thread {thread_id!r} was run by a graph a node called, whose state class "
            f"{graph.graph.state_cls.__name__}'s graph does not know, and a fork writes the "
            "state in it: add that graph as a node (add_node(name, graph)), or fork the "
            f"thread {root!r} at a step before the call and run the fork (the call runs anew)"
        )
    return known


async def fork_nested(
    graph: CompiledGraph[Any],
    thread_id: str,
    *,
    at_step: int | None,
    at_seq: int | None,
    new_thread_id: str | None,
) -> str:
    """Fork a subgraph run's thread at a point: its parent is forked at the start of the
    step that ran it (and so on up to the root), the child at the point, into the fork's
    namespace; running the root fork carries the child on from there. The root fork's id."""
    parent, _, segment = thread_id.rpartition(SEPARATOR)
    step = segment.partition(":")[2].split(".")[0].split("+")[0]
    if not step.isdigit() or int(step) < 1:
        raise SubgraphForkError(
            f"thread {thread_id!r} is not named as a subgraph run of this engine names one "
            "(parent|node:step): fork it with the graph that ran it, on its own"
        )
    child_cls = await _fork_class(graph, thread_id)  # the class and the point checked
    await fork_event(  # before anything is written (it only reads)
        graph.store, thread_id, at_step=at_step, at_seq=at_seq, new_thread_id=thread_id,
        state_cls=child_cls,
    )  # fmt: skip
    if namespace_of(parent):
        forked = await fork_nested(
            graph, parent, at_step=int(step) - 1, at_seq=None, new_thread_id=new_thread_id
        )
    else:
        forked = await fork_thread(
            graph.store,
            parent,
            at_step=int(step) - 1,
            new_thread_id=new_thread_id,
            state_cls=await _fork_class(graph, parent),
        )
    await fork_thread(
        graph.store,
        thread_id,
        at_step=at_step,
        at_seq=at_seq,
        new_thread_id=f"{forked}{SEPARATOR}{segment}",
        state_cls=child_cls,
    )
    return forked


def parent_of(config: Mapping[str, Any] | None) -> NodeContext | None:
    """The node a graph call comes from, when it is a subgraph call: made inside a running
    node with no thread of its own (or the parent's, as LangGraph's config passes on)."""
    parent = _current.get()
    if parent is None or parent.log is None:
        return None
    if config:
        named = config.get("thread_id") or (config.get("configurable") or {}).get("thread_id")
        if named is not None and named != parent.thread_id:
            return None  # a thread of its own: an ordinary run of that thread
    return parent


def child_thread(parent: NodeContext) -> tuple[str, str]:
    """The namespace segment of the next subgraph run of the parent's step, and its thread:
    `node:step`, `.branch` in a step of several branches, `+n` for a node's n-th call."""
    place = parent.subgraphs
    parent.subgraphs += 1
    segment = f"{parent.node}:{parent.step}"
    if parent.branch is not None:
        segment += f".{parent.branch}"
    if place:
        segment += f"+{place}"
    return segment, f"{parent.thread_id}{SEPARATOR}{segment}"


def namespace_of(thread_id: str) -> tuple[str, ...]:
    """The namespace of a thread: () for a root thread, a segment per nesting level."""
    return tuple(thread_id.split(SEPARATOR)[1:])


async def run_nested(
    graph: CompiledGraph[Any], input: Any, config: Mapping[str, Any] | None, parent: NodeContext
) -> RunLoop[Any]:
    """Run `graph` as a subgraph of the node `parent`: on its thread of the parent's log,
    carried on where an earlier attempt of the step left it; the link recorded in the
    parent's step; the parent paused (`GraphInterrupt`) when the child paused."""
    segment, thread_id = child_thread(parent)
    assert parent.log is not None
    engine = _over(graph.engine, parent.log)
    given = await _input_for(engine, thread_id, input)
    settings = {k: v for k, v in (config or {}).items() if k not in ("thread_id", "configurable")}
    run = RunLoop.of(engine, {**settings, "thread_id": thread_id}, None)
    forwarding = _nested_stream(graph, run, parent, segment)
    try:
        await run.live(given)
    finally:
        if forwarding is not None:
            await forwarding
    # the thread holds this call alone: its messages are the call's, however many attempts
    run.own = set(run.fold.message_ids)
    meta = run.fold.state.execution_meta
    status = "interrupted" if meta.is_interrupted() else meta.status.value
    parent.record(
        SubgraphRan(
            node=parent.node,
            namespace=segment,
            thread_id=thread_id,
            seq=run.fold.seq,
            hash=run.fold.hash,
            status=status,
        )
    )
    if meta.is_interrupted():
        raise GraphInterrupt(meta.interrupt_reason or "subgraph", meta.interrupt_data)
    return run


async def _input_for(engine: Engine[Any], thread_id: str, input: Any) -> Any:
    """What the child's run takes: the input on a new thread; None to carry on a run a crash,
    a stop or a failure left (or to read back one that completed); the parent's resume value
    for a child paused in `interrupt()`."""
    if await engine.store.last_seq(thread_id) == 0:
        return input
    meta = (await engine.load(thread_id)).state.execution_meta
    if meta.is_interrupted() and meta.internal_data.get(AWAITING_KEY):
        found, value = take_resume()
        if not found:  # the parent was not given an answer: the child still waits
            raise GraphInterrupt(meta.interrupt_reason or "subgraph", meta.interrupt_data)
        return Command(resume=value)
    return None  # completed (read back), paused at a breakpoint, stopped, failed, crashed


def _over(engine: Engine[Any], log: EventStore) -> Engine[Any]:
    """The child's engine writing to the parent's log (whatever log the child was compiled
    with: a subgraph's steps are the parent's record)."""
    if engine.store is log:
        return engine
    nested = copy.copy(engine)
    nested.store = log
    return nested


def _nested_stream(
    graph: CompiledGraph[Any], run: RunLoop[Any], parent: NodeContext, segment: str
) -> asyncio.Task[None] | None:
    """When the parent's consumer asked for stream modes, the child's parts go to it under
    the child's namespace (`subgraphs=True` shows it)."""
    outer = parent.stream
    if outer is None or outer.projection is None:
        return None
    mine = graph.stream_projection(tuple(outer.projection.modes), {"thread_id": run.thread_id})
    nested = outer.projection.nested(segment, mine.nodes)
    nested.values_of, nested.message_of = mine.values_of, mine.message_of
    nested.update_of, nested.interrupts_of = mine.update_of, mine.interrupts_of
    stream = RunStream(run.thread_id, projection=nested).start()
    parts = stream.subscribe()
    run.stream = stream

    async def forward() -> None:
        try:
            while (part := await parts.get()) is not END_OF_STREAM:
                await outer.tell(part)
        finally:
            await stream.stop(drain=False)

    return asyncio.ensure_future(forward())


def blocking_in_node(coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any] | None:
    """A blocking graph call made by a sync node on its worker thread, run on the run's own
    event loop with the node's context (a subgraph call, recorded in the run's log); None
    when the caller is not a sync node."""
    parent = _current.get()
    if parent is None or parent.loop is None or parent.loop.is_closed():
        return None
    try:
        asyncio.get_running_loop()
        return None  # on an event loop: not a worker thread
    except RuntimeError:
        pass
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()
    context = contextvars.copy_context()

    def start() -> None:
        task = parent.loop.create_task(coro, context=context)  # type: ignore[union-attr]

        def settle(task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                done.cancel()
            elif task.exception() is not None:
                done.set_exception(task.exception())
            else:
                done.set_result(task.result())

        task.add_done_callback(settle)

    parent.loop.call_soon_threadsafe(start)
    return done


class SubgraphNode:
    """A compiled graph as a node: the fields its state shares with the parent's go in, its
    final values of them come back as the node's update (new messages only, for the
    context), as LangGraph's subgraph node returns the child's values."""

    def __init__(self, name: str, graph: CompiledGraph[Any], parent_cls: type[AgentState]) -> None:
        self.graph = graph
        self.__name__ = name
        child_cls = graph.graph.state_cls
        own = [f for f in child_cls.model_fields if f not in BASE_FIELDS]
        missing = [f for f in own if f not in parent_cls.model_fields]
        if missing:
            raise SubgraphStateError(
                f"the graph added as node {name!r} has state {child_cls.__name__} with "
                f"field(s) {', '.join(map(repr, missing))} that {parent_cls.__name__} lacks: a "
                "graph added as a node shares its state's fields with the parent by name; add "
                "them to the parent's state, or call the graph from a node function with "
                "mapped input (child.invoke({...}))"
            )
        self.fields = own

    async def __call__(self, state: Any, config: Mapping[str, Any]) -> dict[str, Any]:
        """Run the graph on the shared fields of `state`, or on a `Send`'s argument (a
        dict, taken as the graph's input as it is); its final values of them come back."""
        parent = parent_of(None)
        if parent is None:
            raise GraphError(f"subgraph node {self.__name__!r} ran outside a running node")
        sent: list[Any] = []
        if isinstance(state, AgentState):
            values = {f: getattr(state, f) for f in self.fields if f != "context"}
            sent = list(state.context)
            if "context" in self.fields and sent:
                values["context"] = sent
        else:
            values = state
        run = await run_nested(self.graph, values, None, parent)
        final = run.fold.state
        out: dict[str, Any] = {f: getattr(final, f) for f in self.fields if f != "context"}
        known = {m.message_id for m in sent}
        new = [m for m in final.context if m.message_id not in known]
        if new:
            out["context"] = new
        return out


__all__ = [
    "SEPARATOR",
    "SubgraphForkError",
    "SubgraphNode",
    "SubgraphStateError",
    "blocking_in_node",
    "namespace_of",
    "parent_of",
    "run_nested",
]
