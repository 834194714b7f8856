"""A worker process for the claim tests: a graph whose sync tool "charges a card".

usage: python -m tests.workers.claim_run DB EFFECTS THREAD start|resume|input SECONDS
       [--think S] [--wait-go] [--gate DIR]

Each user message makes the scripted agent call the `charge` tool once (call id
`charge-<n>` for the n-th user message); the tool, a sync function run on a worker thread,
appends "start <call_id>" to EFFECTS (fsync'ed), sleeps SECONDS, then appends
"done <call_id>", so a test can see whether a charge ran twice or overlapped. After the
tool's answer the agent replies in text and the run ends. With --think, the agent node
sleeps S seconds before asking for the charge (a model thinking), which leaves a window in
which the thread is claimed but the tool has not started. With --gate DIR, the phases wait
on the test instead of the clock: the agent, about to ask for the first charge, appends
"thinking" to DIR/progress and waits for the file DIR/think-go; the tool, once it has
written "start", waits for DIR/charge-go (SECONDS and --think are then not slept).

`start` runs the thread with a first user message, `input` sends another user message
("second input"), `resume` calls `ainvoke(None)`. The worker prints "ready" once its store
is open, then "ok" when the run ended, or "busy <error>" when it got `ThreadBusyError`
(exit code 3), or "error <type> <message>" otherwise (exit code 4). With --wait-go it
waits, after "ready", for a line on stdin before it invokes: a test can start it early and
release it at an exact moment, without the interpreter's start-up time in between.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from agentlog.actors import END, CompiledGraph, StateGraph
from agentlog.actors.testing import until_blocking
from agentlog.actors.tools.node import ToolNode
from agentlog.events import EventStore, SQLiteEventStore, ThreadBusyError
from agentlog.projections import AgentState, Message, TextBlock, ToolCallBlock
from tests.workers import append_line

SECOND_INPUT = "second input"


def _record(path: str, line: str) -> None:
    append_line(path, line)


def _held(gate: str | None, name: str, seconds: float) -> None:
    """Wait for the test to create `gate`/`name` if there is a gate, else sleep `seconds`."""
    if gate is None:
        time.sleep(seconds)  # a stand-in for slow work: no test relies on its length
    else:
        until_blocking((Path(gate) / name).exists, what=f"the test to open {name}")


def build_graph(
    store: EventStore,
    effects: str,
    seconds: float,
    think: float = 0.0,
    gate: str | None = None,
) -> CompiledGraph[AgentState]:
    """The one-tool agent on `store`; its tool writes to `effects` and takes `seconds` (or
    waits for the test to open its gate)."""

    def charge(amount: int, call_id: str) -> str:
        """Charge a card (a side effect that must never run twice at once).

        Args:
            amount: how much to charge.
            call_id: the id of this call, for the side-effect file.
        """
        _record(effects, f"start {call_id}")
        _held(gate, "charge-go", seconds)
        _record(effects, f"done {call_id}")
        return f"charged {amount}"

    def agent(state: AgentState) -> dict[str, Any]:
        users = sum(1 for m in state.context if m.role == "user")
        last = state.context[-1]
        if last.role == "tool":
            text = f"charged for input {users}"
            reply = Message(
                message_id=f"a-done-{users}",
                role="assistant",
                content=[TextBlock(text=text)],
                timestamp=0.0,
            )
            return {"messages": [reply]}
        if gate is not None:
            append_line(str(Path(gate) / "progress"), "thinking")
        _held(gate, "think-go", think)
        call_id = f"charge-{users}"
        call = ToolCallBlock(id=call_id, name="charge", args={"amount": 10, "call_id": call_id})
        ask = Message(message_id=f"a-{users}", role="assistant", content=[call], timestamp=0.0)
        return {"messages": [ask]}

    def route(state: AgentState) -> str:
        return "tools" if state.context[-1].tool_calls() else END

    graph: StateGraph[AgentState] = StateGraph(name="charge-card")
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([charge]))
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph.compile(store)


async def main(args: argparse.Namespace) -> int:
    config = {"thread_id": args.thread}
    async with SQLiteEventStore(args.db) as store:
        await store.open()
        print("ready", flush=True)
        if args.wait_go:
            await asyncio.to_thread(sys.stdin.readline)
        graph = build_graph(store, args.effects, args.seconds, args.think, args.gate)
        mode = args.mode
        if mode == "start":
            value: Any = {"messages": [Message.text_message("first input", message_id="u-1")]}
        elif mode == "input":
            value = {"messages": [Message.text_message(SECOND_INPUT, message_id="u-2")]}
        else:
            value = None
        try:
            await graph.ainvoke(value, config)
        except ThreadBusyError as exc:
            print(f"busy {exc}", flush=True)
            return 3
        except Exception as exc:
            print(f"error {type(exc).__name__} {exc}", flush=True)
            return 4
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("db")
    parser.add_argument("effects")
    parser.add_argument("thread")
    parser.add_argument("mode", choices=["start", "resume", "input"])
    parser.add_argument("seconds", type=float)
    parser.add_argument("--think", type=float, default=0.0)
    parser.add_argument("--wait-go", action="store_true")
    parser.add_argument("--gate", default=None)
    sys.exit(asyncio.run(main(parser.parse_args())))
