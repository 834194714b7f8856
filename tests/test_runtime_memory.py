"""What the runtime keeps after its runs end: no input, at most `keep_results` ended runs,
before and after a restart (counted in objects and sizes, never timed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pydantic
import pytest

from agentlog.actors.runtime import (
    AgentRuntime,
    EntryPoint,
    IdempotencyKeyMismatchError,
    RuntimeConfig,
    UnknownRunError,
)
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message
from tests.helpers import line

LARGE = 50_000


def said(state: AgentState) -> list[Message]:
    return [Message.text_message("ok", role="assistant")]


def runtime_on(store: SQLiteEventStore, **config: Any) -> AgentRuntime:
    runtime = AgentRuntime(store, RuntimeConfig(**config))
    runtime.add_graph("g", line(("work", said)).compile(store))
    runtime.register_entry_point(EntryPoint(id="api", graph_id="g"))
    return runtime


def strings(value: Any, seen: set[int] | None = None) -> Iterator[str]:
    """Every str reachable from `value` through containers, dataclasses, structs, models."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key, seen)
            yield from strings(item, seen)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from strings(item, seen)
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            yield from strings(getattr(value, name), seen)
    elif isinstance(value, pydantic.BaseModel):
        yield from strings(dict(value), seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from strings(getattr(value, f.name), seen)
    elif isinstance(value, BaseException):
        yield from strings(value.args, seen)


def kept_input_bytes(runtime: AgentRuntime) -> int:
    """The size of the large inputs still reachable from what the runtime keeps of runs."""
    kept = (runtime.ledger, runtime.dispatcher.results, runtime.dispatcher.errors)
    return sum(len(s) for s in strings(kept) if len(s) >= LARGE)


async def test_ended_runs_leave_no_input_behind(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "x.db") as store, runtime_on(store) as runtime:
        for i in range(12):
            thread = await runtime.trigger("api", f"{i}" + "x" * LARGE)
            result = await runtime.wait(thread)
            assert result["status"] == "completed"
        assert kept_input_bytes(runtime) == 0
        assert not runtime.dispatcher.results  # each went to its waiter
        again = await runtime.wait(thread)  # rebuilt from the log: the input is there
        assert again["messages"][0].text().startswith("11xxx")


async def test_at_most_keep_results_ended_runs_are_kept_and_a_restart_holds_no_more(
    tmp_path: Path,
) -> None:
    keep, runs = 5, 40
    async with SQLiteEventStore(tmp_path / "x.db") as store:
        async with runtime_on(store, keep_results=keep) as runtime:
            threads = []
            for i in range(runs):
                key = "first" if i == 0 else None
                threads.append(await runtime.trigger("api", f"{i}" + "x" * LARGE,
                                                     idempotency_key=key))  # fmt: skip
                if i % 3:  # some are waited for, others are not
                    await runtime.wait(threads[-1])
            await runtime.wait(threads[-1])
            ledger = runtime.ledger
            assert len(ledger.triggers) <= keep and len(ledger.finished) <= keep
            assert len(runtime.dispatcher.results) <= keep
            assert len(ledger.by_thread) <= keep
            assert kept_input_bytes(runtime) == 0
            assert runtime.stats()["entry_points"]["api"]["completed"] == runs
            with pytest.raises(UnknownRunError, match="last 5 ended runs"):
                await runtime.wait(threads[0])
            # a key of a run no longer kept still names it, and still tells its request
            again = "0" + "x" * LARGE
            assert await runtime.trigger("api", again, idempotency_key="first") == threads[0]
            with pytest.raises(IdempotencyKeyMismatchError):
                await runtime.trigger("api", "other", idempotency_key="first")
        async with runtime_on(store, keep_results=keep) as restarted:
            assert len(restarted.ledger.triggers) <= keep
            assert kept_input_bytes(restarted) == 0
            assert restarted.stats()["entry_points"]["api"]["completed"] == runs
            assert (await restarted.wait(threads[-1]))["status"] == "completed"


def test_keep_results_is_a_positive_int() -> None:
    from agentlog.actors.runtime import RegistrationError

    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(RegistrationError, match="keep_results must be an int >= 1"):
            RuntimeConfig(keep_results=bad)  # type: ignore[arg-type]


async def test_a_restart_folds_a_long_history_a_page_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a restart holds at its peak is a page of the runtime thread, not its history."""
    import tracemalloc

    from agentlog.actors.runtime import journal

    runs = 40
    async with SQLiteEventStore(tmp_path / "x.db") as store:
        async with runtime_on(store, keep_results=5) as runtime:
            for i in range(runs):
                await runtime.wait(await runtime.trigger("api", f"{i}" + "x" * LARGE))
        monkeypatch.setattr(journal, "CATCH_UP_PAGE", 12)  # 4 runs' records a page
        restarted = runtime_on(store, keep_results=5)
        tracemalloc.start()
        try:
            await restarted.start()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            await restarted.stop()
        assert len(restarted.ledger.triggers) <= 5
        assert peak < runs * LARGE / 2, f"a restart peaked at {peak} bytes"


async def test_a_restart_starts_from_the_ledgers_snapshot_not_from_the_first_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger is saved every `SNAPSHOT_EVERY` records of the runtime thread; a restart
    loads the newest and folds only what follows, into the same ledger a full fold makes."""
    from agentlog.actors.runtime import journal
    from agentlog.actors.runtime.ledger import Ledger

    monkeypatch.setattr(journal, "SNAPSHOT_EVERY", 30)
    async with SQLiteEventStore(tmp_path / "x.db") as store:
        async with runtime_on(store, keep_results=5) as runtime:
            threads = []
            for i in range(40):
                threads.append(await runtime.trigger("api", f"{i}", idempotency_key=f"k{i}"))
                await runtime.wait(threads[-1])
            pending = await runtime.trigger("api", "later")  # accepted, still to run
        assert await store.snapshot_seqs("__runtime__")
        read = store.read
        starts: list[int] = []

        def counting(thread_id: str, from_seq: int = 1, *rest: Any) -> Any:
            if thread_id == "__runtime__":
                starts.append(from_seq)
            return read(thread_id, from_seq, *rest)

        monkeypatch.setattr(store, "read", counting)
        restarted = runtime_on(store, keep_results=5)
        await restarted.journal.catch_up()
        assert starts and min(starts) > 1, starts  # never from the first record
        monkeypatch.setattr(store, "read", read)
        full = Ledger(keep=5)
        full.apply_all([r async for r in store.read("__runtime__")])
        assert restarted.ledger.to_snapshot() == full.to_snapshot()
        async with restarted:
            assert (await restarted.wait(pending))["status"] == "completed"
            # the key's request digest came through the snapshot: a retry, or a mismatch
            assert await restarted.trigger("api", "0", idempotency_key="k0") == threads[0]
            with pytest.raises(IdempotencyKeyMismatchError):
                await restarted.trigger("api", "again", idempotency_key="k0")
            assert restarted.stats()["entry_points"]["api"]["completed"] == 41
