"""One owner per thread, across real processes: the claim a run takes, and how it ends.

The store-level rules (busy, fenced, taken over) are in the conformance suite; here they
are exercised where they matter: two processes on one SQLite file, a process killed with
SIGKILL while it holds a thread, and programs that end without closing their store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog import END, START, AgentState, StateGraph
from agentlog.actors.testing import until, until_blocking
from agentlog.events import NodeEntered, SQLiteEventStore
from agentlog.events.claims import HOST, Claim, Heartbeat, new_claim
from agentlog.events.stores import sqlite as sqlite_store

from .helpers import agent_with_tools

ROOT = Path(__file__).resolve().parent.parent
WORKER_TIMEOUT = 60.0
"""No worker here should take more than a few seconds; past this the test fails."""


def worker(module: str, *args: str, wait_go: bool = False) -> subprocess.Popen[str]:
    """Start `python -m tests.workers.<module> ARGS` in the repository, pipes on."""
    argv = [sys.executable, "-m", f"tests.workers.{module}", *args]
    if wait_go:
        argv.append("--wait-go")
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_line(proc: subprocess.Popen[str], expected: str) -> None:
    """Read the worker's stdout until a line equal to `expected` (fail if it ends first)."""
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != expected:
        _, err = proc.communicate(timeout=WORKER_TIMEOUT)
        raise AssertionError(f"worker said {line!r}, not {expected!r}; stderr:\n{err}")


def go(proc: subprocess.Popen[str]) -> None:
    """Release a worker started with --wait-go."""
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    """Wait for the worker; its exit code, remaining stdout and stderr."""
    try:
        out, err = proc.communicate(timeout=WORKER_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"worker did not end within {WORKER_TIMEOUT}s: {out}\n{err}") from None
    return proc.returncode, out, err


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def claim_row(db: Path, thread: str) -> tuple[str, int, str] | None:
    """(host, pid, purpose) of the thread's claim in the file, read behind the store's back."""
    if not db.exists():
        return None
    conn = sqlite3.connect(db, timeout=10)
    try:
        row = conn.execute(
            "SELECT host, pid, purpose FROM claims WHERE thread_id = ?", (thread,)
        ).fetchone()
    except sqlite3.OperationalError:  # the schema is not there yet
        return None
    finally:
        conn.close()
    return None if row is None else (row[0], row[1], row[2])


def beat_of(db: Path, thread: str) -> float:
    """The heartbeat_at of the thread's claim in the file, read behind the store's back."""
    conn = sqlite3.connect(db, timeout=10)
    try:
        row = conn.execute("SELECT heartbeat_at FROM claims WHERE thread_id = ?", (thread,))
        return float(row.fetchone()[0])
    finally:
        conn.close()


def records(db: Path, thread: str) -> list[tuple[int, str | None, str | None, str]]:
    """(seq, run_id, actor, kind) of every record of the thread."""
    conn = sqlite3.connect(db, timeout=10)
    try:
        return conn.execute(
            "SELECT seq, run_id, actor, kind FROM events WHERE thread_id = ? ORDER BY seq",
            (thread,),
        ).fetchall()
    finally:
        conn.close()


async def texts(db: Path, thread: str) -> list[str]:
    """The texts of the thread's messages, folded through the public API."""
    from tests.workers.claim_run import build_graph

    async with SQLiteEventStore(db) as store:
        state = await build_graph(store, "/nonexistent", 0).aget_state({"thread_id": thread})
    return [m.text() for m in state.context]


