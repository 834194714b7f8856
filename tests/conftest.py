"""Shared test setup: hypothesis profiles and event builders."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from agentlog.events import EventStore, MemoryEventStore, SQLiteEventStore

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
    print_blob=True,
)
settings.register_profile(
    "dev",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def examples(wanted: int) -> int:
    """An explicit example count capped by the loaded profile: `ci` (40) bounds the suite's
    time, `dev` (100) lets the count a test asks for through."""
    return min(wanted, settings.default.max_examples)


def ticking_clock() -> Callable[[], float]:
    """A clock read once per append: records of one commit share `at`, commits differ."""
    counter = itertools.count(1)
    return lambda: float(next(counter))


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    """Each store kind in turn, on a ticking clock (test classes may override it)."""
    if request.param == "memory":
        yield MemoryEventStore(clock=ticking_clock())
    else:
        async with SQLiteEventStore(tmp_path / "log.db", clock=ticking_clock()) as sqlite:
            yield sqlite


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with slow tests first, each file's tests kept together and in their order.

    `make test` hands whole files to its workers in collection order (loadfile, with xdist's
    reordering by test count turned off: it put the files of a few long tests, the slowest
    ones, last). Started first, the long files run beside each other and the short ones fill
    in behind them, instead of one long file running alone at the end.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # a stable sort
