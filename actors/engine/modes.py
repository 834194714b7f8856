"""Stream modes: LangGraph's views of a run (`values`, `updates`, `messages`, `custom`,
`tasks`, `checkpoints`, `debug`), projected from what the run commits.

A `ModeProjection` rides on the run's stream (`RunStream.projection`). The commit path hands
it each commit's records with the run's fold (`committed`): `values` is the fold's state
after the commit, `updates` the state-changing records of a node's step, grouped by node
(by branch for a superstep's: its `branch_entered` records name them),
`messages` the messages a step appended (and the token deltas a model adapter published while
the step ran, `delta`), `tasks` and `checkpoints` a step's start, end and the state it left.
`custom` parts come from `get_stream_writer()` (`agentlog.actors.engine.writer`). Nothing here
keeps state of its own beyond where the run is (its step, its node, the records of the step
under way), so what a mode says is what the log says.

`shaped` turns a part into what `astream` yields: LangGraph's v1 shapes (the chunk, a `(mode,
chunk)` tuple for a list of modes, the namespace first with `subgraphs=True`) or its v2 dicts
(`{"type", "ns", "data"}`, and `interrupts` for values).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agentlog.actors.engine.errors import GraphError
from agentlog.events import EventRecord
from agentlog.events.kinds import (
    BranchEntered,
    ContextSummarized,
    InterruptRaised,
    MessageAppended,
    MessageReplaced,
    MessagesRemoved,
    MessagesReplaced,
    ModelCalled,
    NodeEntered,
    StateUpdated,
    StepAdvanced,
)
from agentlog.projections import (
    END,
    AgentState,
    Message,
    ReasoningBlock,
    RemoveMessage,
    StreamChunk,
    StreamEvent,
    TextBlock,
    present,
)
from agentlog.projections.fold import field_plan
from agentlog.projections.keys import TASKS_KEY


class StreamMode(StrEnum):
    """What `stream(..., stream_mode=...)` yields, by LangGraph's names."""

    VALUES = "values"
    """The state's values after the run's input and after every step."""
    UPDATES = "updates"
    """`{node: update}` after every step: what the node wrote."""
    MESSAGES = "messages"
    """`(message, metadata)`: token chunks as a model streams them, and whole messages."""
    CUSTOM = "custom"
    """What a node handed the writer of `get_stream_writer()`."""
    TASKS = "tasks"
    """A node's step beginning (its input) and ending (its update)."""
    CHECKPOINTS = "checkpoints"
    """The thread's state after each commit that ends a step, as `get_state` reads it."""
    DEBUG = "debug"
    """`tasks` and `checkpoints`, each wrapped with its type, step and time."""


VERSIONS = ("v1", "v2")
"""The stream shapes: LangGraph's tuples (v1), or its typed dicts (v2)."""


class InvalidStreamModeError(GraphError):
    """A stream was asked for a mode (or a shape version) that does not exist."""


def check_modes(stream_mode: str | Sequence[str]) -> tuple[StreamMode, ...]:
    """The modes asked for, each once, in order; `InvalidStreamModeError` names the valid
    ones when one is not a mode (raised before the run starts)."""
    asked = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    valid = ", ".join(repr(m.value) for m in StreamMode)
    if not asked:
        raise InvalidStreamModeError(f"stream_mode is an empty list: give one or more of {valid}")
    modes: list[StreamMode] = []
    for name in asked:
        try:
            mode = StreamMode(name)
        except ValueError:
            raise InvalidStreamModeError(
                f"stream_mode {name!r} is not a stream mode: use one of {valid}, a list of "
                "them, or leave it out for agentlog's own StreamChunk stream"
            ) from None
        if mode not in modes:
            modes.append(mode)
    return tuple(modes)


def check_version(version: str) -> str:
    """`version` if it is a stream shape, else `InvalidStreamModeError` naming them."""
    if version not in VERSIONS:
        raise InvalidStreamModeError(
            f"version {version!r} is not a stream version: use 'v1' (LangGraph's tuples) or "
            "'v2' (dicts with type, ns and data)"
        )
    return version


