"""The relay to RabbitMQ, killed and cut off again and again: the consumer takes every record
once (dropping the copies a crash queues again), in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.relay import ChainCheck, amqp_records

from .relay_kills import Broker, drill

pytestmark = pytest.mark.slow
SERVER = "amqp://guest:guest@127.0.0.1:5672/"


async def _nothing(_tag: str) -> None:
    return None


async def _stored(_tag: str, check: ChainCheck) -> int:
    return check.accepted + check.copies  # what the queue delivered, copies included


async def _clean(tag: str) -> None:
    import aio_pika

    conn = await aio_pika.connect(SERVER)
    try:
        channel = await conn.channel()
        await channel.queue_delete(tag)
        await channel.exchange_delete(tag)
    finally:
        await conn.close()


def _consume(url: str, tag: str, check: ChainCheck) -> Any:
    return amqp_records(url, queue=tag, check=check)


AMQP = Broker(
    port=5672,
    url=lambda port, tag: f"amqp://guest:guest@127.0.0.1:{port}/?exchange={tag}&queue={tag}",
    template=lambda tag: f"{tag}.{{kind}}",
    consume=_consume,
    stored=_stored,
    prepare=_nothing,
    clean=_clean,
    exactly_once_in_broker=False,  # AMQP has no deduplication: the consumer drops copies
)


async def test_rabbitmq_consumer_gets_every_record_once_through_kills_and_cuts(
    tmp_path: Path,
) -> None:
    result = await drill(AMQP, tmp_path, seed=5672)
    print(result)
