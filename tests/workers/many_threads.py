"""A worker process for the many-threads crash tests: many runs at once on one SQLite store.

usage: python -m tests.workers.many_threads DB SIDE_EFFECTS THREADS SNAPSHOT_EVERY DELAY_MS MODE

MODE is `each` (bring threads t0 .. t{THREADS-1} to their end one after the other) or
`all` (all at once, one `asyncio.gather` of `ainvoke`). A thread with no record yet is
started; any other is resumed with `ainvoke(None, {"thread_id": t})`. SNAPSHOT_EVERY 0 keeps
the engine's default. The worker prints "ready" once the store is open, then one JSON line
per thread, `{"thread": t, "error": null | "Type: message"}`, then "done".

Even-numbered threads call a tool on each of their turns; that tool appends "<call_id>\\n"
to SIDE_EFFECTS (one `write` on an O_APPEND file, which a SIGKILL of this process cannot
undo), so a test can count how often each call really ran. Nodes and tools await random
sleeps of up to DELAY_MS, so hundreds of steps are in flight together and a kill lands
anywhere; what the threads record does not depend on those delays.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

from agentlog.actors import END, CompiledGraph, StateGraph, ToolNode
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message, TextBlock, ToolCallBlock
from tests.workers import append_line

STEPS = 30
"""Steps of every thread: 30 "talk" turns, or 15 turns of "talk" then "tools"."""

TOOL_TURNS = STEPS // 2


def thread_ids(count: int) -> list[str]:
    """The threads a worker runs, in the order it resumes them."""
    return [f"t{i}" for i in range(count)]


def uses_tools(thread: str) -> bool:
    """Even-numbered threads call a tool on each turn; the others only talk."""
    return int(thread[1:]) % 2 == 0


def call_ids(thread: str) -> list[str]:
    """Every tool call an uninterrupted run of `thread` makes, in order."""
    return [f"{thread}-call-{n}" for n in range(TOOL_TURNS)] if uses_tools(thread) else []


def start_message(thread: str) -> Message:
    """The user's first message of `thread` (no wall clock in it)."""
    message = Message.text_message(f"hello from {thread}", message_id=f"{thread}-u")
    message.timestamp = 0.0
    return message


def _record(path: str | None, call_id: str) -> None:
    """The side effect: one line per execution of a call, in one write."""
    if path is None:
        raise RuntimeError("this graph was built without a side-effect file: it cannot run")
    append_line(path, call_id, durable=False)


def _turns(state: AgentState, thread: str) -> int:
    """The assistant turns so far, from the context's length: the user's message, then one
    message per turn of a talking thread, two (the call, its result) of a tool thread. Not
    by reading every message: a node's view copies each message it reads, which made the
    100 threads' 30 steps quadratic in the workers' time (a fifth of it)."""
    return (len(state.context) - 1) // (2 if uses_tools(thread) else 1)


def build_graph(
    store: SQLiteEventStore,
    side_effects: str | None = None,
    snapshot_every: int | None = None,
    max_delay: float = 0.0,
) -> CompiledGraph[AgentState]:
    """The graph every thread runs; tools write to `side_effects`, sleeps last <= max_delay."""

    async def pause() -> None:
        await asyncio.sleep(random.uniform(0.0, max_delay))

    async def note(text: str, call_id: str) -> str:
        """Write a note (async tool): a sleep, the side effect, another sleep.

        Args:
            text: what to note.
            call_id: the id of this call, for the side-effect file.
        """
        await pause()
        _record(side_effects, call_id)
        await pause()
        return f"noted {text}"

    async def talk(state: AgentState, config: dict[str, Any]) -> dict[str, Any]:
        thread = str(config["thread_id"])
        n = _turns(state, thread)
        await pause()  # the "model" thinks
        blocks: list[Any] = [TextBlock(text=f"{thread} turn {n}")]
        if uses_tools(thread):
            call_id = f"{thread}-call-{n}"
            args = {"text": f"{thread}/{n}", "call_id": call_id}
            blocks.append(ToolCallBlock(id=call_id, name="note", args=args))
        message = Message(
            message_id=f"{thread}-a{n}", role="assistant", content=blocks, timestamp=0.0
        )
        return {"messages": [message]}

    def after_talk(state: AgentState) -> str:
        if state.context[-1].tool_calls():
            return "tools"
        talked = len(state.context) - 1  # a talking thread: the user's message, then its turns
        return END if talked >= STEPS else "talk"

    def after_tools(state: AgentState) -> str:
        answered = (len(state.context) - 1) // 2  # a tool thread: a result after each turn
        return END if answered >= TOOL_TURNS else "talk"

    graph: StateGraph[AgentState] = StateGraph(name="many-threads")
    graph.add_node("talk", talk)
    graph.add_node("tools", ToolNode([note]))
    graph.set_entry_point("talk")
    graph.add_conditional_edges("talk", after_talk, {"tools": "tools", "talk": "talk", END: END})
    graph.add_conditional_edges("tools", after_tools, {"talk": "talk", END: END})
    if snapshot_every is None:
        return graph.compile(store, recursion_limit=STEPS + 5)
    return graph.compile(store, snapshot_every=snapshot_every, recursion_limit=STEPS + 5)


async def _bring_to_end(
    store: SQLiteEventStore, graph: CompiledGraph[AgentState], thread: str
) -> str | None:
    """Start or resume `thread` until it ends; the error it raised, as text, or None."""
    config = {"thread_id": thread}
    try:
        if await store.last_seq(thread) == 0:
            await graph.ainvoke({"messages": [start_message(thread)]}, config)
        else:
            await graph.ainvoke(None, config)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


async def run(
    db: str, effects: str, count: int, every: int | None, max_delay: float, mode: str
) -> None:
    async with SQLiteEventStore(db) as store:
        print("ready", flush=True)
        graph = build_graph(store, effects, every, max_delay)
        threads = thread_ids(count)
        if mode == "each":
            errors = [await _bring_to_end(store, graph, t) for t in threads]
        else:
            errors = await asyncio.gather(*(_bring_to_end(store, graph, t) for t in threads))
        for thread, error in zip(threads, errors, strict=True):
            print(json.dumps({"thread": thread, "error": error}), flush=True)
    print("done", flush=True)


def main(argv: list[str]) -> None:
    if len(argv) != 6 or argv[5] not in ("each", "all"):
        raise SystemExit(__doc__)
    db, effects, count, every, delay_ms, mode = argv
    snapshot_every = int(every) or None
    asyncio.run(run(db, effects, int(count), snapshot_every, float(delay_ms) / 1000, mode))


if __name__ == "__main__":
    main(sys.argv[1:])
