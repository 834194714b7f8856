"""Replay-test speed: steps per second replaying a recorded corpus under the same code,
against the plain fold of the same threads, in the same run.

The corpus: THREADS threads of a tool-calling loop (a function agent asks for one tool call
per turn, then ends), STEPS + 1 steps each: 10,100 steps in all (2,020 with --quick),
recorded once into an in-memory store (not timed). Each round then times, alternately:

* replay: `agentlog.actors.replay.replay_test` over every thread (each replayed into a fresh
  in-memory log, every tool call answered from the recording, every step compared);
* fold: `agentlog.projections.state_at(use_snapshots=False)` of every thread from the same
  store: the state the log holds, which any reader pays for.

* run: the same threads run afresh by the same code into a new in-memory store (tools
  executed): what the engine alone costs, so the replay's own share shows.

`fold_over_replay` (the paired ratio of replay time to fold time) says how many times a
replay costs a fold; `replay_over_run` how much a replay adds to running the code.

Usage: .venv/bin/python bench/replay_test.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import _common as common

from agentlog import END, AgentState, Message, StateGraph, ToolNode
from agentlog.actors.replay import replay_test
from agentlog.events import MemoryEventStore
from agentlog.projections import ToolCallBlock, state_at

THREADS = 100
STEPS = 100
"""Steps per thread: STEPS / 2 agent turns, each followed by its tool step."""


def search(q: str) -> str:
    """Search for `q`.

    Args:
        q: The query.
    """
    return f"results for {q}"


async def agent(state: AgentState) -> list[Message]:
    turn = state.execution_meta.step // 2  # agent, tools, agent ...: no reading of the context
    thread = state.execution_meta.thread_id
    if turn >= STEPS // 2:
        return [Message(message_id=f"{thread}-a{turn}", role="assistant", content=[])]
    call = ToolCallBlock(id=f"{thread}-c{turn}", name="search", args={"q": f"q{turn}"})
    return [Message(message_id=f"{thread}-a{turn}", role="assistant", content=[call])]


def build(store: Any) -> Any:
    graph: StateGraph[AgentState] = StateGraph(name="bench")
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([search]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent", lambda s: "tools" if s.context[-1].tool_calls() else END,
        {"tools": "tools", END: END},
    )  # fmt: skip
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=store, recursion_limit=STEPS + 10)


async def record(threads: int) -> MemoryEventStore:
    store = MemoryEventStore()
    app = build(store)
    for i in range(threads):
        await app.ainvoke("go", {"thread_id": f"t{i}"})
    return store


async def timed_replay(store: MemoryEventStore) -> tuple[float, int, bool]:
    start = time.perf_counter()
    report = await replay_test(build, store=store)
    return time.perf_counter() - start, report.steps, report.ok


async def timed_fold(store: MemoryEventStore, threads: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    steps = 0
    for thread in threads:
        state = await state_at(store, thread, use_snapshots=False)
        steps += state.execution_meta.step
    return time.perf_counter() - start, steps


def main() -> None:
    args = common.parse_args(__doc__ or "")
    threads = THREADS // 5 if args.quick else THREADS
    store = asyncio.run(record(threads))
    names = asyncio.run(store.threads())
    seen: dict[str, Any] = {}

    def replay_round() -> float:
        seconds, steps, ok = asyncio.run(timed_replay(store))
        seen.update(replay_steps=steps, ok=ok)
        return seconds

    def run_round() -> float:
        start = time.perf_counter()
        asyncio.run(record(threads))
        return time.perf_counter() - start

    def fold_round() -> float:
        seconds, steps = asyncio.run(timed_fold(store, names))
        seen.update(fold_steps=steps)
        return seconds

    contenders = {"replay": replay_round, "fold": fold_round, "run": run_round}
    samples = common.alternate(args.rounds, contenders)
    med = common.medians(samples)
    replay_rate = common.per_second(seen["replay_steps"], med["replay"])
    fold_rate = common.per_second(seen["fold_steps"], med["fold"])
    common.emit(
        {
            "bench": "replay_test",
            "quick": args.quick,
            "threads": threads,
            "steps": seen["replay_steps"],
            "all_same": seen["ok"],
            "replay_steps_per_s": round(replay_rate),
            "fold_steps_per_s": round(fold_rate),
            "run_steps_per_s": round(common.per_second(seen["replay_steps"], med["run"])),
            "fold_over_replay": round(common.paired_ratio(samples["replay"], samples["fold"]), 2),
            "replay_over_run": round(common.paired_ratio(samples["replay"], samples["run"]), 2),
            "rounds": args.rounds,
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
