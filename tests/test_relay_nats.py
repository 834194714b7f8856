"""The relay to NATS JetStream, killed and cut off again and again: every record once, in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.relay import ChainCheck, Relay, nats_records
from agentlog.events import SQLiteEventStore

from .helpers import text_event
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


async def test_the_consumer_goes_on_when_a_fetch_runs_out_of_time_on_a_busy_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine nats-py's fetch can raise asyncio's own TimeoutError (its deadline
    spent before the second pull request) rather than its subclass: a consumer must take
    that as an empty batch too, not stop."""
    from nats.js.client import JetStreamContext

    tag = "tfetch" + str(abs(hash(tmp_path)) % 10**6)
    await _prepare(tag)
    real = JetStreamContext.PullSubscription.fetch
    spent = []

    async def busy(self: Any, *args: Any, **kw: Any) -> Any:
        if len(spent) < 2:
            spent.append(1)
            raise TimeoutError  # what fetch raises when its deadline is used up
        return await real(self, *args, **kw)

    monkeypatch.setattr(JetStreamContext.PullSubscription, "fetch", busy)
    try:
        async with SQLiteEventStore(tmp_path / "log.db") as store:
            await store.append("a", [text_event("one"), text_event("two")], expected_seq=0)
            url = f"{SERVER}?stream={tag.upper()}"
            async with Relay(store, url, name="r", subject_template=f"{tag}.{{kind}}") as relay:
                await relay.wait_for(2)
        taken = []
        async for record in nats_records(url, subject=f"{tag}.>", durable=tag):
            taken.append(record["seq"])
            if len(taken) == 2:
                break
        assert taken == [1, 2] and len(spent) == 2
    finally:
        await _clean(tag)
