"""Checks a test runs on a recorded thread, and the steps a counterexample script takes.

`assert_replays` is what the pytest fixture `agentlog_assert_replays` calls; `restart` and
`paused_at` are what the graph state machine does to a thread at a commit it chose, so a
script it prints can do the same. Nothing here imports pytest or hypothesis.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentlog.actors.testing.faults import FaultyStore
from agentlog.events import EventStore
from agentlog.events.errors import AgentlogError
from agentlog.projections import AgentState, replay, state_at, verify_snapshots
from agentlog.projections.invariants import thread_findings

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph

T = TypeVar("T")

__all__ = ["assert_replays", "paused_at", "restart"]


async def assert_replays(
    app: Any, thread_id: str, state_cls: type[AgentState] | None = None
) -> AgentState:
    """Assert that `thread_id` (in an app's store, or a store) still replays to the state it
    recorded: the chain verifies, the log folds to what a read through snapshots gives, every
    snapshot agrees with the log, and every tool call has exactly one result. Returns the
    state; raises `AssertionError` naming the thread and what is wrong."""
    store: EventStore = getattr(app, "store", app)
    if state_cls is None:
        graph = getattr(app, "graph", None)
        state_cls = graph.state_cls if graph is not None else None
    report = await store.verify(thread_id)
    assert report.ok, f"thread {thread_id!r}: the log does not verify: {report}"
    records = [r async for r in store.read(thread_id)]
    folded = replay(records, state_cls) if state_cls else replay(records)
    recorded = await state_at(store, thread_id, state_cls=type(folded))
    assert recorded.model_dump(mode="json") == folded.model_dump(mode="json"), (
        f"thread {thread_id!r}: the state read through snapshots differs from the replay"
    )
    bad = [f for f in await verify_snapshots(store, thread_id, state_cls) if f.problem]
    assert not bad, f"thread {thread_id!r}: a snapshot disagrees with the log: {bad[0]}"
    findings = await thread_findings(store, thread_id, state_cls)
    assert findings.ok, f"thread {thread_id!r}: {findings.findings[0]}"
    return folded


async def reopen_after_crash(
    store: FaultyStore, reopen: Callable[[], EventStore] | None = None
) -> EventStore:
    """What a restart does to a store that crashed: the dead app's claims go, and the store
    is opened afresh from its files (`reopen`; None keeps the inner store, as for memory)."""
    store.bury()
    await asyncio.sleep(0)  # let the dead app's tasks see their refusals
    if reopen is None:
        return store.inner
    with contextlib.suppress(AgentlogError):
        await store.inner.close()
    return reopen()


async def restart(
    factory: Callable[[EventStore], CompiledGraph[Any]],
    store: FaultyStore,
    reopen: Callable[[], EventStore] | None = None,
) -> tuple[CompiledGraph[Any], FaultyStore]:
    """After `store` crashed: what a restarted process does. Let go of the dead app's
    claims, open the store again (`reopen`, say `lambda: SQLiteEventStore(path)`; None for a
    memory store, which outlives its app) and build the app on it with `factory`. Returns the
    new app and its store (a `FaultyStore` on the same thread, to crash again)."""
    inner = await reopen_after_crash(store, reopen)
    fresh = FaultyStore(inner, store.thread_id)
    return factory(fresh), fresh


async def paused_at(
    store: FaultyStore, call: Awaitable[T], commit: int | None
) -> asyncio.Future[T]:
    """Start `call` (say `app.ainvoke(...)`) held after the `commit`-th commit `store` sees
    (None: not held); return once it is held there or has ended. The result is the running
    call: `store.disarm()` lets it go on, then await it."""
    if commit is not None:
        store.pause_at(commit, "after")
    run = asyncio.ensure_future(call)
    paused = asyncio.ensure_future(store.paused.wait())
    await asyncio.wait({run, paused}, return_when=asyncio.FIRST_COMPLETED)
    paused.cancel()
    return run
