"""The relay's crash drill, shared by one test file per broker (so xdist can run them apart).

10,000 records across 100 threads, half written before the relay starts and half while it
runs; the relay (`tests.workers.relay_run`) runs in a child of the tests' fork server
(`fork_worker`) and talks to the broker through a TCP proxy of this test. A consumer (the
package's own helper) reads the broker all along; each time it has taken a random number
more records, the relay is SIGKILLed and started again, and now and then the proxy cuts
every connection instead. The kills follow what the consumer saw, never the clock. At the
end the consumer must have taken every record exactly once (copies dropped), in each
thread's order and in commit order overall, every chain verifying; and at least one kill
must have fallen between the broker's confirmation and the cursor's save (the consumer had
seen more than the cursor said, or was handed a copy to drop).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlog.actors.relay import ChainCheck
from agentlog.events import NodeEntered, SQLiteEventStore, load_cursor

from .helpers import fork_worker, text_event
from .workers.zygote import ForkedWorker

THREADS = 100
PER_THREAD = 100
TOTAL = THREADS * PER_THREAD
ROUNDS = 10  # each round appends PER_THREAD / ROUNDS events to every thread
MIN_KILLS = 20
DEADLINE = 240.0  # a failure guard only


class Proxy:
    """A TCP proxy to the broker whose connections the test can cut at once."""

    def __init__(self, port: int) -> None:
        self.port, self.links, self.cuts = port, set[asyncio.StreamWriter](), 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            writer.transport.abort()
            return
        self.links |= {writer, up_writer}
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )
        for end in (writer, up_writer):
            self.links.discard(end)
            end.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.transport.abort()

    def cut(self) -> None:
        self.cuts += 1
        for end in list(self.links):
            end.transport.abort()

    async def close(self) -> None:
        self.cut()
        self.server.close()


@dataclass
class Broker:
    """One broker's part of the drill: its URL (through the proxy), template and consumer."""

    port: int
    url: Callable[[int, str], str]
    template: Callable[[str], str]
    consume: Callable[[str, str, ChainCheck], AsyncIterator[dict[str, Any]]]
    stored: Callable[[str, ChainCheck], Awaitable[int]]
    """How many messages the broker held (the raw count, copies included)."""
    prepare: Callable[[str], Awaitable[None]]
    clean: Callable[[str], Awaitable[None]]
    exactly_once_in_broker: bool


@dataclass
class Drill:
    kills: int = 0
    cuts: int = 0
    in_window: int = 0
    copies: int = 0
    positions: list[int] = field(default_factory=list, repr=False)


async def _write(db: Path, rounds: range) -> None:
    async with SQLiteEventStore(db) as store:
        per_round = PER_THREAD // ROUNDS
        for r in rounds:
            for t in range(THREADS):
                thread = f"thread-{t:03d}"
                events = [
                    text_event(f"round {r} event {i} of {thread}") if i % 2 else
                    NodeEntered(node=f"n{r}.{i}")
                    for i in range(per_round)
                ]  # fmt: skip
                await store.append(thread, events, expected_seq=r * per_round)


async def drill(broker: Broker, tmp_path: Path, seed: int) -> Drill:
    rng = random.Random(seed)
    tag = f"t{uuid.uuid4().hex[:12]}"
    db = tmp_path / "log.db"
    await _write(db, range(ROUNDS // 2))
    await broker.prepare(tag)
    proxy = Proxy(broker.port)
    port = await proxy.start()
    job = (db, broker.url(port, tag), "drill", broker.template(tag),
           str(rng.choice([64, 128, 256])), tmp_path / "relay.log")  # fmt: skip
    check, result = ChainCheck(), Drill()
    taken = asyncio.Event()

    async def start() -> ForkedWorker:
        return await asyncio.to_thread(fork_worker, "relay_run", *job)

    async def stop(relay: ForkedWorker) -> None:
        """Kill the relay and wait until it is reaped (its pipes read to their ends)."""
        relay.kill()
        await asyncio.to_thread(relay.communicate, DEADLINE)

    async def consume() -> None:
        async for record in broker.consume(broker.url(broker.port, tag), tag, check):
            result.positions.append(record["position"])
            taken.set()
            if len(result.positions) == TOTAL:
                return

    async def until(count: int) -> None:
        while len(result.positions) < count:
            taken.clear()
            waiting = asyncio.ensure_future(taken.wait())
            await asyncio.wait([waiting, consumer], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if consumer.done() and len(result.positions) < count:
                consumer.result()  # a chain that does not verify fails here, not at DEADLINE
                raise AssertionError(f"the consumer stopped at {len(result.positions)} records")

    relay = await start()  # first: the fork server's start-up does not slow the consumer's
    consumer = asyncio.ensure_future(consume())
    writer = asyncio.ensure_future(_write(db, range(ROUNDS // 2, ROUNDS)))
    try:
        async with asyncio.timeout(DEADLINE):
            mark = 0
            while True:
                mark += rng.randint(280, 420)
                if mark >= TOTAL - 50:
                    break
                await until(mark)
                if consumer.done():
                    consumer.result()  # a chain that does not verify fails here
                if (result.kills + result.cuts) % 6 == 5:
                    proxy.cut()
                    result.cuts += 1
                    continue
                await stop(relay)
                result.kills += 1
                async with SQLiteEventStore(db, readonly=True) as reader:
                    if max(result.positions) > await load_cursor(reader, "drill"):
                        result.in_window += 1  # the broker had more than the cursor said
                relay = await start()
            await writer
            await consumer
        stored = await broker.stored(tag, check)
        assert stored >= TOTAL
        if broker.exactly_once_in_broker:
            assert stored == TOTAL, "the broker holds a record twice"
    finally:
        await stop(relay)
        for task in (consumer, writer):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await proxy.close()
        await broker.clean(tag)
    assert len(result.positions) == TOTAL == check.accepted
    assert result.positions == sorted(result.positions), "commit order was not kept"
    assert len(set(result.positions)) == TOTAL
    assert len(check.heads) == THREADS
    assert all(seq == PER_THREAD for seq, _ in check.heads.values())
    assert result.kills >= MIN_KILLS, result
    result.copies = check.copies  # what the broker let through twice, the consumer dropped
    assert result.in_window + result.copies >= 1, (
        f"no kill fell between the broker's confirmation and the cursor's save: {result}"
    )
    return result
