"""Read your writes under `shared` isolation, against a model (issue 33, row 5): whatever the
run's steps, failed attempts and retries, a node reads the value as read at the run's start
with exactly the writes that landed (earlier steps' committed attempts) and its own pending
ones applied; never a failed attempt's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.actors.engine.context import NodeContext, _current
from agentlog.actors.runtime import EntryPoint
from agentlog.actors.runtime.shared import RunScope


async def _never(*_: Any, **__: Any) -> list[Any]:
    return []


ops = st.lists(st.sampled_from(["a", "b"]).flatmap(
    lambda key: st.tuples(st.just(key), st.integers(-5, 5))
), min_size=1, max_size=4)  # fmt: skip
attempts = st.lists(ops, min_size=1, max_size=3)  # a step's attempts: all but the last fail
steps = st.lists(st.tuples(st.sampled_from(["fetch", "act"]), attempts), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(steps=steps, base=st.dictionaries(st.sampled_from(["a", "b"]), st.integers(-9, 9)))
def test_a_node_reads_what_landed_and_its_own_pending_writes(
    steps: list[tuple[str, list[list[tuple[str, int]]]]], base: dict[str, int]
) -> None:
    runtime = SimpleNamespace(facts=SimpleNamespace(values=dict(base)))
    entry = EntryPoint(id="api", graph_id="g", isolation="shared")
    scope = RunScope(runtime, entry, SimpleNamespace())  # type: ignore[arg-type]
    landed = dict(base)  # the model: what the run's committed writes made of each key
    seq = 0
    for number, (node, tries) in enumerate(steps, start=1):
        seq += 3
        for attempt, writes in enumerate(tries):
            context = NodeContext("t", "r", node, _never, step_seq=seq, step=number)
            token = _current.set(context)
            try:
                pending = dict(landed)
                for key, by in writes:
                    scope.wrote(key, "increment", by)
                    pending[key] = pending.get(key, 0) + by
                    for k in ("a", "b"):
                        assert scope.visible(k) == pending.get(k), (k, steps)
            finally:
                _current.reset(token)
            if attempt == len(tries) - 1:  # the last attempt committed with its step
                landed = pending
    reader = NodeContext("t", "r", "report", _never, step_seq=seq + 3, step=len(steps) + 1)
    token = _current.set(reader)
    try:
        for key in ("a", "b"):
            assert scope.visible(key) == landed.get(key), (key, steps)
    finally:
        _current.reset(token)
