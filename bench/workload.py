"""agentlog's side of the benchmark workload: a tool-calling agent loop, durable per step.

Shared by bench/steps.py and bench/peers/agentlog_driver.py; the peers' drivers build the
same loop in their own idiom (bench/peers/README.md states the contract). The variants:

* "def-tool" (the main loop): the agent node is a plain `def` that reads
  `len(state.context)` and `state.context[-1]` and returns one assistant message of 200
  characters; two of every three carry one tool call, both as a `ToolCallBlock` in the
  content and in Agentflow's `tools_calls` form (`[{"id", "type": "function", "function":
  {"name", "arguments": "<json>"}}]`). The router after it is a plain `def` reading
  `state.context[-1].tools_calls`. The tool step is a plain `def` node that runs the tool
  for each call of the last message and appends the result.
* "toolnode": the same, with the tool step a `ToolNode` holding the one sync tool.
* "async-scripted": the earlier loop, kept for comparison: an async agent alternating a
  bare tool call and a 100-200 character text, a `ToolNode` with an async tool, routing on
  `execution_meta.step`.

A step is one node run and appends exactly one message, so a run of N steps ends with N + 1
messages (the user's first). The agent never asks for a call that would not fit in N steps,
so no call is left open at the end.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentlog.actors import END, StateGraph  # noqa: E402
from agentlog.actors.tools.node import ToolNode  # noqa: E402
from agentlog.events import SQLiteEventStore  # noqa: E402
from agentlog.projections import (  # noqa: E402
    AgentState,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)

VARIANTS = ("def-tool", "toolnode", "async-scripted")
REALISTIC = ("def-tool", "toolnode")
MESSAGE_CHARS = 200
FILLER = (
    "The agent weighs what it has gathered so far and writes its next thought down in a "
    "sentence long enough to look like real model output, then decides whether to call a "
    "tool. "
) * 2
FIRST_MESSAGE = "Please look a few things up."


def agent_text(context_len: int, last_role: str) -> str:
    """The assistant's text at a context of `context_len` messages: exactly 200 characters."""
    return f"Step {context_len}, after a {last_role} message: {FILLER}"[:MESSAGE_CHARS]


def wants_call(context_len: int, steps: int) -> bool:
    """Two agent messages in three ask for a tool, when the tool's step still fits in N.

    The agent runs at context lengths 1, 3, 5, 6, 8, 10, 11, ... (a cycle of five steps:
    call, tool, call, tool, text), so `(len - 1) % 5` is 0, 2 or 4 at every agent step.
    """
    return (context_len - 1) % 5 != 4 and context_len + 1 <= steps


