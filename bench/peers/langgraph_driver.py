"""Benchmark driver for LangGraph, a peer of agentlog (run with the langgraph venv's python).

    python langgraph_driver.py --workload W --n N --db PATH [--variant def-tool|toolnode]
        [--checkpointer sqlite|none] [--durability sync|async] [--threads T]
        [--side-effects FILE] [--thread-id ID]

Prints ONE JSON line on stdout (crash-run also prints "ready" first); progress goes to stderr.
It does not import agentlog: everything here is plain, idiomatic LangGraph, building the
workload of README.md in this folder:

* state: ``MessagesState`` (``messages: Annotated[list[AnyMessage], add_messages]``);
* an ``agent`` node, a plain ``def``, reading ``len(state["messages"])`` and the last
  message, returning one 200-character ``AIMessage``; two in three carry one tool call, as
  LangChain's chat models return them (``tool_calls`` parsed, and the provider's raw
  ``tool_calls`` in ``additional_kwargs``);
* a router, a plain ``def``, reading ``state["messages"][-1].tool_calls``: to ``tools``
  when there is a call, to END once the thread has N steps (node runs), else to ``agent``;
* the tool step: a plain ``def`` node running the one sync tool for each call and
  appending a ``ToolMessage`` (``--variant def-tool``), or ``langgraph.prebuilt.ToolNode``
  with that tool (``--variant toolnode``); ``recursion_limit = N + 10``;
* ``--workload fanout``: N runs of a ``Send`` map-reduce to 8 branches, each on a fresh
  thread (``langgraph_fanout.py``, imported from this folder);
* persistence (``--checkpointer sqlite``): ``SqliteSaver`` on ``sqlite3.connect(path,
  check_same_thread=False)`` (``AsyncSqliteSaver`` for the asyncio workloads), written
  after every superstep per ``durability="sync"|"async"``; ``--checkpointer none``
  compiles the graph without any checkpointer (nothing is kept; only ``loop`` and
  ``concurrency`` apply).

Workloads ``loop``, ``concurrency``, ``concurrent`` and ``crash-run`` start from a fresh
database (they delete PATH, PATH-wal and PATH-shm); ``load``, ``history`` and ``resume`` open
the existing one.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import sqlite3
import statistics
import sys
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

from fanout_spec import BRANCHES
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph_fanout import run_fanout

_START = time.perf_counter()
_FILLER = (
    "The agent considers the task, weighs the evidence gathered so far and writes down "
    "its next thought in a sentence long enough to look like real model output. "
) * 2


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _START:7.2f}s] {message}", file=sys.stderr, flush=True)


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result), flush=True)


def versions() -> dict[str, str]:
    out = {}
    for pkg in (
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "langchain-core",
    ):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "?"
    return out


def base_result(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "system": "langgraph",
        "version": versions(),
        "python": platform.python_version(),
        "workload": args.workload,
        "variant": args.variant,
        "n": args.n,
        "checkpointer": args.checkpointer,
        "durability": args.durability if args.checkpointer == "sqlite" else None,
    }


def fresh_db(path: str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(path + suffix).unlink(missing_ok=True)


def db_bytes(path: str) -> int:
    return sum(Path(path + s).stat().st_size for s in ("", "-wal") if Path(path + s).exists())


def config_for(thread_id: str, n: int) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": n + 10}


# --------------------------------------------------------------------------- the graph

MESSAGE_CHARS = 200
FILLER = (
    "The agent weighs what it has gathered so far and writes its next thought down in a "
    "sentence long enough to look like real model output, then decides whether to call a "
    "tool. "
) * 2


def agent_text(context_len: int, last_type: str) -> str:
    """The assistant's text at a context of `context_len` messages: exactly 200 characters."""
    return f"Step {context_len}, after a {last_type} message: {FILLER}"[:MESSAGE_CHARS]


def wants_call(context_len: int, steps: int) -> bool:
    """Two agent messages in three ask for a tool, when the tool's step still fits in N."""
    return (context_len - 1) % 5 != 4 and context_len + 1 <= steps


