"""The relay's throughput against its own client in a loop, and its lag behind an agent loop.

For each broker (Redis Streams, NATS JetStream, RabbitMQ on 127.0.0.1; a broker that does
not answer is reported as skipped):

* events_per_s: N records (100 threads) relayed from a SQLite store, from the relay's start
  until its cursor reaches the last record (read, build the export line, send, wait for the
  broker's confirmations, save the cursor per batch). The peer is the same client sending
  the very same payloads and headers in a loop, in batches of the same size, each batch
  waiting for its confirmations (Redis: a pipeline of XADD; NATS: `publish_async` and the
  acks; RabbitMQ: publishes on a confirming channel) with no store, no cursor and no
  dedupe, the messages built beforehand (untimed). Both are timed from their connect
  (the stream, exchange and queue declared in it) to the last confirmation.
  ratio = relay / peer (target >= 0.7). Each round uses a fresh stream or queue;
  rounds alternate relay and peer, and the ratio is the median of the paired rounds.
* lag: the "def-tool" agent loop of bench/workload.py runs S steps at full speed on the
  same store object while the relay follows it in the same process; the lag (records
  committed but not yet confirmed by the broker) is sampled at every commit: its median and
  maximum, and the milliseconds from the loop's end until the relay caught up.

Usage: .venv/bin/python bench/relay.py [--quick] [--rounds N] [--brokers redis,nats,amqp]
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common
from workload import Loop, first_input

from agentlog.actors.relay import Relay
from agentlog.actors.relay.message import PrevHashes, Template, message
from agentlog.events import NodeEntered, SQLiteEventStore
from agentlog.events.codec import Row

BATCH = 256
THREADS = 100
PORTS = {"redis": 6379, "nats": 4222, "amqp": 5672}


def url_of(broker: str, tag: str) -> str:
    return {
        "redis": "redis://127.0.0.1:6379/0",
        "nats": f"nats://127.0.0.1:4222?stream={tag.upper()}",
        "amqp": f"amqp://guest:guest@127.0.0.1:5672/?exchange={tag}&queue={tag}",
    }[broker]


def template_of(broker: str, tag: str) -> str:
    return tag if broker == "redis" else f"{tag}.{{kind}}"


async def answers(broker: str) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", PORTS[broker]), 2)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


async def fill(path: Path, records: int) -> list[Row]:
    """`records` records over THREADS threads, and their rows in position order."""
    async with SQLiteEventStore(path) as store:
        per_thread = records // THREADS
        for i in range(0, per_thread, 10):
            for t in range(THREADS):
                events = [NodeEntered(node=f"node-{i + j}") for j in range(10)]
                await store.append(f"thread-{t:03d}", events, expected_seq=i)
        return [row async for row in store.read_all_rows(0)]


async def clean(broker: str, tag: str) -> None:
    if broker == "redis":
        import redis.asyncio

        async with redis.asyncio.Redis.from_url(url_of(broker, tag)) as conn:
            await conn.delete(tag)
    elif broker == "nats":
        import nats

        conn = await nats.connect(servers=["nats://127.0.0.1:4222"])
        with contextlib.suppress(Exception):  # never made
            await conn.jetstream().delete_stream(tag.upper())
        await conn.close()
    else:
        import aio_pika

        conn = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
        channel = await conn.channel()
        await channel.queue_delete(tag)
        await channel.exchange_delete(tag)
        await conn.close()


async def relay_round(broker: str, path: Path, last: int) -> float:
    tag = f"b{uuid.uuid4().hex[:10]}"
    try:
        async with SQLiteEventStore(path) as store:
            relay = Relay(store, url_of(broker, tag), name=tag,
                          subject_template=template_of(broker, tag), batch=BATCH)  # fmt: skip
            start = time.perf_counter()
            async with relay:
                await relay.wait_for(last)
            return time.perf_counter() - start
    finally:
        await clean(broker, tag)


async def peer_round(broker: str, path: Path, rows: list[Row]) -> float:
    """The client alone: the same messages, batch by batch, each batch confirmed."""
    tag = f"p{uuid.uuid4().hex[:10]}"
    template = Template(template_of(broker, tag), broker=broker)
    async with SQLiteEventStore(path) as store:
        prevs = PrevHashes(store)
        messages = []
        for row in rows:
            messages.append(message(row, await prevs.before(row), template))
            prevs.saw(row)
    batches = [messages[i : i + BATCH] for i in range(0, len(messages), BATCH)]
    try:
        if broker == "redis":
            import redis.asyncio

            start = time.perf_counter()
            conn = redis.asyncio.Redis.from_url(url_of(broker, tag))
            for batch in batches:
                pipe = conn.pipeline(transaction=False)
                for m in batch:
                    pipe.xadd(m.destination, {"id": m.id, "record": m.body, **m.headers})
                await pipe.execute()
            seconds = time.perf_counter() - start
            await conn.aclose()
        elif broker == "nats":
            import nats

            start = time.perf_counter()
            conn = await nats.connect(servers=["nats://127.0.0.1:4222"])
            js = conn.jetstream()
            await js.add_stream(name=tag.upper(), subjects=[f"{tag}.*"])
            for batch in batches:
                acks = []
                for m in batch:
                    headers = {"Nats-Msg-Id": m.id}
                    headers.update((f"Agentlog-{k.capitalize()}", v) for k, v in m.headers.items())
                    acks.append(await js.publish_async(m.destination, m.body, headers=headers))
                await asyncio.gather(*acks)
            seconds = time.perf_counter() - start
            await conn.close()
        else:
            import aio_pika

            start = time.perf_counter()
            conn = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
            channel = await conn.channel(publisher_confirms=True)
            exchange = await channel.declare_exchange(
                tag, aio_pika.ExchangeType.TOPIC, durable=True
            )
            queue = await channel.declare_queue(tag, durable=True)
            await queue.bind(exchange, "#")
            persistent = aio_pika.DeliveryMode.PERSISTENT
            for batch in batches:
                await asyncio.gather(*(
                    exchange.publish(aio_pika.Message(m.body, message_id=m.id,
                                     headers=dict(m.headers), delivery_mode=persistent),
                                     routing_key=m.destination, mandatory=True)
                    for m in batch
                ))  # fmt: skip
            seconds = time.perf_counter() - start
            await conn.close()
        return seconds
    finally:
        await clean(broker, tag)


async def lag_run(broker: str, directory: Path, steps: int) -> dict[str, Any]:
    """The agent loop at full speed with the relay following it on the same store."""
    tag = f"l{uuid.uuid4().hex[:10]}"
    path = common.fresh_path(directory, f"lag-{broker}")
    lags: list[int] = []
    try:
        async with SQLiteEventStore(path) as store:
            relay = Relay(store, url_of(broker, tag), name=tag,
                          subject_template=template_of(broker, tag), batch=BATCH)  # fmt: skip
            signal = store.commit_signal
            done = False

            async def sample() -> None:
                seen = 0
                while not done:
                    await signal.wait(seen, 0.05)
                    seen = signal.position
                    lags.append(max(seen - relay.cursor, 0))

            compiled = Loop("def-tool", steps).graph().compile(store, recursion_limit=steps + 10)
            async with relay:
                sampler = asyncio.ensure_future(sample())
                start = time.perf_counter()
                await compiled.ainvoke(first_input(), {"thread_id": "agent"})
                end = time.perf_counter()
                head = signal.position
                await relay.wait_for(head)
                caught_up = time.perf_counter()
                done = True
                await sampler
            return {
                "steps": steps,
                "records": head,
                "loop_steps_per_s": common.per_second(steps, end - start),
                "lag_median": statistics.median(lags) if lags else 0,
                "lag_max": max(lags, default=0),
                "catch_up_ms": common.ms(caught_up - end),
            }
    finally:
        await clean(broker, tag)
        common.remove_db(path)


async def bench_broker(broker: str, args: Any, directory: Path) -> dict[str, Any]:
    records = 2_000 if args.quick else 10_000
    path = common.fresh_path(directory, f"log-{broker}")
    rows = await fill(path, records)
    samples: dict[str, list[float]] = {"relay": [], "peer": []}
    for i in range(args.rounds + 1):  # the first round warms up
        relay_s = await relay_round(broker, path, rows[-1].position)
        peer_s = await peer_round(broker, path, rows)
        if i:
            samples["relay"].append(relay_s)
            samples["peer"].append(peer_s)
        common.log(f"  {broker}: relay {common.ms(relay_s)} ms, peer {common.ms(peer_s)} ms")
    relay_s, peer_s = common.median(samples["relay"]), common.median(samples["peer"])
    common.remove_db(path)
    lag = await lag_run(broker, directory, 100 if args.quick else 400)
    return {
        "records": records,
        "relay_events_per_s": common.per_second(records, relay_s),
        "peer_events_per_s": common.per_second(records, peer_s),
        "ratio": round(common.paired_ratio(samples["peer"], samples["relay"]), 3),
        "lag": lag,
    }


async def main() -> None:
    parser = common.argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="redis,nats,amqp")
    args = common.checked(parser)
    results: dict[str, Any] = {}
    with common.temp_dir() as directory:
        for broker in args.brokers.split(","):
            if not await answers(broker):
                results[broker] = {"skipped": f"nothing answers on 127.0.0.1:{PORTS[broker]}"}
                continue
            common.log(f"{broker} ...")
            results[broker] = await bench_broker(broker, args, directory)
    common.emit({"bench": "relay", "batch": BATCH, "brokers": results,
                 "environment": common.environment()})  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
