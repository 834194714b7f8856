"""`state_at` keeps the messages it validated out of referencing snapshots and hands them out
through `SharedContext`: the same state as the log's fold at every point, read in any order,
and nothing a caller does to what it was given reaches the cache or another reader."""

from __future__ import annotations

import copy
import pickle
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.events import ChainBrokenError, SQLiteEventStore
from agentlog.events.errors import InvalidArgumentError
from agentlog.projections import AgentState, Message, TextBlock, state_at, state_data
from agentlog.projections import shared as shared_module
from agentlog.projections.views import (
    _CACHE,
    MESSAGE_CACHE_LIMIT,
    SharedContext,
    clear_message_cache,
    set_message_cache_limit,
)

from .test_snapshots import T, Thread, started, steps


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    clear_message_cache()
    yield
    set_message_cache_limit(MESSAGE_CACHE_LIMIT)


async def long_thread(store: SQLiteEventStore, n: int = 40, every: int = 23) -> Thread:
    """`n` agent steps (every other one calling a tool), a snapshot past every `every` records."""
    thread = await started(store, observe=True)
    last = 0
    for k in range(n):
        await thread.step(tool=k % 2 == 1)
        if thread.fold.seq // every > last // every:
            last = thread.fold.seq
            await thread.snapshot()
    return thread


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        yield store


def touch_everything(message: Message) -> None:
    """Change every field, block and nested value of `message` in place."""
    message.metadata["touched"] = True
    message.reasoning = "changed"
    for block in message.content:
        if isinstance(block, TextBlock):
            block.text = "changed"
        elif hasattr(block, "args"):
            block.args["touched"] = {"deep": [1]}
    message.content.append(TextBlock(text="added"))
    if message.tools_calls:
        message.tools_calls[0]["function"] = "changed"


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), limit=st.sampled_from([20_000, 30, 0]))
def test_every_point_in_any_order_is_the_fold_from_the_start(seed: int, limit: int) -> None:
    import asyncio
    import tempfile

    async def run() -> None:
        set_message_cache_limit(limit)
        with tempfile.TemporaryDirectory() as directory:
            async with SQLiteEventStore(Path(directory) / "log.db") as store:
                thread = await long_thread(store)
                last = thread.fold.seq
                points = random.Random(seed).sample(range(1, last + 1), min(last, 25))
                for seq in points:
                    shared = await state_at(store, T, seq)
                    assert shared == await state_at(store, T, seq, use_snapshots=False), seq
                    assert state_data(shared) == state_data(
                        await state_at(store, T, seq, use_snapshots=False)
                    )

    asyncio.run(run())


async def test_a_caller_changing_what_it_read_reaches_no_other_read(db: SQLiteEventStore) -> None:
    thread = await long_thread(db)
    seq = thread.fold.seq
    expected = await state_at(db, T, seq, use_snapshots=False)
    first = await state_at(db, T, seq)
    assert isinstance(first.context, SharedContext)  # served from a referencing snapshot
    again = await state_at(db, T, seq)  # the cache is warm now
    assert isinstance(again.context, SharedContext) and again == expected

    # Every way a list hands out its items: each message reached is changed in place.
    context = again.context
    reached: list[Any] = [
        context[0],
        context[-1],
        *context[1:3],
        *list(reversed(context))[:2],
        *[m for m in context][3:5],
        *context.copy()[5:6],
        *copy.copy(context)[6:7],
        *(context + [])[7:8],  # noqa: RUF005 - the operator itself is under test
        *([] + context)[8:9],  # noqa: RUF005
        *(context * 1)[9:10],
        *sorted(context, key=lambda m: str(m.message_id))[:1],
        *copy.deepcopy(context)[10:11],
        *pickle.loads(pickle.dumps(context))[11:12],
        context.pop(),
    ]
    for message in reached:
        touch_everything(message)
    context.sort(key=lambda m: touch_everything(m) or str(m.message_id))
    context += context
    context.extend(context)
    for message in context:
        touch_everything(message)

    # The changes stay in the state that was changed: a list of its own, as any other.
    assert context[0].metadata["touched"] is True
    assert context[0] is context[0]
    # And reach neither the cache, nor another read, nor the log.
    for use_cache in (True, True, False):
        other = await state_at(db, T, seq, use_snapshots=use_cache)
        assert other == expected
        assert all("touched" not in m.metadata for m in other.context)
    assert first == expected
    assert (await db.verify(T)).ok


async def test_a_state_built_from_a_read_context_owns_its_messages(db: SQLiteEventStore) -> None:
    thread = await long_thread(db)
    seq = thread.fold.seq
    expected = await state_at(db, T, seq, use_snapshots=False)
    await state_at(db, T, seq)
    warm = await state_at(db, T, seq)
    assert isinstance(warm.context, SharedContext)
    built = AgentState(context=warm.context)
    for message in built.context:
        touch_everything(message)
    again = await state_at(db, T, seq)
    assert again == expected
    assert all("touched" not in m.metadata for m in again.context)


