"""Builders shared by the tests."""

from __future__ import annotations

import itertools
import json
import os
import select
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from agentlog.actors import END, StateGraph
from agentlog.events import GENESIS_HASH, MessageAppended, NodeEntered, StepAdvanced
from agentlog.events.codec import chain_hash
from agentlog.events.kinds import Event
from agentlog.projections import AgentState, Message, message_appended
from tests.workers.zygote import ForkedWorker, Zygote


def step_events(step: int, text: str = "hello", role: str = "assistant") -> list[Event]:
    """The events of one ordinary agent step."""
    return [
        NodeEntered(node="agent"),
        message_appended(Message.text_message(f"{text} {step}", role=role)),  # type: ignore[arg-type]
        StepAdvanced(step=step, next_node="agent"),
    ]


def text_event(text: str, message_id: str | None = None) -> MessageAppended:
    """A message_appended event of a user text."""
    return message_appended(Message.text_message(text, message_id=message_id))


def edit_db(db: Path, sql: str, *args: object) -> None:
    """Change a database file behind the store's back, as an intruder or a bad disk would."""
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(sql, args)
    conn.close()


def rechain(db: Path, thread_id: str = "t") -> None:
    """Recompute a thread's hashes after an edit, as a newer agentlog writing it would have."""
    conn = sqlite3.connect(db)
    with conn:
        prev = GENESIS_HASH
        rows = conn.execute(
            "SELECT thread_id, seq, run_id, actor, at, kind, version, position, payload "
            "FROM events WHERE thread_id = ? ORDER BY seq",
            (thread_id,),
        ).fetchall()
        for *envelope, payload in rows:
            prev = chain_hash(prev, tuple(envelope), payload)
            conn.execute("UPDATE events SET hash = ? WHERE position = ?", (prev, envelope[7]))
        conn.execute("UPDATE threads SET last_hash = ? WHERE thread_id = ?", (prev, thread_id))
    conn.close()


def line(*nodes: tuple[str, Callable[..., Any]], state_cls: type[AgentState] = AgentState) -> Any:
    """A graph running `nodes` one after the other, then END."""
    graph: StateGraph[Any] = StateGraph(state_cls)
    for name, fn in nodes:
        graph.add_node(name, fn)
    graph.set_entry_point(nodes[0][0])
    for (a, _), (b, _) in itertools.pairwise(nodes):
        graph.add_edge(a, b)
    graph.add_edge(nodes[-1][0], END)
    return graph


ROOT = Path(__file__).resolve().parent.parent

QUIET_PYTEST = ("-p", "no:cacheprovider", "-p", "no:langsmith_plugin")
"""For a pytest run in a subprocess: no cache written beside the test, and not the langsmith
plugin (installed with langchain-core; it imports its client at start-up, about a second)."""


def agentlog(
    *args: str | Path, cwd: Path = ROOT, columns: int = 160, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the `agentlog` command line as a user would, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-c", "from agentlog.actors.cli import main; main()", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"COLUMNS": str(columns), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
    )


def spawn_worker(module: str, *args: str | Path) -> subprocess.Popen[str]:
    """Start `python -m tests.workers.<module> ARGS` in the repository, pipes on."""
    return subprocess.Popen(
        [sys.executable, "-m", f"tests.workers.{module}", *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


_ZYGOTE: list[Zygote] = []


def fork_worker(module: str, *args: str | Path) -> ForkedWorker:
    """`spawn_worker`'s process without its start-up: forked from this test process's fork
    server (tests/workers/zygote.py), which imported agentlog once. A process of its own all
    the same (SIGKILL, exit codes, pipes); for tests that start many short workers."""
    if not _ZYGOTE:
        _ZYGOTE.append(Zygote())
    return _ZYGOTE[0].fork(module, [str(a) for a in args])


Worker = subprocess.Popen[str] | ForkedWorker


def _unbuffered_line(fd: int, timeout: float) -> str:
    """One line read from `fd` a byte at a time: a buffered `readline` may take what follows
    it too, which `communicate` (reading the descriptor itself) would then never see."""
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        readable, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        byte = os.read(fd, 1) if readable else b""
        if not byte:
            break
        line += byte
    return line.decode(errors="replace")


def wait_ready(proc: Worker, timeout: float = 60.0) -> None:
    """Block until a worker prints "ready" (its store is open); fail with its stderr if not."""
    assert proc.stdout is not None
    line = _unbuffered_line(proc.stdout.fileno(), timeout)
    if line.strip() != "ready":
        proc.kill()
        _, err = proc.communicate(timeout=timeout)
        raise AssertionError(f"the worker did not get ready within {timeout}s: {line!r}\n{err}")


def wait_done(proc: Worker, what: str, timeout: float) -> None:
    """Wait for a worker that runs a thread to its end: it must print "ready", then "done"."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{what}: the resumed run hung for {timeout}s\n{out}\n{err}") from None
    assert proc.returncode == 0 and out.split() == ["ready", "done"], (
        f"{what}: the resumed run failed (exit {proc.returncode})\n{out}\n{err}"
    )


def agent_with_tools(
    agent: Callable[..., Any],
    tools: Sequence[Callable[..., Any]],
    state_cls: type[AgentState] = AgentState,
) -> Any:
    """The usual loop: `agent`, then `tools` while its last message asks for calls, else END."""
    from agentlog.actors import ToolNode

    graph: StateGraph[Any] = StateGraph(state_cls)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(list(tools)))
    graph.set_entry_point("agent")
    graph.add_conditional_edges(
        "agent",
        lambda state: "tools" if state.context[-1].tool_calls() else END,
        {"tools": "tools", END: END},
    )
    graph.add_edge("tools", "agent")
    return graph


def normalized(event: Any) -> str:
    """An event as JSON, without its wall-clock parts (durations, tool message stamps), so an
    interrupted and resumed run can be compared with an uninterrupted one."""
    data = msgspec.to_builtins(event)
    data["kind"] = type(event).__struct_config__.tag
    data.pop("duration_ms", None)
    if isinstance(data.get("message"), dict):
        data["message"].pop("timestamp", None)
    return json.dumps(data, sort_keys=True)


def counted_digest_compares(monkeypatch: Any) -> list[tuple[Any, Any]]:
    """Record the two arguments of every `hmac.compare_digest` call from now on (the
    comparison still runs): a constant-time check shows no early exit in this list."""
    import hmac

    compared: list[tuple[Any, Any]] = []
    original = hmac.compare_digest

    def counting(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return original(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    return compared


def records_in(db: Path) -> int:
    """How many records the live database holds now (a read-only look, as another process
    would take it; 0 while the file cannot be read yet)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return 0
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


async def thread_log(store: Any, thread_id: str) -> list[Any]:
    """A thread's records, none when the thread does not exist (nothing was written)."""
    if thread_id not in await store.threads():
        return []
    return [r async for r in store.read(thread_id)]
