"""The graph state machine's SQLite and SIGKILL variants find planted bugs too, with a small
example count (each example opens files, or spawns processes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from agentlog.actors.testing import MachineFailure, graph_machine
from tests import toolkit_graphs
from tests.test_toolkit_machine import HUNT, QUICK, run_printed_test
from tests.toolkit_graphs import closure_counter, wall_clock


def test_the_wall_clock_is_found_on_a_sqlite_file() -> None:
    machine = graph_machine(wall_clock, name="ClockOnFile", store="sqlite")
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(machine, settings=settings(HUNT, max_examples=5))
    assert "state kept outside the log" in failure.value.invariant
    assert failure.value.script == ["await app.ainvoke('hello', config)"]


@pytest.mark.slow
def test_a_closure_counter_is_found_through_a_crash_on_a_sqlite_file(tmp_path: Path) -> None:
    machine = graph_machine(closure_counter, name="ClosureOnFile", store="sqlite")
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(machine, settings=settings(HUNT, max_examples=20))
    assert any(line.startswith("# crash") for line in failure.value.script)
    assert "lambda: SQLiteEventStore(path)" in failure.value.test  # reopened from its file
    pasted = run_printed_test(tmp_path, failure.value)
    assert pasted.returncode == 1, pasted.stdout + pasted.stderr
    assert "reply number" in pasted.stdout


@pytest.mark.slow
def test_sigkill_crashes_kill_a_real_child_process() -> None:
    machine = graph_machine(
        toolkit_graphs.scripted_support, name="Killed", store="sqlite", crashes="sigkill"
    )
    run_state_machine_as_test(
        machine, settings=settings(QUICK, max_examples=4, stateful_step_count=5)
    )
    driven: Any = machine()
    try:
        driven.send_input(input="hello")
        driven.crash_at(input="hello", commit=2, when="after")
        assert (driven.main.spawns, driven.main.crashes) == (1, 1)  # a child really died
        assert driven.main.recovery == "resumed"
        driven.check()
        assert driven.live is not None and driven.live.execution_meta.status.value == "completed"
    finally:
        driven.teardown()


@pytest.mark.slow
def test_state_outside_the_log_is_found_with_sigkill_crashes(tmp_path: Path) -> None:
    """Found, not shrunk: every example the shrinker tries spawns processes (a minute and
    more); shrinking is the same machinery as in process, tested above."""
    machine = graph_machine(
        closure_counter, name="KilledClosure", store="sqlite", crashes="sigkill"
    )
    hunt = settings(
        HUNT, max_examples=10, stateful_step_count=6,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
    )  # fmt: skip
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(machine, settings=hunt)
    assert "state kept outside the log" in failure.value.invariant
    assert "in a child process" in "\n".join(failure.value.script) or any(
        line.startswith("# crash") for line in failure.value.script
    )
    pasted = run_printed_test(tmp_path, failure.value)
    assert pasted.returncode == 1, pasted.stdout + pasted.stderr
