"""The relay to Redis Streams, killed and cut off again and again: every record once, in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.relay import ChainCheck, redis_records

from .relay_kills import Broker, drill

pytestmark = pytest.mark.slow
URL = "redis://127.0.0.1:6379/0"


async def _stored(tag: str, _check: ChainCheck) -> int:
    import redis.asyncio

    async with redis.asyncio.Redis.from_url(URL) as conn:
        return int(await conn.xlen(tag))


async def _clean(tag: str) -> None:
    import redis.asyncio

    async with redis.asyncio.Redis.from_url(URL) as conn:
        await conn.delete(tag)


async def _nothing(_tag: str) -> None:
    return None


def _consume(url: str, tag: str, check: ChainCheck) -> Any:
    return redis_records(url, keys=(tag,), check=check)


REDIS = Broker(
    port=6379,
    url=lambda port, _tag: f"redis://127.0.0.1:{port}/0",
    template=lambda tag: tag,
    consume=_consume,
    stored=_stored,
    prepare=_nothing,
    clean=_clean,
    exactly_once_in_broker=True,
)


async def test_redis_gets_every_record_once_through_kills_and_cuts(tmp_path: Path) -> None:
    result = await drill(REDIS, tmp_path, seed=39)
    print(result)
