"""The command line on hostile and huge data, run as real subprocesses with piped output.

Stored text comes from models, tools and users: it must reach a terminal inert (controls
and bidi overrides as visible escapes, rich markup as literal text, no forged lines), a
view of a huge thread must be bounded, and errors must be one line (JSON with --json).
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.actors.cli.render import inert
from agentlog.events import (
    NodeEntered,
    RunCompleted,
    RunStarted,
    SQLiteEventStore,
    StateUpdated,
    StepAdvanced,
)
from agentlog.events.codec import GENESIS_HASH, chain_hash
from agentlog.events.kinds import Event, ThreadCreated
from agentlog.projections import Message, message_appended

from .helpers import agentlog

ROOT = Path(__file__).resolve().parents[1]

EVIL_ID = "t1\u202e\u2066gnp.exe\u2069\x1b]0;owned\x07"
"""A thread id only an older agentlog wrote (today's store refuses to write or read it)."""
BIDI_ID = "t3\u202e\u2066gnp.exe\u2069\x9b2J"
"""A thread id today's store accepts: bidi overrides and a C1 control."""
OSC = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J\x1b[H"
RED = "\x1b[31m"
MARKUP = "[bold red]ALERT[/bold red]"
BIDI = "".join(chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)])
FORGED_ROW = "\n│ t2 │ completed │ 9 │ __end__ │"
TEXT = f"hello {CLEAR}{RED}{MARKUP}\x00nul\x9bc1 {BIDI}{FORGED_ROW}\ttab"
RAW = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI}]")


def append(db: Path, thread: str, batches: list[list[Event]], actor: str | None = None) -> None:
    async def write() -> None:
        async with SQLiteEventStore(db) as store:
            seq = 0
            for batch in batches:
                seq = (await store.append(thread, batch, expected_seq=seq, actor=actor))[-1].seq

    asyncio.run(write())


def rename(db: Path, old: str, new: str) -> None:
    """Give a thread an id today's store refuses (as an older agentlog wrote), re-chained."""
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT position, seq, run_id, actor, at, kind, version, payload FROM events "
        "WHERE thread_id = ? ORDER BY seq",
        (old,),
    ).fetchall()
    prev = GENESIS_HASH
    with conn:
        for position, seq, run_id, actor, at, kind, version, payload in rows:
            envelope = (new, seq, run_id, actor, at, kind, version, position)
            prev = chain_hash(prev, envelope, payload)
            conn.execute(
                "UPDATE events SET thread_id = ?, hash = ? WHERE position = ?",
                (new, prev, position),
            )
        conn.execute(
            "UPDATE threads SET thread_id = ?, last_hash = ? WHERE thread_id = ?", (new, prev, old)
        )
    conn.close()


def steps(n: int, text: str = "turn", node: str = "agent") -> list[list[Event]]:
    batches: list[list[Event]] = [[RunStarted(entry_node=node)]]
    for step in range(1, n + 1):
        said = Message.text_message(f"{text} {step}", role="assistant")
        batches.append([NodeEntered(node=node), message_appended(said)])
        batches.append([StepAdvanced(step=step, next_node=node)])
    return batches


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("hostile") / "log.db"
    evil_node = f"agent{FORGED_ROW}{OSC}"
    batches: list[list[Event]] = [[RunStarted(entry_node=evil_node)]]
    batches.append([NodeEntered(node=evil_node)])
    batches.append([message_appended(Message.text_message(TEXT, role="assistant"))])
    batches.append([StateUpdated(values={"context_summary": TEXT}, source=f"x{RED}")])
    batches.append([StepAdvanced(step=1, next_node=evil_node)])
    batches.append([NodeEntered(node=evil_node)])
    batches.append([message_appended(Message.text_message(f"second {OSC}", role="user"))])
    batches.append([StepAdvanced(step=2, next_node=evil_node)])
    append(db, BIDI_ID, batches, actor=f"mallory{CLEAR}")
    append(db, "evil", steps(1))
    rename(db, "evil", EVIL_ID)
    append(db, "t2", steps(1))
    return db


