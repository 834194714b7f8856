"""`gc_paused`: the collector is off while a state is built, and what was built joins the
oldest generation afterwards instead of being examined by young collections that free none
of it, without ever undoing objects the application froze."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from projections.fold import gc_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


def _build(n: int) -> list[dict[str, list[int]]]:
    return [{"blocks": [i]} for i in range(n)]


def test_what_is_built_while_paused_joins_the_oldest_generation(collector_on: None) -> None:
    with gc_paused():
        assert not gc.isenabled()
        built = _build(5_000)
    assert gc.isenabled()
    assert gc.get_count()[0] < 700  # no young collection is due because of the build
    assert any(obj is built for obj in gc.get_objects(generation=2))
    assert not any(obj is built for obj in gc.get_objects(generation=0))


def test_a_nested_pause_leaves_the_collector_off_until_the_outer_one_ends(
    collector_on: None,
) -> None:
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_application_turned_off_stays_off() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            _build(10)
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def test_objects_the_application_froze_stay_frozen(collector_on: None) -> None:
    kept = {"frozen": ["by the application"]}
    gc.freeze()
    try:
        with gc_paused():
            _build(1_000)
        assert gc.get_freeze_count() > 0
        for generation in range(3):
            assert not any(obj is kept for obj in gc.get_objects(generation=generation))
    finally:
        gc.unfreeze()


def test_cyclic_garbage_made_while_paused_is_still_collected(collector_on: None) -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    with gc_paused():
        Node()
    assert gc.collect() >= 1  # promoted, not lost: a full collection frees it
