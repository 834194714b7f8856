"""What a live stream costs to open on a long log: 60 Server-Sent Event streams opened at
once, each on a thread created after 30,000 records of other threads, through a real uvicorn
server; the time from each request to its first record (p50 and max), per round.

A stream reads its thread by the (thread, seq) index, so the figure should not grow with the
log; it used to read the whole log from the start to find its thread (8.7-12.3 s here).

Usage: .venv/bin/python bench/streams.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import _common as common
import httpx
import uvicorn

from agentlog.actors import END, StateGraph
from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import SQLiteEventStore
from agentlog.events.kinds import MessageAppended, ThreadCreated
from agentlog.projections import AgentState, Message

STREAMS = 60
"""Streams opened at once."""


def answer(state: AgentState) -> list[Message]:
    return [Message.text_message("ok", role="assistant")]


def runtime_on(store: SQLiteEventStore) -> AgentRuntime:
    graph: StateGraph[AgentState] = StateGraph(name="chat")
    graph.add_node("agent", answer)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    runtime = AgentRuntime(store)
    runtime.add_graph("chat", graph.compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="chat"))
    return runtime


async def fill(store: SQLiteEventStore, records: int, threads: int = 600) -> None:
    """`records` records spread over `threads` threads, interleaved in the log (round by
    round, one record per thread per round, the appends of a round committed together)."""
    per_thread = records // threads
    message = Message.text_message("filler", role="user").model_dump(mode="json")
    for seq in range(per_thread):

        async def one(t: int, seq: int = seq) -> None:
            event = (
                ThreadCreated(by="bench", graph_id="chat")
                if seq == 0
                else MessageAppended(message=message)
            )
            await store.append(f"old-{t}", [event], expected_seq=seq)

        await asyncio.gather(*(one(t) for t in range(threads)))


async def first_records(url: str, threads: list[str]) -> list[float]:
    """Seconds from each stream's request to its first record, all opened at once."""
    limits = httpx.Limits(max_connections=STREAMS + 5)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def first(thread: str) -> float:
            start = time.perf_counter()
            async with client.stream("GET", f"/log/threads/{thread}/stream") as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        return time.perf_counter() - start
            raise AssertionError(f"the stream of {thread} ended with no record")

        return list(await asyncio.gather(*(first(t) for t in threads)))


async def one_round(path: Path, records: int) -> dict[str, float]:
    async with SQLiteEventStore(path) as store:
        await fill(store, records)
        runtime = runtime_on(store)
        threads = [f"new-{i}" for i in range(STREAMS)]
        for thread in threads:  # each new thread's first record comes after the long log
            await store.append(thread, [ThreadCreated(by="bench", graph_id="chat")], expected_seq=0)
        config = uvicorn.Config(create_app(runtime), port=0, log_level="warning")
        server = uvicorn.Server(config)
        task = asyncio.ensure_future(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            latencies = sorted(await first_records(f"http://127.0.0.1:{port}", threads))
        finally:
            server.should_exit = True
            await task
    return {
        "first_record_p50_s": latencies[len(latencies) // 2],
        "first_record_max_s": latencies[-1],
    }


def main() -> None:
    args = common.parse_args(__doc__ or "")
    records = 3_000 if args.quick else 30_000
    rounds: list[dict[str, float]] = []
    with common.temp_dir() as directory:
        for n in range(args.rounds):
            with common.scratch_db(directory, f"streams-{n}") as path:
                rounds.append(asyncio.run(one_round(path, records)))
                common.log(f"round {n + 1}: {rounds[-1]}")
    p50 = common.median([r["first_record_p50_s"] for r in rounds])
    common.emit(
        {
            "bench": "streams",
            "log_records": records,
            "streams": STREAMS,
            "rounds": args.rounds,
            "first_record_p50_s": round(p50, 4),
            "first_record_max_s": round(max(r["first_record_max_s"] for r in rounds), 4),
            "note": "median p50 and worst max over the rounds; server and client in one process",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