def assert_inert(done: subprocess.CompletedProcess[str]) -> None:
    for stream in (done.stdout, done.stderr):
        found = RAW.search(stream)
        assert found is None, f"raw {found.group()!r} in {stream[:2000]!r}"


@pytest.mark.parametrize(
    "command",
    [
        ["threads"],
        ["history", BIDI_ID],
        ["show", BIDI_ID],
        ["show", BIDI_ID, "--full"],
        ["diff", BIDI_ID, "0", "2"],
        ["verify"],
        ["verify", BIDI_ID],
        ["show", f"{BIDI_ID}-missing"],  # the error names the id
        ["show", EVIL_ID],
    ],
)
def test_every_view_escapes_controls_and_bidi(hostile: Path, command: list[str]) -> None:
    done = agentlog(*command, "--db", hostile)
    assert_inert(done)
    shown = done.stdout + done.stderr
    if command[-1] == EVIL_ID or command in (["threads"], ["verify"]):
        assert "t1\\u202e\\u2066gnp.exe\\u2069\\x1b]0;owned\\x07" in shown
    if command != ["show", EVIL_ID]:
        assert "t3\\u202e\\u2066gnp.exe\\u2069\\x9b2J" in shown
    if command[0] in ("show", "diff") and command[1] == BIDI_ID:
        assert "\\x1b[2J" in shown and "\\x00nul" in shown and "\\x9bc1" in shown
        assert "\\u202a\\u202b\\u202c\\u202d\\u202e\\u2066\\u2067\\u2068\\u2069" in shown
        assert MARKUP in shown  # literal, not read as markup


