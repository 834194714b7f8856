"""The compiled LangGraph-shaped graph: LangGraph's calls and return shapes over agentlog's
`CompiledGraph` (`invoke` gives the values, `get_state` a `StateSnapshot` whose checkpoint id
is the seq of the log it was read at)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from agentlog.actors.engine.command import Command
from agentlog.actors.engine.compiled import CompiledGraph
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.modes import ModeProjection, StreamMode
from agentlog.actors.engine.options import Durability
from agentlog.actors.engine.run import run_config
from agentlog.actors.langgraph.nodes import Shapes
from agentlog.actors.langgraph.types import (
    Interrupt,
    PregelTask,
    StateSnapshot,
    interrupt_id,
)
from agentlog.events import ThreadNotFoundError
from agentlog.projections import END, AgentState
from agentlog.projections.keys import RESUME_KEY
from agentlog.projections.present import next_nodes

T = TypeVar("T")
INTERRUPT = "__interrupt__"


class ShapedGraph(CompiledGraph[Any]):
    """agentlog's compiled graph whose stream modes carry the front's values and messages."""

    def __init__(self, compiled: CompiledGraph[Any], shapes: Shapes) -> None:
        super().__init__(compiled.engine)
        self.shapes = shapes

    def stream_projection(
        self, modes: Sequence[StreamMode], config: Mapping[str, Any]
    ) -> ModeProjection:
        projection = super().stream_projection(modes, config)
        projection.values_of = self.shapes.values
        projection.message_of = self.shapes.message_out
        projection.update_of = self.shapes.update_out
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
        return self._get_portal().iterate(parts)


class CompiledStateGraph:
    """A compiled graph answering as LangGraph's does, over agentlog's `CompiledGraph`
    (reachable as `.graph_engine` for agentlog's own calls: time travel, fork, stop)."""

    def __init__(self, compiled: CompiledGraph[Any], shapes: Shapes, *, checkpointed: bool) -> None:
        self.graph_engine = ShapedGraph(compiled, shapes)
        self.shapes = shapes
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
        _refuse_options(options, ("stream_mode", "output_keys", "print_mode"))
        config = self._config(config, context, durability)
        result, _ = await self.graph_engine.ainvoke_to(await self._input(input, config), config)
        state: AgentState = result["state"]
        values = self.shapes.values(state)
        pending = interrupts_of(state, run_config(config)["thread_id"])
        if pending:
            values[INTERRUPT] = list(pending)
        return values

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
        _refuse_options(options, ("output_keys", "print_mode"))
        config = self._config(config, context, durability)
        parts = self.graph_engine.astream(
            await self._input(input, config),
            config,
            stream_mode=stream_mode,
            subgraphs=subgraphs,
            version=version,
        )
        async for part in parts:
            yield part

    def stream(
        self, input: Any, config: Mapping[str, Any] | None = None, **options: Any
    ) -> Iterator[Any]:
        return self.graph_engine.each(self.astream(input, config, **options))

    # ---- reading ------------------------------------------------------------------------

    async def aget_state(
        self, config: Mapping[str, Any], *, subgraphs: bool = False
    ) -> StateSnapshot:
        """The thread's state at its head, or at `configurable.checkpoint_id` (a seq)."""
        thread_id = run_config(config)["thread_id"]
        seq = _checkpoint_of(config)
        if seq is None:
            seq = await self.graph_engine.store.last_seq(thread_id)
        return await self._snapshot_at(thread_id, seq, None)

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
        return self.graph_engine.call(self.aget_state(config))

    async def aget_state_history(self, config: Mapping[str, Any], **_: Any) -> list[StateSnapshot]:
        """One snapshot per step, newest first (the newest is the head, as `get_state`)."""
        thread_id = run_config(config)["thread_id"]
        entries = await self.graph_engine.aget_state_history({"thread_id": thread_id})
        head = await self.graph_engine.store.last_seq(thread_id)
        snapshots: list[StateSnapshot] = []
        parent: int | None = None
        for number, entry in enumerate(entries, 1):
            seq = head if number == len(entries) else entry.last_seq
            snapshots.append(await self._snapshot_at(thread_id, seq, parent, entry.step))
            parent = seq
        return snapshots[::-1]

    def get_state_history(
        self, config: Mapping[str, Any], **options: Any
    ) -> Iterator[StateSnapshot]:
        return iter(self.graph_engine.call(self.aget_state_history(config, **options)))

    async def aupdate_state(
        self, config: Mapping[str, Any], values: Any, as_node: str | None = None
    ) -> dict[str, Any]:
        """Record a human edit of the state (as `as_node` if given); the config of the new head."""
        thread_id = run_config(config)["thread_id"]
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

    def _config(
        self, config: Mapping[str, Any] | None, context: Any, durability: str | None
    ) -> dict[str, Any]:
        out: dict[str, Any] = self.graph_engine.call_config(config, context, durability) or {}
        if _checkpoint_of(out) is not None:
            raise GraphError(
                "a run cannot start from a checkpoint_id on its own thread here: every "
                "thread's log only grows; branch the past into a new thread with "
                "graph.graph_engine.afork(config, at_seq=int(checkpoint_id)) and run that"
            )
        has_thread = "thread_id" in out or "thread_id" in (out.get("configurable") or {})
        if not has_thread:
            if self.checkpointed:
                raise GraphError(
                    "a graph compiled with a checkpointer needs a thread: pass config="
                    "{'configurable': {'thread_id': '...'}}"
                )
            out["thread_id"] = f"run-{uuid.uuid4().hex}"  # one call, in memory, as LangGraph
        return out

    async def _input(self, input: Any, config: Mapping[str, Any]) -> Any:
        if isinstance(input, Command):
            if isinstance(input.resume, Mapping) and input.resume:
                return await self._resume_by_id(input, config)
            return self.shapes.update(input)
        if input is None:
            return None
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
            values=self.shapes.values(state),
            next=nxt,
            config=_config_at(thread_id, seq),
            metadata={"source": "loop", "step": meta.step if step is None else step, "parents": {}},
            created_at=None if at is None else datetime.fromtimestamp(at, UTC).isoformat(),
            parent_config=_config_at(thread_id, parent) if parent else None,
            tasks=tasks,
            interrupts=pending,
        )


def _checkpoint_of(config: Mapping[str, Any]) -> int | None:
    configurable = config.get("configurable") or {}
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
    return {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": str(seq)}
    }


def _refuse_options(options: Mapping[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise GraphError(
            f"this call does not take {', '.join(unknown)}; it takes {', '.join(known)}"
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
