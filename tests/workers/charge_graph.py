"""A small payment agent for the early-end and edit tests, a transcript check, and a worker.

usage: python -m tests.workers.charge_graph DB JOURNAL THREAD start|resume [SECONDS|RELEASE]

The graph: an "agent" node (scripted, no model) asks once for `charge(amount=...)`, and
answers in text once the call has a result; a "tools" ToolNode runs it. The worker's
`charge` is sync and, between writing "start <amount>" and "finish <amount>" lines to
JOURNAL (fsync'ed, so a test can count real executions), sleeps SECONDS (default 2) or,
given a path, waits until the file RELEASE exists (the test says when, whatever the load).
`start` begins the thread with a user message (`stream` does the same through the blocking
`stream()`); `resume` calls `invoke(None)`. The worker
prints "ready" once the store is open, and "result <status>" when `invoke` returns.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentlog.actors import END, CompiledGraph, StateGraph, ToolNode
from agentlog.actors.testing import WaitTimeoutError, until_blocking
from agentlog.events import EventStore, SQLiteEventStore
from agentlog.projections import AgentState, Message, TextBlock, ToolCallBlock, ToolResultBlock
from tests.workers import append_line

CALL_ID = "call-1"
"""The id of the one tool call the scripted agent makes."""


def ask_message(amount: int, message_id: str = "a-1") -> Message:
    """The assistant turn asking for `charge(amount)`, as the scripted agent writes it."""
    return Message(
        message_id=message_id,
        role="assistant",
        content=[
            TextBlock(text="charging"),
            ToolCallBlock(id=CALL_ID, name="charge", args={"amount": amount}),
        ],
    )


def charge_graph(
    store: EventStore,
    tools: Sequence[Callable[..., Any]],
    *,
    amount: int = 10,
    interrupt_before: Sequence[str] = (),
) -> CompiledGraph[AgentState]:
    """agent -> tools -> agent -> END, the agent asking once for `charge(amount)`."""

    def agent(state: AgentState) -> dict[str, Any]:
        answered = any(isinstance(b, ToolResultBlock) for m in state.context for b in m.content)
        if answered:
            return {"messages": [Message.text_message("done", role="assistant")]}
        return {"messages": [ask_message(amount)]}

    def route(state: AgentState) -> str:
        last = state.context[-1]
        return "tools" if last.role == "assistant" and last.tool_calls() else END

    graph: StateGraph[AgentState] = StateGraph(name="charge")
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(list(tools)))
    graph.set_entry_point("agent")
    graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph.compile(store, interrupt_before=interrupt_before)


def check_transcript(messages: Sequence[Message]) -> None:
    """Fail unless every tool call has exactly one result, right after its assistant turn.

    That is what every model provider demands: the results of an assistant turn's calls
    come next, before any other message, and no result answers an unknown call.
    """
    answered: set[str] = set()
    for index, message in enumerate(messages):
        calls = [c.id for c in message.tool_calls()] if message.role == "assistant" else []
        results: list[str] = []
        for later in messages[index + 1 :]:
            if later.role != "tool":
                break
            results += [b.call_id for b in later.content if isinstance(b, ToolResultBlock)]
        if calls:
            assert sorted(results) == sorted(calls), (
                f"message {index} ({message.message_id!r}) asks for {calls} but the tool "
                f"messages right after it answer {results}"
            )
            answered.update(calls)
        if message.role == "tool":
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    assert block.call_id in answered, (
                        f"message {index} answers {block.call_id!r}, which no assistant turn "
                        "right before it asked for"
                    )


def journal_line(path: str, line: str) -> None:
    """Append one durable line to the side-effect journal."""
    append_line(path, line)


def wait(hold: str) -> None:
    """Sleep `hold` seconds, or, when it is a path, until that file exists (a test's go)."""
    try:
        seconds = float(hold)
    except ValueError:
        with contextlib.suppress(WaitTimeoutError):  # the guard: a test that died
            until_blocking(lambda: os.path.exists(hold), timeout=600, what="the test's go")
        return
    time.sleep(seconds)


def main(argv: list[str]) -> None:
    if len(argv) not in (4, 5) or argv[3] not in ("start", "stream", "resume"):
        raise SystemExit(__doc__)
    db, journal, thread, mode = argv[:4]
    hold = argv[4] if len(argv) == 5 else "2"

    def charge(amount: int) -> str:
        """Charge the customer's card.

        Args:
            amount: how much, in cents.
        """
        journal_line(journal, f"start {amount}")
        wait(hold)
        journal_line(journal, f"finish {amount}")
        return f"charged {amount}"

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a stuck test asks for stacks
    # Ctrl-C reaches a program a shell runs in the foreground; this one may inherit SIGINT
    # ignored from the process that started it (a test runner's worker), and the test
    # presses Ctrl-C for real.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    # The store opens on first use, on the engine's private loop behind the blocking
    # `invoke`, exactly as in a script that never touches asyncio.
    app = charge_graph(SQLiteEventStore(db), [charge])
    print("ready", flush=True)
    config = {"thread_id": thread}
    pay = {"messages": [Message.text_message("pay", message_id="u-1")]}
    if mode == "stream":  # the blocking stream, read to its end
        for _ in app.stream(pay, config):
            pass
        result = app.invoke(None, config)
    elif mode == "start":
        result = app.invoke(pay, config)
    else:
        result = app.invoke(None, config)
    print(f"result {result['status']}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
