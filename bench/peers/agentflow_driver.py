"""Benchmark driver for 10xScale Agentflow (`10xscale-agentflow`, import name `agentflow`).

Run it with the Agentflow venv's python (Agentflow needs Python >= 3.12):

    python agentflow_driver.py --workload W --n N --db PATH [--threads T]
                               [--side-effects FILE] [--thread-id ID]

Prints exactly one JSON line on stdout; progress goes to stderr.

What is measured (Agentflow 0.10.x):

* Graph: `StateGraph(AgentState)` building the workload of README.md in this folder: an
  `agent` node, a plain `def`, reading `len(state.context)` and `state.context[-1]` and
  returning one 200-character assistant `Message`; two in three carry one tool call, both
  as a `ToolCallBlock` in the content and in Agentflow's OpenAI-style `tools_calls`. The
  router after it, a plain `def`, reads `state.context[-1].tools_calls`: to `tools` when
  there is a call, END once the thread has N steps (node runs), else `agent`. The tool step
  is a plain `def` node running the one sync tool `lookup` for each call and appending its
  result (`--variant def-tool`), or Agentflow's own `ToolNode([lookup])` (`toolnode`).
* Checkpointer: `SqliteCheckpointer` (aiosqlite, WAL, `synchronous=NORMAL`), Agentflow's
  single-file SQLite backend. The graph's default `durable_checkpoint_every_step=True`
  writes the state (one upserted row per thread), the step's new messages (an append-only
  per-thread message log) and the state cache (a second upserted row) after every node.
* Agentflow keeps only the latest state per thread, so there is no state history to list
  and no time travel; `history` reports that and times what exists (the message log).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agentflow import __version__ as AF_VERSION
from agentflow.core.graph import StateGraph, ToolNode
from agentflow.core.state import (
    AgentState,
    ExecutionStatus,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from agentflow.storage.checkpointer import SqliteCheckpointer
from agentflow.utils.constants import END

SYSTEM = "agentflow"
_START = time.perf_counter()

# Set once per process by main(); the routing functions and nodes read them.
TARGET_STEPS = 10
VARIANT = "def-tool"
SIDE_EFFECTS: str | None = None
SLOW_NODE_S = 0.0
NODE_ENTRIES: list[float] = []
MESSAGE_CHARS = 200
FILLER = (
    "The agent weighs what it has gathered so far and writes its next thought down in a "
    "sentence long enough to look like real model output, then decides whether to call a "
    "tool. "
) * 2


def log(message: str) -> None:
    """A progress line on stderr, stamped with the seconds since start."""
    print(f"[{time.perf_counter() - _START:7.2f}s] {message}", file=sys.stderr, flush=True)


def emit(result: dict[str, Any]) -> None:
    """The one JSON line on stdout."""
    print(json.dumps(result), flush=True)


def base_result(n: int) -> dict[str, Any]:
    return {
        "system": SYSTEM,
        "version": AF_VERSION,
        "python": platform.python_version(),
        "variant": VARIANT,
        "n": n,
    }


def db_bytes(path: str) -> int:
    """Size of the database and any WAL / shared-memory side files."""
    return sum(
        os.path.getsize(p) for p in (path, path + "-wal", path + "-shm") if os.path.exists(p)
    )


def remove_db(path: str) -> None:
    for p in (path, path + "-wal", path + "-shm", path + "-journal"):
        if os.path.exists(p):
            os.remove(p)


# --------------------------------------------------------------------------------------
# The graph
# --------------------------------------------------------------------------------------


def steps_done(state: AgentState) -> int:
    """Node executions so far: every node appends exactly one message after the user's."""
    return len(state.context) - 1


def agent_text(context_len: int, last_role: str) -> str:
    """The assistant's text at a context of `context_len` messages: exactly 200 characters."""
    return f"Step {context_len}, after a {last_role} message: {FILLER}"[:MESSAGE_CHARS]


def wants_call(context_len: int, steps: int) -> bool:
    """Two agent messages in three ask for a tool, when the tool's step still fits in N."""
    return (context_len - 1) % 5 != 4 and context_len + 1 <= steps


def run_tool(query: str, tool_call_id: str) -> str:
    """The tool's work: deterministic, no I/O unless side effects are recorded."""
    if SIDE_EFFECTS is not None:
        with open(SIDE_EFFECTS, "a", encoding="utf-8") as f:
            f.write(f"{tool_call_id}\n")
            f.flush()
            os.fsync(f.fileno())
    return f"result for {query}"


