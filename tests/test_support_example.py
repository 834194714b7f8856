"""The demo's scripted support agent tells the truth about its refund."""

from __future__ import annotations

from agentlog.actors.examples.support import support_graph
from agentlog.events import MemoryEventStore
from agentlog.projections import ExecutionStatus


async def test_an_approved_refund_is_confirmed_with_its_reference() -> None:
    app = support_graph(MemoryEventStore())
    config = {"thread_id": "t"}
    await app.ainvoke("refund please", config)
    done = await app.ainvoke(None, config)
    assert done["messages"][-1].text().startswith("Done: your refund is on its way")


async def test_a_refund_refused_at_the_breakpoint_is_said_not_issued() -> None:
    """New input at the breakpoint rejects the pending refund call: the agent says so."""
    app = support_graph(MemoryEventStore())
    config = {"thread_id": "t"}
    paused = await app.ainvoke("refund please", config, include_state=True)
    assert paused["state"].execution_meta.status == ExecutionStatus.INTERRUPTED_BEFORE
    done = await app.ainvoke("no, do not refund", config, include_state=True)
    last = done["messages"][-1].text()
    assert last.startswith("The refund was not issued"), last
    assert "refund is on its way" not in " ".join(m.text() for m in done["messages"])
    assert done["state"].execution_meta.status == ExecutionStatus.COMPLETED
