"""The relay to NATS JetStream, killed and cut off again and again: every record once, in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.relay import ChainCheck, nats_records

from .relay_kills import Broker, drill

pytestmark = pytest.mark.slow
SERVER = "nats://127.0.0.1:4222"


async def _stream(tag: str, job: str) -> int:
    import nats

    conn = await nats.connect(servers=[SERVER])
    try:
        js = conn.jetstream()
        if job == "prepare":
            await js.add_stream(name=tag.upper(), subjects=[f"{tag}.>"], duplicate_window=120)
        elif job == "count":
            return int((await js.stream_info(tag.upper())).state.messages)
        else:
            await js.delete_stream(tag.upper())
        return 0
    finally:
        await conn.close()


async def _prepare(tag: str) -> None:
    await _stream(tag, "prepare")


async def _stored(tag: str, _check: ChainCheck) -> int:
    return await _stream(tag, "count")


async def _clean(tag: str) -> None:
    await _stream(tag, "delete")


def _consume(url: str, tag: str, check: ChainCheck) -> Any:
    return nats_records(url, subject=f"{tag}.>", durable=tag, check=check)


NATS = Broker(
    port=4222,
    url=lambda port, tag: f"nats://127.0.0.1:{port}?stream={tag.upper()}",
    template=lambda tag: f"{tag}.{{kind}}",
    consume=_consume,
    stored=_stored,
    prepare=_prepare,
    clean=_clean,
    exactly_once_in_broker=True,  # each copy comes back within the duplicate window
)


async def test_nats_gets_every_record_once_through_kills_and_cuts(tmp_path: Path) -> None:
    result = await drill(NATS, tmp_path, seed=4222)
    print(result)