def test_stored_text_cannot_forge_a_line_in_one_line_fields(hostile: Path) -> None:
    listed = agentlog("threads", "--db", hostile)
    rows = [line for line in listed.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 3 and sum(row.startswith("│ t2 ") for row in rows) == 1
    assert "agent\\n│ t2 │ completed" in listed.stdout  # the node name, on its own row

    history = agentlog("history", BIDI_ID, "--db", hostile)
    assert not any(line.startswith("│ t2 ") for line in history.stdout.splitlines())
    assert "mallory\\x1b[2J\\x1b[H" in history.stdout

    shown = agentlog("show", BIDI_ID, "--db", hostile).stdout
    lines = shown.splitlines()
    assert not any(line.startswith("│ t2 ") for line in lines)
    raw = [line for line in lines if "t2 │ completed │ 9" in line and "\\n│ t2" not in line]
    assert raw and all(line.startswith("│   │ ") for line in raw)  # a body's line, in its cell


def test_json_stays_exact(hostile: Path) -> None:
    listed = json.loads(agentlog("threads", "--db", hostile, "--json").stdout)
    assert {EVIL_ID, BIDI_ID} <= {t["thread_id"] for t in listed}
    state = json.loads(agentlog("show", BIDI_ID, "--db", hostile, "--json").stdout)
    assert state["messages"][0]["content"][0]["text"] == TEXT
    assert state["state"]["context_summary"] == TEXT
    rows = json.loads(agentlog("history", BIDI_ID, "--db", hostile, "--json").stdout)
    assert rows[0]["actor"] == f"mallory{CLEAR}"


ESCAPE = re.compile(r"\\(\\|n|t|r|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")


def unescape(text: str) -> str:
    def one(found: re.Match[str]) -> str:
        code = found.group(1)
        return {"\\": "\\", "n": "\n", "t": "\t", "r": "\r"}.get(code) or chr(int(code[1:], 16))

    return ESCAPE.sub(one, text)


@given(st.text())
def test_escaping_is_total_visible_and_reversible_in_one_line_fields(text: str) -> None:
    shown = inert(text)
    assert RAW.search(shown) is None and "\n" not in shown and "\t" not in shown
    assert unescape(shown) == text  # nothing dropped, nothing ambiguous


@given(st.text())
def test_bodies_keep_newlines_and_tabs_and_escape_the_rest(text: str) -> None:
    shown = inert(text, body=True)
    assert RAW.search(shown.replace("\n", "").replace("\t", "")) is None
    assert shown.count("\n") == text.count("\n")


# ---- a thread's creation: who, its graph and metadata are stored text too ----------------


@pytest.fixture(scope="module")
def created(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("created") / "log.db"
    metadata = {f"k{RED}": TEXT, MARKUP: BIDI, "huge": "B" * 900_000 + "TAIL"}
    made = ThreadCreated(by=f"mallory{CLEAR}", graph_id=f"g{OSC}", metadata=metadata)
    append(db, "made", [[made], *steps(1)], actor=f"mallory{CLEAR}")
    return db


@pytest.mark.parametrize(
    "command", [["threads"], ["history", "made"], ["show", "made"], ["show", "made", "--full"]]
)
def test_a_created_threads_metadata_is_shown_inert(created: Path, command: list[str]) -> None:
    done = agentlog(*command, "--db", created)
    assert done.returncode == 0, done.stderr
    assert_inert(done)
    if command[0] == "threads":
        assert "made" in done.stdout and "running" in done.stdout
        return
    assert "mallory\\x1b[2J\\x1b[H" in done.stdout
    if command[0] == "history":
        assert "created by mallory\\x1b[2J\\x1b[H for graph g\\x1b]0;owned\\x07; metadata {" in (
            done.stdout
        )
        assert len(done.stdout) < 20_000 and "TAIL" not in done.stdout
        return
    assert "created by mallory\\x1b[2J\\x1b[H metadata=" in done.stdout
    assert MARKUP in done.stdout and "\\u202a\\u202b" in done.stdout
    if "--full" in command:
        assert "B" * 900_000 + "TAIL" in done.stdout
    else:
        assert len(done.stdout) < 20_000 and "TAIL" not in done.stdout
        assert "more characters; --full shows all]" in done.stdout


def test_a_created_threads_metadata_stays_exact_in_json(created: Path) -> None:
    state = json.loads(agentlog("show", "made", "--db", created, "--json").stdout)
    made = state["state"]["execution_meta"]["internal_data"]["created"]
    assert made["by"] == f"mallory{CLEAR}" and made["metadata"][f"k{RED}"] == TEXT
    assert made["metadata"]["huge"].endswith("BTAIL")
    rows = json.loads(agentlog("history", "made", "--db", created, "--json").stdout)
    assert (rows[0]["kind"], rows[0]["actor"]) == ("thread_created", f"mallory{CLEAR}")
    assert rows[0]["summary"].startswith(f"created by mallory{CLEAR} for graph g{OSC}")


# ---- big data: bounded by default, complete on request ----------------------------------


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("big") / "log.db"
    huge = Message.text_message("A" * 1_000_000 + "THE END", role="assistant")
    append(db, "huge", [[RunStarted(entry_node="agent")], [message_appended(huge)]])
    append(db, "long", [*steps(1500), [RunCompleted()]])
    return db


def test_show_cuts_a_huge_message_and_says_how_much(big: Path) -> None:
    done = agentlog("show", "huge", "--db", big)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) < 20_000  # a 2,000-character cell, its borders, and the rest
    assert "… [998,007 more characters; --full shows all]" in done.stdout
    assert "THE END" not in done.stdout
    full = agentlog("show", "huge", "--db", big, "--full")
    assert "THE END" in full.stdout and len(full.stdout) > 1_000_000
    state = json.loads(agentlog("show", "huge", "--db", big, "--json").stdout)
    assert state["messages"][0]["content"][0]["text"].endswith("A" * 10 + "THE END")


def test_show_of_a_long_thread_prints_its_last_messages(big: Path) -> None:
    done = agentlog("show", "long", "--db", big)
    assert done.returncode == 0, done.stderr
    assert "1,480 earlier messages not shown; --full shows all (or --last N)" in done.stdout
    assert "1500 messages (the last 20)" in done.stdout
    assert "turn 1500" in done.stdout and "turn 1480 " not in done.stdout + " "
    assert "│ turn 1481" in done.stdout
    assert len(done.stdout) < 10_000
    five = agentlog("show", "long", "--db", big, "--last", "5")
    assert "1,495 earlier messages" in five.stdout and "│ turn 1495" not in five.stdout
    everything = agentlog("show", "long", "--db", big, "--full")
    assert "│ turn 1 " in everything.stdout and "not shown" not in everything.stdout
    state = json.loads(agentlog("show", "long", "--db", big, "--json").stdout)
    assert len(state["messages"]) == 1500


def test_diff_is_bounded_too(big: Path) -> None:
    done = agentlog("diff", "long", "0", "-1", "--db", big)
    assert done.returncode == 0, done.stderr
    assert "1,480 earlier added messages not shown" in done.stdout
    assert len(done.stdout) < 10_000
    change = json.loads(agentlog("diff", "long", "0", "-1", "--db", big, "--json").stdout)
    assert len(change["messages_added"]) == 1500 and change["b"] == -1
    assert change["step"] == [0, 1500]


# ---- rough edges ------------------------------------------------------------------------


def test_negative_points_count_from_the_end(big: Path) -> None:
    last = json.loads(agentlog("diff", "long", "-2", "-1", "--db", big, "--json").stdout)
    named = json.loads(agentlog("diff", "long", "1499", "1500", "--db", big, "--json").stdout)
    assert (last["a_seq"], last["b_seq"]) == (named["a_seq"], named["b_seq"])
    by_seq = json.loads(
        agentlog("diff", "long", "-3", "-1", "--by", "seq", "--db", big, "--json").stdout
    )
    assert by_seq["b_seq"] - by_seq["a_seq"] == 2
    shown = json.loads(agentlog("show", "long", "--step", "-1", "--db", big, "--json").stdout)
    assert shown["step"] == 1500
    too_far = agentlog("diff", "long", "-1502", "2", "--db", big)
    assert too_far.returncode == 1 and len(too_far.stderr.splitlines()) == 1
    assert "step -1502 counts back past the start" in too_far.stderr
    assert "steps 0 to 1500" in too_far.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["show"],
        ["show", "t", "--bogus"],
        ["diff", "t", "x", "1"],
        ["show", "t", "--step", "1", "--seq", "2"],
        ["nonsense"],
    ],
)
def test_usage_errors_are_one_line_on_stderr(big: Path, args: list[str]) -> None:
    done = agentlog(*args, "--db", big)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "╭" not in done.stderr and "--help" in lines[0] and done.stdout == ""


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["show", "nope"], 1, "thread 'nope' does not exist"),
        (["show", "long", "--step", "9999"], 1, "step 9999 does not exist"),
        (["show", "long", "--bogus"], 2, "No such option"),
        (["show"], 2, "Missing argument"),
    ],
)
def test_json_errors_are_json_objects_on_stderr(
    big: Path, args: list[str], code: int, words: str
) -> None:
    done = agentlog(*args, "--db", big, "--json")
    assert done.returncode == code and done.stdout == ""
    (line,) = done.stderr.splitlines()
    report: dict[str, Any] = json.loads(line)
    assert report["exit"] == code and words in report["error"]


def test_piped_tables_do_not_wrap_to_the_terminal_width(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    long_id = "thread-" + "x" * 150
    append(db, long_id, steps(1, node="a-node-with-a-rather-long-name-" + "y" * 40))
    for command in (["threads"], ["history", long_id], ["show", long_id]):
        done = agentlog(*command, "--db", db, columns=40)
        assert done.returncode == 0, done.stderr
        assert long_id in done.stdout, command  # whole, on one line
        assert "a-node-with-a-rather-long-name-" + "y" * 40 in done.stdout
