"""Slow clients against `agentlog serve`: 400 connections from one address, half trickling
their headers and half their body, a byte every 5 s each, for 45 s; the server's open
descriptors (/proc/<pid>/fd) and the connections still open, over time.

With the default limits (headers 10 s, body 30 s, 100 connections per client) the cap closes
300 at once, the header deadline the next 50, the body deadline the rest; before them all
400 were still open after 45 s, holding 399 descriptors. Linux only (reads /proc).

Usage: .venv/bin/python bench/slow_clients.py [--quick]
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

from agentlog.actors import END, StateGraph
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import EventStore
from agentlog.projections import AgentState, Message

ROOT = Path(__file__).resolve().parent.parent
HEADERS_NEVER_DONE = b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n"
BODY_NEVER_DONE = (
    b"POST /threads/search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
)


def answer(state: AgentState) -> list[Message]:
    return [Message.text_message("ok", role="assistant")]


def build(store: EventStore) -> AgentRuntime:
    """The app served: `--app slow_clients:build`."""
    graph: StateGraph[AgentState] = StateGraph(name="chat")
    graph.add_node("agent", answer)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    runtime = AgentRuntime(store)
    runtime.add_graph("chat", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="chat"))
    return runtime


def serve(db: Path, *options: str) -> tuple[subprocess.Popen[str], tuple[str, int]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentlog.actors.cli", "serve", "--db", str(db),
         "--app", "slow_clients:build", "--port", "0", *options],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("{"):
        proc.kill()
        raise SystemExit(f"the server did not start: {proc.communicate()[1][-2000:]}")
    host, port = json.loads(line)["serving"].removeprefix("http://").rsplit(":", 1)
    return proc, (host, int(port))


def attack(pid: int, address: tuple[str, int], clients: int, every_s: float, for_s: float,
           marks: list[float]) -> dict[str, Any]:  # fmt: skip
    """Open `clients` connections, trickle a byte on each every `every_s`, for `for_s` s."""

    def descriptors() -> int:
        return len(os.listdir(f"/proc/{pid}/fd"))

    baseline = descriptors()
    sockets = []
    for i in range(clients):
        sock = socket.create_connection(address, timeout=10)
        head = HEADERS_NEVER_DONE if i % 2 == 0 else BODY_NEVER_DONE
        with contextlib.suppress(OSError):  # past the cap, closed at once
            sock.sendall(head)
        sock.setblocking(False)
        sockets.append(sock)
    start = time.monotonic()
    still, peak, samples, next_byte = set(sockets), descriptors(), {}, start + every_s
    while (elapsed := time.monotonic() - start) < for_s:
        readable = select.select(list(still), [], [], 0.2)[0] if still else []
        if not still:
            time.sleep(0.2)
        for sock in readable:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                still.discard(sock)
        if time.monotonic() >= next_byte:
            next_byte += every_s
            for sock in list(still):
                try:
                    sock.send(b"a")
                except OSError:
                    still.discard(sock)
        peak = max(peak, descriptors())
        for mark in marks:
            if f"{mark:g}s" not in samples and elapsed >= mark:
                samples[f"{mark:g}s"] = {"server_fds": descriptors(), "open": len(still)}
    for sock in sockets:
        sock.close()
    return {"baseline_fds": baseline, "peak_fds": peak, "over_time": samples}


def main() -> None:
    args = common.parse_args(__doc__ or "")
    if args.quick:
        clients, every_s, for_s, marks = 100, 0.5, 6.0, [0.5, 2.0, 5.0]
        options = (
            "--header-timeout",
            "1",
            "--body-timeout",
            "3",
            "--client-connections",
            "40",
        )
    else:
        clients, every_s, for_s, marks = 400, 5.0, 45.0, [1.0, 12.0, 32.0, 44.5]
        options = ()
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-") as directory:
        proc, address = serve(Path(directory) / "slow.db", *options)
        try:
            result = attack(proc.pid, address, clients, every_s, for_s, marks)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    common.emit(
        {
            "bench": "slow_clients",
            "clients": clients,
            "byte_every_s": every_s,
            "seconds": for_s,
            "limits": " ".join(options) or "defaults",
            **result,
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
