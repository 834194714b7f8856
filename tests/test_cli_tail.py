"""`agentlog tail`, run as a real process beside a writer: it prints what is committed after
it starts, one line (or JSON object) per record, inert for people, and ends with exit 0 on
SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import END, StateGraph
from agentlog.actors.engine.commit import fork_thread
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.testing import until_blocking
from agentlog.events import NodeEntered, SQLiteEventStore, StateUpdated, StepAdvanced
from agentlog.events.kinds import Event
from agentlog.projections import AgentState, Message, message_appended

from .helpers import ROOT, agentlog

PATIENCE = 60.0
"""How long a test waits for output that must come before it calls the command hung."""

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Characters that must never reach a terminal raw."""


def append(db: Path, thread: str, events: list[Event], actor: str | None = "agent") -> None:
    """Commit `events` to `thread` from this process (the log's writer)."""

    async def write() -> None:
        async with SQLiteEventStore(db) as store:
            seq = await store.last_seq(thread)
            await store.append(thread, events, expected_seq=seq, actor=actor)

    asyncio.run(write())


class Tail:
    """A running `agentlog tail` whose stdout is read line by line, never blocking for ever."""

    def __init__(self, *args: str | Path) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from agentlog.actors.cli import main; main()",
                "tail",
                *map(str, args),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        )
        self._buffer = b""

    def lines(self, count: int, timeout: float = PATIENCE) -> list[str]:
        """The next `count` lines it prints; fails with its stderr when they do not come."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while self._buffer.count(b"\n") < count:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                self.proc.kill()
                _, err = self.proc.communicate()
                raise AssertionError(
                    f"tail printed {self._buffer!r}, not {count} lines: {err.decode()}"
                )
            self._buffer += chunk
        *got, self._buffer = self._buffer.split(b"\n", count)
        return [line.decode() for line in got]

    def ready_lines(self) -> int:
        """How many whole lines it has printed that were not read yet (without waiting)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._buffer += chunk
        return self._buffer.count(b"\n")

    def stop(self, how: int = signal.SIGTERM) -> tuple[int, str, str]:
        """Send `how`; its exit status and the rest of its output."""
        self.proc.send_signal(how)
        out, err = self.proc.communicate(timeout=PATIENCE)
        return self.proc.returncode, (self._buffer + out).decode(), err.decode()


@contextmanager
def tail(*args: str | Path) -> Iterator[Tail]:
    running = Tail(*args)
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.communicate()


def steps(count: int, start: int = 1) -> list[Event]:
    return [
        e
        for k in range(start, start + count)
        for e in (NodeEntered(node="agent"), StepAdvanced(step=k, next_node="agent"))
    ]


def test_json_tail_sees_records_committed_after_it_started_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    append(db, "t1", steps(1))
    with tail("--db", db, "--json", "--from", "0") as running:
        first = [json.loads(line) for line in running.lines(2)]  # it is following now
        append(db, "t2", steps(2))
        append(db, "t1", [StateUpdated(values={"k": "v"})], actor="user")
        later = [json.loads(line) for line in running.lines(5)]
        code, rest, err = running.stop(signal.SIGTERM)
    assert (code, rest, err) == (0, "", "")
    got = first + later
    assert [r["position"] for r in got] == [1, 2, 3, 4, 5, 6, 7]
    assert [(r["thread_id"], r["seq"]) for r in got] == [
        ("t1", 1), ("t1", 2), ("t2", 1), ("t2", 2), ("t2", 3), ("t2", 4), ("t1", 3),
    ]  # fmt: skip
    last = got[-1]
    assert last["kind"] == "state_updated" and last["actor"] == "user"
    assert last["event"] == {
        "kind": "state_updated", "values": {"k": "v"}, "source": "node", "reason": None,
        "replace": False,
    }  # fmt: skip
    assert len(last["hash"]) == 64


