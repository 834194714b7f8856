"""A run resumed past a breakpoint that dies right after recording the resume must, on
restart, go on into the node it was let into: the log says the breakpoint was passed.
(Found by the graph state machine's differential invariant, with SIGKILL crashes.)"""

from __future__ import annotations

import contextlib

from agentlog.actors.examples.support import support_graph
from agentlog.actors.testing import FaultyStore, SimulatedCrashError
from agentlog.events import MemoryEventStore
from agentlog.projections import ExecutionStatus, replay


async def test_a_crash_just_after_the_resume_is_recorded_does_not_ask_again() -> None:
    store = MemoryEventStore()
    config = {"thread_id": "t"}
    first = FaultyStore(store, "t")
    app = support_graph(first)
    paused = await app.ainvoke("refund please", config, include_state=True)
    assert paused["state"].execution_meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    first.crash_at(1, "after")  # the resume's first commit lands; the process dies
    with contextlib.suppress(SimulatedCrashError):
        await app.ainvoke(None, config)  # approved
    assert first.crashed
    first.bury()
    kinds = [r.kind async for r in store.read("t")]
    assert kinds[-1] == "resumed"

    restarted = support_graph(FaultyStore(store, "t"))
    done = await restarted.ainvoke(None, config, include_state=True)
    assert done["state"].execution_meta.status == ExecutionStatus.COMPLETED
    records = [r async for r in store.read("t")]
    assert [r.kind for r in records].count("interrupt_raised") == 1
    assert replay(records).model_dump() == done["state"].model_dump()
