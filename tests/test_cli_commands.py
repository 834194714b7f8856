"""The reading, branching and audit commands of `agentlog`, run as real subprocesses.

One small log is built once per module (an interrupt, a human edit and a resume; a thread
left paused; a thread of a custom state class); each test runs a few commands on it, or on
a copy when it writes or tampers, and checks what they print against the library.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest
from pydantic import Field

from agentlog.actors import END, StateGraph, ToolNode
from agentlog.actors.cli.render import iso
from agentlog.events import Event, NodeEntered, RunStarted, SQLiteEventStore, StepAdvanced
from agentlog.projections import (
    AgentState,
    ExecutionStatus,
    Message,
    ToolCallBlock,
    diff,
    event_history,
    message_appended,
    state_at,
    state_at_point,
    step_seq,
)

from .helpers import agentlog

ROOT = Path(__file__).resolve().parent.parent
VERIFY_EXPORT = ROOT / "events" / "verify_export.py"
T = TypeVar("T")


def ok_json(*args: str | Path) -> Any:
    done = agentlog(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def failed(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """The command exited 1 with exactly one line on stderr, naming `words`.

    With --json that line is a JSON object {"error": ..., "exit": 1}.
    """
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    if "--json" in done.args:
        assert len(lines) == 1, done.stderr
        report = json.loads(lines[0])
        assert report["exit"] == 1, report
        lines = [f"error: {report['error']}"]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in done.stderr
    return lines[0]


def read(db: Path, fn: Callable[[SQLiteEventStore], Awaitable[T]]) -> T:
    async def main() -> T:
        async with SQLiteEventStore(db) as store:
            return await fn(store)

    return asyncio.run(main())


def tamper(db: Path, sql: str, *args: object) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(sql, args)
    conn.close()


# ---- the log ---------------------------------------------------------------------------------


def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    return f"sunny in {city}"


async def agent(state: AgentState) -> list[Message]:
    last = state.context[-1]
    if last.role == "tool":
        return [Message.text_message(f"answer: {last.text()}", role="assistant")]
    call = ToolCallBlock(id=f"call-{len(state.context)}", name="get_weather", args={"city": "Oslo"})
    return [Message(role="assistant", content=[call])]


def route(state: AgentState) -> str:
    return "tools" if state.context[-1].tool_calls() else END


class Notes(AgentState):
    notes: list[str] = Field(default_factory=list)


async def noting(state: Notes) -> dict[str, Any]:
    return {"messages": [Message.text_message("noted", role="assistant")], "notes": ["n1"]}


async def build(db: Path) -> None:
    async with SQLiteEventStore(db) as store:
        graph: StateGraph[AgentState] = StateGraph(AgentState)
        graph.add_node("agent", agent)
        graph.add_node("tools", ToolNode([get_weather]))
        graph.set_entry_point("agent")
        graph.add_conditional_edges("agent", route, {"tools": "tools", END: END})
        graph.add_edge("tools", "agent")
        app = graph.compile(checkpointer=store, interrupt_before=["tools"])
        t1 = {"thread_id": "t1"}
        await app.ainvoke({"messages": [Message.text_message("weather in Oslo?")]}, t1)
        await app.aupdate_state(t1, {"context_summary": "asks about Oslo"}, actor="alice")
        await app.ainvoke(None, t1)  # approved
        await app.ainvoke(
            {"messages": [Message.text_message("and tomorrow?")]}, {"thread_id": "t2"}
        )
        notes: StateGraph[Notes] = StateGraph(Notes)
        notes.add_node("note", noting)
        notes.set_entry_point("note")
        notes.add_edge("note", END)
        start = {"messages": [Message.text_message("hi")]}
        await notes.compile(checkpointer=store).ainvoke(start, {"thread_id": "custom"})


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("cli") / "log.db"
    asyncio.run(build(db))
    return db


class Marks(NamedTuple):
    """Where things happened in thread t1, read from the log (not assumed)."""

    last: int
    step1: int
    step3: int
    interrupt: int
    edit: int
    tool_message: int


@pytest.fixture(scope="module")
def t1(log: Path) -> Marks:
    async def find(store: SQLiteEventStore) -> Marks:
        rows = await event_history(store, "t1")

        def first(kind: str, actor: str | None = None) -> int:
            return next(r.seq for r in rows if r.kind == kind and actor in (None, r.actor))

        return Marks(
            last=rows[-1].seq,
            step1=await step_seq(store, "t1", 1),
            step3=await step_seq(store, "t1", 3),
            interrupt=first("interrupt_raised"),
            edit=first("state_updated"),
            tool_message=first("message_appended", "tools"),
        )

    marks = read(log, find)
    assert marks.step1 < marks.interrupt < marks.edit < marks.tool_message < marks.step3
    return marks


@pytest.fixture
def copy(log: Path, tmp_path: Path) -> Path:
    """A copy of the log for a test that writes to it or damages it."""
    return Path(shutil.copy(log, tmp_path / "copy.db"))


# ---- threads, history, show, diff --------------------------------------------------------------


def test_threads_lists_status_steps_and_last_activity(log: Path, t1: Marks) -> None:
    table = agentlog("threads", "--db", log)
    assert table.returncode == 0, table.stderr
    lines = {line.split()[1]: line for line in table.stdout.splitlines() if "│" in line}
    assert "completed" in lines["t1"] and f" {t1.last} " in lines["t1"] and "__end__" in lines["t1"]
    assert "interrupted_before" in lines["t2"] and "tools" in lines["t2"]
    assert "completed" in lines["custom"] and "__end__" in lines["custom"]  # no class needed
    assert "3 threads" in table.stdout

    listed = {t["thread_id"]: t for t in ok_json("threads", "--db", log)}
    assert list(listed) == ["t1", "t2", "custom"]

    async def facts(store: SQLiteEventStore) -> dict[str, tuple[int, float]]:
        found = {}
        for thread_id in await store.threads():
            last = await store.last_seq(thread_id)
            async for record in store.read(thread_id, last):
                found[thread_id] = (last, record.at)
        return found

    for thread_id, (records, at) in read(log, facts).items():
        assert listed[thread_id]["records"] == records
        assert listed[thread_id]["last_activity"] == at  # a float, as stored
    state: AgentState = read(log, lambda store: state_at(store, "t1"))
    assert listed["t1"] | {"last_activity": None} == {
        "thread_id": "t1",
        "status": "completed",
        "stop": None,
        "step": state.execution_meta.step,
        "node": "__end__",
        "records": t1.last,
        "last_activity": None,
        "error": None,
    }
    assert listed["t2"]["status"] == "interrupted_before" and listed["t2"]["step"] == 1
    assert listed["custom"]["status"] == "completed" and listed["custom"]["error"] is None


def test_history_is_the_timeline_of_events(log: Path, t1: Marks) -> None:
    table = agentlog("history", "t1", "--db", log)
    assert table.returncode == 0, table.stderr
    out = table.stdout
    assert f"thread t1: {t1.last} events" in out
    for word in ("interrupt_raised", "alice set context_summary", "resumed", "sunny in Oslo"):
        assert word in out
    assert out.index("interrupt_raised") < out.index("alice set") < out.index("run_completed")
    assert "T" in out and "Z" in out  # ISO times

    rows = ok_json("history", "t1", "--db", log)
    expected = read(log, lambda store: event_history(store, "t1"))
    assert rows == [
        {"seq": r.seq, "at": r.at, "kind": r.kind, "actor": r.actor, "node": r.node}
        | {"summary": r.summary, "duration_ms": r.duration_ms, "status": r.status}
        | {"tool": r.tool, "fork_point": r.fork_point}
        for r in expected
    ]
    picked = ok_json("history", "t1", "--kind", "resumed", "--kind", "state_updated", "--db", log)
    assert [(r["kind"], r["actor"]) for r in picked] == [
        ("state_updated", "alice"),
        ("resumed", "user"),
    ]
    assert picked == [r for r in rows if r["kind"] in ("resumed", "state_updated")]


def test_a_long_history_prints_as_plain_aligned_lines(tmp_path: Path) -> None:
    db = tmp_path / "long.db"

    async def write(store: SQLiteEventStore) -> None:
        seq = len(await store.append("long", [RunStarted(entry_node="agent")], expected_seq=0))
        for step in range(1, 801):
            said = Message.text_message(f"turn {step}\nsecond line", role="assistant")
            events: list[Event] = [NodeEntered(node="agent"), message_appended(said)]
            events.append(StepAdvanced(step=step, next_node="agent"))
            seq += len(await store.append("long", events, expected_seq=seq))

    read(db, write)
    done = agentlog("history", "long", "--db", db)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "thread long: 2401 events" and lines[1].split()[:3] == [
        "seq",
        "time",
        "(UTC)",
    ]
    rows = read(db, lambda store: event_history(store, "long"))
    assert len(lines) == 2 + len(rows)
    for line, row in zip(lines[2:], rows, strict=True):
        assert line.split()[:3] == [str(row.seq), iso(row.at), row.kind]
        assert line.endswith(row.summary.replace("\n", "\\n"))  # a newline cannot forge a row
    assert lines[-2].endswith("assistant: turn 800\\nsecond line")


def test_show_prints_the_state_at_a_point(log: Path, t1: Marks) -> None:
    latest = agentlog("show", "t1", "--db", log)
    assert latest.returncode == 0, latest.stderr
    out = latest.stdout
    assert f"thread t1 at seq {t1.last}: status=completed step=3 node=__end__" in out
    assert "context_summary" in out and '"asks about Oslo"' in out
    assert "answer: sunny in Oslo" in out and 'get_weather({"city": "Oslo"})' in out

    paused = agentlog("show", "t1", "--seq", str(t1.interrupt), "--db", log)
    assert "status=interrupted_before" in paused.stdout
    assert "interrupt: interrupted_before at 'tools'" in paused.stdout

    at_step = ok_json("show", "t1", "--step", "1", "--db", log)
    seq = read(log, lambda store: step_seq(store, "t1", 1))
    state: AgentState = read(log, lambda store: state_at_point(store, "t1", at_step=1))
    assert at_step["seq"] == seq and at_step["step"] == 1
    assert at_step["state"] == state.model_dump(mode="json")
    assert at_step["messages"] == [m.model_dump(mode="json") for m in state.context]
    assert at_step["fields"] == {"context_summary": None}

    edited = ok_json("show", "t1", "--seq", str(t1.edit), "--db", log)
    assert edited["status"] == "interrupted_before" and edited["node"] == "tools"
    assert edited["interrupt"] == {
        "node": "tools",
        "reason": "interrupt_before",
        "data": None,
        "status": "interrupted_before",
    }
    assert edited["fields"] == {"context_summary": "asks about Oslo"}
    expected: AgentState = read(log, lambda store: state_at(store, "t1", t1.edit))
    assert edited["state"] == expected.model_dump(mode="json")


def test_diff_says_what_changed_between_two_points(log: Path, t1: Marks) -> None:
    table = agentlog("diff", "t1", "1", "3", "--db", log)
    assert table.returncode == 0, table.stderr
    out = table.stdout
    assert f"step 1 (seq {t1.step1}) -> step 3 (seq {t1.step3})" in out
    assert "context_summary" in out and '"asks about Oslo"' in out
    assert "+ tool message" in out and "+ assistant message" in out and "answer: sunny" in out

    by_step = ok_json("diff", "t1", "1", "3", "--db", log)
    change = read(log, lambda store: diff(store, "t1", 1, 3))
    assert (by_step["a_seq"], by_step["b_seq"]) == (change.a_seq, change.b_seq)
    assert by_step["step"] == [1, 3] and by_step["status"] is None and not by_step["empty"]
    assert by_step["fields"] == {"context_summary": [None, "asks about Oslo"]}
    assert by_step["messages_added"] == [m.model_dump(mode="json") for m in change.messages_added]

    points = (str(t1.step1), str(t1.edit))
    by_seq = ok_json("diff", "t1", *points, "--by", "seq", "--db", log)
    assert by_seq["status"] == ["running", "interrupted_before"]
    assert by_seq["interrupt"][0] is None and by_seq["interrupt"][1]["node"] == "tools"
    assert by_seq["messages_added"] == []

    same = agentlog("diff", "t1", "2", "2", "--db", log)
    assert "no change" in same.stdout


# ---- fork --------------------------------------------------------------------------------------


def test_fork_branches_a_thread_at_a_step(copy: Path, t1: Marks) -> None:
    named = ok_json("fork", "t1", "--step", "1", "--to", "branch", "--db", copy)
    assert named == {
        "thread_id": "branch",
        "source_thread": "t1",
        "source_seq": t1.step1,
        "step": 1,
    }
    plain = agentlog("fork", "t1", "--step", "2", "--db", copy)
    assert plain.returncode == 0, plain.stderr
    generated = plain.stdout.strip()
    assert generated.startswith("t1-fork-") and plain.stdout.count("\n") == 1

    for thread_id, step in (("branch", 1), (generated, 2)):
        source = read(copy, partial(state_at_point, thread_id="t1", at_step=step))
        forked = read(copy, partial(state_at, thread_id=thread_id))
        assert forked.context == source.context
        assert forked.context_summary == source.context_summary
        meta, src = forked.execution_meta, source.execution_meta
        assert (meta.step, meta.current_node) == (src.step, src.current_node)
        assert src.status == ExecutionStatus.RUNNING  # the source's run went on from there
        assert (meta.status, meta.interrupted_node) == (  # the fork waits at that point
            ExecutionStatus.INTERRUPTED_BEFORE,
            src.current_node,
        )
        assert meta.thread_id == thread_id
    assert read(copy, lambda store: store.threads())[-2:] == ["branch", generated]

    before = copy.read_bytes()
    taken = agentlog("fork", "t1", "--step", "1", "--to", "branch", "--db", copy)
    failed(taken, "'branch' already exists")
    assert copy.read_bytes() == before


# ---- verify ------------------------------------------------------------------------------------


def test_verify_passes_on_an_intact_log(log: Path, t1: Marks) -> None:
    table = agentlog("verify", "--db", log)
    assert table.returncode == 0, table.stderr
    assert "hash chains of 3 threads" in table.stdout and "all ok" in table.stdout
    assert sum("│ ok " in line for line in table.stdout.splitlines()) == 3

    report = ok_json("verify", "t1", "--db", log)
    heads = read(log, lambda store: store.verify("t1"))
    assert report["ok"] is True
    assert report["threads"] == [
        {
            "thread_id": "t1",
            "ok": True,
            "records_checked": t1.last,
            "first_bad_seq": None,
            "problem": None,
            "head": f"t1@{t1.last}:{heads.head_hash}",
        }
    ]
    saved = agentlog("verify", "--head", f"t1@{t1.last}:{heads.head_hash}", "--db", log)
    assert saved.returncode == 0 and f"t1@{t1.last}:" in saved.stdout

    shown = agentlog("verify", "--json", "--db", log, TTY_COMPATIBLE="1")  # progress on stderr
    assert shown.returncode == 0 and "verifying threads" in shown.stderr
    assert json.loads(shown.stdout)["ok"] is True


def test_verify_fails_when_a_payload_byte_changed(copy: Path, t1: Marks) -> None:
    where = "WHERE thread_id = 't1' AND seq = ?"
    conn = sqlite3.connect(copy)
    payload = conn.execute(f"SELECT payload FROM events {where}", (t1.tool_message,)).fetchone()[0]
    conn.close()
    flipped = payload.replace(b"Oslo", b"Oslx")  # one byte of "sunny in Oslo"
    assert len(flipped) == len(payload) and flipped != payload
    tamper(copy, f"UPDATE events SET payload = ? {where}", flipped, t1.tool_message)

    before = copy.read_bytes()
    table = agentlog("verify", "--db", copy)
    line = failed(table, "1 of 3 threads failed", "'t1'", f"seq {t1.tool_message}")
    assert "does not match its hash" in line
    assert "FAILED" in table.stdout and "1 failed" in table.stdout

    report = json.loads(agentlog("verify", "--json", "--db", copy).stdout)
    assert report["ok"] is False
    bad = [t for t in report["threads"] if not t["ok"]]
    assert [(t["thread_id"], t["first_bad_seq"], t["records_checked"]) for t in bad] == [
        ("t1", t1.tool_message, t1.tool_message - 1)
    ]
    failed(agentlog("verify", "t1", "--db", copy), f"seq {t1.tool_message}")
    assert copy.read_bytes() == before


def test_verify_with_a_saved_head_catches_a_truncated_tail(copy: Path, t1: Marks) -> None:
    head = ok_json("verify", "t1", "--db", copy)["threads"][0]["head"]
    assert head.startswith(f"t1@{t1.last}:")
    keep = t1.last - 2
    tamper(copy, "DELETE FROM events WHERE thread_id = 't1' AND seq > ?", keep)
    tamper(  # and the thread's head moved back too, so the chain alone looks whole
        copy,
        "UPDATE threads SET last_seq = ?, last_hash = "
        "(SELECT hash FROM events WHERE thread_id = 't1' AND seq = ?) WHERE thread_id = 't1'",
        keep,
        keep,
    )
    alone = agentlog("verify", "t1", "--db", copy)
    assert alone.returncode == 0, alone.stderr

    caught = agentlog("verify", "t1", "--head", head, "--json", "--db", copy)
    failed(caught, "truncated")
    report = json.loads(caught.stdout)
    assert report["ok"] is False and report["threads"][0]["first_bad_seq"] == keep + 1


# ---- export ------------------------------------------------------------------------------------


def test_export_writes_a_verifiable_jsonl_and_the_head(
    log: Path, t1: Marks, tmp_path: Path
) -> None:
    out = tmp_path / "t1.jsonl"
    written = ok_json("export", "t1", "--out", out, "--db", log)
    report = read(log, lambda store: store.verify("t1"))
    assert written == {
        "thread_id": "t1",
        "format": "jsonl",
        "records": t1.last,
        "head": f"t1@{t1.last}:{report.head_hash}",
        "hash": report.head_hash,
        "out": str(out),
    }
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    records = read(log, lambda store: _records(store, "t1"))
    assert [(x["seq"], x["kind"], x["hash"]) for x in lines] == records
    assert not (tmp_path / "t1.jsonl.tmp").exists()

    if VERIFY_EXPORT.exists():
        checked = subprocess.run(
            [sys.executable, str(VERIFY_EXPORT), str(out), "--head", written["head"]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"ok: {t1.last} records, head {written['head']}" in checked.stdout

    to_stdout = agentlog("export", "t1", "--db", log, TTY_COMPATIBLE="1")  # progress on stderr
    assert to_stdout.returncode == 0, to_stdout.stderr
    assert [json.loads(line) for line in to_stdout.stdout.splitlines()] == lines
    assert f"head: {written['head']}" in to_stdout.stderr and "exporting t1" in to_stdout.stderr

    text = agentlog("export", "t1", "--out", tmp_path / "again.jsonl", "--db", log)
    assert text.returncode == 0 and f"head: {written['head']}" in text.stdout
    assert (tmp_path / "again.jsonl").read_text() == out.read_text()


async def _records(store: SQLiteEventStore, thread_id: str) -> list[tuple[int, str, str]]:
    return [(r.seq, r.kind, r.hash) async for r in store.read(thread_id)]


# ---- errors ------------------------------------------------------------------------------------


def test_a_missing_database_is_reported_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    for args in (("threads",), ("show", "t1"), ("verify",), ("fork", "t1", "--step", "1")):
        failed(agentlog(*args, "--db", missing), "no database at", "nothing was created")
    assert list(tmp_path.iterdir()) == []


def test_bad_thread_step_and_head_fail_cleanly_without_writing(log: Path) -> None:
    before = log.read_bytes()
    failed(agentlog("history", "nope", "--db", log), "thread 'nope' does not exist")
    failed(agentlog("show", "t1", "--step", "9", "--db", log), "step 9 does not exist")
    failed(agentlog("diff", "t1", "0", "40", "--by", "seq", "--db", log), "seq 40")
    failed(agentlog("fork", "t1", "--step", "7", "--to", "x", "--db", log), "step 7 does not")
    failed(agentlog("verify", "--head", "t1@x:abc", "--db", log), "--head", "malformed head")
    assert log.read_bytes() == before
    assert read(log, lambda store: store.threads()) == ["t1", "t2", "custom"]


def test_an_export_to_a_missing_directory_fails_and_leaves_nothing(
    log: Path, tmp_path: Path
) -> None:
    out = tmp_path / "absent" / "t1.jsonl"
    failed(agentlog("export", "t1", "--out", out, "--db", log), "cannot write", str(out))
    assert list(tmp_path.iterdir()) == []


def test_files_that_are_not_agentlog_databases_are_left_untouched(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    failed(agentlog("threads", "--db", notes), "not an agentlog database")
    failed(agentlog("export", "t1", "--db", notes), "not an agentlog database")
    assert notes.read_text() == "not a database\n"

    other = tmp_path / "other.db"  # a SQLite database no table of which is ours (none at all)
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("DROP TABLE t")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    failed(agentlog("verify", "--db", other), "not an agentlog database")
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "other.db"]


def test_usage_errors_exit_2(log: Path) -> None:
    both = agentlog("show", "t1", "--step", "1", "--seq", "3", "--db", log)
    assert both.returncode == 2 and "not both" in both.stderr
    kind = agentlog("history", "t1", "--kind", "bogus", "--db", log)
    assert kind.returncode == 2 and "unknown kind 'bogus'" in kind.stderr
    assert os.path.exists(log)