@pytest.fixture
def reaper() -> Iterator[list[subprocess.Popen[str]]]:
    """Workers a test started; any still running at its end is killed, never left behind."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# ---- 1. one thread, two processes ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("arrival", ["while_thinking", "while_charging"])
@pytest.mark.parametrize("second", ["resume", "input"])
def test_a_second_process_is_refused_before_it_writes_and_the_charge_runs_once(
    tmp_path: Path,
    reaper: list[subprocess.Popen[str]],
    second: str,
    arrival: str,
) -> None:
    """Process B asks for a thread process A is running: refused with nothing written.

    B arrives either while A's agent node still thinks (the thread is claimed, the charge
    has not started) or while A's sync tool is charging: A is held at that point (its gates
    stay shut) until B has had its answer. B resumes (`ainvoke(None)`) or sends new input.
    Either way it must get ThreadBusyError naming A, write nothing, and the card is charged
    exactly once. Once A is done, B's same call succeeds.
    """
    db, effects, gate = tmp_path / "log.db", tmp_path / "effects", tmp_path / "gate"
    gate.mkdir()
    a = worker("claim_run", str(db), str(effects), "t", "start", "0", "--gate", str(gate))
    b = worker("claim_run", str(db), str(effects), "t", second, "0.1", wait_go=True)
    reaper += [a, b]
    wait_line(a, "ready")
    wait_line(b, "ready")
    until_blocking(lambda: (row := claim_row(db, "t")) is not None and row[1] == a.pid)
    until_blocking(lambda: lines(gate / "progress") == ["thinking"])
    if arrival == "while_charging":
        (gate / "think-go").touch()
        until_blocking(lambda: lines(effects) == ["start charge-1"])
    else:
        assert lines(effects) == [], "the charge started before the thread was even checked"
    before = records(db, "t")
    go(b)
    code_b, out_b, err_b = finish(b)
    after_b = records(db, "t")
    (gate / "think-go").touch()
    (gate / "charge-go").touch()
    code_a, out_a, err_a = finish(a)

    assert code_b == 3, (out_b, err_b)
    assert out_b.startswith("busy "), out_b
    assert f"process {a.pid}" in out_b and "charge-card" in out_b, out_b
    assert code_a == 0 and out_a.strip() == "ok", (out_a, err_a)
    # B wrote nothing: every record is A's (A may have moved on meanwhile, B never).
    assert after_b[: len(before)] == before
    log = records(db, "t")
    run_ids = {run_id for _, run_id, _, _ in log}
    assert len(run_ids) == 1, log
    assert [kind for *_, kind in log].count("run_started") == 1
    assert lines(effects) == ["start charge-1", "done charge-1"]
    assert claim_row(db, "t") is None, "A left its claim behind"
    assert "second input" not in asyncio.run(texts(db, "t"))

    again = worker("claim_run", str(db), str(effects), "t", second, "0.1")
    reaper.append(again)
    code, out, err = finish(again)
    assert code == 0 and out.splitlines() == ["ready", "ok"], (out, err)
    final = asyncio.run(texts(db, "t"))
    if second == "input":
        assert final.count("second input") == 1
        charges = ["start charge-1", "done charge-1", "start charge-2", "done charge-2"]
        assert lines(effects) == charges
    else:  # resuming a completed thread changes nothing and charges nobody
        assert "second input" not in final
        assert lines(effects) == ["start charge-1", "done charge-1"]


@pytest.mark.slow
def test_a_thread_held_by_a_killed_process_is_taken_over_at_once(
    tmp_path: Path, reaper: list[subprocess.Popen[str]]
) -> None:
    """SIGKILL while charging: the next process's first invoke runs at once, no lease wait.

    The claim row still names the dead process; the default lease is 30 s, so a takeover
    that waited for it would blow the time bound. The unfinished charge runs again (at
    least once, as documented), and the new run completes and releases the thread.
    """
    db, effects = tmp_path / "log.db", tmp_path / "effects"
    a = worker("claim_run", str(db), str(effects), "t", "start", "60")
    c = worker("claim_run", str(db), str(effects), "t", "resume", "0.1", wait_go=True)
    reaper += [a, c]
    wait_line(a, "ready")
    wait_line(c, "ready")
    until_blocking(lambda: lines(effects) == ["start charge-1"])
    os.kill(a.pid, signal.SIGKILL)
    assert a.wait(timeout=WORKER_TIMEOUT) == -signal.SIGKILL
    row = claim_row(db, "t")
    assert row is not None and row[0] == HOST and row[1] == a.pid, row

    started = time.monotonic()
    go(c)
    code, out, err = finish(c)
    elapsed = time.monotonic() - started
    assert code == 0 and out.strip() == "ok", (out, err)
    assert elapsed < 10.0, f"the takeover took {elapsed:.1f}s: it waited for the lease"
    assert lines(effects) == ["start charge-1", "start charge-1", "done charge-1"]
    assert claim_row(db, "t") is None
    assert asyncio.run(texts(db, "t"))[-1] == "charged for input 1"


async def test_the_heartbeat_renews_the_row_while_the_loop_is_blocked(tmp_path: Path) -> None:
    """A claim's heartbeat_at moves every lease/3, even while the event loop is stuck."""
    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as store:
        claim = await store.claim("t", lease=0.3)

        def beat() -> float:
            conn = sqlite3.connect(db, timeout=10)
            try:
                return float(
                    conn.execute(
                        "SELECT heartbeat_at FROM claims WHERE thread_id = 't'"
                    ).fetchone()[0]
                )
            finally:
                conn.close()

        seen = {beat()}

        def beaten_thrice() -> bool:
            seen.add(beat())
            return len(seen) >= 3

        until_blocking(beaten_thrice)  # blocks the loop, as a sync node would: beats go on
        assert len(seen) >= 3, f"heartbeat_at took only the values {sorted(seen)}"
        holder = await store.holder("t")
        assert holder is not None and holder.token == claim.token
        assert time.time() - holder.heartbeat_at < 0.3
        await store.release(claim)
        assert await store.holder("t") is None


