"""The compiled LangGraph-shaped graph: LangGraph's calls and return shapes over agentlog's
`CompiledGraph` (`invoke` gives the values, `get_state` a `StateSnapshot` whose checkpoint id
is the seq of the log it was read at)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from agentlog.actors.engine.branch import branch_thread
from agentlog.actors.engine.command import Command
from agentlog.actors.engine.compiled import CompiledGraph
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.modes import ModeProjection, StreamMode
from agentlog.actors.engine.options import Durability
from agentlog.actors.engine.run import run_config
from agentlog.actors.engine.subgraph import (
    SEPARATOR,
    SubgraphNode,
    namespace_of,
    parent_of,
    target_thread,
)
from agentlog.actors.langgraph.nodes import Shapes
from agentlog.actors.langgraph.types import (
    Interrupt,
    PregelTask,
    StateSnapshot,
    interrupt_id,
)
from agentlog.events import ThreadNotFoundError
from agentlog.projections import END, AgentState
from agentlog.projections.forks import went_back_after
from agentlog.projections.keys import RESUME_KEY
from agentlog.projections.present import next_nodes

T = TypeVar("T")
INTERRUPT = "__interrupt__"


class ShapedGraph(CompiledGraph[Any]):
    """agentlog's compiled graph whose stream modes carry the front's values and messages."""

    def __init__(self, compiled: CompiledGraph[Any], front: CompiledStateGraph) -> None:
        super().__init__(compiled.engine)
        self.front = front
        self.shapes = front.shapes

    def stream_projection(
        self, modes: Sequence[StreamMode], config: Mapping[str, Any]
    ) -> ModeProjection:
        projection = super().stream_projection(modes, config)
        front = self.front
        projection.values_of = lambda state: front.shown(front.shapes.values(state))
        projection.message_of = self.shapes.message_out
        projection.update_of = front.update_shown
        thread_id = projection.thread_id
        projection.interrupts_of = lambda state: interrupts_of(state, thread_id)
        return projection

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` to its end from code without an event loop (the blocking calls)."""
        result: T = self._blocking(coro)
        return result

    def each(self, parts: AsyncIterator[T]) -> Iterator[T]:
        """Iterate `parts` from code without an event loop."""
        assert isinstance(parts, AsyncGenerator)
        return self._iterating(parts)


