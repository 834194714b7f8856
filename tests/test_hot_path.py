"""The step's fast paths keep the guarantees of the slow ones: the fold's in-place gate refuses
what `decide` refuses, and an actor's `ask_nowait` delivers like `ask`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agentlog.actors.engine.actor import Actor, ActorStoppedError
from agentlog.events import (
    Forked,
    InterruptRaised,
    NodeEntered,
    Resumed,
    RunCompleted,
    RunStarted,
    StepAdvanced,
    Stopped,
    StopRequested,
    ToolCallFinished,
)
from agentlog.events.kinds import Event
from agentlog.projections import (
    AgentState,
    Fold,
    IllegalTransitionError,
    InvalidStateUpdateError,
    Message,
    ToolResultBlock,
    decide,
    message_appended,
    replay,
)
from agentlog.projections.fold import uncommitted_record


def _records(events: list[Event], base: int) -> list:  # type: ignore[type-arg]
    return [uncommitted_record(e, base + i + 1, "t") for i, e in enumerate(events)]


def _completed() -> AgentState:
    return replay(_records([RunStarted(), RunCompleted()], 0))


def _interrupted() -> AgentState:
    return replay(_records([RunStarted(), InterruptRaised(node="n", reason="r")], 0))


def _answer(call_id: str) -> Event:
    return message_appended(Message.tool_message([ToolResultBlock(call_id=call_id, output="x")]))


REFUSED: list[tuple[Callable[[], AgentState], list[Event]]] = [
    (_completed, [StepAdvanced(step=1)]),
    (_completed, [NodeEntered(node="n")]),
    (_completed, [RunCompleted()]),
    (AgentState, [StepAdvanced(step=5)]),
    (AgentState, [Resumed()]),
    (_interrupted, [NodeEntered(node="n")]),
    (AgentState, [Stopped()]),
    (AgentState, [StopRequested(), StopRequested()]),
    (AgentState, [ToolCallFinished(call_id="c", name="f")]),
    (AgentState, [Forked(source_thread="s", source_seq=1, state={})]),
    (AgentState, [_answer("never-called")]),
    (AgentState, [message_appended(Message.text_message("x")).__class__(message={"role": "x"})]),
]


@pytest.mark.parametrize(("make", "events"), REFUSED)
def test_the_in_place_gate_refuses_what_decide_refuses(
    make: Callable[[], AgentState], events: list[Event]
) -> None:
    base = 2
    with pytest.raises((IllegalTransitionError, InvalidStateUpdateError)) as by_decide:
        decide(make(), events, seq=base)
    fold = Fold(make(), seq=base)
    with pytest.raises(type(by_decide.value)) as in_place:
        fold.apply_decided(_records(events, base))
    assert str(in_place.value) == str(by_decide.value)


def test_the_in_place_gate_folds_what_decide_accepts() -> None:
    events: list[Event] = [RunStarted(), NodeEntered(node="a"), StepAdvanced(step=1)]
    assert decide(AgentState(), events, seq=0) == events
    fold = Fold.new(AgentState)
    fold.apply_decided(_records(events, 0))
    assert fold.seq == 3
    assert fold.state == replay(_records(events, 0))


class _Echo(Actor[int, int]):
    def __init__(self) -> None:
        super().__init__("echo", concurrency=None)

    async def receive(self, message: int) -> int:
        if message < 0:
            raise ValueError(f"negative: {message}")
        await asyncio.sleep(0)
        return message * 2


async def test_ask_nowait_replies_like_ask() -> None:
    actor = _Echo().start()
    try:
        futures = [actor.ask_nowait(i) for i in range(5)]
        assert await asyncio.gather(*futures) == [0, 2, 4, 6, 8]
        failing = actor.ask_nowait(-1)
        with pytest.raises(ValueError, match="negative: -1"):
            await failing
        assert await actor.ask(3) == 6
    finally:
        await actor.stop()


async def test_ask_nowait_is_handled_though_nobody_awaits_and_fails_once_stopped() -> None:
    handled: list[int] = []

    class Recorder(_Echo):
        async def receive(self, message: int) -> int:
            handled.append(message)
            return await super().receive(message)

    actor = Recorder().start()
    actor.ask_nowait(7)  # never awaited
    await actor.stop()  # drains what is in hand
    assert handled == [7]
    with pytest.raises(ActorStoppedError):
        actor.ask_nowait(8)
