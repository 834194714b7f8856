"""A worker process for the superstep crash test: a graph of parallel branches on SQLite.

usage: python -m tests.workers.superstep_run DB SIDE_EFFECTS THREAD run|dump

The graph: "plan" sends one "work" branch per subject (`Send`), each reduced into `items`;
then "ask" writes an assistant message with tool calls and fans out to a "tools" ToolNode
and a plain "audit" node in one superstep; both join into "report", then END. Every work
branch, tool execution and audit appends a line to SIDE_EFFECTS (fsync'ed), so a test can
count how often each ran. Deterministic: fixed delays, no clock, no randomness.

`run` starts the thread when it is new and resumes it otherwise; it prints "ready" once the
store is open and "done" when the thread has completed. `dump` prints the thread's state
(as `comparable` makes it) as JSON.
"""

from __future__ import annotations

import asyncio
import json
import operator
import sys
from typing import Annotated, Any

from pydantic import Field

from agentlog.actors import END, START, CompiledGraph, Send, StateGraph
from agentlog.actors.tools.node import ToolNode
from agentlog.events import EventStore, SQLiteEventStore
from agentlog.projections import AgentState, ExecutionStatus, Message, TextBlock, ToolCallBlock
from tests.workers import append_line
from tests.workers.graph_run import comparable

SUBJECTS = ("ants", "bees", "cats", "dogs", "eels")
CALLS = ("call-0", "call-1", "call-2")


class Report(AgentState):
    items: Annotated[list[str], operator.add] = Field(default_factory=list)
    audits: Annotated[list[str], operator.add] = Field(default_factory=list)
    summary: str = ""


def build_graph(store: EventStore, side_effects: str | None = None) -> CompiledGraph[Report]:
    """The branching graph on `store`; its branches write to `side_effects`."""

    def effect(line: str) -> None:
        if side_effects is None:
            raise RuntimeError("built without a side-effect file: this graph cannot run")
        append_line(side_effects, line)

    def plan(state: Report) -> dict[str, Any]:
        return {"summary": "planned"}

    done = {subject: asyncio.Event() for subject in SUBJECTS}
    """Set once a subject's branch has made its effect: the branches finish last one first
    (a sequence, not a clock), so the merge must restore branch order itself."""

    async def work(state: dict[str, Any]) -> dict[str, Any]:
        subject = state["subject"]
        later = SUBJECTS[SUBJECTS.index(subject) + 1 :]
        if later:
            await done[later[0]].wait()  # every branch of the step runs again on a resume
        effect(f"work-{subject}")
        done[subject].set()
        return {"items": [f"{subject} done"]}

    def ask(state: Report) -> dict[str, Any]:
        blocks: list[Any] = [TextBlock(text="checking")]
        blocks += [ToolCallBlock(id=c, name="check", args={"call_id": c}) for c in CALLS]
        message = Message(message_id="a-1", role="assistant", content=blocks, timestamp=0.0)
        return {"messages": [message]}

    async def check(call_id: str) -> str:
        """Check one thing.

        Args:
            call_id: the id of this call, for the side-effect file.
        """
        effect(call_id)
        return f"{call_id} ok"

    async def audit(state: Report) -> dict[str, Any]:
        effect("audit")
        return {"audits": [f"{len(state.items)} items audited"]}

    def report(state: Report) -> dict[str, Any]:
        return {"summary": f"{len(state.items)} items, {len(state.context)} messages"}

    graph: StateGraph[Report] = StateGraph(Report, name="superstep-crash")
    graph.add_node("plan", plan)
    graph.add_node("work", work)
    graph.add_node("ask", ask)
    graph.add_node("tools", ToolNode([check]))
    graph.add_node("audit", audit)
    graph.add_node("report", report)
    graph.add_edge(START, "plan")
    graph.add_conditional_edges(
        "plan", lambda state: [Send("work", {"subject": s}) for s in SUBJECTS], ["work"]
    )
    graph.add_edge("work", "ask")
    graph.add_edge("ask", "tools")
    graph.add_edge("ask", "audit")
    graph.add_edge(["tools", "audit"], "report")
    graph.add_edge("report", END)
    return graph.compile(store, snapshot_every=5)


async def run(db: str, side_effects: str, thread: str) -> None:
    config = {"thread_id": thread}
    async with SQLiteEventStore(db) as store:
        print("ready", flush=True)
        graph = build_graph(store, side_effects)
        if await store.last_seq(thread) == 0:
            start = Message.text_message("start", message_id="u-1")
            start.timestamp = 0.0
            await graph.ainvoke({"messages": [start]}, config)
        else:
            await graph.ainvoke(None, config)
        state = await graph.aget_state(config)
        if state.execution_meta.status != ExecutionStatus.COMPLETED:
            raise SystemExit(f"run ended with status {state.execution_meta.status.value}")
    print("done", flush=True)


async def dump(db: str, thread: str) -> None:
    async with SQLiteEventStore(db) as store:
        state = await build_graph(store).aget_state({"thread_id": thread})
    print(json.dumps(comparable(state), sort_keys=True), flush=True)


def main(argv: list[str]) -> None:
    if len(argv) != 4 or argv[3] not in ("run", "dump"):
        raise SystemExit(__doc__)
    db, side_effects, thread, mode = argv
    asyncio.run(run(db, side_effects, thread) if mode == "run" else dump(db, thread))


if __name__ == "__main__":
    main(sys.argv[1:])