class CompiledStateGraph:
    """A compiled graph answering as LangGraph's does, over agentlog's `CompiledGraph`
    (reachable as `.graph_engine` for agentlog's own calls: time travel, fork, stop)."""

    def __init__(self, compiled: CompiledGraph[Any], shapes: Shapes, *, checkpointed: bool) -> None:
        self.shapes = shapes
        self.graph_engine = ShapedGraph(compiled, self)
        self.checkpointed = checkpointed

    # ---- running ------------------------------------------------------------------------

    async def ainvoke(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        context: Any = None,
        durability: Durability | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Run (or resume) the thread until it ends or pauses; the state's values, with
        `__interrupt__` when a node paused it."""
        if options.pop("stream_mode", "values") != "values":
            raise UnsupportedOptionError("invoke returns the values: use stream() for other modes")
        asked = breakpoints_of(options)
        refuse_options("invoke", options)
        config = await self._at_checkpoint(self._config(config, context, durability) | asked)
        result, _ = await self.graph_engine.ainvoke_to(await self._input(input, config), config)
        state: AgentState = result["state"]
        values = self.shapes.values(state)
        pending = interrupts_of(state, run_config(config)["thread_id"])
        if pending:
            values[INTERRUPT] = list(pending)
        return self.returned(values)  # type: ignore[no-any-return]

    def invoke(
        self, input: Any, config: Mapping[str, Any] | None = None, **options: Any
    ) -> dict[str, Any]:
        return self.graph_engine.call(self.ainvoke(input, config, **options))

    async def astream(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: Any = "updates",
        context: Any = None,
        subgraphs: bool = False,
        version: str = "v1",
        durability: Durability | None = None,
        **options: Any,
    ) -> AsyncIterator[Any]:
        """Stream a run in LangGraph's modes (`updates` unless told), its values shaped as
        this graph's schema says."""
        asked = breakpoints_of(options)
        refuse_options("stream", options)
        config = await self._at_checkpoint(self._config(config, context, durability) | asked)
        parts = self.graph_engine.astream(
            await self._input(input, config),
            config,
            stream_mode=stream_mode,
            subgraphs=subgraphs,
            version=version,
        )
        async for part in parts:
            yield part

    async def abatch(
        self, inputs: Sequence[Any], config: Any = None, **options: Any
    ) -> list[dict[str, Any]]:
        """`ainvoke` each input, at once (`config`: one for all, or one per input)."""
        configs = list(config) if isinstance(config, list) else [config] * len(inputs)
        if len(configs) != len(inputs):
            raise GraphError(f"abatch got {len(inputs)} inputs and {len(configs)} configs")
        calls = (self.ainvoke(i, c, **options) for i, c in zip(inputs, configs, strict=True))
        return list(await asyncio.gather(*calls))

    def batch(
        self, inputs: Sequence[Any], config: Any = None, **options: Any
    ) -> list[dict[str, Any]]:
        return self.graph_engine.call(self.abatch(inputs, config, **options))

    def stream(
        self, input: Any, config: Mapping[str, Any] | None = None, **options: Any
    ) -> Iterator[Any]:
        return self.graph_engine.each(self.astream(input, config, **options))

    # ---- reading ------------------------------------------------------------------------

    async def aget_state(
        self, config: Mapping[str, Any], *, subgraphs: bool = False
    ) -> StateSnapshot:
        """The thread's state at its head, or at `configurable.checkpoint_id` (a seq); a
        subgraph run's with `checkpoint_ns`; with `subgraphs`, each task that is a subgraph
        node holds the snapshot of its run under way (paused in it, say) as its `state`."""
        thread_id = target_thread(config, run_config(config)["thread_id"])
        front = self._front_of(thread_id)
        seq = _checkpoint_of(config)
        if seq is None:
            seq = await self.graph_engine.store.last_seq(thread_id)
        snapshot = await front._snapshot_at(thread_id, seq, None)
        if not subgraphs or not snapshot.tasks:
            return snapshot
        tasks = []
        for task in snapshot.tasks:
            child = f"{thread_id}{SEPARATOR}{task.name}:{(snapshot.metadata or {})['step'] + 1}"
            known = isinstance(front.graph_engine.graph.nodes.get(task.name), SubgraphNode)
            if known and await self.graph_engine.store.last_seq(child):
                inner = await self.aget_state({"thread_id": child}, subgraphs=True)
                task = task._replace(state=inner)
            tasks.append(task)
        return snapshot._replace(tasks=tuple(tasks))

    def _front_of(self, thread_id: str) -> CompiledStateGraph:
        """The compiled graph whose run a thread of this log is: this one, or a subgraph
        node's (over this log), whose schema shapes its values."""
        front = self
        for segment in namespace_of(thread_id):
            node = front.graph_engine.graph.nodes.get(segment.partition(":")[0])
            if not isinstance(node, SubgraphNode) or not isinstance(node.graph, ShapedGraph):
                return front
            engine = copy.copy(node.graph.engine)
            engine.store = self.graph_engine.store
            front = CompiledStateGraph(CompiledGraph(engine), node.graph.shapes, checkpointed=True)
        return front

    async def _snapshot_at(
        self, thread_id: str, seq: int, parent: int | None, step: int | None = None
    ) -> StateSnapshot:
        if seq == 0:
            return self._snapshot(thread_id, 0, self.shapes.schema.state_cls(), None, None)
        state = await self.graph_engine.aget_state({"thread_id": thread_id}, at_seq=seq)
        at = None
        async for record in self.graph_engine.store.read(thread_id, seq, seq):
            at = record.at
        return self._snapshot(thread_id, seq, state, parent, at, step=step)

    def get_state(self, config: Mapping[str, Any], *, subgraphs: bool = False) -> StateSnapshot:
        return self.graph_engine.call(self.aget_state(config, subgraphs=subgraphs))

    async def aget_state_history(self, config: Mapping[str, Any], **_: Any) -> list[StateSnapshot]:
        """One snapshot per step, newest first (the newest is the head, as `get_state`)."""
        thread_id = run_config(config)["thread_id"]
        try:
            entries = await self.graph_engine.aget_state_history({"thread_id": thread_id})
        except ThreadNotFoundError:
            return []  # as LangGraph: a thread with no checkpoint has no history
        store = self.graph_engine.store
        head = await store.last_seq(thread_id)
        snapshots: list[StateSnapshot] = []
        parent: int | None = None
        # the head is the last step's state, unless the thread went back to a past
        # checkpoint since: then that step's state stays in the history, and the head follows
        back = bool(entries) and await went_back_after(store, thread_id, entries[-1].last_seq)
        for number, entry in enumerate(entries, 1):
            seq = head if number == len(entries) and not back else entry.last_seq
            snapshots.append(await self._snapshot_at(thread_id, seq, parent, entry.step))
            parent = seq
        if back:
            snapshots.append(await self._snapshot_at(thread_id, head, parent))
        return snapshots[::-1]

    def get_state_history(
        self, config: Mapping[str, Any], **options: Any
    ) -> Iterator[StateSnapshot]:
        return iter(self.graph_engine.call(self.aget_state_history(config, **options)))

    async def aupdate_state(
        self, config: Mapping[str, Any], values: Any, as_node: str | None = None
    ) -> dict[str, Any]:
        """Record a human edit of the state (as `as_node` if given); the config of the new head."""
        thread_id = run_config(await self._at_checkpoint(config))["thread_id"]
        update = self.shapes.update(values)
        records = await self.graph_engine.aupdate_state({"thread_id": thread_id}, update, as_node)
        seq = records[-1].seq if records else await self.graph_engine.store.last_seq(thread_id)
        return _config_at(thread_id, seq)

    def update_state(
        self, config: Mapping[str, Any], values: Any, as_node: str | None = None
    ) -> dict[str, Any]:
        return self.graph_engine.call(self.aupdate_state(config, values, as_node))

    def get_graph(self, **options: Any) -> Any:
        return self.graph_engine.get_graph(**options)

    # ---- shapes -------------------------------------------------------------------------

    def given(self, input: Any) -> Any:
        """A call's input as the graph's state takes it (a graph of an entrypoint wraps it)."""
        return input

    def shown(self, values: dict[str, Any]) -> Any:
        """The values a snapshot shows."""
        return values

    def returned(self, values: dict[str, Any]) -> Any:
        """What `invoke` returns, from the values (and the pending interrupts): the output
        schema's keys when the graph has one."""
        keys = self.shapes.output_keys
        if keys is None:
            return values
        return {k: v for k, v in values.items() if k in keys or k == INTERRUPT}

    def update_shown(self, update: dict[str, Any]) -> Any:
        """One node's update as the `updates` stream mode shows it."""
        return self.shapes.update_out(update)

    def _config(
        self, config: Mapping[str, Any] | None, context: Any, durability: str | None
    ) -> dict[str, Any]:
        if config is not None and not isinstance(config, Mapping):
            run_config(config)  # refuses it, saying what a config is
        out: dict[str, Any] = self.graph_engine.call_config(config, context, durability) or {}
        configurable = out.get("configurable")
        has_thread = "thread_id" in out or (
            isinstance(configurable, Mapping) and "thread_id" in configurable
        )
        parent = parent_of(out)
        if parent is not None and not has_thread:
            out["thread_id"] = parent.thread_id  # a subgraph call: a thread of the parent's log
        elif not has_thread:
            if self.checkpointed:
                raise GraphError(
                    "a graph compiled with a checkpointer needs a thread: pass config="
                    "{'configurable': {'thread_id': '...'}}"
                )
            out["thread_id"] = f"run-{uuid.uuid4().hex}"  # one call, in memory, as LangGraph
        return out

    async def _at_checkpoint(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config without its `checkpoint_id`, the thread set back to that checkpoint
        first when it is a past one (`agentlog.actors.engine.branch`: a record at the head,
        the branch left behind staying in the log and the history)."""
        at = _checkpoint_of(config)
        out = {k: v for k, v in config.items() if k != "checkpoint_id"}
        configurable = out.get("configurable")
        if isinstance(configurable, Mapping):
            out["configurable"] = {k: v for k, v in configurable.items() if k != "checkpoint_id"}
        if at is None:
            return out
        thread_id = run_config(out)["thread_id"]
        if SEPARATOR in target_thread(config, thread_id):
            raise PastCheckpointError(
                "a checkpoint inside a subgraph run cannot be run or edited on its own: run "
                "or edit the parent's checkpoint before the step that ran the subgraph"
            )
        if at != await self.graph_engine.store.last_seq(thread_id):
            await branch_thread(self.graph_engine, thread_id, at_seq=at, actor="user")
        return out

    async def _input(self, input: Any, config: Mapping[str, Any]) -> Any:
        if isinstance(input, Command):
            if isinstance(input.resume, Mapping) and input.resume:
                return await self._resume_by_id(input, config)
            return self.shapes.update(input)
        if input is None:
            return None
        input = self.given(input)
        if isinstance(input, str | bytes) or not (
            isinstance(input, Mapping)
            or hasattr(input, "__dataclass_fields__")
            or hasattr(type(input), "model_fields")
        ):
            raise GraphError(
                f"the input must be a dict of the state's keys (or a Command, or None to go "
                f"on), got {type(input).__name__} {input!r:.60}; to send a message, write "
                "{'messages': [('user', 'text')]}"
            )
        return self.shapes.update(input)

    async def _resume_by_id(self, command: Command[Any], config: Mapping[str, Any]) -> Command[Any]:
        """`Command(resume={interrupt_id: value})`: the value for the one pending pause."""
        thread_id = run_config(config)["thread_id"]
        ids: set[str] = set()
        with contextlib.suppress(ThreadNotFoundError):
            state = await self.graph_engine.aget_state({"thread_id": thread_id})
            ids = {i.id for i in interrupts_of(state, thread_id)}
        resume = command.resume
        assert isinstance(resume, Mapping)
        if ids and set(resume) <= ids:
            (value,) = resume.values()
            return Command(update=command.update, goto=command.goto, resume=value)
        plain: Command[Any] = self.shapes.update(command)
        return plain  # a plain dict as the value, as LangGraph allows

    def _snapshot(
        self,
        thread_id: str,
        seq: int,
        state: AgentState,
        parent: int | None,
        at: float | None,
        *,
        step: int | None = None,
    ) -> StateSnapshot:
        meta = state.execution_meta
        pending = interrupts_of(state, thread_id)
        nxt = tuple(n for n in next_nodes(meta) if n != END) if seq else ()
        tasks = tuple(
            PregelTask(interrupt_id(thread_id, node, meta.step, 0), node, (node,), None, pending)
            for node in nxt
        )
        return StateSnapshot(
            values=self.shown(self.shapes.values(state)),
            next=nxt,
            config=_config_at(thread_id, seq),
            metadata={"source": "loop", "step": meta.step if step is None else step, "parents": {}},
            created_at=None if at is None else datetime.fromtimestamp(at, UTC).isoformat(),
            parent_config=_config_at(thread_id, parent) if parent else None,
            tasks=tasks,
            interrupts=pending,
        )


def breakpoints_of(options: dict[str, Any]) -> dict[str, Any]:
    """A call's `interrupt_before` / `interrupt_after` (taken out of `options`), for this
    run only: the config keys the engine reads them from."""
    names = ("interrupt_before", "interrupt_after")
    return {n: options.pop(n) for n in names if options.get(n) is not None}


def _checkpoint_of(config: Mapping[str, Any]) -> int | None:
    configurable = config.get("configurable")
    configurable = configurable if isinstance(configurable, Mapping) else {}
    raw = configurable.get("checkpoint_id", config.get("checkpoint_id"))
    if raw is None:
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise GraphError(
            f"checkpoint_id {raw!r:.40} is not one of this thread's: take it from "
            f"get_state(config).config or get_state_history(config)"
        ) from None


def _config_at(thread_id: str, seq: int) -> dict[str, Any]:
    root, _, ns = thread_id.partition(SEPARATOR)  # a subgraph run's: its parent's, its ns
    return {"configurable": {"thread_id": root, "checkpoint_ns": ns, "checkpoint_id": str(seq)}}


class PastCheckpointError(GraphError):
    """A past checkpoint named where it cannot be run or edited (inside a subgraph run)."""


class UnsupportedOptionError(GraphError, TypeError):
    """A LangGraph option this front does not have (yet): refused, never ignored."""


def refuse_options(call: str, options: Mapping[str, Any], ignored: Sequence[str] = ()) -> None:
    """Refuse the options of `call` this front does not carry out (`ignored` ones change
    nothing a program sees, and pass)."""
    unknown = sorted(set(options) - set(ignored))
    if unknown:
        raise UnsupportedOptionError(
            f"{call} got {', '.join(unknown)}, which agentlog.langgraph does not carry out; "
            "leave it out (docs/langgraph.md lists what differs from LangGraph)"
        )


def interrupts_of(state: AgentState, thread_id: str) -> tuple[Interrupt, ...]:
    """The pause a thread waits at, as LangGraph shows it (one at most: one node runs per step)."""
    meta = state.execution_meta
    if not meta.is_interrupted():
        return ()
    data = meta.interrupt_data or {}
    if "value" not in data:
        return ()
    answered = len((meta.internal_data.get(RESUME_KEY) or {}).get("values", ()))
    node = meta.interrupted_node or meta.current_node
    return (Interrupt(data["value"], interrupt_id(thread_id, node, meta.step, answered)),)