@dataclass(frozen=True)
class Part:
    """One item of a moded stream, before `shaped` gives it the caller's shape."""

    mode: StreamMode
    data: Any
    ns: tuple[str, ...] = ()
    interrupts: tuple[Any, ...] = ()
    """For a values part: the run's pending interrupts (the part that says it paused)."""


def state_values(state: AgentState) -> dict[str, Any]:
    """A state's values, as `values` mode yields them: every field but the execution
    metadata, copied, so the run folding on does not change what a consumer holds."""
    values: dict[str, Any] = {}
    for name in type(state).model_fields:
        if name == "execution_meta":
            continue
        value = getattr(state, name)
        # messages are never changed in place by the fold (it replaces them): a list copy
        values[name] = list(value) if name == "context" else copy.deepcopy(value)
    return values


def _update_of(event: Any) -> dict[str, Any] | None:
    """What a state-changing record wrote, as a node's update says it (None: it changes no
    state value)."""
    if isinstance(event, MessageAppended | MessageReplaced):
        return {"context": [Message.model_validate(event.message)]}
    if isinstance(event, MessagesRemoved):
        return {"context": [RemoveMessage(i) for i in event.message_ids]}
    if isinstance(event, MessagesReplaced):
        return {"context": [Message.model_validate(m) for m in event.messages]}
    if isinstance(event, ContextSummarized):
        update: dict[str, Any] = {"context_summary": event.summary}
        if event.messages is not None:
            update["context"] = [Message.model_validate(m) for m in event.messages]
        return update
    if isinstance(event, StateUpdated):
        return dict(event.values)
    return None


