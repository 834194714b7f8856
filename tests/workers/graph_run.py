"""A worker process for the crash-recovery tests: runs a scripted agent graph on SQLite.

usage: python -m tests.workers.graph_run DB SIDE_EFFECTS THREAD run|dump [DURABILITY]

The graph is deterministic: an "agent" node (a scripted model, no clock, no randomness)
asks for one or two tool calls on each of its first TURNS turns, then answers in text; a
"tools" ToolNode runs them. Every tool execution appends "<call_id>\\n" to SIDE_EFFECTS
(fsync'ed), so a test can count how often each call really ran.

`run` starts the thread when it is new and resumes it (`ainvoke(None)`) otherwise; it
prints "ready" once the store is open and "done" when the thread has completed. `dump`
prints the thread's state as JSON, without the fields that differ from run to run.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agentlog.actors import END, CompiledGraph, StateGraph
from agentlog.actors.tools.node import ToolNode
from agentlog.events import EventStore, SQLiteEventStore
from agentlog.projections import AgentState, ExecutionStatus, Message, TextBlock, ToolCallBlock
from tests.workers import append_line

TURNS = 6
"""Assistant turns that ask for tools; the next one answers in text and the run ends."""

SNAPSHOT_EVERY = 7
"""Small, so that recovery also goes through `snapshot + tail` loads."""


def calls_of_turn(n: int) -> int:
    """How many tool calls turn `n` asks for: two on even turns, one on odd ones."""
    return 2 if n % 2 == 0 else 1


def call_ids() -> list[str]:
    """Every call id an uninterrupted run makes, in order."""
    return [f"call-{n}-{i}" for n in range(TURNS) for i in range(calls_of_turn(n))]


def _call_delay(call_id: str) -> float:
    """A fixed 5-20 ms per call, derived from its id (no randomness, no clock)."""
    _, n, i = call_id.split("-")
    return 0.005 + ((int(n) * 7 + int(i) * 5) % 16) / 1000


def _record(path: str | None, call_id: str) -> None:
    """The side effect: one durable line per execution of a call."""
    if path is None:
        raise RuntimeError("this graph was built without a side-effect file: it cannot run")
    append_line(path, call_id)


def build_graph(store: EventStore, side_effects: str | None = None) -> CompiledGraph[AgentState]:
    """The scripted agent graph on `store`; tools write to `side_effects`."""

    async def lookup(key: str, call_id: str) -> str:
        """Look a key up (async tool): half the delay, the side effect, the other half.

        Args:
            key: what to look up.
            call_id: the id of this call, for the side-effect file.
        """
        delay = _call_delay(call_id)
        await asyncio.sleep(delay / 2)
        _record(side_effects, call_id)
        await asyncio.sleep(delay / 2)
        return f"value of {key}"

    def measure(size: int, call_id: str) -> dict[str, int]:
        """Measure something (sync tool, run in a worker thread).

        Args:
            size: the size to measure.
            call_id: the id of this call, for the side-effect file.
        """
        import time

        delay = _call_delay(call_id)
        time.sleep(delay / 2)
        _record(side_effects, call_id)
        time.sleep(delay / 2)
        return {"size": size, "squared": size * size}

    async def agent(state: AgentState) -> dict[str, Any]:
        n = sum(1 for m in state.context if m.role == "assistant")
        await asyncio.sleep(0.01 + (n % 3) * 0.005)  # the "model" thinks, so kills land here
        if n >= TURNS:
            text = f"finished after {n} turns and {len(call_ids())} calls"
            answer = Message(
                message_id=f"a-{n}", role="assistant", content=[TextBlock(text=text)], timestamp=0.0
            )
            return {"messages": [answer]}
        blocks: list[Any] = [TextBlock(text=f"turn {n}: calling tools")]
        for i in range(calls_of_turn(n)):
            call_id = f"call-{n}-{i}"
            if (n + i) % 2 == 0:
                blocks.append(
                    ToolCallBlock(
                        id=call_id, name="lookup", args={"key": f"k{n}{i}", "call_id": call_id}
                    )
                )
            else:
                blocks.append(
                    ToolCallBlock(
                        id=call_id, name="measure", args={"size": n * 10 + i, "call_id": call_id}
                    )
                )
        message = Message(message_id=f"a-{n}", role="assistant", content=blocks, timestamp=0.0)
        return {"messages": [message]}

    def route(state: AgentState) -> str:
        last = state.context[-1] if state.context else None
        return "tools" if last is not None and last.tool_calls() else END

    graph: StateGraph[AgentState] = StateGraph(name="crash-recovery")
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([lookup, measure]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph.compile(store, snapshot_every=SNAPSHOT_EVERY)


def comparable(state: AgentState) -> dict[str, Any]:
    """The state as JSON builtins, without what legitimately differs between two runs.

    Removed: every message's `timestamp` (tool messages are stamped with the wall clock)
    and the run id (a fresh uuid per run). Everything else must match exactly.
    """
    data: dict[str, Any] = state.model_dump(mode="json")
    for message in data["context"]:
        message.pop("timestamp", None)
    data["execution_meta"]["internal_data"].pop("run_id", None)
    return data


async def run(db: str, side_effects: str, thread: str, durability: Any = "sync") -> None:
    config = {"thread_id": thread}
    async with SQLiteEventStore(db) as store:
        print("ready", flush=True)
        graph = build_graph(store, side_effects)
        if await store.last_seq(thread) == 0:
            start = Message.text_message("start", message_id="u-1")
            start.timestamp = 0.0
            await graph.ainvoke({"messages": [start]}, config, durability=durability)
        else:  # resume; a completed thread stays as it is
            await graph.ainvoke(None, config, durability=durability)
        state = await graph.aget_state(config)
        if state.execution_meta.status != ExecutionStatus.COMPLETED:
            raise SystemExit(f"run ended with status {state.execution_meta.status.value}")
    print("done", flush=True)


async def dump(db: str, thread: str) -> None:
    async with SQLiteEventStore(db) as store:
        state = await build_graph(store).aget_state({"thread_id": thread})
    print(json.dumps(comparable(state), sort_keys=True), flush=True)


def main(argv: list[str]) -> None:
    if len(argv) not in (4, 5) or argv[3] not in ("run", "dump"):
        raise SystemExit(__doc__)
    db, side_effects, thread, mode = argv[:4]
    durability = argv[4] if len(argv) == 5 else "sync"
    asyncio.run(run(db, side_effects, thread, durability) if mode == "run" else dump(db, thread))


if __name__ == "__main__":
    main(sys.argv[1:])
