"""What HTTP costs: signed webhook deliveries accepted per second and runs completed per
second through a real uvicorn server, against the same runs triggered in process, in one run;
and the latency of a record from its commit to a Server-Sent Events client (p50/p99), against
the same records reaching an in-process subscriber (`runtime.subscribe`).

Server and client share this process (and its 2 cores here): the figures include the
client's own cost. Each round uses a fresh SQLite file; rounds alternate.

Usage: .venv/bin/python bench/serve.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common
import httpx
import uvicorn

from agentlog.actors import END, StateGraph
from agentlog.actors.http import create_app
from agentlog.actors.http.webhooks import sign_standard
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RuntimeConfig
from agentlog.events import SQLiteEventStore
from agentlog.events.follow import last_position
from agentlog.projections import AgentState, Message

SECRET = "bench-secret"
CONNECTIONS = 8
"""Deliveries in flight at once over HTTP (one per connection)."""


def answer(state: AgentState) -> list[Message]:
    """A user-style node: read the last message, answer it."""
    return [Message.text_message(f"got {state.context[-1].text()[:40]}", role="assistant")]


def runtime_on(store: SQLiteEventStore, runs: int) -> AgentRuntime:
    graph: StateGraph[AgentState] = StateGraph(name="hooks")
    graph.add_node("agent", answer)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    runtime = AgentRuntime(store, RuntimeConfig(max_concurrent_runs=runs))
    runtime.add_graph("hooks", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="hooks"))
    runtime.register_entry_point(
        EntryPoint(id="hook", graph_id="hooks", trigger="webhook", path="/hook", secrets=[SECRET])
    )
    return runtime


async def served(runtime: AgentRuntime) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    server = uvicorn.Server(uvicorn.Config(create_app(runtime), port=0, log_level="warning"))
    task = asyncio.ensure_future(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, task, f"http://127.0.0.1:{port}"


async def over_http(path: Path, runs: int) -> dict[str, float]:
    async with SQLiteEventStore(path) as store:
        runtime = runtime_on(store, runs)
        server, task, url = await served(runtime)
        # A few connections, each kept busy: httpx's pool costs grow with the requests
        # waiting in it, and that cost is the client's, in this same process.
        limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
        slots = asyncio.Semaphore(CONNECTIONS)
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

            async def deliver(n: int) -> str:
                body = json.dumps({"n": n}).encode()
                now = int(time.time())
                headers = {
                    "content-type": "application/json",
                    "webhook-id": f"d{n}",
                    "webhook-timestamp": str(now),
                    "webhook-signature": sign_standard(SECRET, f"d{n}", now, body),
                }
                async with slots:
                    response = await client.post("/hook", content=body, headers=headers)
                assert response.status_code == 202, response.text
                return str(response.json()["thread_id"])

            start = time.perf_counter()
            threads = await asyncio.gather(*(deliver(n) for n in range(runs)))
            accepted = time.perf_counter() - start
            for thread in threads:
                await runtime.wait(thread, timeout=120)
            completed = time.perf_counter() - start
            latencies = await sse_latency(client, runtime, 30)
        server.should_exit = True
        await task
    return {
        "accepted_per_s": runs / accepted,
        "runs_per_s": runs / completed,
        **percentiles(latencies),
    }


def percentiles(latencies: list[float]) -> dict[str, float]:
    """p50 and p99 of `latencies` (seconds), in milliseconds."""
    ordered = sorted(latencies) or [0.0]
    return {
        "sse_p50_ms": ordered[len(ordered) // 2] * 1000,
        "sse_p99_ms": ordered[min(int(0.99 * len(ordered)), len(ordered) - 1)] * 1000,
    }


async def pings(runtime: AgentRuntime, rounds: int) -> None:
    """Runs on one thread, one after the other: each commits records a listener times."""
    for n in range(rounds):
        await runtime.trigger_and_wait("api", f"ping {n}", thread_id="sse", timeout=60)
    await asyncio.sleep(0.2)


async def sse_latency(client: httpx.AsyncClient, runtime: AgentRuntime, rounds: int) -> list[float]:
    """From each record's commit time to its arrival over SSE, for a thread run repeatedly."""
    await runtime.trigger_and_wait("api", "warm", thread_id="sse", timeout=60)
    after = await last_position(runtime.store)  # only records committed while listening
    seen: list[float] = []

    async def listen() -> None:
        async with client.stream("GET", f"/log/threads/sse/stream?after={after}") as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    record: dict[str, Any] = json.loads(line[6:])
                    seen.append(time.time() - float(record["at"]))

    listener = asyncio.ensure_future(listen())
    await asyncio.sleep(0.1)
    await pings(runtime, rounds)
    listener.cancel()
    return seen


async def subscriber_latency(runtime: AgentRuntime, rounds: int) -> list[float]:
    """The same, for an in-process subscriber of the thread (no HTTP, no SSE framing)."""
    await runtime.trigger_and_wait("api", "warm", thread_id="sse", timeout=60)
    after = await last_position(runtime.store)
    seen: list[float] = []

    async def listen() -> None:
        async for record in runtime.subscribe(thread_id="sse", after=after):
            seen.append(time.time() - float(record.at))

    listener = asyncio.ensure_future(listen())
    await asyncio.sleep(0.1)
    await pings(runtime, rounds)
    listener.cancel()
    return seen


async def in_process(path: Path, runs: int) -> dict[str, float]:
    async with SQLiteEventStore(path) as store:
        runtime = runtime_on(store, runs)
        async with runtime:
            start = time.perf_counter()
            threads = await asyncio.gather(
                *(
                    runtime.trigger("api", {"messages": [{"role": "user", "content": f"{n}"}]})
                    for n in range(runs)
                )
            )  # started together, as the HTTP deliveries are
            accepted = time.perf_counter() - start
            for thread in threads:
                await runtime.wait(thread, timeout=120)
            completed = time.perf_counter() - start
            latencies = await subscriber_latency(runtime, 30)
    return {
        "accepted_per_s": runs / accepted,
        "runs_per_s": runs / completed,
        **percentiles(latencies),
    }


def main() -> None:
    args = common.parse_args(" ".join(__doc__.split("\n\n")[0].split()))
    runs = 100 if args.quick else 400
    samples: dict[str, list[dict[str, float]]] = {"http": [], "in_process": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            common.log(f"round {r + 1}/{args.rounds}")
            samples["http"].append(asyncio.run(over_http(Path(tmp) / f"h{r}.db", runs)))
            samples["in_process"].append(asyncio.run(in_process(Path(tmp) / f"p{r}.db", runs)))
    medians = {
        kind: {k: round(common.median([s[k] for s in rows]), 2) for k in rows[0]}
        for kind, rows in samples.items()
    }
    common.emit(
        {
            "bench": "serve",
            "runs": runs,
            "rounds": args.rounds,
            **medians,
            **{
                f"http_to_in_process_{name}": round(
                    medians["http"][key] / medians["in_process"][key], 3
                )
                for name, key in (
                    ("accepted", "accepted_per_s"),
                    ("runs", "runs_per_s"),
                    ("sse_p50", "sse_p50_ms"),
                    ("sse_p99", "sse_p99_ms"),
                )
            },
            "note": (
                "medians of alternating rounds; server and client share one process; HTTP "
                f"deliveries {CONNECTIONS} at a time while accepted runs execute, in-process "
                "triggers all submitted at once"
            ),
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
