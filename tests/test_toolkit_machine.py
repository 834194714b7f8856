"""The graph state machine: it passes healthy graphs, and finds and shrinks planted bugs
(state in a module global, the wall clock, a domain rule broken only after a sequence)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from actors.cli.demo import support_graph
from actors.testing import MachineFailure, graph_machine
from events import MemoryEventStore
from tests import toolkit_graphs
from tests.toolkit_graphs import (
    global_counter,
    refund_creep,
    refund_within_total,
    scripted_support,
    wall_clock,
)

QUICK = settings(
    max_examples=15,
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
HUNT = settings(QUICK, max_examples=60, report_multiple_bugs=False, derandomize=True)
"""Settings for finding a planted bug: fixed seed, so the finding does not depend on luck."""


def test_the_demo_agent_passes_the_machine() -> None:
    run_state_machine_as_test(graph_machine(support_graph, name="Demo"), settings=QUICK)


def test_a_scripted_agent_with_recording_tools_passes_the_machine() -> None:
    run_state_machine_as_test(graph_machine(scripted_support, name="Scripted"), settings=QUICK)


def test_a_module_global_is_found_as_state_outside_the_log() -> None:
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(graph_machine(global_counter, name="Counter"), settings=HUNT)
    assert "state kept outside the log" in failure.value.invariant
    assert "reply number" in failure.value.detail


def test_the_wall_clock_is_found_as_state_outside_the_log() -> None:
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(graph_machine(wall_clock, name="Clock"), settings=HUNT)
    assert "state kept outside the log" in failure.value.invariant
    assert failure.value.script == ["await app.ainvoke('hello', config)"]  # shrunk to one call


def test_a_user_invariant_broken_after_a_sequence_shrinks_to_that_sequence() -> None:
    machine = graph_machine(
        refund_creep,
        name="Refunds",
        inputs=st.sampled_from(["hello", "refund please"]),
        invariants=[refund_within_total],
    )
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(machine, settings=HUNT)
    assert failure.value.invariant == "the user's invariant refund_within_total"
    asks = [line for line in failure.value.script if "refund please" in line]
    assert len(asks) == 3, failure.value.script  # the third request breaks it, not before
    assert len(failure.value.script) == 3
    assert "refund_within_total" in str(failure.value)


def test_the_machine_runs_on_a_sqlite_file() -> None:
    machine = graph_machine(support_graph, name="DemoOnFile", store="sqlite")
    run_state_machine_as_test(machine, settings=settings(QUICK, max_examples=6))


@pytest.mark.slow
def test_sigkill_crashes_kill_a_real_child_process() -> None:
    machine = graph_machine(
        toolkit_graphs.scripted_support, name="Killed", store="sqlite", crashes="sigkill"
    )
    run_state_machine_as_test(
        machine, settings=settings(QUICK, max_examples=4, stateful_step_count=5)
    )


def test_the_machine_works_inside_an_async_test() -> None:
    async def inside() -> None:
        run_state_machine_as_test(
            graph_machine(support_graph, name="Async"), settings=settings(QUICK, max_examples=3)
        )

    import asyncio

    asyncio.run(inside())


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"store": "disk"}, ValueError, "store must be"),
        ({"crashes": "sometimes"}, ValueError, "crashes must be"),
        ({"crashes": "sigkill"}, ValueError, 'needs store="sqlite"'),
        ({"invariants": [3]}, TypeError, "function of the state"),
    ],
)
def test_bad_options_are_refused_with_what_to_do(
    options: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        graph_machine(support_graph, **options)


def test_a_state_graph_is_compiled_on_each_store() -> None:
    from tests.helpers import line

    def hello(state: Any) -> Any:
        return {"messages": [{"role": "assistant", "content": "hi"}]}

    run_state_machine_as_test(
        graph_machine(line(("hello", hello)), name="Plain"),
        settings=settings(QUICK, max_examples=5),
    )


def test_a_factory_returning_something_else_is_refused() -> None:
    with pytest.raises(TypeError, match="must return the compiled graph"):
        graph_machine(lambda store: 5)  # type: ignore[arg-type,return-value]


def test_a_factory_that_does_not_take_the_store_is_refused() -> None:
    with pytest.raises(TypeError, match="takes the store"):
        graph_machine(lambda: support_graph(MemoryEventStore()))  # type: ignore[arg-type,misc]


def test_a_local_factory_cannot_be_killed_in_a_child() -> None:
    def local(store: Any) -> Any:
        return support_graph(store)

    with pytest.raises(TypeError, match="top level of an importable module"):
        graph_machine(local, store="sqlite", crashes="sigkill")


def test_a_factory_must_compile_on_the_store_it_is_given() -> None:
    def elsewhere(store: Any) -> Any:
        return support_graph(MemoryEventStore())

    machine = graph_machine(elsewhere, name="Elsewhere")
    with pytest.raises(TypeError, match="must compile the graph on the store it is given"):
        machine()