@dataclass
class ModeProjection:
    """The modes a consumer asked for, projected from one run's commits and deltas.

    `values_of` and `message_of` shape what the modes carry (a front speaking LangGraph's
    state or messages passes its own); `ns` is the namespace of the graph this run is
    (`()` for the root; a subgraph's run carries its own)."""

    modes: frozenset[StreamMode]
    thread_id: str
    nodes: frozenset[str] = frozenset()
    ns: tuple[str, ...] = ()
    values_of: Callable[[AgentState], Any] = state_values
    message_of: Callable[[Message], Any] = lambda message: message
    update_of: Callable[[dict[str, Any]], Any] = lambda update: update
    """Shapes one node's update (a front renames its fields, shapes its messages)."""
    interrupts_of: Callable[[AgentState], tuple[Any, ...]] = lambda state: tuple(
        present.interrupts(state.execution_meta)
    )
    """The pauses a paused run shows (a front shows its own `Interrupt`s)."""
    step: int | None = None
    """The step counter as the last commit left it (None until the first commit)."""
    node: str | None = None
    """The node whose step is under way."""
    task_id: str | None = None
    pending: list[EventRecord] = field(default_factory=list)
    """The state-changing records of the step under way."""
    branches: list[tuple[str, str]] = field(default_factory=list)
    """The step under way's branches when it is a superstep: (node, task id), in branch
    order."""
    streamed_ids: set[Any] = field(default_factory=set)
    """Ids of the messages whose chunks were handed over (`emit_message_chunk`): not
    yielded again whole when their step commits."""
    skip_streamed: bool = True
    """Leave out a whole message whose model call says it streamed (`model_called`'s
    `streamed`): its chunks went to this consumer. False for one reading the log later."""

    def nested(self, segment: str, nodes: frozenset[str] = frozenset()) -> ModeProjection:
        """The projection of a run nested in this one (a subgraph's, with `nodes`): the same
        modes, thread and shapes, its namespace one `segment` deeper (LangGraph spells a
        segment `node:task_id`)."""
        return ModeProjection(
            self.modes,
            self.thread_id,
            nodes,
            (*self.ns, segment),
            values_of=self.values_of,
            message_of=self.message_of,
            update_of=self.update_of,
            interrupts_of=self.interrupts_of,
        )

    def wants(self, *modes: StreamMode) -> bool:
        return any(m in self.modes for m in modes)

    @property
    def checkpoint_ns(self) -> str:
        return "|".join(self.ns)

    def metadata(self, node: str | None, **extra: Any) -> dict[str, Any]:
        """The metadata of a `messages` part: where in the run the message came from."""
        step = (self.step or 0) + 1
        return {
            "thread_id": self.thread_id,
            "langgraph_step": step,
            "langgraph_node": node,
            "langgraph_path": ("__pregel_pull", node),
            "langgraph_checkpoint_ns": self.checkpoint_ns,
            **extra,
        }

    def part(self, mode: StreamMode, data: Any, interrupts: tuple[Any, ...] = ()) -> Part:
        return Part(mode, data, self.ns, interrupts)

    # ---- what the run hands over -----------------------------------------------------------

    def committed(self, records: Sequence[EventRecord], state: AgentState) -> list[Part]:
        """The parts one commit makes: `state` is the run's fold right after it."""
        if self.step is None:
            self.step = state.execution_meta.step - sum(
                isinstance(r.event, StepAdvanced) for r in records
            )
        parts: list[Part] = []
        streamed = {
            r.event.message_id
            for r in records
            if isinstance(r.event, ModelCalled) and r.event.streamed and r.event.message_id
            if self.skip_streamed
        }
        opened = any(type(r.event).OPENS_RUN for r in records)
        for record in records:
            event = record.event
            if isinstance(event, NodeEntered | BranchEntered):
                if opened:  # the state with the run's input, before its first node
                    parts += self._at_rest(record, state, "input")
                    opened = False
                task_id = f"{record.thread_id}:{record.seq}"
                if isinstance(event, NodeEntered) or event.branch == 0:
                    self.pending, self.node, self.branches = [], event.node, []
                    self.task_id = task_id
                if isinstance(event, BranchEntered):
                    self.branches.append((event.node, task_id))
                branch = event.branch if isinstance(event, BranchEntered) else None
                parts += self._task_started(event.node, task_id, state, branch)
            elif isinstance(event, StepAdvanced):
                parts += self._step_ended(record, event, state, streamed)
                parts += self._at_rest(record, state, "loop")
            elif _update_of(event) is not None and self.node is not None:
                self.pending.append(record)
            elif isinstance(event, InterruptRaised):
                parts += self._paused(state)
        if opened:
            parts += self._at_rest(records[-1], state, "input")
        return parts

    def _at_rest(self, record: EventRecord, state: AgentState, source: str) -> list[Part]:
        """The values and the checkpoint after the run's input or a step: `state` is the
        fold after the whole commit, whose later records (the next node entered, its tool
        calls started) change no value."""
        parts = []
        if self.wants(StreamMode.VALUES):
            parts.append(self.part(StreamMode.VALUES, self.values_of(state)))
        if self.wants(StreamMode.CHECKPOINTS, StreamMode.DEBUG):
            parts += self._checkpoint(record, state, source)
        return parts

    def delta(self, chunk: StreamChunk) -> list[Part]:
        """The `messages` part of a token delta a model adapter published (`NodeContext
        .publish`); other chunks are agentlog's own stream and none of the modes."""
        data = chunk.data or {}
        if chunk.event != StreamEvent.MESSAGE or "delta" not in data:
            return []
        if not self.wants(StreamMode.MESSAGES):
            return []
        kind, text = data.get("kind"), str(data.get("delta", ""))
        if kind == "text":
            message = Message(role="assistant", content=[TextBlock(text=text)], delta=True)
        elif kind == "reasoning":
            message = Message(role="assistant", content=[ReasoningBlock(summary=text)], delta=True)
        else:  # a tool call's arguments as they stream, and the like: said in the metadata
            message = Message(role="assistant", content=[], delta=True)
            message.metadata.update({k: v for k, v in data.items() if k != "node"})
        node = data.get("node", self.node)
        extra = {"ls_model_name": data["model"]} if "model" in data else {}
        return [self.message_part(self.message_of(message), node, **extra)]

    def message_part(self, message: Any, node: str | None, **extra: Any) -> Part:
        """A `messages` part for `message` (a chunk or a whole message) from `node`."""
        return self.part(StreamMode.MESSAGES, (message, self.metadata(node, **extra)))

    # ---- the pieces ---------------------------------------------------------------------

    def _step_ended(
        self, record: EventRecord, event: StepAdvanced, state: AgentState, streamed: set[Any]
    ) -> list[Part]:
        node = record.actor if record.actor in self.nodes else (self.node or str(record.actor))
        if self.branches:  # a superstep: one update and one task per branch
            results: list[tuple[str | None, str, Any]] = [
                (task_id, name, self.update_of(self._merged(records, type(state))))
                for (name, task_id), records in zip(self.branches, self._by_branch(), strict=True)
            ]
            updates = [(name, update) for _, name, update in results]
        else:
            by_node = self._updates(node, type(state))
            updates = list(by_node.items())
            results = [(self.task_id, node, by_node.get(node, {}))]
        parts: list[Part] = []
        if self.wants(StreamMode.MESSAGES):
            for item in self.pending:
                if isinstance(item.event, MessageAppended):
                    message = Message.model_validate(item.event.message)
                    if message.message_id not in streamed | self.streamed_ids:
                        writer = item.actor if self.branches and item.actor in self.nodes else node
                        parts.append(self.message_part(self.message_of(message), writer))
        if self.wants(StreamMode.UPDATES):
            parts += [self.part(StreamMode.UPDATES, {n: u}) for n, u in updates]
        if self.wants(StreamMode.TASKS, StreamMode.DEBUG):
            for task_id, name, update in results:
                result = {"id": task_id, "name": name, "error": None, "result": update}
                parts += self._task_part("task_result", {**result, "interrupts": []}, event.step)
        self.step, self.pending, self.node, self.branches = event.step, [], None, []
        return parts

    def _updates(self, node: str, state_cls: type[AgentState]) -> dict[str, dict[str, Any]]:
        """The step's updates by the node that wrote them (the step's node, unless a record
        names another node of the graph as its writer), each merged as its field's reducer
        would merge it, so folding them gives what the log gives."""
        by_node: dict[str, list[EventRecord]] = {}
        for record in self.pending:
            writer = record.actor if record.actor in self.nodes else node
            by_node.setdefault(str(writer), []).append(record)
        merged = {k: self.update_of(self._merged(v, state_cls)) for k, v in by_node.items()}
        return merged or {node: {}}

    @staticmethod
    def _merged(records: Sequence[EventRecord], state_cls: type[AgentState]) -> dict[str, Any]:
        """What `records` wrote, as one update: each field's writes merged as its reducer
        merges them (lists, and so messages, joined), so folding it gives what the log gives."""
        plan = field_plan(state_cls)
        into: dict[str, Any] = {}
        for record in records:
            for name, value in (_update_of(record.event) or {}).items():
                if name not in into:
                    into[name] = value
                elif name == "context" or isinstance(value, list):
                    into[name] = [*into[name], *value]
                else:
                    reducer = plan.get(name, (None, None))[1]
                    into[name] = value if reducer is None else reducer(into[name], value)
        return into

    def _by_branch(self) -> list[list[EventRecord]]:
        """The superstep's records, one list per branch, in branch order.

        A record names its branch's node (`owners` of the step's commit), and the branches'
        outputs are committed in branch order, each as its messages, then its summary, then
        its other fields (`output_events`): so among the records of one node, a record that
        comes back to an earlier place of that order begins that node's next branch. A record
        naming no branch's node goes with the first branch."""
        groups: list[list[EventRecord]] = [[] for _ in self.branches]
        slots: dict[str, list[int]] = {}
        for i, (name, _) in enumerate(self.branches):
            slots.setdefault(name, []).append(i)
        at: dict[str, int] = {}
        last: dict[str, int] = {}
        for record in self.pending:
            writer = str(record.actor) if record.actor in slots else self.branches[0][0]
            mine, place = slots[writer], _place(record.event)
            k = at.get(writer, 0)
            if writer in last and (place < last[writer] or place == last[writer] > 0):
                k = min(k + 1, len(mine) - 1)
            at[writer], last[writer] = k, place
            groups[mine[k]].append(record)
        return groups

    def _paused(self, state: AgentState) -> list[Part]:
        pending = self.interrupts_of(state)
        parts: list[Part] = []
        if self.wants(StreamMode.UPDATES):
            parts.append(self.part(StreamMode.UPDATES, {"__interrupt__": pending}))
        if self.wants(StreamMode.VALUES):
            parts.append(self.part(StreamMode.VALUES, self.values_of(state), pending))
        return parts

    def _task_started(
        self, node: str, task_id: str, state: AgentState, branch: int | None
    ) -> list[Part]:
        """A task's start: its input is the state, or a `Send`'s arg (the step's plan)."""
        if not self.wants(StreamMode.TASKS, StreamMode.DEBUG):
            return []
        planned = state.execution_meta.internal_data.get(TASKS_KEY) or {}
        tasks = planned.get("tasks") or []
        sent = tasks[branch] if branch is not None and branch < len(tasks) else {}
        given = copy.deepcopy(sent["arg"]) if "arg" in sent else self.values_of(state)
        task = {"id": task_id, "name": node, "input": given, "triggers": ()}
        return self._task_part("task", task, (self.step or 0) + 1)

    def _task_part(self, kind: str, payload: dict[str, Any], step: int) -> list[Part]:
        parts = []
        if self.wants(StreamMode.TASKS):
            parts.append(self.part(StreamMode.TASKS, payload))
        if self.wants(StreamMode.DEBUG):
            parts.append(self.part(StreamMode.DEBUG, _debug(kind, step, payload)))
        return parts

    def _checkpoint(self, last: EventRecord, state: AgentState, source: str) -> list[Part]:
        meta = state.execution_meta
        config = {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": self.checkpoint_ns,
                "checkpoint_id": str(last.seq),
            }
        }
        payload = {
            "config": config,
            "values": self.values_of(state),
            "metadata": {"source": source, "step": meta.step, "run_id": last.run_id},
            "next": [n for n in present.next_nodes(meta) if n != END],
            "interrupts": present.interrupts(meta),
        }
        parts = []
        if self.wants(StreamMode.CHECKPOINTS):
            parts.append(self.part(StreamMode.CHECKPOINTS, payload))
        if self.wants(StreamMode.DEBUG):
            parts.append(self.part(StreamMode.DEBUG, _debug("checkpoint", meta.step, payload)))
        return parts