def openai_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """One tool call in the OpenAI / Agentflow `tools_calls` form."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def record_side_effect(path: str | None, call_id: str) -> None:
    """Append the call id to the side-effects file (flushed and fsynced), when there is one."""
    if path is None:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{call_id}\n")
        f.flush()
        os.fsync(f.fileno())


@dataclass
class Loop:
    """One N-step loop of a variant, stamping each step's start for per-step times."""

    variant: str
    steps: int
    side_effects: str | None = None
    ready: bool = False  # print "ready" on stdout at the first step (crash runs)
    marks: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}: use one of {VARIANTS}")

    def mark(self) -> None:
        """A step starts: stamp it (and announce the run once, for crash runs)."""
        self.marks.append(time.perf_counter())
        if self.ready:
            with self._lock:
                if self.ready:
                    self.ready = False
                    print("ready", flush=True)

    # ---- the realistic variants -------------------------------------------------------

    def agent(self, state: AgentState) -> list[Message]:
        """A scripted model: 200 characters, two messages in three asking for one tool call."""
        self.mark()
        n = len(state.context)
        last = state.context[-1]
        text = agent_text(n, last.role)
        if not wants_call(n, self.steps):
            return [Message(role="assistant", content=[TextBlock(text=text)])]
        call_id, args = f"call_{n}", {"query": f"question {n}"}
        return [
            Message(
                role="assistant",
                content=[TextBlock(text=text), ToolCallBlock(id=call_id, name="lookup", args=args)],
                tools_calls=[openai_call(call_id, "lookup", args)],
            )
        ]

    def route_agent(self, state: AgentState) -> str:
        """To the tool when the last message asks for one, else END after N steps, or agent."""
        if state.context[-1].tools_calls:
            return "tools"
        return END if len(state.context) - 1 >= self.steps else "agent"

    def route_tools(self, state: AgentState) -> str:
        """END after N steps, else back to the agent."""
        return END if len(state.context) - 1 >= self.steps else "agent"

    def lookup(self, query: str, tool_call_id: str) -> str:
        """Look a query up (instantly).

        Args:
            query: What to look up.
        """
        if self.variant == "toolnode":
            self.mark()
        record_side_effect(self.side_effects, tool_call_id)
        return f"result for {query}"

    def tools(self, state: AgentState) -> list[Message]:
        """The tool step as a plain node: run each call of the last message, append results."""
        self.mark()
        out: list[Message] = []
        for call in state.context[-1].tools_calls or []:
            args = json.loads(call["function"]["arguments"])
            output = self.lookup(**args, tool_call_id=call["id"])
            out.append(Message.tool_message([ToolResultBlock(call_id=call["id"], output=output)]))
        return out

    # ---- the earlier async loop -------------------------------------------------------

    async def scripted_agent(self, state: AgentState) -> list[Message]:
        """The earlier scripted agent: a bare tool call after text (or at the start), else
        100-200 characters of text."""
        self.mark()
        k = state.execution_meta.step + 1
        last = state.context[-1] if state.context else None
        if last is None or last.role != "tool":
            call = ToolCallBlock(id=f"call-{k}", name="alookup", args={"query": f"question {k}"})
            return [Message(role="assistant", content=[call])]
        text = f"answer at step {k}: ".ljust(100 + (k * 37) % 101, "z")
        return [Message.text_message(text, role="assistant")]

    async def alookup(self, query: str, tool_call_id: str) -> str:
        """Look a query up (instantly).

        Args:
            query: What to look up.
        """
        self.mark()
        record_side_effect(self.side_effects, tool_call_id)
        return f"result for {query}"

    def route_scripted(self, state: AgentState) -> str:
        """END once the step being routed is the N-th, else by the last message."""
        if state.execution_meta.step + 1 >= self.steps:
            return END
        last = state.context[-1]
        return "tools" if last.role == "assistant" and last.tool_calls() else "agent"

    # ---- the graph --------------------------------------------------------------------

    def graph(self) -> StateGraph[AgentState]:
        """The variant's agent/tools graph."""
        graph: StateGraph[AgentState] = StateGraph()
        if self.variant == "async-scripted":
            graph.add_node("agent", self.scripted_agent)
            graph.add_node("tools", ToolNode([self.alookup]))
            route: Callable[[AgentState], str] = self.route_scripted
            graph.add_conditional_edges(
                "agent", route, {"tools": "tools", "agent": "agent", END: END}
            )
            graph.add_conditional_edges("tools", route, {"agent": "agent", END: END})
        else:
            graph.add_node("agent", self.agent)
            tools: Any = self.tools if self.variant == "def-tool" else ToolNode([self.lookup])
            graph.add_node("tools", tools)
            graph.add_conditional_edges(
                "agent", self.route_agent, {"tools": "tools", "agent": "agent", END: END}
            )
            graph.add_conditional_edges("tools", self.route_tools, {"agent": "agent", END: END})
        graph.set_entry_point("agent")
        return graph

    def per_step(self, end: float) -> list[float]:
        """Seconds of each step: from its start to the next one's (the last: to `end`)."""
        marks = [*self.marks, end]
        return [b - a for a, b in itertools.pairwise(marks)]


def first_input() -> dict[str, Any]:
    """The run's input: one user message."""
    return {"messages": [Message.text_message(FIRST_MESSAGE, role="user")]}


@dataclass
class RunResult:
    """What one timed run of the loop gives back."""

    seconds: float
    steps: int
    messages: int
    tool_results: int
    per_step: list[float]
    commits: int | None = None
    append_calls: int | None = None


class AppendCounter:
    """Counts calls of one store's `append` (each is one durable commit of one batch)."""

    def __init__(self, store: SQLiteEventStore) -> None:
        self.calls = 0
        real = store.append

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await real(*args, **kwargs)

        store.append = counted  # type: ignore[method-assign]


async def run_loop(
    path: str | Path,
    variant: str,
    steps: int,
    thread_id: str,
    *,
    commits: Callable[[], int] | None = None,
) -> RunResult:
    """One `ainvoke` of the N-step loop on a fresh store at `path`, timed without the open.

    `commits`, when given, is read before and after the run (a commit counter's total), and
    the store's `append` calls are counted too: for untimed runs only.
    """
    loop = Loop(variant, steps)
    async with SQLiteEventStore(path) as store:  # opened (and the schema made) before timing
        appends = AppendCounter(store) if commits is not None else None
        compiled = loop.graph().compile(store, recursion_limit=steps + 10)
        before = commits() if commits is not None else 0
        start = time.perf_counter()
        result = await compiled.ainvoke(first_input(), {"thread_id": thread_id}, include_state=True)
        end = time.perf_counter()
        after = commits() if commits is not None else 0
    state: AgentState = result["state"]
    return RunResult(
        seconds=end - start,
        steps=state.execution_meta.step,
        messages=len(state.context),
        tool_results=sum(m.role == "tool" for m in state.context),
        per_step=loop.per_step(end),
        commits=after - before if commits is not None else None,
        append_calls=appends.calls if appends is not None else None,
    )
