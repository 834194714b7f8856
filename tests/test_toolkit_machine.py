"""The graph state machine: it passes healthy graphs, finds and shrinks planted bugs (state
in a module global, in a closure, the wall clock, a domain rule broken only after a
sequence), and prints the steps as a test that fails the same way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from agentlog.actors.examples.support import support_graph
from agentlog.actors.testing import MachineFailure, RecordedCall, graph_machine
from agentlog.events import MemoryEventStore
from agentlog.projections import Message
from tests.helpers import QUIET_PYTEST, ROOT
from tests.toolkit_graphs import (
    closure_counter,
    counting_graph,
    global_counter,
    refund_creep,
    refund_within_total,
    reused_call_id,
    scripted_support,
    wall_clock,
)

QUICK = settings(
    max_examples=15,
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
HUNT = settings(QUICK, max_examples=40, report_multiple_bugs=False, derandomize=True, database=None)
"""Settings for finding a planted bug: the CI profile's example count and a fixed seed, so
the finding does not depend on luck."""


def run_printed_test(tmp_path: Path, failure: MachineFailure) -> subprocess.CompletedProcess[str]:
    """Paste the test a failure printed into a file of its own and run it with pytest."""
    assert failure.test
    shown = str(failure)
    assert all(line in shown for line in failure.test.splitlines())  # printed in the failure
    (tmp_path / "test_pasted.py").write_text(failure.test)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *QUIET_PYTEST, "-p", "no:xdist",
         "-p", "no:randomly", str(tmp_path / "test_pasted.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip


def test_the_demo_agent_passes_the_machine() -> None:
    run_state_machine_as_test(graph_machine(support_graph, name="Demo"), settings=QUICK)


def test_a_scripted_agent_with_recording_tools_passes_the_machine() -> None:
    run_state_machine_as_test(graph_machine(scripted_support, name="Scripted"), settings=QUICK)


def test_a_module_global_is_found_as_state_outside_the_log() -> None:
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(graph_machine(global_counter, name="Counter"), settings=HUNT)
    assert "state kept outside the log" in failure.value.invariant
    assert "reply number" in failure.value.detail


def test_the_wall_clock_is_found_as_state_outside_the_log(tmp_path: Path) -> None:
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(graph_machine(wall_clock, name="Clock"), settings=HUNT)
    assert "state kept outside the log" in failure.value.invariant
    assert failure.value.script == ["await app.ainvoke('hello', config)"]  # shrunk to one call
    pasted = run_printed_test(tmp_path, failure.value)
    assert pasted.returncode == 1, pasted.stdout + pasted.stderr
    assert "assert comparable(crashed) == comparable(calm)" in pasted.stdout
    assert "answered at" in pasted.stdout


@pytest.mark.slow  # a hypothesis search and shrink through real crashes: 30-60 s
def test_a_counter_in_a_closure_is_found_through_a_crash(tmp_path: Path) -> None:
    """Each app counts alone, so only a crash (and the app it rebuilds) shows the bug."""
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(graph_machine(closure_counter, name="Closure"), settings=HUNT)
    assert "state kept outside the log" in failure.value.invariant
    assert any(line.startswith("# crash") for line in failure.value.script)
    assert len(failure.value.script) <= 4, failure.value.script
    assert "restart(closure_counter, store)" in failure.value.test
    pasted = run_printed_test(tmp_path, failure.value)
    assert pasted.returncode == 1, pasted.stdout + pasted.stderr
    assert "reply number" in pasted.stdout


def test_a_reused_tool_call_id_is_named_as_the_cause() -> None:
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(graph_machine(reused_call_id, name="Reused"), settings=HUNT)
    assert failure.value.invariant == "no committed tool result runs again"
    assert "asked for a call with the id 'call-1' again" in failure.value.detail
    assert "each tool call needs an id of its own" in failure.value.detail


@pytest.mark.slow  # a hypothesis search and shrink through real crashes: 30-60 s
def test_a_user_invariant_broken_after_a_sequence_shrinks_to_a_test_that_fails(
    tmp_path: Path,
) -> None:
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
    test = failure.value.test
    assert "from tests.toolkit_graphs import refund_creep, refund_within_total" in test
    assert "def test_refunds_counterexample() -> None:" in test
    assert "assert refund_within_total(state) is not False" in test
    pasted = run_printed_test(tmp_path, failure.value)
    assert pasted.returncode == 1, pasted.stdout + pasted.stderr
    assert "1 failed" in pasted.stdout
    assert "refund=120.0" in pasted.stdout  # the third request: 3 x 40 over the 89.90 total


def test_the_machine_runs_on_a_sqlite_file() -> None:
    machine = graph_machine(support_graph, name="DemoOnFile", store="sqlite")
    run_state_machine_as_test(machine, settings=settings(QUICK, max_examples=6))


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

    with pytest.raises(TypeError, match="must compile the graph on the store it is given"):
        graph_machine(elsewhere, name="Elsewhere")


def test_one_invariant_not_in_a_list_is_refused_with_what_to_write() -> None:
    with pytest.raises(TypeError, match=r"invariants=\[your_rule\]"):
        graph_machine(support_graph, invariants=refund_within_total)  # type: ignore[arg-type]


def test_an_invariant_that_raises_is_reported_with_the_steps() -> None:
    def refund_below_ten(state: Any) -> bool:
        return bool(state.refund <= 10)  # AgentState has no refund: AttributeError

    machine = graph_machine(support_graph, name="Raising", invariants=[refund_below_ten])
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(machine, settings=HUNT)
    assert failure.value.invariant == "the user's invariant refund_below_ten"
    assert failure.value.detail.startswith("it raised AttributeError")
    assert isinstance(failure.value.__cause__, AttributeError)
    assert failure.value.script == ["await app.ainvoke('hello', config)"]


# ---- each rule, driven by hand, and the invariants' own failures -------------------------


def drive(machine: Any) -> None:
    """Every rule once, on the demo agent: each must do what it says, and the checks hold."""
    machine.send_input(input="I want a refund")  # looks the order up, pauses before the refund
    machine.check()
    assert machine.interrupted()
    machine.human_edit(
        values={"messages": [Message.text_message("please hurry", role="user")]}, as_node="agent"
    )
    machine.check()
    machine.answer_interrupt(answer="yes")
    machine.check()
    machine.stop_at(input="hello", commit=2)
    machine.check()
    machine.resume()
    machine.check()
    machine.invoke_twice(input="hello", commit=1)
    machine.check()
    machine.crash_at(input="hello", commit=2, when="after")
    machine.check()
    machine.time_travel(pick=3)
    machine.fork_at(pick=2, switch=True)
    machine.check()
    machine.send_input(input="hello")
    machine.check()


def test_each_rule_does_what_it_says_and_its_script_replays(tmp_path: Path) -> None:
    machine: Any = graph_machine(support_graph, name="Driven")()
    try:
        drive(machine)
        code = "\n".join(line for step in machine.steps for line in step.main)
        assert "await app.astop(config)" in code  # the stop landed in a paused run
        assert "with pytest.raises(ThreadBusyError):" in code  # the second call was refused
        assert machine.main.crashes == 1 and "restart(build, store)" in code
        assert "config = {'thread_id': 't~fork1'}" in code
        assert machine.main.thread_id == "t~fork1"
        shadow = [step.said for step in machine.steps if step.shadow is not None]
        assert len(shadow) == 2  # only the crash and the second invocation differ
        both = machine.code.render(machine.steps, "shadow")
        logged = machine.code.render(machine.steps, "log")
    finally:
        machine.teardown()
    assert "def test_driven_counterexample() -> None:" in both
    assert "assert comparable(crashed) == comparable(calm)" in both
    assert 'return await assert_replays(app, config["thread_id"])' in logged
    test = both + "\n" + logged.replace("_counterexample(", "_log_counterexample(")
    (tmp_path / "test_replayed.py").write_text(test)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *QUIET_PYTEST, str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, test + done.stdout + done.stderr  # a healthy graph passes
    assert "2 passed" in done.stdout


def machine_after_one_call() -> Any:
    machine: Any = graph_machine(scripted_support, name="Sabotaged")()
    machine.send_input(input="hello")
    machine.check()
    return machine


def test_a_tampered_log_breaks_the_chain_invariant() -> None:
    machine = machine_after_one_call()
    try:
        rows = machine.main.inner._threads["t"]
        rows[1] = rows[1]._replace(payload=rows[1].payload.replace(b"hello", b"HELLO"))
        with pytest.raises(MachineFailure, match="broken: the hash chain verifies"):
            machine.check()
    finally:
        machine.teardown()


def test_a_live_state_the_log_does_not_give_breaks_the_replay_invariant() -> None:
    machine = machine_after_one_call()
    try:
        assert machine.live is not None
        machine.live = machine.live.model_copy(update={"context": machine.live.context[:-1]})
        with pytest.raises(MachineFailure, match="broken: replay of the log equals the live"):
            machine.check()
    finally:
        machine.teardown()


def test_a_tool_run_again_after_its_result_committed_breaks_the_rerun_invariant() -> None:
    machine = machine_after_one_call()
    try:
        life = machine.main.life
        life.finished_before = frozenset({"c-1"})
        life.tools[0].calls.append(RecordedCall(1, "c-1", {"order_id": "A-1"}, "completed"))
        with pytest.raises(MachineFailure, match="no committed tool result runs again") as failure:
            machine.check()
        assert "lookup_order ran call 'c-1' again" in failure.value.detail
        assert "assert_replays(app, config" in failure.value.test
    finally:
        machine.teardown()


def test_the_benchmark_says_what_it_measures() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "testing.py"), "--help"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "with the memory store and with SQLite" in said
    assert "agentlog_share" in said


@pytest.mark.slow  # a hypothesis search and shrink through real crashes: 30-60 s
def test_the_test_printed_for_a_state_graph_compiles_it_by_its_name(tmp_path: Path) -> None:
    with pytest.raises(MachineFailure) as failure:
        run_state_machine_as_test(graph_machine(counting_graph, name="Given"), settings=HUNT)
    assert "from tests.toolkit_graphs import counting_graph" in failure.value.test
    assert "app = counting_graph.compile(store)" in failure.value.test
    pasted = run_printed_test(tmp_path, failure.value)
    assert pasted.returncode == 1, pasted.stdout + pasted.stderr
    assert "reply number" in pasted.stdout