def test_by_default_tail_starts_at_the_end_and_from_resumes_after_a_position(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    append(db, "t", steps(2))
    with tail("--db", db, "--json") as running:
        # It prints nothing of the 4 records before it; commit until it shows it follows.
        def shows_a_new_commit() -> bool:
            append(db, "t", [StateUpdated(values={"n": 1})])
            return bool(running.ready_lines())

        until_blocking(shows_a_new_commit, timeout=PATIENCE, interval=0.05, what="tail to follow")
        shown = json.loads(running.lines(1)[0])
        code, _, err = running.stop(signal.SIGINT)
    assert (code, err) == (0, "")
    assert shown["position"] > 4 and shown["kind"] == "state_updated"
    resume_after = shown["position"]
    with tail("--db", db, "--json", "--from", str(resume_after)) as running:
        append(db, "t", [StateUpdated(values={"n": 2})])
        end = json.loads(running.lines(1)[0])["position"]  # the one just committed
        assert running.stop()[0] == 0
    with tail("--db", db, "--json", "--from", str(resume_after)) as running:
        again = [json.loads(line)["position"] for line in running.lines(end - resume_after)]
        assert running.stop()[0] == 0
    assert again == list(range(resume_after + 1, end + 1))


def test_from_minus_n_starts_with_the_last_n_records(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    append(db, "t", steps(3))
    with tail("--db", db, "--json", "--from", "-2") as running:
        got = [json.loads(line)["position"] for line in running.lines(2)]
        code, rest, _ = running.stop()
    assert (code, rest, got) == (0, "", [5, 6])


def test_filters_by_kind_thread_and_node(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    append(db, "a", steps(2))
    append(db, "b", [NodeEntered(node="tools"), StateUpdated(values={"x": 1})], actor="tools")
    append(db, "a", [NodeEntered(node="tools")], actor="runtime")
    with tail(
        "--db", db, "--json", "--from", "0", "--thread", "a",
        "--kind", "node_entered", "--kind", "state_updated", "--node", "tools",
    ) as running:  # fmt: skip
        (only,) = [json.loads(line) for line in running.lines(1)]
        append(db, "b", [NodeEntered(node="tools")], actor="tools")  # another thread
        append(db, "a", [StateUpdated(values={"y": 2})], actor="tools")
        (later,) = [json.loads(line) for line in running.lines(1)]
        code, rest, _ = running.stop()
    assert (only["thread_id"], only["seq"], only["kind"]) == ("a", 5, "node_entered")
    assert (later["thread_id"], later["seq"], later["kind"]) == ("a", 6, "state_updated")
    assert (code, rest) == (0, "")


EVIL = "hi \x1b]0;owned\x07\x1b[2J\x1b[31mred\x00nul\x9bc1 \u202egnp.exe\u2066\r\nforged\tline"


def test_hostile_text_is_shown_inert_one_line_per_record(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    thread = "t\u202eevil\x9b"
    append(
        db,
        thread,
        [
            NodeEntered(node="n\x1b[31m"),
            message_appended(Message.text_message(EVIL, role="assistant")),
            StateUpdated(values={"k\x1b[2J": 1}, reason="\x07bell"),
        ],
        actor="actor\x1b[5m\n",
    )
    with tail("--db", db, "--from", "0") as running:
        lines = running.lines(3)
        code, rest, err = running.stop()
    assert (code, rest, err) == (0, "", "")
    for line in lines:
        assert not RAW.search(line), line
        assert line.split()[2] == r"t\u202eevil\x9b"
        assert r"actor\x1b[5m\n" in line
    entered, message, updated = lines
    assert entered.split()[:5] == ["1", entered.split()[1], r"t\u202eevil\x9b", "1", "node_entered"]
    assert r"node=n\x1b[31m" in entered
    assert r"hi \x1b]0;owned\x07\x1b[2J\x1b[31mred\x00nul\x9bc1 \u202egnp.exe" in message
    assert r"\r\nforged\tline" in message
    assert r"k\x1b[2J" in updated and r"\x07bell" in updated


def test_json_output_is_exact_and_one_object_per_line(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    append(db, "t", [message_appended(Message.text_message(EVIL, role="user"))])
    with tail("--db", db, "--json", "--from", "0") as running:
        (line,) = running.lines(1)
        running.stop()
    record: dict[str, Any] = json.loads(line)
    assert record["event"]["message"]["content"][0]["text"] == EVIL
    assert not RAW.search(line)  # JSON escapes every control character


def test_a_missing_database_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    done = agentlog("tail", "--db", missing, timeout=PATIENCE)
    assert done.returncode == 1
    assert done.stderr.startswith("error: no database at") and done.stdout == ""
    assert not missing.exists()
    as_json = agentlog("tail", "--db", missing, "--json", timeout=PATIENCE)
    assert json.loads(as_json.stderr)["exit"] == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--kind", "bogus"], "unknown kind 'bogus'"),
        (["--thread", ""], "the thread id is empty"),
        (["--node", ""], "the node name is empty"),
        (["--graph", ""], "the graph id is empty"),
        (["--from", "x"], "--from"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    db = tmp_path / "log.db"
    append(db, "t", steps(1))
    done = agentlog("tail", "--db", db, *args, timeout=PATIENCE)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr


def _graph(name: str) -> StateGraph[AgentState]:
    def answer(state: AgentState) -> list[Message]:
        return [Message.text_message(f"{name} says hi", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph(name=name)
    graph.add_node("answer", answer)
    graph.set_entry_point("answer")
    graph.add_edge("answer", END)
    return graph


async def _graphs_log(db: Path) -> dict[str, set[tuple[str, int]]]:
    """Runs of graph "alpha" (named "first") and "beta" through a runtime, a fork of an alpha
    thread, and a run of "first" without a runtime; each graph's (thread, seq) pairs, the
    runtime's records of its triggers included."""
    async with SQLiteEventStore(db) as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("alpha", _graph("first").compile(store))
        runtime.add_graph("beta", _graph("second").compile(store))
        runtime.register_entry_point(EntryPoint(id="a", graph_id="alpha"))
        runtime.register_entry_point(EntryPoint(id="b", graph_id="beta"))
        async with runtime:
            for n in range(2):
                for entry in ("a", "b"):
                    await runtime.trigger_and_wait(entry, f"hello {n}", timeout=PATIENCE)
        ledger = runtime.ledger
        alpha = [
            t.accepted.thread_id for t in ledger.triggers.values() if t.accepted.graph_id == "alpha"
        ]
        forked = await fork_thread(
            store, alpha[0], at_seq=2, new_thread_id="alpha-fork", state_cls=AgentState
        )
        plain = _graph("first").compile(store)
        await plain.ainvoke("hi", {"thread_id": "plain"})
        owner = {t.id: t.accepted.graph_id for t in ledger.triggers.values()}
        kept: dict[str, set[tuple[str, int]]] = {"alpha": set(), "beta": set(), "first": set()}
        for thread in await store.threads():
            async for record in store.read(thread):
                if thread == "__runtime__":
                    trigger = getattr(record.event, "trigger_id", None)
                    if trigger is not None:
                        kept[owner[trigger]].add((thread, record.seq))
                elif thread == "plain":
                    kept["first"].add((thread, record.seq))
                else:
                    graph = "alpha" if thread in (*alpha, forked) else "beta"
                    kept[graph].add((thread, record.seq))
        return kept


def test_graph_keeps_the_records_of_threads_that_run_that_graph(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    kept = asyncio.run(_graphs_log(db))
    assert all(kept.values()) and ("alpha-fork", 1) in kept["alpha"]
    with tail("--db", db, "--json", "--from", "0", "--graph", "alpha") as running:
        shown = [json.loads(line) for line in running.lines(len(kept["alpha"]))]
        beta_thread = next(t for t, _ in kept["beta"] if t != "__runtime__")
        append(db, beta_thread, [StateUpdated(values={"late": "beta"})])
        append(db, "alpha-fork", [StateUpdated(values={"late": "alpha"})])
        (late,) = [json.loads(line) for line in running.lines(1)]
        code, rest, err = running.stop()
    assert (code, rest, err) == (0, "", "")
    assert {(r["thread_id"], r["seq"]) for r in shown} == kept["alpha"]
    assert [r["position"] for r in shown] == sorted(r["position"] for r in shown)
    assert (late["thread_id"], late["event"]["values"]) == ("alpha-fork", {"late": "alpha"})
    # A thread no runtime started is known by the name of the graph its first run recorded.
    with tail("--db", db, "--json", "--from", "0", "--graph", "first") as running:
        plain = [json.loads(line) for line in running.lines(len(kept["first"]))]
        append(db, "plain", [StateUpdated(values={"late": "first"})])
        (late,) = [json.loads(line) for line in running.lines(1)]
        assert running.stop()[0] == 0
    assert {(r["thread_id"], r["seq"]) for r in plain} == kept["first"]
    assert late["thread_id"] == "plain"


def test_sigint_ends_it_at_once_while_its_reader_has_stopped_reading(tmp_path: Path) -> None:
    """A reader that stops reading (a pager paused) fills the pipe: the lines wait, and
    SIGINT still ends the command at once (a blocking write used to hold it for ever)."""
    import fcntl
    import termios

    db = tmp_path / "log.db"
    append(db, "t", steps(1500))
    with tail("--db", db, "--json", "--from", "0") as running:
        assert running.proc.stdout is not None
        fd = running.proc.stdout.fileno()
        capacity = fcntl.fcntl(fd, 1032)  # F_GETPIPE_SZ
        waiting = bytearray(4)

        def pipe_full() -> bool:  # tail now waits for its reader
            fcntl.ioctl(fd, termios.FIONREAD, waiting)
            return int.from_bytes(waiting, sys.byteorder) > capacity - 4096

        until_blocking(pipe_full, timeout=PATIENCE, what="tail to fill its pipe")
        running.proc.send_signal(signal.SIGINT)
        assert running.proc.wait(timeout=PATIENCE) == 0