def lookup(query: str, tool_call_id: str) -> str:
    """Look a query up (instantly).

    Args:
        query: What to look up.
    """
    NODE_ENTRIES.append(time.perf_counter())
    return run_tool(query, tool_call_id)


def agent(state: AgentState) -> Message:
    """Scripted assistant: 200 characters, two messages in three with one tool call."""
    NODE_ENTRIES.append(time.perf_counter())
    if SLOW_NODE_S:
        time.sleep(SLOW_NODE_S)
    n = len(state.context)
    last = state.context[-1]
    text = agent_text(n, last.role)
    if not wants_call(n, TARGET_STEPS):
        return Message(role="assistant", content=[TextBlock(text=text)])
    call_id, args = f"call_{n}", {"query": f"question {n}"}
    return Message(
        role="assistant",
        content=[TextBlock(text=text), ToolCallBlock(id=call_id, name="lookup", args=args)],
        tools_calls=[
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps(args)},
            }
        ],
    )


def tools(state: AgentState) -> list[Message]:
    """The tool step as a plain node: run each call of the last message, append results."""
    NODE_ENTRIES.append(time.perf_counter())
    out = []
    for call in state.context[-1].tools_calls or []:
        args = json.loads(call["function"]["arguments"])
        output = run_tool(**args, tool_call_id=call["id"])
        out.append(Message.tool_message([ToolResultBlock(call_id=call["id"], output=output)]))
    return out


def finished(state: AgentState) -> bool:
    """A run that reached END is stored with status COMPLETED (current_node stays put)."""
    return state.execution_meta.status == ExecutionStatus.COMPLETED


def route_after_agent(state: AgentState) -> str:
    if state.context[-1].tools_calls:
        return "tools"
    return END if steps_done(state) >= TARGET_STEPS else "agent"


def route_after_tools(state: AgentState) -> str:
    return END if steps_done(state) >= TARGET_STEPS else "agent"


def build(checkpointer: SqliteCheckpointer):
    graph = StateGraph(AgentState())
    graph.add_node("agent", agent)
    graph.add_node("tools", tools if VARIANT == "def-tool" else ToolNode([lookup]))
    graph.add_conditional_edges(
        "agent", route_after_agent, {"tools": "tools", "agent": "agent", END: END}
    )
    graph.add_conditional_edges("tools", route_after_tools, {"agent": "agent", END: END})
    graph.set_entry_point("agent")
    return graph.compile(checkpointer=checkpointer)


def run_config(thread_id: str, n: int) -> dict[str, Any]:
    # recursion_limit counts node executions (Agentflow's default is 25).
    return {"thread_id": thread_id, "recursion_limit": n + 10}


def first_input() -> dict[str, Any]:
    return {"messages": [Message.text_message("Please look a few things up.", role="user")]}


async def open_graph(db: str):
    checkpointer = SqliteCheckpointer(db)
    await checkpointer.asetup()
    return checkpointer, build(checkpointer)


# --------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------


