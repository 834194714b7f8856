"""A runtime's live parts (`agentlog.actors.runtime.live`), one run's channel at a time: a
subscriber gets what is handed over after it came, the first asking for them also what came
before; a part from a worker thread wakes the subscriber's loop; a full buffer drops the
newer parts and counts them; `take` leaves the parts made after the commit it is given."""

from __future__ import annotations

import asyncio

from agentlog.actors.engine.modes import Part, StreamMode
from agentlog.actors.runtime.live import BUFFER, LivePart, LiveParts


def item(n: int, after: int = 1) -> LivePart:
    return LivePart(after, Part(StreamMode.CUSTOM, n))


def taken(items: list[LivePart]) -> list[object]:
    return [i.part.data for i in items]


async def test_a_subscriber_gets_what_comes_after_it_the_first_asking_also_before() -> None:
    hub = LiveParts()
    channel = hub.channel("r")
    channel.publish(item(1))
    late = hub.subscribe("r", earlier=False)
    first = hub.subscribe("r", earlier=True)
    second = hub.subscribe("r", earlier=True)
    channel.publish(item(2))
    assert taken(late.take()) == [2]
    assert taken(first.take()) == [1, 2]
    assert taken(second.take()) == [2]
    for subscription in (late, first, second):
        hub.unsubscribe("r", subscription)
    assert "r" not in hub.channels  # no tap, no subscriber: gone


async def test_a_part_from_a_worker_thread_wakes_the_subscriber() -> None:
    hub = LiveParts()
    subscription = hub.subscribe("r", earlier=False)
    await asyncio.to_thread(hub.channel("r").publish, item(7))
    await asyncio.wait_for(subscription.wait(), 30)
    assert taken(subscription.take()) == [7]


async def test_a_full_buffer_drops_the_newer_parts_and_counts_them() -> None:
    hub = LiveParts()
    subscription = hub.subscribe("r", earlier=False)
    for n in range(BUFFER + 5):
        hub.channel("r").publish(item(n))
    assert taken(subscription.take()) == list(range(BUFFER))
    assert subscription.dropped == 5


async def test_take_leaves_the_parts_made_after_the_commit_it_is_given() -> None:
    hub = LiveParts()
    subscription = hub.subscribe("r", earlier=False)
    channel = hub.channel("r")
    channel.publish(item(1, after=3))
    channel.publish(item(2, after=5))
    assert taken(subscription.take(upto=4)) == [1]
    assert taken(subscription.take(upto=4)) == []
    assert taken(subscription.take(upto=5)) == [2]