async def test_states_equal_compare_pickle_and_dump_like_plain_lists(db: SQLiteEventStore) -> None:
    thread = await long_thread(db)
    await state_at(db, T)
    state = await state_at(db, T)
    assert isinstance(state.context, SharedContext)
    plain = state.model_copy(update={"context": list(state.context)})
    assert state == plain == thread.fold.state
    assert state.model_dump() == plain.model_dump()
    assert pickle.loads(pickle.dumps(state)) == plain
    deep = state.model_copy(deep=True)
    assert deep == plain and type(deep.context) is list
    assert AgentState.model_validate(state_data(state)) == plain


async def test_the_cache_is_per_store(tmp_path: Path) -> None:
    """Two files holding the same thread id with different messages never mix."""
    async with (
        SQLiteEventStore(tmp_path / "a.db") as a,
        SQLiteEventStore(tmp_path / "b.db") as b,
    ):
        first = await long_thread(a)
        other = Thread(b, observe=True)
        other.count = 1000  # other ids and texts at the same seqs
        await other.append(*(await _start_events(other)))
        await steps(other, 40)
        await other.snapshot()
        for _ in range(2):
            assert await state_at(a, T) == first.fold.state
            assert await state_at(b, T) == other.fold.state


async def _start_events(thread: Thread) -> list[Any]:
    from agentlog.events import RunStarted
    from agentlog.projections import message_appended

    return [RunStarted(entry_node="agent"), message_appended(thread.message("user"))]


async def test_a_forged_snapshot_is_refused_with_the_cache_warm(db: SQLiteEventStore) -> None:
    thread = await long_thread(db)
    seq = thread.fold.seq
    await state_at(db, T, seq)
    snapshot = await db.load_snapshot(T, seq, resolve=False)
    assert snapshot is not None and snapshot.context_refs
    await db.save_snapshot(msgspec.structs.replace(snapshot, hash="0" * 64, digest=""))
    with pytest.raises(ChainBrokenError, match="snapshot"):
        await state_at(db, T, seq)
    assert await state_at(db, T, seq, use_snapshots=False) == thread.fold.state


async def test_only_messages_under_a_checked_snapshot_are_kept(db: SQLiteEventStore) -> None:
    thread = await long_thread(db)
    seq = thread.fold.seq
    snapshot = await db.load_snapshot(T, seq, resolve=False)
    assert snapshot is not None and snapshot.context_refs
    await db.save_snapshot(msgspec.structs.replace(snapshot, hash="0" * 64, digest=""))
    with pytest.raises(ChainBrokenError):
        await state_at(db, T, seq)
    assert _CACHE.get(db, T) is None  # refused before anything was kept


async def test_a_limit_of_zero_keeps_nothing_and_a_bad_limit_is_refused(
    db: SQLiteEventStore,
) -> None:
    thread = await long_thread(db)
    set_message_cache_limit(0)
    assert await state_at(db, T) == thread.fold.state
    assert _CACHE.get(db, T) is None
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(InvalidArgumentError, match="cache limit"):
            set_message_cache_limit(bad)  # type: ignore[arg-type]


async def test_a_first_read_validates_only_the_messages_read(
    db: SQLiteEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = await long_thread(db)
    seq = thread.fold.seq
    expected = await state_at(db, T, seq, use_snapshots=False)
    clear_message_cache()
    validated: list[Any] = []
    real = Message.model_validate

    def counting(value: Any, *args: Any, **kwargs: Any) -> Message:
        validated.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(Message, "model_validate", counting)
    monkeypatch.setattr(shared_module, "_validate_message", counting)
    state = await state_at(db, T, seq)
    context = state.context
    assert isinstance(context, SharedContext) and len(context) == len(expected.context) > 20
    assert validated == []  # len, and the fold past the snapshot, validate nothing
    assert isinstance(list.__getitem__(context, 3), bytes)  # its record's payload, as stored
    assert context[3] == expected.context[3] and len(validated) == 1
    assert context[3] is context[3] and len(validated) == 1  # validated once, then its own
    context[3].metadata["mine"] = True
    assert (await state_at(db, T, seq)).context[3] == expected.context[3]  # not the cache's
    context[3].metadata.pop("mine")

    # Every view of the whole sees messages, as a plain context of them gives them.
    for look in (
        lambda s: s == expected,
        lambda s: s.model_dump() == expected.model_dump(),
        lambda s: s.model_dump_json() == expected.model_dump_json(),
        lambda s: state_data(s) == state_data(expected),
        lambda s: pickle.loads(pickle.dumps(s)) == expected,
        lambda s: s.model_copy(deep=True) == expected,
        lambda s: copy.deepcopy(s.context) == expected.context,
        lambda s: repr(s.context) == repr(expected.context),
        lambda s: expected.context[5] in s.context and s.context.index(expected.context[5]) == 5,
        lambda s: [m for m in s.context] == expected.context,
    ):
        assert look(await state_at(db, T, seq))
