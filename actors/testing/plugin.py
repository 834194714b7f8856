"""agentlog's pytest plugin: fixtures for a temporary store, the app under test on it, and
an assertion that a thread still replays to the state it recorded.

Installed with agentlog (the `pytest11` entry point); it imports agentlog only when a test
asks for one of its fixtures, all named `agentlog_*`. Define `agentlog_graph` (a `StateGraph`,
or a factory `build(store)` returning the compiled app) to get `agentlog_app`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph
    from agentlog.events import EventStore
    from agentlog.projections import AgentState


def _finish(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run `coro` to the end from sync code, even under a running loop (async tests)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = asyncio.run(coro)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    worker = threading.Thread(target=run, name="agentlog-plugin")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


@pytest.fixture
def agentlog_store_kind() -> str:
    """Which store `agentlog_store` is: "sqlite" (default) or "memory"; override to change."""
    return "sqlite"


@pytest.fixture
def agentlog_sqlite_store(tmp_path: Path) -> Iterator[EventStore]:
    """A SQLite event store on a file in the test's temporary directory, closed afterwards."""
    from agentlog.events import SQLiteEventStore

    store = SQLiteEventStore(tmp_path / "agentlog.db")
    yield store
    _finish(store.close())


@pytest.fixture
def agentlog_memory_store() -> EventStore:
    """An in-memory event store (the same contract as SQLite, nothing on disk)."""
    from agentlog.events import MemoryEventStore

    return MemoryEventStore()


@pytest.fixture
def agentlog_store(request: pytest.FixtureRequest, agentlog_store_kind: str) -> EventStore:
    """The store the app under test runs on, as `agentlog_store_kind` says."""
    if agentlog_store_kind not in ("sqlite", "memory"):
        raise pytest.UsageError(
            f"agentlog_store_kind must return 'sqlite' or 'memory', got {agentlog_store_kind!r}"
        )
    store: EventStore = request.getfixturevalue(f"agentlog_{agentlog_store_kind}_store")
    return store


@pytest.fixture
def agentlog_graph() -> Any:
    """Define this fixture in your conftest: your `StateGraph`, or `build(store)`."""
    raise pytest.UsageError(
        "agentlog_app needs your graph: define a fixture named agentlog_graph that returns "
        "your StateGraph (uncompiled) or a function build(store) returning the compiled app"
    )


@pytest.fixture
def agentlog_app(agentlog_graph: Any, agentlog_store: EventStore) -> Iterator[CompiledGraph[Any]]:
    """The app under test: `agentlog_graph` compiled onto `agentlog_store`."""
    from agentlog.actors.engine.compiled import CompiledGraph
    from agentlog.actors.engine.graph import StateGraph

    if isinstance(agentlog_graph, StateGraph):
        app: Any = agentlog_graph.compile(agentlog_store)
    elif isinstance(agentlog_graph, CompiledGraph):
        raise pytest.UsageError(
            "agentlog_graph returned a compiled app: return the StateGraph itself, or a "
            "function build(store), so the app runs on the test's own store"
        )
    elif callable(agentlog_graph):
        app = agentlog_graph(agentlog_store)
    else:
        raise pytest.UsageError(
            f"agentlog_graph must return a StateGraph or build(store), got {agentlog_graph!r}"
        )
    if not isinstance(app, CompiledGraph) or app.store is not agentlog_store:
        raise pytest.UsageError(
            "agentlog_graph's build(store) must return graph.compile(store) on the store given"
        )
    yield app
    app.close()


class ReplayCheck:
    """`check(app_or_store, thread_id)`: the thread's log verifies and replays to the state
    it recorded (snapshots and the live fold agree), every tool call has one result.

    Call it in a sync test; `await check.async_(...)` in an async one. Returns the state.
    """

    def __call__(
        self, app: Any, thread_id: str, state_cls: type[AgentState] | None = None
    ) -> AgentState:
        return _finish(self.async_(app, thread_id, state_cls))  # type: ignore[no-any-return]

    async def async_(
        self, app: Any, thread_id: str, state_cls: type[AgentState] | None = None
    ) -> AgentState:
        from agentlog.actors.testing.checks import assert_replays

        return await assert_replays(app, thread_id, state_cls)


@pytest.fixture
def agentlog_assert_replays() -> ReplayCheck:
    """Assert that a recorded thread still replays to the state it recorded."""
    return ReplayCheck()