async def test_a_claim_left_by_a_closed_store_dies_with_its_process(tmp_path: Path) -> None:
    """Closing a store without releasing its claim stops the heartbeat; this process being
    alive, the thread stays owned; a foreign host's copy of that row would age out."""
    db = tmp_path / "log.db"
    store = SQLiteEventStore(db)
    await store.claim("t", lease=0.3)
    await store.close()
    before = claim_row(db, "t"), beat_of(db, "t")
    async with SQLiteEventStore(db) as witness:  # a live claim of the same lease beats on
        await witness.claim("w", lease=0.3)
        first = beat_of(db, "w")
        await until(lambda: beat_of(db, "w") > first, what="the witness claim's next beats")
        second = beat_of(db, "w")
        await until(lambda: beat_of(db, "w") > second, what="the witness claim's next beats")
    assert (claim_row(db, "t"), beat_of(db, "t")) == before  # nothing renews nor drops it
    async with SQLiteEventStore(db) as other:
        holder = await other.holder("t")
        assert holder is not None and holder.alive(time.time())


# ---- 2. programs end ----------------------------------------------------------------------


def run_program(mode: str, db: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-m", "tests.workers.exit_check", mode, str(db)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the {mode!r} program did not exit: {exc.stderr!r}") from None


def test_a_program_that_never_closes_its_store_still_exits(tmp_path: Path) -> None:
    done = run_program("noclose", tmp_path / "log.db")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["invoked"]
    assert done.stderr == ""


def test_a_program_that_raises_after_ainvoke_exits_with_its_traceback(tmp_path: Path) -> None:
    from tests.workers.exit_check import FAILURE

    done = run_program("raise", tmp_path / "log.db")
    assert done.returncode == 1
    assert done.stdout.splitlines() == ["invoked"]
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.rstrip().endswith(f"RuntimeError: {FAILURE}"), done.stderr


def test_async_with_closes_the_store_threads(tmp_path: Path) -> None:
    """After `async with SQLiteEventStore`, no connection or heartbeat thread is left; only
    the process-wide executor for sync work (shared by every graph) may remain."""
    done = run_program("asyncwith", tmp_path / "log.db")
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "invoked" and out[1].startswith("threads:"), out
    left = [name for name in out[1].removeprefix("threads:").strip().split(",") if name]
    assert all(name.startswith("agentlog-sync") for name in left), left