def record_side_effect(path: str | None, call_id: str) -> None:
    if path is None:
        return
    with open(path, "a") as f:
        f.write(f"{call_id}\n")
        f.flush()
        os.fsync(f.fileno())


class Loop:
    """The N-step agent/tools loop; `marks` gets a perf_counter stamp at every step's start."""

    def __init__(
        self,
        variant: str,
        steps: int,
        side_effects: str | None = None,
        ready: bool = False,
    ) -> None:
        self.variant = variant
        self.steps = steps
        self.side_effects = side_effects
        self.ready = ready
        self.marks: list[float] = []
        self.lock = threading.Lock()

    def mark(self) -> None:
        self.marks.append(time.perf_counter())
        if self.ready:
            with self.lock:
                if self.ready:
                    self.ready = False
                    print("ready", flush=True)

    def agent(self, state: MessagesState) -> dict[str, Any]:
        self.mark()
        messages = state["messages"]
        n = len(messages)
        last = messages[-1]
        text = agent_text(n, last.type)
        if not wants_call(n, self.steps):
            return {"messages": [AIMessage(content=text)]}
        call_id, args = f"call_{n}", {"query": f"question {n}"}
        raw = {
            "id": call_id,
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps(args)},
        }
        msg = AIMessage(
            content=text,
            tool_calls=[{"id": call_id, "name": "lookup", "args": args, "type": "tool_call"}],
            additional_kwargs={"tool_calls": [raw]},
        )
        return {"messages": [msg]}

    def route_agent(self, state: MessagesState) -> str:
        if state["messages"][-1].tool_calls:
            return "tools"
        return END if len(state["messages"]) - 1 >= self.steps else "agent"

    def route_tools(self, state: MessagesState) -> str:
        return END if len(state["messages"]) - 1 >= self.steps else "agent"

    def run_tool(self, query: str, tool_call_id: str) -> str:
        record_side_effect(self.side_effects, tool_call_id)
        return f"result for {query}"

    def tools(self, state: MessagesState) -> dict[str, Any]:
        self.mark()
        out = [
            ToolMessage(
                content=self.run_tool(**tc["args"], tool_call_id=tc["id"]),
                tool_call_id=tc["id"],
                name=tc["name"],
            )
            for tc in state["messages"][-1].tool_calls
        ]
        return {"messages": out}

    def tool_node(self) -> ToolNode:
        loop = self

        def lookup(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
            """Look a query up (instantly).

            Args:
                query: What to look up.
            """
            loop.mark()
            return loop.run_tool(query, tool_call_id)

        return ToolNode([lookup])

    def builder(self) -> StateGraph:
        builder = StateGraph(MessagesState)
        builder.add_node("agent", self.agent)
        builder.add_node("tools", self.tools if self.variant == "def-tool" else self.tool_node())
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", self.route_agent, ["tools", "agent", END])
        builder.add_conditional_edges("tools", self.route_tools, ["agent", END])
        return builder


def first_input() -> dict[str, Any]:
    return {"messages": [HumanMessage(content="Please look a few things up.")]}


def open_saver(path: str) -> tuple[sqlite3.Connection, SqliteSaver]:
    conn = sqlite3.connect(path, check_same_thread=False)
    return conn, SqliteSaver(conn)


def steps_of(values: dict[str, Any]) -> int:
    """Node runs so far: every step appends one message after the user's."""
    return len(values.get("messages", [])) - 1


# --------------------------------------------------------------------------- workloads


def w_loop(args: argparse.Namespace) -> dict[str, Any]:
    n = args.n
    fresh_db(args.db)
    loop = Loop(args.variant, n)
    config = config_for(args.thread_id, n)
    conn = None
    if args.checkpointer == "sqlite":
        conn, saver = open_saver(args.db)
        saver.setup()  # idempotent; would otherwise run lazily inside the first checkpoint write
        graph = loop.builder().compile(checkpointer=saver)
        options: dict[str, Any] = {"durability": args.durability}
    else:
        graph = loop.builder().compile()
        options = {}
    log(f"loop: n={n} variant={args.variant} {args.checkpointer} {options}")
    t0 = time.perf_counter()
    final = graph.invoke(first_input(), config, **options)
    t1 = time.perf_counter()
    if conn is not None:
        stored = graph.get_state(config).values  # after invoke returns, async writes are flushed
        conn.close()
        size: int | None = db_bytes(args.db)
    else:
        stored, size = final, None
    steps = steps_of(final)
    messages = stored["messages"]
    durations = [b - a for a, b in itertools.pairwise([*loop.marks, t1])]
    k = max(1, len(durations) // 10)
    first10 = statistics.median(durations[:k])
    last10 = statistics.median(durations[-k:])
    log(f"loop: {steps} steps in {t1 - t0:.3f}s")
    return {
        **base_result(args),
        "steps": steps,
        "messages": len(messages),
        "tool_results": sum(isinstance(m, ToolMessage) for m in messages),
        "seconds": round(t1 - t0, 4),
        "steps_per_s": round(steps / (t1 - t0), 1),
        "first10_ms": round(first10 * 1000, 4),
        "last10_ms": round(last10 * 1000, 4),
        "ratio_last_first": round(last10 / first10, 3) if first10 else None,
        "db_bytes": size,
        "bytes_per_step": round(size / steps, 1) if size is not None else None,
        **({} if conn is not None else {"note": "no checkpointer: nothing is stored"}),
    }


def w_load(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    conn, saver = open_saver(args.db)
    saver.setup()
    graph = Loop(args.variant, args.n).builder().compile(checkpointer=saver)
    t1 = time.perf_counter()
    state = graph.get_state(config_for(args.thread_id, args.n))
    t2 = time.perf_counter()
    messages = len(state.values.get("messages", []))
    conn.close()
    return {
        **base_result(args),
        "load_ms": round((t2 - t1) * 1000, 3),
        "open_ms": round((t1 - t0) * 1000, 3),
        "messages": messages,
        "step": steps_of(state.values),
    }


def w_history(args: argparse.Namespace) -> dict[str, Any]:
    conn, saver = open_saver(args.db)
    saver.setup()
    graph = Loop(args.variant, args.n).builder().compile(checkpointer=saver)
    config = config_for(args.thread_id, args.n)
    t0 = time.perf_counter()
    history = list(graph.get_state_history(config))
    t1 = time.perf_counter()
    # Find the checkpoint written right after node execution number N/2 (untimed).
    half = args.n // 2
    target = next((s for s in history if steps_of(s.values) == half), None)
    result: dict[str, Any] = {
        **base_result(args),
        "history_ms": round((t1 - t0) * 1000, 3),
        "states": len(history),
    }
    if target is not None:
        cid = target.config["configurable"]["checkpoint_id"]
        at = {"configurable": {"thread_id": args.thread_id, "checkpoint_id": cid}}
        t2 = time.perf_counter()
        snap = graph.get_state(at)
        t3 = time.perf_counter()
        result["state_at_half_ms"] = round((t3 - t2) * 1000, 3)
        result["half_step"] = steps_of(snap.values)
        result["half_messages"] = len(snap.values.get("messages", []))
    else:
        result["state_at_half_ms"] = None
    conn.close()
    return result


def w_concurrency(args: argparse.Namespace) -> dict[str, Any]:
    n = args.n
    threads = args.threads
    fresh_db(args.db)

    async def gather(graph: Any, options: dict[str, Any]) -> tuple[int, float]:
        configs = [config_for(f"t{i}", n) for i in range(threads)]
        t0 = time.perf_counter()
        finals = await asyncio.gather(
            *(graph.ainvoke(first_input(), c, **options) for c in configs)
        )
        t1 = time.perf_counter()
        return sum(steps_of(f) for f in finals), t1 - t0

    async def run() -> tuple[int, float]:
        if args.checkpointer == "none":
            return await gather(Loop(args.variant, n).builder().compile(), {})
        async with AsyncSqliteSaver.from_conn_string(args.db) as saver:
            await saver.setup()
            graph = Loop(args.variant, n).builder().compile(checkpointer=saver)
            return await gather(graph, {"durability": args.durability})

    log(f"concurrency: threads={threads} n={n} {args.checkpointer} {args.durability}")
    completed, seconds = asyncio.run(run())
    return {
        **base_result(args),
        "threads": threads,
        "completed_steps": completed,
        "seconds": round(seconds, 4),
        "steps_per_s": round(completed / seconds, 1),
        "db_bytes": db_bytes(args.db) if args.checkpointer == "sqlite" else None,
    }


def w_crash_run(args: argparse.Namespace) -> dict[str, Any]:
    fresh_db(args.db)
    conn, saver = open_saver(args.db)
    saver.setup()
    loop = Loop(args.variant, args.n, side_effects=args.side_effects, ready=True)
    graph = loop.builder().compile(checkpointer=saver)
    config = config_for(args.thread_id, args.n)
    log(f"crash-run: n={args.n} thread={args.thread_id}")
    final = graph.invoke(first_input(), config, durability=args.durability)
    conn.close()
    # Only reached if nobody killed us.
    return {**base_result(args), "final_step": steps_of(final), "completed": True}


def w_resume(args: argparse.Namespace) -> dict[str, Any]:
    conn, saver = open_saver(args.db)
    saver.setup()
    loop = Loop(args.variant, args.n, side_effects=args.side_effects)
    graph = loop.builder().compile(checkpointer=saver)
    config = config_for(args.thread_id, args.n)
    before = graph.get_state(config)
    step_before = steps_of(before.values) if before.values else None
    log(f"resume: state at step {step_before}, next={before.next}")
    t0 = time.perf_counter()
    if not before.values:
        # Killed before the first checkpoint: nothing to resume, start over.
        graph.invoke(first_input(), config, durability=args.durability)
    else:
        # The idiomatic LangGraph resume: input None continues from the last checkpoint.
        # Not gated on `before.next`: if the killed run had saved a finished task's writes
        # but not the next checkpoint, get_state shows next=() although the run is unfinished
        # (and invoke(None) on a finished thread runs nothing anyway).
        graph.invoke(None, config, durability=args.durability)
    t1 = time.perf_counter()
    after = graph.get_state(config)
    conn.close()
    final_step = steps_of(after.values) if after.values else 0
    return {
        **base_result(args),
        "resumed_from_step": step_before,
        "final_step": final_step,
        "messages": len(after.values.get("messages", [])),
        "completed": final_step >= args.n and not after.next,
        "resume_ms": round((t1 - t0) * 1000, 3),
    }


def slow_graph(saver: SqliteSaver) -> Any:
    """One node that sleeps 0.3 s, then replies to the last message."""

    def slow(state: MessagesState) -> dict[str, Any]:
        who = state["messages"][-1].content
        time.sleep(0.3)
        return {"messages": [AIMessage(content=f"reply to: {who}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("slow", slow)
    builder.add_edge(START, "slow")
    builder.add_edge("slow", END)
    return builder.compile(checkpointer=saver)


def concurrent_once(path: str, thread_id: str, durability: str, shared: bool) -> dict[str, Any]:
    """Two invocations of one thread_id at once, from two Python threads.

    `shared`: both go through one SqliteSaver (one connection); otherwise each has its own
    connection and saver on the same file, standing for two processes.
    """
    fresh_db(path)
    conns = []
    graphs = []
    for _ in range(1 if shared else 2):
        conn, saver = open_saver(path)
        saver.setup()
        conns.append(conn)
        graphs.append(slow_graph(saver))
    if shared:
        graphs.append(graphs[0])
    config = {"configurable": {"thread_id": thread_id}}

    # Seed the conversation so both runs start from the same existing checkpoint.
    graphs[0].invoke({"messages": [HumanMessage(content="seed")]}, config)
    seeded = len(graphs[0].get_state(config).values["messages"])

    barrier = threading.Barrier(2)
    returned: dict[str, Any] = {}
    errors: dict[str, str] = {}

    def run(name: str, graph: Any) -> None:
        barrier.wait()
        try:
            out = graph.invoke(
                {"messages": [HumanMessage(content=f"from {name}")]},
                config,
                durability=durability,
            )
            returned[name] = [m.content for m in out["messages"]]
        except Exception as exc:  # report whatever happened
            errors[name] = f"{type(exc).__name__}: {exc}"

    workers = [
        threading.Thread(target=run, args=(name, g))
        for name, g in zip(("A", "B"), graphs, strict=True)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()

    final = graphs[0].get_state(config)
    contents = [m.content for m in final.values["messages"]]
    history = list(graphs[0].get_state_history(config))
    children: dict[str, int] = {}
    for snap in history:
        if snap.parent_config is not None:
            pid = snap.parent_config["configurable"]["checkpoint_id"]
            children[pid] = children.get(pid, 0) + 1
    forks = sum(1 for c in children.values() if c > 1)
    for conn in conns:
        conn.close()

    expected = seeded + 4  # union: each run adds its human message and the reply
    wanted = ("from A", "reply to: from A", "from B", "reply to: from B")
    lost = [
        c
        for name, c in zip("AABB", wanted, strict=True)
        if c not in contents and name not in errors
    ]
    if len(errors) == 2:
        outcome = "both_failed"
    elif errors:
        outcome = "one_failed_loudly"
    elif lost:
        outcome = "both_succeeded_lost_update"
    else:
        outcome = "both_succeeded_merged"
    detail = (
        f"{'one shared SqliteSaver' if shared else 'two connections/savers on one file'}; "
        f"the seeded thread had {seeded} messages, each run appends 2, so the union is "
        f"{expected}; the latest checkpoint has {len(contents)}: {contents}; missing from "
        f"it: {lost}; {len(history)} checkpoints in the history, {forks} of them with two "
        f"children (a fork: both runs wrote a child of the same parent, and the thread's "
        f"head is the one with the later checkpoint_id); what each invoke returned: {returned}"
    )
    return {
        "outcome": outcome,
        "error": "; ".join(f"{k}: {v}" for k, v in errors.items()) or None,
        "messages_after": len(contents),
        "messages_expected_union": expected,
        "lost_messages": lost,
        "forks": forks,
        "detail": detail,
    }


def w_concurrent(args: argparse.Namespace) -> dict[str, Any]:
    """Headline: two savers on one file (like two processes); also one shared saver."""
    separate = concurrent_once(args.db, args.thread_id, args.durability, shared=False)
    shared = concurrent_once(args.db, args.thread_id, args.durability, shared=True)
    return {**base_result(args), **separate, "same_process": shared}


def w_fanout(args: argparse.Namespace) -> dict[str, Any]:
    """N runs of the Send fan-out graph (langgraph_fanout.py), each on a fresh thread."""
    fresh_db(args.db)
    log(f"fanout: runs={args.n} branches={args.branches} {args.checkpointer} {args.durability}")
    figures = run_fanout(args.db, args.n, args.branches, args.checkpointer, args.durability)
    return {**base_result(args), "variant": "send", **figures}


WORKLOADS = {
    "loop": w_loop,
    "fanout": w_fanout,
    "load": w_load,
    "history": w_history,
    "concurrency": w_concurrency,
    "crash-run": w_crash_run,
    "resume": w_resume,
    "concurrent": w_concurrent,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--db", required=True)
    parser.add_argument("--durability", choices=["sync", "async"], default="sync")
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--side-effects", default=None)
    parser.add_argument("--thread-id", default="bench")
    parser.add_argument("--variant", choices=["def-tool", "toolnode"], default="def-tool")
    parser.add_argument("--checkpointer", choices=["sqlite", "none"], default="sqlite")
    parser.add_argument("--branches", type=int, default=BRANCHES, help="fanout: Sends per run")
    args = parser.parse_args()
    if args.n is None:
        args.n = 10 if args.workload == "concurrency" else 100
    if args.n < 1:
        parser.error("--n must be >= 1")
    if args.checkpointer == "none" and args.workload not in ("loop", "concurrency", "fanout"):
        # Nothing is kept without a checkpointer: no state to load, resume or list.
        emit({**base_result(args), "unsupported": "no checkpointer: nothing is persisted"})
        return
    emit(WORKLOADS[args.workload](args))


if __name__ == "__main__":
    main()
