"""The actor core: ordering, backpressure, asks, supervision and stopping."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from agentlog.actors.engine.actor import Actor, ActorFailed, ActorStoppedError, AskTimeoutError
from agentlog.actors.testing import until, wait_all_tasks_blocked


@dataclass(frozen=True)
class Add:
    n: int


@dataclass(frozen=True)
class Boom:
    why: str


@dataclass(frozen=True)
class Held:
    """Handled until the test sets the actor's `release`; `holding` is set once in hand."""


class Counter(Actor[Add | Boom | Held, int]):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("counter", **kwargs)  # type: ignore[arg-type]
        self.total = 0
        self.seen: list[int] = []
        self.events: list[str] = []
        self.holding, self.release = asyncio.Event(), asyncio.Event()

    async def on_start(self) -> None:
        self.events.append("start")

    async def on_stop(self) -> None:
        self.events.append("stop")

    async def on_failure(self, message: object, error: BaseException) -> None:
        self.events.append(f"failure:{error}")

    async def receive(self, message: Add | Boom | Held) -> int:
        match message:
            case Add(n):
                self.total += n
                self.seen.append(n)
            case Boom(why):
                raise ValueError(why)
            case Held():
                self.holding.set()
                await self.release.wait()
        return self.total


async def test_messages_are_handled_one_at_a_time_in_order() -> None:
    actor = Counter().start()
    for i in range(50):
        await actor.tell(Add(i))
    assert await actor.ask(Add(0)) == sum(range(50))
    assert actor.seen == [*range(50), 0]
    await actor.stop()
    assert actor.events == ["start", "stop"] and not actor.running


async def test_a_failure_reaches_the_asker_and_the_supervisor_and_the_actor_goes_on() -> None:
    failures: list[ActorFailed] = []
    actor = Counter(supervisor=failures.append).start()
    with pytest.raises(ValueError, match="bad"):
        await actor.ask(Boom("bad"))
    await actor.tell(Boom("told"))
    assert await actor.ask(Add(2)) == 2
    assert [(f.actor, f.message, str(f.error)) for f in failures] == [
        ("counter", Boom("bad"), "bad"),
        ("counter", Boom("told"), "told"),
    ]
    assert actor.events[1:] == ["failure:bad", "failure:told"]
    await actor.stop()


async def test_async_supervisors_are_awaited() -> None:
    seen: list[str] = []

    async def supervisor(failure: ActorFailed) -> None:
        await asyncio.sleep(0)
        seen.append(str(failure.error))

    actor = Counter(supervisor=supervisor).start()
    await actor.tell(Boom("x"))
    await actor.stop()
    assert seen == ["x"]


async def test_the_mailbox_is_bounded() -> None:
    actor = Counter(mailbox_size=2).start()
    await actor.tell(Held())
    await actor.holding.wait()  # the held message is being handled; the mailbox is empty
    await actor.tell(Add(1))
    await actor.tell(Add(2))
    blocked = asyncio.ensure_future(actor.tell(Add(3)))
    for _ in range(20):
        await asyncio.sleep(0)  # the loop runs everything that could make room: nothing does
    assert not blocked.done()  # backpressure: the third tell waits for room
    actor.release.set()
    await blocked
    await actor.stop()
    assert actor.seen == [1, 2, 3]
    with pytest.raises(ValueError):
        Counter(mailbox_size=0)


async def test_ask_times_out_with_a_typed_error() -> None:
    actor = Counter().start()
    with pytest.raises(AskTimeoutError, match="counter"):
        await actor.ask(Held(), timeout=0.05)  # held until released: it cannot beat the timeout
    actor.release.set()
    assert await actor.ask(Add(1)) == 1
    await actor.stop()


async def test_stop_drains_queued_messages_by_default() -> None:
    actor = Counter().start()
    await actor.tell(Held())
    await actor.holding.wait()  # busy: what comes next queues
    pending = [asyncio.ensure_future(actor.ask(Add(i))) for i in range(3)]
    stopping = asyncio.ensure_future(actor.stop())
    await wait_all_tasks_blocked()  # the stop waits for the queue it drains
    assert not stopping.done()
    actor.release.set()
    await stopping
    assert [await p for p in pending] == [0, 1, 3]


