"""What the Agent Server routes ask of the runtime, in the Agent Server's shapes: a thread,
its state at a checkpoint, its history, an edit, an assistant. It reads through a
`RuntimeFacade` and converts at the edge (`wire`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentlog.actors.engine.compiled import CompiledGraph
from agentlog.actors.engine.longterm import BaseStore
from agentlog.actors.http.agentserver import wire
from agentlog.actors.http.agentserver.bodies import RunCreate
from agentlog.actors.http.agentserver.cronbook import PREFIX as CRON_PREFIX
from agentlog.actors.http.agentserver.cronbook import CronBook
from agentlog.actors.http.agentserver.livewire import live_modes
from agentlog.actors.http.agentserver.outbound import Outbox, RunWebhooks
from agentlog.actors.http.errors import ApiError
from agentlog.actors.langgraph.compiled import ShapedGraph, interrupts_of
from agentlog.actors.langgraph.types import interrupt_id
from agentlog.actors.runtime.facade import RuntimeFacade, TriggerState, created_metadata
from agentlog.actors.runtime.spec import EntryPoint
from agentlog.events import ThreadNotFoundError
from agentlog.projections import END, AgentState, present
from agentlog.projections.edge import to_builtins

INTERRUPT = "__interrupt__"
THREADS_STORE = "threads"
"""The runtime's own store (`__store__/threads`) keeping the metadata a thread is given after
its creation: an item per thread, each change a record naming its token."""
THREAD_METADATA = ("threads",)
NOTES_KEPT = 10_000
"""How many runs' request notes a server keeps."""


@dataclass(frozen=True)
class RunNote:
    metadata: Any
    multitask_strategy: str
    modes: list[str]
    kwargs: dict[str, Any]
    """What the request asked for (`Run.kwargs`): its input or command, config, modes."""