def test_app_close_ends_the_portal_and_the_store_closes_from_a_new_loop(tmp_path: Path) -> None:
    done = run_program("appclose", tmp_path / "log.db")
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "invoked" and out[1].startswith("threads:"), out
    left = [name for name in out[1].removeprefix("threads:").strip().split(",") if name]
    assert "agentlog-portal" not in left
    assert all(name.startswith("agentlog-sync") for name in left), left


# ---- claims outliving their store, heartbeats, clocks ---------------------------------------


async def test_work_that_outlives_its_store_still_frees_the_thread(tmp_path: Path) -> None:
    """A run abandoned while a sync tool runs keeps the thread; once the tool returns, the
    thread is free even though the store was closed meanwhile."""
    import threading

    from agentlog.actors import ThreadBusyError
    from agentlog.projections import Message, ToolCallBlock

    started, release = threading.Event(), threading.Event()

    def slow(n: int) -> int:
        """Blocks until released."""
        started.set()
        release.wait(10)
        return n

    def agent(state: AgentState) -> list[Message]:
        if state.context[-1].role == "tool":
            return [Message.text_message("done", role="assistant")]
        call = ToolCallBlock(id="c1", name="slow", args={"n": 1})
        return [Message(role="assistant", content=[call])]

    graph = agent_with_tools(agent, [slow])
    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as store:
        app = graph.compile(checkpointer=store)
        run = asyncio.ensure_future(app.ainvoke("go", {"thread_id": "t"}))
        assert await asyncio.to_thread(started.wait, 10)
        run.cancel()  # the caller leaves while the tool runs on its worker thread
        with pytest.raises(asyncio.CancelledError):
            await run
    async with SQLiteEventStore(db) as store:
        with pytest.raises(ThreadBusyError, match="tool call 'slow'"):
            await store.claim("t")
        release.set()

        async def released() -> bool:
            return await store.holder("t") is None

        await until(released)  # released on a connection of its own
        out = await graph.compile(checkpointer=store).ainvoke(None, {"thread_id": "t"})
        assert out["status"] == "completed"


async def test_a_claims_heartbeat_is_real_time_whatever_the_stores_clock(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "log.db", clock=lambda: 1000.0) as store:
        before = time.time()
        await store.claim("t")
        holder = await store.holder("t")
        assert holder is not None and holder.heartbeat_at >= before - 1