async def w_loop(args) -> dict[str, Any]:
    remove_db(args.db)
    checkpointer, app = await open_graph(args.db)
    thread = args.thread_id or "bench-loop"
    NODE_ENTRIES.clear()
    t0 = time.perf_counter()
    await app.ainvoke(first_input(), config=run_config(thread, args.n))
    t1 = time.perf_counter()
    state = await checkpointer.aget_state({"thread_id": thread})
    await app.aclose()
    marks = [*NODE_ENTRIES, t1]
    per_step = [b - a for a, b in itertools.pairwise(marks)]
    steps = steps_done(state) if state else len(per_step)
    k = max(1, steps // 10)
    first10 = statistics.median(per_step[:k]) * 1000
    last10 = statistics.median(per_step[-k:]) * 1000
    size = db_bytes(args.db)
    return {
        **base_result(args.n),
        "steps": steps,
        "final_step": steps_done(state) if state else None,
        "af_execution_step": state.execution_meta.step if state else None,
        "messages": len(state.context) if state else None,
        "tool_results": sum(m.role == "tool" for m in state.context) if state else None,
        "seconds": round(t1 - t0, 4),
        "steps_per_s": round(steps / (t1 - t0), 1),
        "first10_ms": round(first10, 4),
        "last10_ms": round(last10, 4),
        "ratio_last_first": round(last10 / first10, 3) if first10 else None,
        "db_bytes": size,
        "bytes_per_step": round(size / steps, 1) if steps else None,
        "checkpointer": type(checkpointer).__name__,
        "durability": "state+new messages+state cache written after every node "
        "(durable_checkpoint_every_step=True); WAL, synchronous=NORMAL",
    }


async def w_load(args) -> dict[str, Any]:
    thread = args.thread_id or "bench-loop"
    t0 = time.perf_counter()
    checkpointer = SqliteCheckpointer(args.db)
    await checkpointer.asetup()
    # Rebuild into AgentState (what StateGraph.compile() would bind).
    checkpointer.bind_state_type(AgentState)
    opened = time.perf_counter()
    state = await checkpointer.aget_state({"thread_id": thread})
    t1 = time.perf_counter()
    await checkpointer.arelease()
    return {
        **base_result(args.n),
        "load_ms": round((t1 - opened) * 1000, 3),
        "open_ms": round((opened - t0) * 1000, 3),
        "messages": len(state.context) if state else None,
        "step": state.execution_meta.step if state else None,
        "checkpointer": type(checkpointer).__name__,
    }


async def w_history(args) -> dict[str, Any]:
    thread = args.thread_id or "bench-loop"
    checkpointer = SqliteCheckpointer(args.db)
    await checkpointer.asetup()
    checkpointer.bind_state_type(AgentState)
    cfg = {"thread_id": thread}
    t0 = time.perf_counter()
    log_msgs = await checkpointer.alist_messages(cfg)
    t1 = time.perf_counter()
    half = len(log_msgs) // 2
    t2 = time.perf_counter()
    prefix = await checkpointer.alist_messages(cfg, offset=0, limit=half or None)
    t3 = time.perf_counter()
    await checkpointer.arelease()
    return {
        **base_result(args.n),
        "history_ms": None,
        "state_at_half_ms": None,
        "note": "not supported: SqliteCheckpointer keeps one upserted state row per thread "
        "(af_states, plus af_state_cache); no per-step state history, no time travel. What "
        "exists is an append-only per-thread message log (alist_messages), timed below; it "
        "holds messages only, not past states (no execution_meta / routing position).",
        "message_log_ms": round((t1 - t0) * 1000, 3),
        "message_log_len": len(log_msgs),
        "message_log_prefix_half_ms": round((t3 - t2) * 1000, 3),
        "message_log_prefix_half_len": len(prefix),
        "checkpointer": type(checkpointer).__name__,
    }


async def w_concurrency(args) -> dict[str, Any]:
    remove_db(args.db)
    threads = args.threads or 200
    checkpointer, app = await open_graph(args.db)
    errors: list[str] = []

    async def one(i: int) -> None:
        try:
            await app.ainvoke(first_input(), config=run_config(f"conc-{i}", args.n))
        except Exception as e:  # report, don't hide
            errors.append(f"{type(e).__name__}: {e}")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(threads)))
    t1 = time.perf_counter()
    completed = 0
    for i in range(threads):
        st = await checkpointer.aget_state({"thread_id": f"conc-{i}"})
        if st is not None:
            completed += steps_done(st)
    await app.aclose()
    return {
        **base_result(args.n),
        "threads": threads,
        "completed_steps": completed,
        "expected_steps": threads * args.n,
        "total_s": round(t1 - t0, 4),
        "steps_per_s": round(completed / (t1 - t0), 1),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "db_bytes": db_bytes(args.db),
        "checkpointer": type(checkpointer).__name__,
    }


async def w_crash_run(args) -> dict[str, Any] | None:
    global SIDE_EFFECTS
    SIDE_EFFECTS = args.side_effects
    thread = args.thread_id or "bench-crash"
    checkpointer, app = await open_graph(args.db)
    print("ready", flush=True)
    await app.ainvoke(first_input(), config=run_config(thread, args.n))
    state = await checkpointer.aget_state({"thread_id": thread})
    await app.aclose()
    # Only reached if not killed.
    return {
        **base_result(args.n),
        "final_step": steps_done(state) if state else None,
        "messages": len(state.context) if state else None,
        "completed": True,
        "note": "crash-run finished without being killed",
    }


