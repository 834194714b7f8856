"""A lone runtime whose run is fenced (its claim on the thread was taken over while a node
ran) resumes the trigger from the log: its input is never sent again."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import MemoryEventStore
from agentlog.events.claims import HOST, Holder
from agentlog.projections import AgentState, Message
from tests.helpers import line


async def test_a_fenced_lone_run_resumes_from_the_log_and_sends_its_input_once() -> None:
    entered = asyncio.Event()
    go = asyncio.Event()
    calls = 0

    async def work(state: AgentState) -> list[Message]:
        nonlocal calls
        calls += 1
        if calls == 1:
            entered.set()
            await go.wait()
        return [Message.text_message("done", role="assistant")]

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    async with MemoryEventStore() as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("g", line(("work", work)).compile(store))
        runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
        async with runtime:
            thread = await runtime.trigger("api", "the input")
            await entered.wait()
            # another process took the thread over, and died: the run's commit is fenced
            store._claims[thread] = Holder(
                "usurper", HOST, dead.pid, "1", time.time(), 3600.0, "a run elsewhere"
            )
            go.set()
            result = await runtime.wait(thread, timeout=60)
        assert result["status"] == "completed"
        kinds = [r.kind async for r in store.read(thread)]
        assert kinds.count("run_started") == 1, kinds
        texts = [m.text() for m in result["state"].context]
        assert texts.count("the input") == 1, texts
        assert calls == 2  # the node cut short by the takeover runs again, as after a crash
