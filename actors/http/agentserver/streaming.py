"""A run's stream as the Agent Server sends it (Server-Sent Events): `metadata` first (the
run id), then the parts of the stream modes asked for, projected from the run's records as
they commit, `error` if it failed, and `end` last.

The parts come from the log through the engine's own projection (`ModeProjection`), the one
`astream` uses, fed record by record with the thread's fold. What the log does not keep comes
live from the run, when it executes on this process (`agentlog.actors.runtime.live`): what a
node's `get_stream_writer()` writes (`custom`) and a model's token deltas (`messages` tuples,
`messages/partial`, `on_chat_model_stream` events), each put after the records committed
before it was made, so a node's deltas come before its step's `updates` and `values`. Those
are not replayed: a stream joined later, or resumed with `Last-Event-ID`, gets the deltas
made after it came (its event ids are the log's positions only). A subgraph's live parts
carry its namespace (`custom|node:step`, with `stream_subgraphs`); its records are on a
thread of its own, so its `values` and `updates` are not in the stream. Modes map to the
engine's as `ENGINE_MODES` says; the `events` mode shows each task's start and end as
`on_chain_start` / `on_chain_end`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from agentlog.actors.engine.modes import Part, StreamMode
from agentlog.actors.http.agentserver import wire
from agentlog.actors.http.agentserver.facade import AgentServer
from agentlog.actors.http.agentserver.livewire import LiveWire
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
    parts: Sequence[Part],
    modes: Sequence[str],
    subgraphs: bool,
    record: EventRecord,
    live: LiveWire | None = None,
) -> list[str]:
    """The events of the parts a batch of records made (but the messages `live` streamed)."""
    return [
        sse(named(mode, part.ns), data, f"{record.position}")
        for part in parts
        if (subgraphs or not part.ns) and (live is None or not live.streamed(part))
        for mode, data in wire_parts(part, modes, record)
    ]


async def run_events(
    srv: AgentServer,
    trigger: TriggerState,
    modes: Sequence[str],
    *,
    subgraphs: bool = False,
    after: int = 0,
    created: bool = False,
) -> AsyncIterator[str]:
    """The run's stream from its records with position > `after`, to its end, with the live
    parts made since it came (`created`: the stream the run was created with, which also gets
    those made before it connected)."""
    yield sse("metadata", {"run_id": trigger.id, "attempt": trigger.attempt or 1})
    live = LiveWire.of(srv.live, trigger.id, modes, subgraphs, earlier=created and not after)
    try:
        async with contextlib.aclosing(_events(srv, trigger, modes, subgraphs, after, live)) as out:
            async for event in out:
                yield event
    finally:
        if live is not None:
            live.close()
    ended = srv.rt.run_now(trigger)
    if ended.outcome == "failed":
        yield sse("error", {"error": ended.error_type or "Error", "message": ended.message or ""})
    yield sse("end", None)


async def _events(
    srv: AgentServer,
    trigger: TriggerState,
    modes: Sequence[str],
    subgraphs: bool,
    after: int,
    live: LiveWire | None,
) -> AsyncGenerator[str, None]:
    """The run's parts: from its records as they commit, and `live`'s in their place."""
    accepted = trigger.accepted
    thread_id, graph_id = accepted.thread_id, accepted.graph_id
    app = srv.app(graph_id)
    wanted = sorted({m for m in (ENGINE_MODES.get(n) for n in modes) if m is not None})
    projection = app.stream_projection(wanted, {"thread_id": thread_id})
    projection.skip_streamed = False  # a model's streamed answer: `live` says if it was sent
    fold: Fold[Any] | None = None
    batch: list[EventRecord] = []
    merged = contextlib.aclosing(live_merged(srv.rt.run_records(trigger, after), live))
    async with merged as records:
        async for record in records:
            if record is None:  # live parts came: those made after what was read so far
                assert live is not None
                for event in live.events(upto=fold.seq if fold is not None else 0):
                    yield event
                continue
            if record.thread_id != thread_id:
                continue  # the runtime's record of the run's end: said below
            if live is not None:  # those made before this record was committed go first
                for event in live.events(upto=record.seq - 1):
                    yield event
            if fold is None:
                before = record.seq - 1
                state = await srv.state_at(thread_id, graph_id, before) if before else None
                if state is None:
                    state = app.graph.state_cls()
                fold = Fold(state, seq=before)
            fold.apply(record)
            batch.append(record)
            if isinstance(record.event, BOUNDARIES):
                parts = projection.committed(batch, fold.state)
                for event in parted(parts, modes, subgraphs, record, live):
                    yield event
                batch = []
    if batch and fold is not None:
        parts = projection.committed(batch, fold.state)
        for event in parted(parts, modes, subgraphs, batch[-1], live):
            yield event
    if live is not None:
        for event in live.events(upto=None):
            yield event


async def live_merged(
    records: AsyncIterator[EventRecord], live: LiveWire | None
) -> AsyncGenerator[EventRecord | None, None]:
    """The run's records as they commit, and None whenever live parts came meanwhile."""
    if live is None:
        async for record in records:
            yield record
        return
    following = aiter(records)
    upcoming: asyncio.Future[EventRecord] = asyncio.ensure_future(anext(following))
    try:
        while True:
            woken: asyncio.Future[Any] = asyncio.ensure_future(live.subscription.wait())
            either: set[asyncio.Future[Any]] = {upcoming, woken}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            woken.cancel()
            if woken.done() and not woken.cancelled():
                yield None
            if upcoming.done():
                try:
                    record = upcoming.result()
                except StopAsyncIteration:
                    return
                upcoming = asyncio.ensure_future(anext(following))
                yield record
    finally:
        upcoming.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await upcoming
        closing = getattr(following, "aclose", None)
        if closing is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await closing()
