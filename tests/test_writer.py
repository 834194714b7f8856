"""The one loop for writes outside a running step: built from the log as it is, checked,
appended after exactly that seq, built again when another writer got there first."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentlog.actors.engine.commit import RETRY, RetryRule, fork_thread, write
from agentlog.events import (
    ClaimLostError,
    ConcurrencyError,
    SQLiteEventStore,
    StateUpdated,
    ThreadBusyError,
)
from agentlog.projections import AgentState, Fold, IllegalTransitionError
from tests.helpers import step_events, text_event


async def test_a_write_that_loses_the_race_is_built_again_from_the_new_state(
    tmp_path: Path,
) -> None:
    async with SQLiteEventStore(tmp_path / "w.db") as store:
        await store.append("t", [text_event("first")], expected_seq=0)
        seen: list[int] = []

        async def interloper() -> None:
            await store.append("t", [text_event("second")], expected_seq=1)

        def build(fold: Fold[AgentState]) -> list[StateUpdated]:
            seen.append(len(fold.state.context))
            if len(seen) == 1:
                raise_later.append(asyncio.ensure_future(interloper()))
            return [StateUpdated(values={"context_summary": f"{len(fold.state.context)} seen"})]

        raise_later: list[asyncio.Future[None]] = []

        async def slow_append(*args: object, **kwargs: object) -> object:
            await asyncio.gather(*raise_later)  # the other writer lands first
            return await store.append(*args, **kwargs)  # type: ignore[arg-type]

        records = await write(
            store, "t", build, state_cls=AgentState, actor="editor", append=slow_append
        )
        assert seen == [1, 2], "the write was built again on the state the race left"
        assert records[-1].seq == 3
        assert records[-1].event == StateUpdated(values={"context_summary": "2 seen"})


async def test_two_forks_to_one_new_id_at_once_make_exactly_one_thread(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "f.db") as store:
        seq = 0
        for step in range(1, 4):
            seq = (await store.append("t", step_events(step), expected_seq=seq))[-1].seq
        outcomes = await asyncio.gather(
            fork_thread(store, "t", at_seq=3, new_thread_id="copy", state_cls=AgentState),
            fork_thread(store, "t", at_seq=6, new_thread_id="copy", state_cls=AgentState),
            return_exceptions=True,
        )
        made = [o for o in outcomes if o == "copy"]
        refused = [o for o in outcomes if isinstance(o, IllegalTransitionError)]
        assert len(made) == 1 and len(refused) == 1, outcomes
        assert "already exists" in str(refused[0])
        assert await store.last_seq("copy") == 1


async def test_a_build_that_returns_nothing_writes_nothing(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "n.db") as store:
        await store.append("t", [text_event("hi")], expected_seq=0)
        assert await write(store, "t", lambda fold: [], state_cls=AgentState, actor="x") == []
        assert await store.last_seq("t") == 1
        with pytest.raises(ValueError, match="refused"):
            await write(store, "t", _refuse, state_cls=AgentState, actor="x")
        assert await store.last_seq("t") == 1


def _refuse(fold: Fold[AgentState]) -> list[StateUpdated]:
    raise ValueError("refused")


async def test_a_write_that_keeps_losing_the_race_gives_up_after_the_rule_s_tries(
    tmp_path: Path,
) -> None:
    async with SQLiteEventStore(tmp_path / "r.db") as store:
        await store.append("t", [text_event("hi")], expected_seq=0)
        tries: list[int] = []

        async def always_beaten(thread_id: str, events: object, **kwargs: object) -> object:
            tries.append(1)
            raise ConcurrencyError(thread_id, 1, 2)

        with pytest.raises(ThreadBusyError, match="gave up after"):
            await write(
                store,
                "t",
                lambda fold: [StateUpdated(values={"context_summary": "x"})],
                state_cls=AgentState,
                actor="x",
                append=always_beaten,
            )
        assert len(tries) == RETRY.races
        assert await store.last_seq("t") == 1


async def test_a_busy_thread_is_waited_out_a_lost_claim_never() -> None:
    rule = RetryRule(busy_wait_s=0.001, max_busy_wait_s=0.002)
    calls: list[str] = []

    async def busy_twice() -> str:
        calls.append("try")
        if len(calls) < 3:
            raise ThreadBusyError("held by a def node still running")
        return "done"

    assert await rule.while_busy(busy_twice) == "done"
    assert len(calls) == 3

    async def lost() -> str:
        calls.append("lost")
        raise ClaimLostError("taken over")

    with pytest.raises(ClaimLostError):
        await rule.while_busy(lost)
    assert calls.count("lost") == 1, "a lost claim is never tried again"

    async def always_busy() -> str:
        raise ThreadBusyError("held")

    async def no_longer_wanted() -> bool:
        return False

    assert await rule.while_busy(always_busy, still=no_longer_wanted) is None
