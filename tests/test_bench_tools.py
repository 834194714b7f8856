"""The benchmarks' measuring tools count and see what they claim to (bench/_common.py,
bench/workload.py): commits, the workload's shape, and work on other threads; and the
drivers of compare.py's fan-out workload (bench/fanout.py, bench/peers/) reduce right."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import _common as common  # noqa: E402
import compare_fanout  # noqa: E402
import fanout  # noqa: E402
import workload  # noqa: E402
from peers import fanout_spec  # noqa: E402

PEER = ROOT / ".bench-venvs" / "langgraph" / "bin" / "python"


def test_commit_counter_counts_commits_and_autocommit_writes_not_rollbacks(
    tmp_path: Path,
) -> None:
    with common.CommitCounter() as counter:
        conn = sqlite3.connect(tmp_path / "c.sqlite", isolation_level=None)
        conn.execute("CREATE TABLE t (x INTEGER)")  # not a write we count: DDL
        for i in range(3):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO t VALUES (?)", [(i,), (i + 10,)])
            conn.execute("COMMIT")
        conn.execute("INSERT INTO t VALUES (99)")  # autocommit: its own transaction
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t VALUES (100)")
        conn.execute("ROLLBACK")
        conn.execute("SELECT count(*) FROM t").fetchone()
        conn.close()
    assert counter.commits == 4
    assert sqlite3.connect is counter._real  # restored


def test_wants_call_asks_in_two_agent_messages_of_three() -> None:
    steps = 10_000
    n, agent_steps, calls = 1, 0, 0
    while n - 1 < steps:
        agent_steps += 1
        if workload.wants_call(n, steps):
            calls += 1
            n += 2  # the call and its result
        else:
            n += 1
    assert n - 1 == steps
    assert abs(calls / agent_steps - 2 / 3) < 0.001
    assert all(len(workload.agent_text(k, "tool")) == workload.MESSAGE_CHARS for k in (1, 999))


async def test_loop_variants_do_the_same_work_and_count_commits(tmp_path: Path) -> None:
    steps = 23  # ends on an agent step that may not call: no call is left open
    seen = set()
    for variant in workload.REALISTIC:
        with common.CommitCounter() as counter:
            result = await workload.run_loop(
                tmp_path / f"{variant}.sqlite",
                variant,
                steps,
                "t",
                commits=lambda: counter.commits,
            )
        assert result.steps == steps
        assert result.messages == steps + 1
        assert len(result.per_step) == steps
        assert result.commits is not None and result.commits >= result.append_calls
        assert result.append_calls is not None and result.append_calls > 0
        seen.add((result.steps, result.messages, result.tool_results))
    assert len(seen) == 1
    (_, _, tool_results) = seen.pop()
    assert tool_results == 9  # steps 2, 4, 7, 9, 12, 14, 17, 19, 22


def test_thread_profiler_sees_work_on_a_thread_started_inside() -> None:
    def busy_in_a_thread() -> int:
        return sum(i * i for i in range(200_000))

    with common.ThreadProfiler() as profiler:
        worker = threading.Thread(target=busy_in_a_thread)
        worker.start()
        worker.join()
    report = profiler.report(50)
    names = [e["function"] for e in report["top_cumulative"]]
    assert any("test_bench_tools.py" in name and "genexpr" in name for name in names), names
    assert report["threads"] == 2
    assert threading.Thread.run is profiler._real_run  # restored


def test_paired_ratio_is_the_median_of_round_by_round_ratios() -> None:
    # the machine slowed down in round 2 for both: pairing sees a steady 0.9
    ours, peer = [90.0, 45.0, 88.0], [100.0, 50.0, 100.0]
    assert common.paired_ratio(ours, peer) == 0.9
    assert common.median(ours) / common.median(peer) != 0.9  # what the medians would say
    try:
        common.paired_ratio([1.0], [1.0, 2.0])
    except ValueError as exc:
        assert "equally many" in str(exc)
    else:
        raise AssertionError("unequal rounds were accepted")


def test_the_time_travel_bench_measures_compiles_default_snapshot_setting() -> None:
    """bench/timetravel.py's first setting is compile's own default (it refuses to run when
    they part, as it did when the default moved and the bench kept the old figure)."""
    import timetravel

    assert timetravel.SNAPSHOT_SETTINGS[0] == timetravel.compile_default()


async def test_the_fanout_graph_reduces_its_8_branches_and_counts_each_fanout_step(
    tmp_path: Path,
) -> None:
    runs = 3
    with common.CommitCounter() as counter:
        result = await fanout.run_fanout(
            tmp_path / "fan.sqlite", runs, commits=lambda: counter.commits
        )
    assert result.finals == [fanout.expected(k) for k in range(runs)]
    assert result.stored_last == fanout.expected(runs - 1)
    assert fanout.expected(0)["summary"] == "8 results, 1600 characters"
    assert result.steps_per_run == 3  # plan; the 8 branches as one step; join
    assert result.appends is not None
    steps = result.appends.fanout_steps()
    assert len(steps) == runs  # one fan-out step per run, found once each
    assert all(appends >= 1 and commits >= appends for appends, commits in steps)


def _driver(python: Path | str, driver: str, db: Path, *more: str) -> dict[str, object]:
    script = str(ROOT / "bench" / "peers" / driver)
    ran = subprocess.run(
        [str(python), script, "--workload", "fanout", "--n", "3", "--db", str(db), *more],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    result: dict[str, object] = json.loads(ran.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("front", ["agentlog", "langgraph"])
def test_the_agentlog_driver_runs_the_fanout_right_on_either_front(
    front: str, tmp_path: Path
) -> None:
    timed = _driver(sys.executable, "agentlog_driver.py", tmp_path / "a.sqlite", "--front", front)
    assert (timed["runs"], timed["runs_right"], timed["stored_right"]) == (3, 3, True)
    assert timed["last_final"] == fanout_spec.digest(fanout.expected(2))
    assert timed["steps_per_run"] == 3


def test_the_agentlog_driver_reports_the_commits_of_a_fanout_step(tmp_path: Path) -> None:
    counted = _driver(
        sys.executable, "agentlog_driver.py", tmp_path / "c.sqlite", "--measure", "commits"
    )
    assert counted["runs_right"] == 3
    appends, commits = counted["appends_per_fanout_step"], counted["commits_per_fanout_step"]
    assert isinstance(appends, float | int) and isinstance(commits, float | int)
    assert commits >= appends >= 1


@pytest.mark.parametrize(
    "column", [["--checkpointer", "none"], ["--durability", "sync"], ["--durability", "async"]]
)
def test_the_langgraph_driver_reduces_the_fanout_as_agentlog_does(
    column: list[str], tmp_path: Path
) -> None:
    if not PEER.exists():
        if os.environ.get("AGENTLOG_PEERS") == "required":
            pytest.fail(
                f"LangGraph's venv is missing: run `{sys.executable} bench/venvs.py langgraph`"
            )
        pytest.skip("LangGraph's venv is missing: `make test` makes it (bench/venvs.py langgraph)")
    result = _driver(PEER, "langgraph_driver.py", tmp_path / "l.sqlite", *column)
    assert (result["runs"], result["runs_right"]) == (3, 3)
    assert result["stored_right"] is (None if "none" in column else True)
    assert result["last_final"] == fanout_spec.digest(fanout.expected(2))


def test_same_result_sees_a_system_that_reduced_differently() -> None:
    good = {"runs": 3, "branches": 8, "runs_right": 3, "stored_right": True, "last_final": 1}
    assert compare_fanout.same_result({"a": [good], "b": [good]})["ok"]
    assert not compare_fanout.same_result({"a": [good], "b": [{**good, "last_final": 2}]})["ok"]
    assert not compare_fanout.same_result({"a": [good], "b": [{**good, "runs_right": 2}]})["ok"]


def test_the_fanout_columns_add_the_ported_program_after_agentlog() -> None:
    import compare

    cs = [compare.Contender("agentlog", "agentlog"), compare.Contender("langgraph-none", "x")]
    labels = [(c.label, c.system, c.extra) for c in compare_fanout.columns(cs)]
    assert labels == [
        ("agentlog", "agentlog", []),
        ("agentlog-langgraph", "agentlog", ["--front", "langgraph"]),
        ("langgraph-none", "x", []),
    ]
