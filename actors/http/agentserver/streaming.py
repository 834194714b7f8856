"""A run's stream as the Agent Server sends it (Server-Sent Events): `metadata` first (the
run id), then the parts of the stream modes asked for, projected from the run's records as
they commit, `error` if it failed, and `end` last.

The parts come from the log through the engine's own projection (`ModeProjection`), the one
`astream` uses, fed record by record with the thread's fold; what is not in the log is not in
a server run's stream: what a node's `get_stream_writer()` writes (`custom`) and a model's
token deltas (`messages/partial`), nor a subgraph node's own parts (its run is on a thread
of its own). Modes map to the engine's as `ENGINE_MODES` says; the
`events` mode shows each task's start and end as `on_chain_start` / `on_chain_end`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agentlog.actors.engine.modes import Part, StreamMode
from agentlog.actors.http.agentserver import wire
from agentlog.actors.http.agentserver.facade import AgentServer
from agentlog.actors.runtime.facade import TriggerState
from agentlog.events import EventRecord
from agentlog.events.kinds import BranchEntered, InterruptRaised, NodeEntered, StepAdvanced
from agentlog.projections.fold import Fold

ENGINE_MODES: dict[str, StreamMode | None] = {
    "values": StreamMode.VALUES,
    "updates": StreamMode.UPDATES,
    "messages": StreamMode.MESSAGES,
    "messages-tuple": StreamMode.MESSAGES,
    "custom": StreamMode.CUSTOM,
    "events": StreamMode.TASKS,
    "debug": StreamMode.DEBUG,
    "tasks": StreamMode.TASKS,
    "checkpoints": StreamMode.CHECKPOINTS,
}
"""An Agent Server stream mode -> the engine's mode its parts come from."""


def sse(event: str, data: Any, ident: str | None = None) -> str:
    """One Server-Sent Event."""
    payload = json.dumps(data, ensure_ascii=True, default=str)
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {event}\ndata: {payload}\n\n"


def named(mode: str, ns: Sequence[str]) -> str:
    """The event name of a mode's part: a subgraph's carries its namespace (`mode|ns`)."""
    return "|".join((mode, *ns)) if ns else mode


def wire_parts(part: Part, asked: Sequence[str], record: EventRecord) -> list[tuple[str, Any]]:
    """The Agent Server events (mode name, data) one engine part makes, for the modes asked."""
    out: list[tuple[str, Any]] = []
    mode = part.mode
    data = wire.jsonable(part.data)
    for name in asked:
        if ENGINE_MODES.get(name) != mode:
            continue
        if name == "values" and part.interrupts:
            data = {**data, "__interrupt__": wire.jsonable(list(part.interrupts))}
        if name == "messages-tuple":
            out.append(("messages", data))
        elif name == "messages":
            message, metadata = data
            key = message.get("id") or ""
            out.append(("messages/metadata", {key: {"metadata": metadata}}))
            out.append(("messages/complete", [message]))
        elif name == "events":
            out.append(("events", chain_event(data)))
        elif name in ("checkpoints", "debug"):
            out.append((name, with_checkpoint_ids(data, record)))
        else:
            out.append((name, data))
    return out


def chain_event(task: dict[str, Any]) -> dict[str, Any]:
    """A task's start or end as a LangChain `astream_events` event."""
    ended = "result" in task
    return {
        "event": "on_chain_end" if ended else "on_chain_start",
        "name": task.get("name"),
        "run_id": task.get("id"),
        "tags": [],
        "metadata": {},
        "data": {"output": task.get("result")} if ended else {"input": task.get("input")},
    }


def with_checkpoint_ids(data: Any, record: EventRecord) -> Any:
    """A checkpoint payload with the wire's checkpoint id for the record it was taken at."""
    payload = data.get("payload") if data.get("type") == "checkpoint" else data
    if not isinstance(payload, dict) or "config" not in payload:
        return data
    configurable = payload["config"].get("configurable", {})
    if configurable.get("checkpoint_id") == str(record.seq):
        configurable["checkpoint_id"] = wire.checkpoint_id(record.seq, record.hash)
    payload.setdefault("parent_config", None)
    payload.setdefault("tasks", [])
    return data


BOUNDARIES = (NodeEntered, BranchEntered, StepAdvanced, InterruptRaised)
"""Records after which the projection is handed what came since: a run's input goes with
the node entered after it (its `values` show the input), a step's writes with its end."""


def parted(
    parts: Sequence[Part], modes: Sequence[str], subgraphs: bool, record: EventRecord
) -> list[str]:
    """The events of the parts a batch of records made."""
    return [
        sse(named(mode, part.ns), data, f"{record.position}")
        for part in parts
        if subgraphs or not part.ns
        for mode, data in wire_parts(part, modes, record)
    ]


async def run_events(
    srv: AgentServer,
    trigger: TriggerState,
    modes: Sequence[str],
    *,
    subgraphs: bool = False,
    after: int = 0,
) -> AsyncIterator[str]:
    """The run's stream from its records with position > `after`, to its end."""
    yield sse("metadata", {"run_id": trigger.id, "attempt": trigger.attempt or 1})
    accepted = trigger.accepted
    thread_id, graph_id = accepted.thread_id, accepted.graph_id
    app = srv.app(graph_id)
    wanted = sorted({m for m in (ENGINE_MODES.get(n) for n in modes) if m is not None})
    projection = app.stream_projection(wanted, {"thread_id": thread_id})
    fold: Fold[Any] | None = None
    batch: list[EventRecord] = []
    async for record in srv.rt.run_records(trigger, after):
        if record.thread_id != thread_id:
            continue  # the runtime's record of the run's end: said below
        if fold is None:
            before = record.seq - 1
            state = await srv.state_at(thread_id, graph_id, before) if before else None
            if state is None:
                state = app.graph.state_cls()
            fold = Fold(state, seq=before)
        fold.apply(record)
        batch.append(record)
        if isinstance(record.event, BOUNDARIES):
            for event in parted(projection.committed(batch, fold.state), modes, subgraphs, record):
                yield event
            batch = []
    if batch and fold is not None:
        for event in parted(projection.committed(batch, fold.state), modes, subgraphs, batch[-1]):
            yield event
    ended = srv.rt.run_now(trigger)
    if ended.outcome == "failed":
        yield sse("error", {"error": ended.error_type or "Error", "message": ended.message or ""})
    yield sse("end", None)