def _place(event: Any) -> int:
    """Where a state-changing record comes in one node's output: its messages, then its
    summary, then its other fields."""
    if isinstance(event, StateUpdated):
        return 2
    return 1 if isinstance(event, ContextSummarized) else 0


def _debug(kind: str, step: int, payload: dict[str, Any]) -> dict[str, Any]:
    """A `debug` part: a task or checkpoint payload with its type, step and time."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"
    return {"type": kind, "timestamp": stamp, "step": step, "payload": payload}


def shaped(part: Part, *, several: bool, subgraphs: bool, version: str) -> Any:
    """A part as `astream` yields it: LangGraph's v1 shapes, or its v2 dict."""
    if version == "v2":
        out: dict[str, Any] = {"type": part.mode.value, "ns": part.ns, "data": part.data}
        if part.mode is StreamMode.VALUES:
            out["interrupts"] = part.interrupts
        return out
    data = part.data
    if part.interrupts:  # v1 says a pause in the values themselves, beside the state's fields
        data = {**part.data, "__interrupt__": part.interrupts}
    if several:
        return (part.ns, part.mode.value, data) if subgraphs else (part.mode.value, data)
    return (part.ns, data) if subgraphs else data


__all__ = [
    "InvalidStreamModeError",
    "ModeProjection",
    "Part",
    "StreamMode",
    "check_modes",
    "check_version",
    "shaped",
    "state_values",
]