class AgentServer:
    """The Agent Server's view of the runtime `rt`."""

    def __init__(self, rt: RuntimeFacade, webhooks: RunWebhooks | None = None) -> None:
        self.rt = rt
        self.outbox = Outbox(self, webhooks)
        """Where runs' webhooks are sent from (`outbound`)."""
        self.started_at = rt.clock()
        self.notes: dict[str, RunNote] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self._long_term: BaseStore | None = None
        self.crons = CronBook(rt)
        self.crons.fired = self.outbox.watch  # a cron's run sends its webhook too
        self.live = rt.live_parts()
        """The live parts of the runs executing here (`custom`, token deltas), by run."""
        self.thread_notes = rt.own_store(THREADS_STORE)
        """Metadata set on threads after their creation (`PATCH /threads/{id}`), as records."""

    def long_term(self) -> BaseStore:
        """The long-term store the graphs were compiled with (the first graph's that has
        one), else a `LogStore` on the runtime's log, made once."""
        if self._long_term is None:
            stores = (self.app(g).long_term_store for g in self.rt.graph_ids())
            found = next((s for s in stores if s is not None), None)
            self._long_term = found or self.rt.own_store()
        return self._long_term

    # ---- runs ------------------------------------------------------------------------

    def note(self, run_id: str, body: RunCreate) -> None:
        """Keep what a run's request said that the log does not (its metadata, its stream
        modes), while this server runs; oldest dropped past `NOTES_KEPT`."""
        self.notes[run_id] = RunNote(
            metadata=wire.jsonable(body.metadata or {}),
            multitask_strategy=body.multitask_strategy or "reject",
            modes=body.modes(),
            kwargs=wire.jsonable(
                {
                    "input": body.input,
                    "command": body.command.model_dump() if body.command else None,
                    "config": body.config or {},
                    "stream_mode": body.modes(),
                    "stream_subgraphs": bool(body.stream_subgraphs),
                }
            ),
        )
        self.live.want(run_id, live_modes(body.modes()))
        while len(self.notes) > NOTES_KEPT:
            del self.notes[next(iter(self.notes))]

    async def deferred(self, body: RunCreate) -> dict[str, Any]:
        """What a run's acceptance records of when it is due and where its result goes
        (`AgentRuntime.submit`'s `due_at`, `webhook`); a webhook this server may not call
        is refused (422) before anything is written."""
        await self.outbox.check(body.webhook)
        after = body.after_seconds
        return {"due_at": self.rt.clock() + after if after else None, "webhook": body.webhook}

    def modes_of(self, run_id: str) -> list[str]:
        note = self.notes.get(run_id)
        return note.modes if note is not None else ["values"]

    def keep(self, task: asyncio.Task[Any]) -> None:
        """Hold a task the server started for a run until it ends."""
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def run(self, trigger: TriggerState) -> dict[str, Any]:
        """A `Run`."""
        trigger = self.rt.run_now(trigger)
        note = self.notes.get(trigger.id)
        accepted = trigger.accepted
        entry = self.rt.entry(accepted.entry_point)  # a cron's timer: the cron's assistant
        cron = entry is not None and entry.id.startswith(CRON_PREFIX)
        return {
            "run_id": trigger.id,
            "thread_id": accepted.thread_id,
            "assistant_id": entry.name if cron and entry is not None else accepted.entry_point,
            "created_at": wire.iso(trigger.accepted_at),
            "updated_at": wire.iso(trigger.updated_at or trigger.accepted_at),
            "status": wire.run_status(
                trigger.outcome if trigger.done else None,
                running=self.rt.is_running(trigger.id),
                error_type=trigger.error_type,
            ),
            "metadata": note.metadata if note is not None else {},
            "multitask_strategy": note.multitask_strategy if note is not None else "reject",
            "kwargs": note.kwargs if note is not None else {},
        }

    # ---- graphs ----------------------------------------------------------------------

    def app(self, graph_id: str) -> CompiledGraph[Any]:
        return self.rt.compiled(graph_id)

    def values(self, graph_id: str | None, state: AgentState | None) -> dict[str, Any]:
        """The state's values as the graph's LangGraph program sees them; a graph of
        agentlog's own shows its context as `messages`."""
        if graph_id is None or state is None:
            return {}
        app = self.app(graph_id)
        if isinstance(app, ShapedGraph):
            shown = app.front.shown(app.front.shapes.values(state))
            return dict(wire.jsonable(shown)) if isinstance(shown, Mapping) else {"": shown}
        values: dict[str, Any] = {}
        for name in type(state).model_fields:
            if name == "execution_meta":
                continue
            values["messages" if name == "context" else name] = getattr(state, name)
        return dict(wire.jsonable(values))

    def interrupts(self, graph_id: str | None, state: AgentState, thread_id: str) -> list[Any]:
        """The pauses the thread waits at, as `Interrupt` dicts."""
        if graph_id is not None and isinstance(self.app(graph_id), ShapedGraph):
            return list(wire.jsonable(list(interrupts_of(state, thread_id))))
        meta = state.execution_meta
        return [
            {
                "value": to_builtins(p),
                "id": interrupt_id(thread_id, p.get("node") or "", meta.step, 0),
            }
            for p in present.interrupts(meta)
        ]

    # ---- checkpoints -----------------------------------------------------------------

    async def record_at(self, thread_id: str, seq: int) -> tuple[str, float] | None:
        """The chain hash and time of the thread's record `seq`."""
        record = await self.rt.record_at(thread_id, seq)
        return None if record is None else (record.hash, record.at)

    async def checkpoint_id(self, thread_id: str, seq: int) -> str | None:
        found = await self.record_at(thread_id, seq) if seq > 0 else None
        return None if found is None else wire.checkpoint_id(seq, found[0])

    async def seq_of(self, thread_id: str, ident: str) -> int:
        """The seq a checkpoint id of the thread names; 404 when it is not the thread's."""
        try:
            seq, digest = wire.parse_checkpoint_id(ident)
        except wire.BadCheckpointError as exc:
            raise ApiError(422, "invalid_request", str(exc)) from None
        found = await self.record_at(thread_id, seq)
        if found is None or not found[0].startswith(digest):
            raise ApiError(
                404,
                "not_found",
                f"checkpoint {ident[:60]!r} is not in thread {thread_id!r}'s history: take one "
                "from its state or history",
            )
        return seq

    async def head(self, thread_id: str) -> int:
        return await self.rt.head(thread_id)

    async def go_back(self, thread_id: str, graph_id: str, ident: str | None, *, by: str) -> None:
        """Set the thread back to checkpoint `ident` when it is a past one (a run or an edit
        there): a record at its head, what followed staying in the log and its history.
        A thread with a run going or queued is refused first (409 `thread_busy`)."""
        if ident is None:
            return
        seq = await self.seq_of(thread_id, ident)
        if seq == await self.head(thread_id):
            return
        if self.rt.runs_holding(thread_id):
            raise ApiError(
                409,
                "thread_busy",
                f"thread {thread_id!r} has a run going or queued: it cannot go back to "
                f"checkpoint {ident[:60]!r} under it; wait for the run, or cancel it first",
            )
        await self.rt.branch_thread(thread_id, graph_id, seq, by=by)

    # ---- states ----------------------------------------------------------------------

    async def state_at(self, thread_id: str, graph_id: str | None, seq: int) -> AgentState | None:
        if graph_id is None or seq == 0:
            return None
        state: AgentState = await self.app(graph_id).aget_state(
            {"thread_id": thread_id}, at_seq=seq
        )
        return state

    async def snapshot(
        self,
        thread_id: str,
        graph_id: str | None,
        seq: int,
        *,
        step: int | None = None,
        parent: int | None = None,
    ) -> dict[str, Any]:
        """A `ThreadState`: the thread right after record `seq`."""
        state = await self.state_at(thread_id, graph_id, seq)
        found = await self.record_at(thread_id, seq) if seq else None
        ident = None if found is None else wire.checkpoint_id(seq, found[0])
        if state is None:
            return {
                "values": {},
                "next": [],
                "checkpoint": wire.checkpoint(thread_id, ident),
                "metadata": {"source": "input", "step": -1, "parents": {}},
                "created_at": wire.iso(found[1]) if found else None,
                "parent_checkpoint": None,
                "tasks": [],
                "interrupts": [],
            }
        meta = state.execution_meta
        pending = self.interrupts(graph_id, state, thread_id)
        nxt = [n for n in present.next_nodes(meta) if n != END]
        tasks = [
            {
                "id": interrupt_id(thread_id, node, meta.step, 0),
                "name": node,
                "error": None,
                "interrupts": pending,
                "checkpoint": None,
                "state": None,
                "result": None,
            }
            for node in nxt
        ]
        parent_id = await self.checkpoint_id(thread_id, parent) if parent else None
        return {
            "values": self.values(graph_id, state),
            "next": nxt,
            "checkpoint": wire.checkpoint(thread_id, ident),
            "metadata": {
                "source": "loop",
                "step": meta.step if step is None else step,
                "parents": {},
                "graph_id": graph_id,
            },
            "created_at": wire.iso(found[1]) if found else None,
            "parent_checkpoint": wire.checkpoint(thread_id, parent_id) if parent_id else None,
            "tasks": tasks,
            "interrupts": pending,
        }

    async def history(
        self, thread_id: str, graph_id: str | None, *, before: int | None = None
    ) -> list[dict[str, Any]]:
        """One `ThreadState` per step, newest first (the newest is the head); with `before`,
        those of checkpoints before that seq."""
        head = await self.head(thread_id)
        if graph_id is None:
            return [await self.snapshot(thread_id, None, head)] if head else []
        try:
            entries = await self.rt.history(thread_id, graph_id)
        except ThreadNotFoundError:
            return []
        shown: list[dict[str, Any]] = []
        parent: int | None = None
        # the head is the last step's state, unless the thread went back to a past
        # checkpoint since: then that step's state stays in the history, and the head follows
        back = bool(entries) and await self.rt.went_back_after(thread_id, entries[-1].last_seq)
        for number, entry in enumerate(entries, 1):
            seq = head if number == len(entries) and not back else entry.last_seq
            if before is not None and seq >= before:
                break
            shown.append(
                await self.snapshot(thread_id, graph_id, seq, step=entry.step, parent=parent)
            )
            parent = seq
        if back and (before is None or head < before):
            shown.append(await self.snapshot(thread_id, graph_id, head, parent=parent))
        return shown[::-1]

    # ---- threads ---------------------------------------------------------------------

    async def thread(
        self, thread_id: str, graph_id: str | None, state: AgentState | None
    ) -> dict[str, Any]:
        """A `Thread`."""
        created, updated = await self.rt.thread_times(thread_id)
        busy = bool(self.rt.runs_holding(thread_id))
        status = state.execution_meta.status if state is not None else "idle"
        pending = self.interrupts(graph_id, state, thread_id) if state is not None else []
        metadata = await self.metadata_of(thread_id, state)
        if graph_id is not None:
            metadata.setdefault("graph_id", graph_id)
        return {
            "thread_id": thread_id,
            "created_at": wire.iso(created),
            "updated_at": wire.iso(updated),
            "metadata": wire.jsonable(metadata),
            "status": wire.thread_status(status, busy),
            "values": self.values(graph_id, state),
            "interrupts": {i["id"]: [i] for i in pending},
            "config": {},
            "error": None,
        }

    async def metadata_of(self, thread_id: str, state: AgentState | None) -> dict[str, Any]:
        """The thread's metadata: what it was created with, and what was set on it since."""
        metadata = dict(created_metadata(state)) if state is not None else {}
        item = await self.thread_notes.aget(THREAD_METADATA, thread_id)
        return metadata | dict(item.value) if item is not None else metadata

    async def set_metadata(self, thread_id: str, metadata: dict[str, Any], *, by: str) -> None:
        """Merge `metadata` into what was set on the thread since its creation (recorded)."""
        item = await self.thread_notes.aget(THREAD_METADATA, thread_id)
        merged = (dict(item.value) if item is not None else {}) | wire.jsonable(metadata)
        await self.thread_notes.aput(THREAD_METADATA, thread_id, merged, by=by)

    # ---- assistants ------------------------------------------------------------------

    def entry_points(self) -> list[EntryPoint]:
        """The assistants: the runtime's entry points but the crons' timers."""
        return [e for e in self.rt.entry_points() if not e.id.startswith(CRON_PREFIX)]

    def entry(self, assistant_id: str) -> EntryPoint | None:
        """The entry point an assistant id names: its id, or a graph's id (its first)."""
        entry = self.rt.entry(assistant_id)
        if entry is not None and not assistant_id.startswith(CRON_PREFIX):
            return entry
        return next((e for e in self.entry_points() if e.graph_id == assistant_id), None)

    def assistant(self, entry: EntryPoint) -> dict[str, Any]:
        """An `Assistant`: one per entry point, a single version."""
        at = wire.iso(self.started_at)
        return {
            "assistant_id": entry.id,
            "graph_id": entry.graph_id,
            "config": {},
            "context": {},
            "created_at": at,
            "updated_at": at,
            "metadata": {"created_by": "system", "trigger": entry.trigger},
            "version": 1,
            "name": entry.id,
            "description": None,
        }