async def test_stop_without_drain_fails_waiting_asks_clearly() -> None:
    actor = Counter().start()
    await actor.tell(Held())
    await actor.holding.wait()
    pending = [asyncio.ensure_future(actor.ask(Add(i))) for i in range(3)]
    await asyncio.sleep(0)
    await actor.stop(drain=False)
    for p in pending:
        with pytest.raises(ActorStoppedError, match="stopped before handling Add"):
            await p
    assert actor.seen == []


async def test_a_stopped_or_unstarted_actor_refuses_messages() -> None:
    actor = Counter()
    with pytest.raises(ActorStoppedError, match="not started"):
        await actor.tell(Add(1))
    actor.start()
    await actor.stop()
    await actor.stop()  # twice is harmless
    with pytest.raises(ActorStoppedError, match="stopped"):
        await actor.ask(Add(1))


async def test_cancelling_the_actor_fails_the_message_in_hand() -> None:
    actor = Counter().start()
    ask = asyncio.ensure_future(actor.ask(Held()))
    await actor.holding.wait()
    assert actor._task is not None
    actor._task.cancel()
    with pytest.raises(ActorStoppedError, match="cancelled"):
        await ask
    assert actor.events == ["start", "stop"]


async def test_a_broken_failure_hook_does_not_stop_the_actor() -> None:
    def broken(failure: ActorFailed) -> None:
        raise RuntimeError("supervisor is down")

    actor = Counter(supervisor=broken).start()
    with pytest.raises(ValueError):
        await actor.ask(Boom("x"))
    assert await actor.ask(Add(3)) == 3
    await actor.stop()


class Sleeper(Actor[float, float]):
    """Each message is in hand until the test sets `gate`; `active` and `peak` count them."""

    def __init__(self, concurrency: int | None) -> None:
        super().__init__("sleeper", concurrency=concurrency)
        self.active = 0
        self.peak = 0
        self.gate = asyncio.Event()

    async def receive(self, message: float) -> float:
        self.active += 1
        self.peak = max(self.peak, self.active)
        await self.gate.wait()
        self.active -= 1
        return message


@pytest.mark.parametrize(("limit", "peak"), [(1, 1), (3, 3), (None, 8)])
async def test_concurrency_limits_messages_in_hand(limit: int | None, peak: int) -> None:
    actor = Sleeper(limit).start()
    asks = asyncio.gather(*(actor.ask(0.02) for _ in range(8)))
    await until(lambda: actor.active == peak)
    for _ in range(20):
        await asyncio.sleep(0)  # room for a message the limit should hold back
    actor.gate.set()
    replies = await asks
    assert replies == [0.02] * 8 and actor.peak == peak
    await actor.stop()
    with pytest.raises(ValueError):
        Sleeper(0)


async def test_stop_waits_for_messages_in_hand() -> None:
    actor = Sleeper(None).start()
    asks = [asyncio.ensure_future(actor.ask(0.05)) for _ in range(3)]
    await until(lambda: actor.active == 3)
    stopping = asyncio.ensure_future(actor.stop())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not stopping.done()  # the messages in hand are still running
    actor.gate.set()
    await stopping
    assert [await a for a in asks] == [0.05] * 3


async def test_stop_without_drain_cancels_messages_in_hand() -> None:
    actor = Sleeper(None).start()
    ask = asyncio.ensure_future(actor.ask(60.0))
    await until(lambda: actor.active == 1)
    await actor.stop(drain=False)  # the gate stays shut: only a cancel ends the message
    with pytest.raises(ActorStoppedError, match="cancelled"):
        await ask


async def test_an_unbounded_actor_answers_asks_at_once_and_stops_cleanly() -> None:
    """With no concurrency limit an idle actor hands an ask straight to a task of its own;
    supervision, failures, cancellation by the asker and stopping behave as through the
    mailbox."""
    failures: list[ActorFailed] = []
    actor = Counter(concurrency=None, supervisor=failures.append).start()
    assert await actor.ask(Add(2)) == 2
    with pytest.raises(ValueError, match="no"):
        await actor.ask(Boom("no"))
    assert [str(f.error) for f in failures] == ["no"]
    slow = asyncio.create_task(actor.ask(Held()))
    await actor.holding.wait()
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    actor.holding.clear()
    waiting = asyncio.create_task(actor.ask(Held()))
    await actor.holding.wait()
    await actor.stop(drain=False)
    with pytest.raises(ActorStoppedError):
        await waiting
    assert actor.events[-1] == "stop"
    with pytest.raises(ActorStoppedError):
        await actor.ask(Add(1))