async def w_resume(args) -> dict[str, Any]:
    """Resume the idiomatic Agentflow way: invoke again on the same thread_id.

    `load_or_create_state` picks the persisted state up (state cache first, then the
    durable row) and `_execute_graph` continues from `execution_meta.current_node` at
    `execution_meta.step`. No new input messages are passed.
    """
    global SIDE_EFFECTS
    SIDE_EFFECTS = args.side_effects
    thread = args.thread_id or "bench-crash"
    checkpointer, app = await open_graph(args.db)
    cfg = {"thread_id": thread}
    before = await checkpointer.aget_state(cfg)
    resumed_from = None
    if before is None:
        note = "no persisted state for thread; started from scratch"
        await app.ainvoke(first_input(), config=run_config(thread, args.n))
    elif finished(before):
        # Invoking again would run more nodes on a finished thread.
        note = "thread had already finished; not re-invoked"
    else:
        resumed_from = {
            "step": before.execution_meta.step,
            "node": before.execution_meta.current_node,
            "messages": len(before.context),
        }
        note = "resumed with ainvoke({}, same thread_id)"
        t0 = time.perf_counter()
        await app.ainvoke({}, config=run_config(thread, args.n))
        log(f"resume took {time.perf_counter() - t0:.3f}s")
    after = await checkpointer.aget_state(cfg)
    log_len = len(await checkpointer.alist_messages(cfg))
    await app.aclose()
    done = steps_done(after) if after else 0
    return {
        **base_result(args.n),
        "final_step": done,
        "af_execution_step": after.execution_meta.step if after else None,
        "messages": len(after.context) if after else None,
        "message_log_len": log_len,
        "completed": bool(after and finished(after) and done >= args.n),
        "status": str(after.execution_meta.status) if after else None,
        "resumed_from": resumed_from,
        "tool_ledger": "SqliteCheckpointer does not implement aget/aput_tool_result, so "
        "Agentflow's tool idempotency ledger is inactive with SQLite",
        "note": note,
    }


async def w_concurrent(args) -> dict[str, Any]:
    """Two invocations of the same thread at the same time, in one process, one checkpointer."""
    global SLOW_NODE_S
    SLOW_NODE_S = 0.3
    remove_db(args.db)
    thread = args.thread_id or "bench-concurrent"
    checkpointer, app = await open_graph(args.db)
    cfg = {"thread_id": thread}
    # Seed the thread with one completed run so both invocations continue a real thread.
    await app.ainvoke(first_input(), config=run_config(thread, args.n))
    seeded = await checkpointer.aget_state(cfg)
    seeded_msgs = len(seeded.context)

    async def turn(label: str):
        msg = Message.text_message(f"concurrent user message {label}", role="user")
        return await app.ainvoke({"messages": [msg]}, config=run_config(thread, args.n * 3))

    results = await asyncio.gather(turn("A"), turn("B"), return_exceptions=True)
    errs = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
    after = await checkpointer.aget_state(cfg)
    msg_log = await checkpointer.alist_messages(cfg)
    await app.aclose()
    texts = [m.text() for m in after.context]
    has_a = any("concurrent user message A" in t for t in texts)
    has_b = any("concurrent user message B" in t for t in texts)
    log_a = any("concurrent user message A" in m.text() for m in msg_log)
    log_b = any("concurrent user message B" in m.text() for m in msg_log)
    if errs:
        outcome = "error" if len(errs) == 2 else "one_failed"
    elif has_a and has_b:
        outcome = "both_succeeded_merged"
    else:
        outcome = "both_succeeded_lost_update"
    return {
        **base_result(args.n),
        "outcome": outcome,
        "error": errs[0] if errs else None,
        "messages_before": seeded_msgs,
        "messages_after": len(after.context),
        "detail": (
            f"both ainvoke calls ran (no lock/conflict check on thread_id); final state "
            f"contains user msg A={has_a}, B={has_b}; append-only message log has "
            f"{len(msg_log)} msgs incl. A={log_a}, B={log_b}. Final state is whichever "
            "run wrote last (af_states is an upsert)."
        ),
        "checkpointer": type(checkpointer).__name__,
    }


WORKLOADS = {
    "loop": w_loop,
    "load": w_load,
    "history": w_history,
    "concurrency": w_concurrency,
    "crash-run": w_crash_run,
    "resume": w_resume,
    "concurrent": w_concurrent,
}


def main() -> None:
    global TARGET_STEPS, VARIANT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--db", required=True)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--side-effects", default=None)
    parser.add_argument("--thread-id", default=None)
    parser.add_argument("--variant", choices=["def-tool", "toolnode"], default="def-tool")
    args = parser.parse_args()
    VARIANT = args.variant
    if args.workload == "concurrency" and "--n" not in sys.argv:
        args.n = 10
    TARGET_STEPS = args.n
    Path(args.db).parent.mkdir(parents=True, exist_ok=True)
    # Agentflow logs warnings about anonymous users etc.; keep stdout clean, stderr quiet.
    logging.basicConfig(stream=sys.stderr, level=logging.ERROR)
    log(f"agentflow {AF_VERSION}: workload={args.workload} n={args.n} db={args.db}")
    result = asyncio.run(WORKLOADS[args.workload](args))
    if result is not None:
        emit(result)


if __name__ == "__main__":
    main()
