"""A worker process for the subgraph crash test: a graph whose steps run two subgraphs, on
SQLite.

usage: python -m tests.workers.subgraph_run DB SIDE_EFFECTS THREAD run

The parent: "plan", then "research" (a compiled graph added as a node: it sends one "work"
branch per subject, then "ask" writes an assistant message with tool calls, run by a
"tools" ToolNode, and "sum" counts), then "write" (a `def` node calling a second graph,
"draft", with mapped input through its blocking `invoke`), then END. Every work branch,
tool execution and draft appends a line to SIDE_EFFECTS (fsync'ed), so a test can count
how often each ran. Deterministic: fixed delays, no clock, no randomness.

`run` starts the thread when it is new and resumes it otherwise; it prints "ready" once the
store is open and "done" when the thread has completed.
"""

from __future__ import annotations

import asyncio
import operator
import sys
from typing import Annotated, Any

from pydantic import Field

from agentlog.actors import END, START, CompiledGraph, Send, StateGraph
from agentlog.actors.tools.node import ToolNode
from agentlog.events import EventStore, SQLiteEventStore
from agentlog.projections import AgentState, ExecutionStatus, Message, TextBlock, ToolCallBlock
from tests.workers import append_line

SUBJECTS = ("ants", "bees", "cats")
CALLS = ("call-0", "call-1", "call-2")


class Research(AgentState):
    items: Annotated[list[str], operator.add] = Field(default_factory=list)
    summary: str = ""


class Report(Research):
    text: str = ""


class Draft(AgentState):
    points: list[str] = Field(default_factory=list)
    text: str = ""


def build_graph(store: EventStore, side_effects: str | None = None) -> CompiledGraph[Report]:
    """The parent graph on `store`; its subgraphs' nodes write to `side_effects`."""

    def effect(line: str) -> None:
        if side_effects is None:
            raise RuntimeError("built without a side-effect file: this graph cannot run")
        append_line(side_effects, line)

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

    def ask(state: Research) -> dict[str, Any]:
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

    def total(state: Research) -> dict[str, Any]:
        return {"summary": f"{len(state.items)} items, {len(state.context)} messages"}

    research: StateGraph[Research] = StateGraph(Research, name="research")
    research.add_node("work", work)
    research.add_node("ask", ask)
    research.add_node("tools", ToolNode([check]))
    research.add_node("sum", total)
    research.add_conditional_edges(
        START, lambda state: [Send("work", {"subject": s}) for s in SUBJECTS], ["work"]
    )
    research.add_edge("work", "ask")
    research.add_edge("ask", "tools")
    research.add_edge("tools", "sum")
    research.add_edge("sum", END)

    def drafting(state: Draft) -> dict[str, Any]:
        effect("draft")
        return {"text": "; ".join(state.points)}

    draft: StateGraph[Draft] = StateGraph(Draft, name="draft")
    draft.add_node("draft", drafting)
    draft.add_edge(START, "draft")
    draft.add_edge("draft", END)
    drafts = draft.compile()

    def plan(state: Report) -> dict[str, Any]:
        return {"summary": "planned"}

    def write(state: Report) -> dict[str, Any]:
        done = drafts.invoke({"points": state.items}, include_state=True)
        return {"text": done["state"].text.upper()}

    graph: StateGraph[Report] = StateGraph(Report, name="subgraph-crash")
    graph.add_node("plan", plan)
    graph.add_node("research", research.compile())
    graph.add_node("write", write)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "research")
    graph.add_edge("research", "write")
    graph.add_edge("write", END)
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


def main(argv: list[str]) -> None:
    if len(argv) != 4 or argv[3] != "run":
        raise SystemExit(__doc__)
    db, side_effects, thread, _ = argv
    asyncio.run(run(db, side_effects, thread))


if __name__ == "__main__":
    main(sys.argv[1:])
