"""An application for `agentlog runtime --app tests.workers.runtime_cli_app:build`.

Graphs: "ticker" (node "work", then node "report") started by the timer entry point "tick"
every RUNTIME_CLI_INTERVAL seconds (default 0.2); "support" (one node) with the api entry
point "chat". "work" sleeps RUNTIME_CLI_SLEEP seconds (default 0.05), so a stop finds runs
in flight. `runtime` is a runtime built at import on the file RUNTIME_CLI_DB (when set);
the other names are what `--app` must refuse.
"""

from __future__ import annotations

import asyncio
import os

from agentlog.actors import END, StateGraph
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import EventStore, SQLiteEventStore
from agentlog.projections import AgentState, Message


def build(store: EventStore) -> AgentRuntime:
    """The runtime on `store`: the timer "tick" starts "ticker" runs, "chat" is an api one."""
    sleep = float(os.environ.get("RUNTIME_CLI_SLEEP", "0.05"))

    async def work(state: AgentState) -> list[Message]:
        await asyncio.sleep(sleep)
        return [Message.text_message("worked", role="assistant")]

    def report(state: AgentState) -> list[Message]:
        return [Message.text_message("reported", role="assistant")]

    ticker: StateGraph[AgentState] = StateGraph(name="ticker")
    ticker.add_node("work", work)
    ticker.add_node("report", report)
    ticker.set_entry_point("work")
    ticker.add_edge("work", "report")
    ticker.add_edge("report", END)

    def answer(state: AgentState) -> list[Message]:
        return [Message.text_message("hello", role="assistant")]

    support: StateGraph[AgentState] = StateGraph(name="support")
    support.add_node("answer", answer)
    support.set_entry_point("answer")
    support.add_edge("answer", END)

    runtime = AgentRuntime(store)
    runtime.add_graph("ticker", ticker.compile(store))
    runtime.add_graph("support", support.compile(store))
    interval = float(os.environ.get("RUNTIME_CLI_INTERVAL", "0.2"))
    runtime.register_entry_point(
        EntryPoint(id="tick", graph_id="ticker", trigger="timer", interval_s=interval)
    )
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    return runtime


async def abuild(store: EventStore) -> AgentRuntime:
    """`build`, as an async function."""
    await asyncio.sleep(0)
    return build(store)


runtime = (
    build(SQLiteEventStore(os.environ["RUNTIME_CLI_DB"]))
    if "RUNTIME_CLI_DB" in os.environ
    else None
)

not_a_runtime = 42


def two_arguments(store: EventStore, other: str) -> AgentRuntime:
    raise AssertionError("never called: it does not take the store alone")


def returns_text(store: EventStore) -> str:
    return "not a runtime"


def on_another_store(store: EventStore) -> AgentRuntime:
    """A runtime on a store of its own, not the one it was given."""
    return build(SQLiteEventStore(os.environ["RUNTIME_CLI_OTHER"]))


def broken(store: EventStore) -> AgentRuntime:
    raise RuntimeError("the configuration is missing")


HOSTILE = "evil\x1b[31m\u202e\nforged"
"""A graph id and an entry point id that would drive a terminal, were they printed raw."""


def hostile(store: EventStore) -> AgentRuntime:
    """A runtime whose graph and entry point ids hold control and bidi characters."""

    def answer(state: AgentState) -> list[Message]:
        return [Message.text_message("hello", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph(name="plain")
    graph.add_node("answer", answer)
    graph.set_entry_point("answer")
    graph.add_edge("answer", END)
    runtime = AgentRuntime(store)
    runtime.add_graph(HOSTILE, graph.compile(store))
    runtime.register_entry_point(EntryPoint(id=f"entry {HOSTILE}", graph_id=HOSTILE))
    runtime.register_entry_point(
        EntryPoint(id=f"timer {HOSTILE}", graph_id=HOSTILE, trigger="timer", interval_s=0.2)
    )
    return runtime
