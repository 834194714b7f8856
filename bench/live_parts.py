"""What a served runtime's live parts cost its runs: the CPU time per run of 200 runs (two
nodes, each writing one custom part) through the runtime, with live parts off (a runtime no
Agent Server serves), on with no stream wanting them (a run nobody streams), and on with a
stream wanting `custom` (each run's parts handed to its channel, no one reading them). CPU
time rather than wall time, so that other work on a shared machine shows less.

Usage: .venv/bin/python bench/live_parts.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import _common as common

from agentlog.actors.engine.modes import StreamMode
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.runtime.live import LiveParts
from agentlog.events import SQLiteEventStore
from agentlog.langgraph import get_stream_writer
from agentlog.projections import AgentState, Message
from tests.helpers import line


def step(state: AgentState) -> list[Message]:
    get_stream_writer()({"progress": 1})
    return [Message.text_message("ok", role="assistant")]


async def runs(directory: Path, mode: str, n: int) -> float:
    """The CPU seconds `n` runs take, one after the other, with live parts as `mode` says."""
    async with SQLiteEventStore(common.fresh_path(directory)) as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("g", line(("a", step), ("b", step)).compile(store))
        runtime.register_entry_point(EntryPoint(id="g", graph_id="g"))
        hub = None if mode == "off" else LiveParts.of(runtime)
        await runtime.start()
        try:
            began = time.process_time()
            for i in range(n):
                accepted = await runtime.submit("g", f"x{i}", thread_id=f"t{i}")
                if hub is not None and mode == "custom":
                    hub.want(accepted.trigger_id, [StreamMode.CUSTOM])
                await runtime.wait_for(accepted.trigger_id, timeout=60)
            return time.process_time() - began
        finally:
            await runtime.stop()


def main() -> None:
    args = common.parse_args(__doc__ or "")
    n = 50 if args.quick else 200
    with common.temp_dir() as directory:
        contenders = {
            mode: (lambda mode=mode: asyncio.run(runs(directory, mode, n)))
            for mode in ("off", "on", "custom")
        }
        samples = common.alternate(args.rounds, contenders, warmup=1)
    per_run = {mode: round(s / n * 1e6) for mode, s in common.medians(samples).items()}
    common.emit(
        {
            "benchmark": "live_parts",
            "runs": n,
            "cpu_us_per_run": per_run,
            "on_vs_off": common.paired_ratio(samples["on"], samples["off"]),
            "custom_vs_off": common.paired_ratio(samples["custom"], samples["off"]),
            "environment": common.environment(),
        }
    )


if __name__ == "__main__":
    main()