async def test_a_short_lease_added_later_is_renewed_in_time(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        await store.claim("long", lease=30.0)  # the heartbeat thread now sleeps ~10 s
        await store.claim("short", lease=0.6)
        first = await store.holder("short")
        assert first is not None

        async def beaten() -> bool:
            later = await store.holder("short")
            return later is not None and later.heartbeat_at > first.heartbeat_at

        # beaten long before the ~10 s the long lease's sleep would take (the bound is the
        # assertion here, kept well above a busy machine's delay)
        await until(beaten, timeout=5)


def test_a_claim_is_first_renewed_a_third_of_its_lease_after_it_was_taken() -> None:
    """Taking a claim writes its heartbeat: a run shorter than a third of its lease commits
    no beat of its own; a longer one is renewed from then on, every claim in one write."""
    beats: list[tuple[float, set[str]]] = []
    renewed = threading.Event()

    def renew(claims: list[Claim], now: float) -> None:
        beats.append((time.monotonic(), {c.thread_id for c in claims}))
        renewed.set()

    heartbeat = Heartbeat(renew)
    try:
        taken = time.monotonic()
        heartbeat.add(new_claim("long", lease=30.0))
        heartbeat.add(new_claim("short", lease=0.6))
        assert renewed.wait(timeout=30), "the short claim was never renewed"
        at, which = beats[0]
        assert at - taken >= 0.2, "a claim was renewed before a third of its lease went by"
        assert which == {"long", "short"}
    finally:
        heartbeat.stop()


async def test_a_claim_says_how_far_its_thread_was_written(tmp_path: Path) -> None:
    """The claim's own transaction reads the thread's head: a run of a fresh thread needs
    no read of its own before it starts."""
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        first = await store.claim("t")
        assert first.last_seq == 0
        await store.append("t", [NodeEntered(node="a"), NodeEntered(node="b")], expected_seq=0,
                           claim=first)  # fmt: skip
        await store.release(first)
        second = await store.claim("t")
        assert second.last_seq == 2
        assert second == dataclasses.replace(second, last_seq=None)  # not part of its identity


async def test_claims_wait_for_another_process_holding_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim and a release never fail for another process's write under way: they wait
    for its lock (queued on the writer's thread) and then land."""
    db = tmp_path / "log.db"
    async with SQLiteEventStore(db) as store:
        held = await store.claim("held")
        writer = store._writer
        assert writer is not None
        queued: list[Any] = []
        both_queued = asyncio.Event()
        call = writer.call

        async def counted(fn: Any, *args: Any) -> Any:
            queued.append(fn)  # tried here first, found the lock taken: handed to the thread
            if len(queued) == 2:
                both_queued.set()
            return await call(fn, *args)

        monkeypatch.setattr(writer, "call", counted)
        other = sqlite3.connect(db, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process's write, under way
            claiming = asyncio.ensure_future(store.claim("t"))
            releasing = asyncio.ensure_future(store.release(held))
            await both_queued.wait()
            assert not claiming.done() and not releasing.done()
            other.execute("COMMIT")
            claim = await claiming
            await releasing
        finally:
            other.close()
        holder = await store.holder("t")
        assert holder is not None and holder.token == claim.token
        assert await store.holder("held") is None


async def test_a_run_of_a_fresh_thread_hands_its_claim_to_no_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claiming the thread, reading where it stands and giving it back take no hop to the
    store's connection threads: the claim reads the head in its transaction, and the claim
    and its release commit on the loop while the writer is idle."""

    def step(state: AgentState) -> dict[str, Any]:
        return {"context": [{"role": "assistant", "content": "done"}]}

    graph: StateGraph[AgentState] = StateGraph(AgentState)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_edge("step", END)
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        app = graph.compile(checkpointer=store)
        await app.ainvoke({"context": []}, {"thread_id": "warm"})  # the store opens
        where: list[str] = []  # the thread each claim statement ran on

        def traced(fn: Any) -> Any:
            def run(*args: Any) -> Any:
                where.append(f"{fn.__name__} on {threading.current_thread().name}")
                return fn(*args)

            return run

        for name in ("take_claim", "drop_claim"):
            monkeypatch.setattr(sqlite_store, name, traced(getattr(sqlite_store, name)))
        heads = 0
        last_seq = store.last_seq

        async def head(thread_id: str) -> int:
            nonlocal heads
            heads += 1
            return await last_seq(thread_id)

        monkeypatch.setattr(store, "last_seq", head)
        out = await app.ainvoke({"context": []}, {"thread_id": "fresh"})
        assert out["status"] == "completed"
        assert heads == 0
        here = threading.current_thread().name
        assert where == [f"take_claim on {here}", f"drop_claim on {here}"]
        assert await store.holder("fresh") is None


def test_a_claim_due_after_the_next_beat_leaves_the_heartbeat_asleep() -> None:
    """A run's claim wakes the heartbeat thread only when it must beat sooner than the
    thread means to wake: a claim per run costs no thread switch of its own."""
    heartbeat = Heartbeat(lambda claims, now: None)
    try:
        heartbeat.add(new_claim("first", lease=30.0))
        until_blocking(lambda: heartbeat._wake_at > 0)  # asleep until first's beat is due
        heartbeat.add(new_claim("second", lease=30.0))
        assert not heartbeat._wake.is_set()
    finally:
        heartbeat.stop()
