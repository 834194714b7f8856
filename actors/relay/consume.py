"""The consumer's side: read what a relay sent, drop second copies, verify each thread's chain.

`ChainCheck` judges one message body at a time with `verify_export.check_line`, the
standard-library verifier of the JSON export: the record's hash must be the SHA-256 of the
previous record's hash, its envelope and its payload bytes, and, for a relay that sends
everything (`complete=True`), its seq the next of its thread and its previous hash the
hash of the last record received on that thread. A record at or below the thread's last
seq is a second copy (a redelivery after a relay crash) and is dropped; a gap or a hash that
does not link raises `ChainError`. For a filtered relay (`complete=False`), each record is
checked against the previous hash it carries, and seqs must still only grow.

`redis_records`, `nats_records` and `amqp_records` read a broker and yield the checked
records (the export line as a dict), each exactly once, in each thread's order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agentlog.actors.relay.brokers import client_module, split_url
from agentlog.actors.relay.message import RelayError
from agentlog.events import verify_export

__all__ = ["ChainCheck", "ChainError", "amqp_records", "nats_records", "redis_records"]


class ChainError(RelayError):
    """What a consumer received does not verify: a record is missing, out of order, or its
    bytes do not match its hash."""


class ChainCheck:
    """Each thread's last (seq, hash) received; `check(body)` is the record or None (a copy)."""

    def __init__(self, *, complete: bool = True) -> None:
        self.complete = complete
        self.heads: dict[str, tuple[int, str]] = {}
        self.copies = 0
        self.accepted = 0

    def check(self, body: bytes | str) -> dict[str, Any] | None:
        try:
            text = body.decode("utf-8") if isinstance(body, bytes) else body
            line = verify_export.loads(text)
            thread, seq = line["thread_id"], line["seq"]
            if not isinstance(thread, str) or type(seq) is not int:
                raise TypeError
        except (ValueError, TypeError, KeyError):
            raise ChainError(f"a message is no agentlog record: {body[:80]!r}") from None
        last_seq, last_hash = self.heads.get(thread, (0, verify_export.GENESIS))
        if seq <= last_seq:
            if seq == last_seq and line.get("hash") != last_hash:
                raise ChainError(f"thread {thread!r} seq {seq} arrived twice, different")
            self.copies += 1
            return None
        expected, prev = (last_seq + 1, last_hash) if self.complete else (seq, line["prev_hash"])
        try:
            verify_export.check_line(text, thread, expected, prev)
        except verify_export.Bad as exc:
            raise ChainError(f"thread {thread!r} at seq {seq}: {exc}") from None
        self.heads[thread] = (seq, line["hash"])
        self.accepted += 1
        return dict(line)


async def redis_records(
    url: str, *, keys: tuple[str, ...] = ("agentlog",), after: str = "0-0",
    check: ChainCheck | None = None, block_ms: int = 1000,
) -> AsyncIterator[dict[str, Any]]:  # fmt: skip
    """The records in the Redis streams `keys`, from entry `after` on, checked, for ever."""
    redis = client_module("redis")
    check = check or ChainCheck()
    conn = redis.asyncio.Redis.from_url(url)
    try:
        streams: dict[Any, str] = dict.fromkeys(keys, after)
        while True:
            for key, entries in await conn.xread(streams, count=512, block=block_ms) or []:
                for entry_id, fields in entries:
                    streams[key.decode() if isinstance(key, bytes) else key] = entry_id
                    record = check.check(fields[b"record"])
                    if record is not None:
                        yield record
    finally:
        await conn.aclose()


async def nats_records(
    url: str, *, subject: str = "agentlog.>", durable: str = "agentlog-consumer",
    check: ChainCheck | None = None,
) -> AsyncIterator[dict[str, Any]]:  # fmt: skip
    """The records on `subject` in the relay's stream (`?stream=`), through the durable pull
    consumer `durable` (acked once the caller took each), checked, for ever."""
    nats = client_module("nats")
    server, found = split_url(url, {"stream": "AGENTLOG", "duplicate_window": ""})
    check = check or ChainCheck()
    conn = await nats.connect(servers=[server])
    try:
        js = conn.jetstream()
        sub = await js.pull_subscribe(subject, durable=durable, stream=found["stream"])
        while True:
            try:
                batch = await sub.fetch(256, timeout=1)
            except TimeoutError:  # nats' own and, when its deadline ran out early, asyncio's
                continue
            for msg in batch:
                record = check.check(msg.data)
                if record is not None:
                    yield record
                await msg.ack()
    finally:
        await conn.close()


async def amqp_records(
    url: str, *, queue: str = "agentlog", check: ChainCheck | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The records in the durable queue `queue`, acked once the caller took each, checked."""
    pika = client_module("amqp")
    server, _ = split_url(url, {"exchange": "", "queue": ""})
    check = check or ChainCheck()
    conn = await pika.connect(server)
    try:
        channel = await conn.channel()
        await channel.set_qos(prefetch_count=512)
        source = await channel.declare_queue(queue, durable=True)
        async with source.iterator() as messages:
            async for msg in messages:
                record = check.check(msg.body)
                if record is not None:
                    yield record
                await msg.ack()
    finally:
        await conn.close()
