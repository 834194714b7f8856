"""The transcript's new events in the views, and `verify`'s tool-call invariant.

Logs are written straight into a store, bypassing the engine (which refuses to record a
completed run with a call still open): a log from an older version or another writer may
hold one, and `verify` must say so, apart from chain damage.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.cli.render import message_line
from agentlog.events import (
    MessageAppended,
    NodeEntered,
    RunCompleted,
    RunStarted,
    SQLiteEventStore,
    StateUpdated,
    StepAdvanced,
)
from agentlog.events.kinds import (
    ContextSummarized,
    Event,
    MessagesRemoved,
    MessagesReplaced,
    Stopped,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.events.record import EventRecord
from agentlog.projections import (
    AgentState,
    ErrorBlock,
    ExecutionStatus,
    Message,
    ReasoningBlock,
    RemoteToolCallBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    message_appended,
    to_builtins,
)
from agentlog.projections.fold import uncommitted_record
from agentlog.projections.invariants import Finding, thread_findings, transcript_findings
from agentlog.projections.timetravel import message_text, summarize

from .helpers import agentlog, edit_db

ESC = "\x1b[2J\x1b[31m"
FORGED = "\n│ 99 │ forged │ row"
EVIL_TEXT = f"old news {ESC}red{FORGED}\x9b end \u202e"
EVIL_ID = f"m-{ESC}\nX"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def assistant_calling(message_id: str, *calls: tuple[str, str]) -> Message:
    return Message(
        message_id=message_id,
        role="assistant",
        content=[ToolCallBlock(id=call_id, name=name) for call_id, name in calls],
    )


def tool_result(message_id: str, call_id: str, output: Any = "done") -> Message:
    return Message.tool_message([ToolResultBlock(call_id=call_id, output=output)], message_id)


def said(message_id: str, text: str, role: str = "user") -> Message:
    return Message.text_message(text, role=role, message_id=message_id)  # type: ignore[arg-type]


def write(db: Path, threads: dict[str, list[Event]]) -> None:
    """Append each thread's events in one batch, straight into the store."""

    async def main() -> None:
        async with SQLiteEventStore(db) as store:
            for thread, events in threads.items():
                await store.append(thread, events, expected_seq=0, actor="agent")

    asyncio.run(main())


def open_call_run() -> list[Event]:
    """A run that completed with its tool call unanswered."""
    return [
        RunStarted(entry_node="agent"),
        NodeEntered(node="agent"),
        message_appended(assistant_calling("a1", ("c1", "lookup"))),
        StepAdvanced(step=1, next_node=None),
        RunCompleted(),
    ]


def removal_run() -> list[Event]:
    """A run whose second node removes a hostile message, then is stopped after it."""
    return [
        RunStarted(entry_node="agent"),
        NodeEntered(node="agent"),
        message_appended(said(EVIL_ID, EVIL_TEXT)),
        message_appended(said("m2", "keep me", role="assistant")),
        StepAdvanced(step=1, next_node="trim"),
        NodeEntered(node="trim"),
        MessagesRemoved(message_ids=[EVIL_ID], reason="too old"),
        StepAdvanced(step=2, next_node="agent"),
        Stopped(node="agent", when="after"),
    ]


def command_run() -> list[Event]:
    """A tool that returned a message and a Command; the next node cancelled by a stop."""
    result = tool_result("r2", "c2", "routed")
    return [
        RunStarted(entry_node="agent"),
        NodeEntered(node="agent"),
        message_appended(assistant_calling("a2", ("c2", "route"))),
        StepAdvanced(step=1, next_node="tools"),
        NodeEntered(node="tools"),
        ToolCallStarted(call_id="c2", name="route"),
        ToolCallFinished(
            call_id="c2",
            name="route",
            status="completed",
            message=to_builtins(result),
            update={"notes": ["n"], "label": "x"},
            goto="review",
        ),
        message_appended(result),
        StateUpdated(values={"label": "x", "notes": ["n"]}, source="tools"),
        StepAdvanced(step=2, next_node="review"),
        NodeEntered(node="review"),
        MessagesReplaced(messages=[to_builtins(said("s1", "short"))]),
        ContextSummarized(summary="they asked to route", messages=[]),
        Stopped(node="review", reason="abandoned: the caller went away", in_flight=["slow"]),
    ]


def stray_result_run() -> list[Event]:
    """A result with no call before it, in a run still going."""
    return [
        RunStarted(entry_node="agent"),
        NodeEntered(node="agent"),
        message_appended(tool_result("r9", "ghost")),
    ]


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("transcript") / "x.db"
    write(
        db,
        {
            "open": open_call_run(),
            "rm": removal_run(),
            "cmd": command_run(),
            "stray": stray_result_run(),
        },
    )
    return db


def assert_inert(done: subprocess.CompletedProcess[str]) -> None:
    for stream in (done.stdout, done.stderr):
        found = RAW.search(stream)
        assert found is None, f"raw {found.group()!r} in {stream!r}"
    assert "Traceback" not in done.stderr


def rows(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("│")]


# ---- the invariant, on a state ----------------------------------------------------------------


def state_of(*messages: Message, status: ExecutionStatus = ExecutionStatus.COMPLETED) -> AgentState:
    state = AgentState(context=list(messages))
    state.execution_meta.status = status
    return state


def test_a_completed_run_with_an_open_call_is_a_finding_naming_call_and_tool() -> None:
    state = state_of(
        said("u", "hi"),
        assistant_calling("a", ("c1", "lookup"), ("c2", "refund")),
        tool_result("r", "c1"),
    )
    assert transcript_findings(state) == [
        Finding(
            "open_call",
            "the run completed with tool call 'c2' (refund) left without a result",
            call_id="c2",
            tool="refund",
        )
    ]


def test_a_remote_call_left_open_counts_too() -> None:
    remote = Message(
        message_id="a", role="assistant", content=[RemoteToolCallBlock(id="rc", name="browser")]
    )
    (finding,) = transcript_findings(state_of(remote))
    assert (finding.kind, finding.call_id, finding.tool) == ("open_call", "rc", "browser")


@pytest.mark.parametrize(
    "status",
    [ExecutionStatus.INTERRUPTED_BEFORE, ExecutionStatus.RUNNING, ExecutionStatus.ERROR],
)
def test_a_run_not_completed_may_wait_on_a_call(status: ExecutionStatus) -> None:
    state = state_of(assistant_calling("a", ("c1", "lookup")), status=status)
    assert transcript_findings(state) == []


def test_a_paired_transcript_has_no_finding() -> None:
    state = state_of(assistant_calling("a", ("c1", "lookup")), tool_result("r", "c1"))
    assert transcript_findings(state) == []


def test_unpaired_results_say_what_is_wrong_at_any_status() -> None:
    state = state_of(
        tool_result("early", "c1"),
        assistant_calling("a", ("c1", "lookup"), ("c2", "refund")),
        tool_result("r2", "c2"),
        tool_result("r2b", "c2"),
        tool_result("r3", "ghost"),
        status=ExecutionStatus.RUNNING,
    )
    assert [(f.kind, f.call_id, f.tool, f.message) for f in transcript_findings(state)] == [
        (
            "unpaired_result",
            "c1",
            "lookup",
            "tool call 'c1' (lookup) is answered before the call is made",
        ),
        (
            "unpaired_result",
            "c2",
            "refund",
            "tool call 'c2' (refund) is answered 2 times; a call takes exactly one result",
        ),
        (
            "unpaired_result",
            "ghost",
            None,
            "tool call 'ghost' has a result but no call in the context",
        ),
    ]


async def test_thread_findings_folds_the_log_read_only(log: Path) -> None:
    before = log.read_bytes()
    async with SQLiteEventStore(log, readonly=True) as store:
        opened = await thread_findings(store, "open")
        assert (opened.thread_id, opened.seq, opened.ok) == ("open", 5, False)
        assert [(f.kind, f.call_id, f.tool) for f in opened.findings] == [
            ("open_call", "c1", "lookup")
        ]
        custom = await thread_findings(store, "cmd")  # custom fields: folded with an open class
        assert custom.ok and custom.findings == []
        explicit = await thread_findings(store, "rm", AgentState)
        assert explicit.ok
    assert log.read_bytes() == before


async def test_a_log_that_cannot_be_replayed_is_one_finding(tmp_path: Path) -> None:
    bad = MessageAppended(message={"role": "alien", "content": []})
    async with SQLiteEventStore(tmp_path / "x.db") as store:
        await store.append("bad", [RunStarted(), NodeEntered(node="agent"), bad], expected_seq=0)
        (finding,) = (await thread_findings(store, "bad")).findings
    assert finding.kind == "unreadable" and "cannot be replayed" in finding.message


# ---- summaries ---------------------------------------------------------------------------


def record(event: Event) -> EventRecord:
    return uncommitted_record(event, 1, "t")


@pytest.mark.parametrize(
    ("event", "summary"),
    [
        (
            MessagesRemoved(message_ids=["a", "b"], reason="trim"),
            "removed 2 messages: 'a', 'b' (trim)",
        ),
        (MessagesRemoved(message_ids=["a"]), "removed 1 message: 'a'"),
        (
            MessagesRemoved(message_ids=[f"m{i}" for i in range(12)]),
            "removed 12 messages: " + ", ".join(f"'m{i}'" for i in range(10)) + " and 2 more",
        ),
        (
            MessagesReplaced(messages=[to_builtins(said("x", "y"))]),
            "context replaced: now 1 message",
        ),
        (ContextSummarized(summary="the gist"), "context summarized: the gist"),
        (
            ContextSummarized(summary="g", messages=[]),
            "context summarized: g; context now 0 messages",
        ),
        (Stopped(node="n", when="after"), "stopped after node n"),
        (Stopped(node="n"), "stopped before node n (cancelled)"),
        (
            Stopped(node="n", reason="abandoned", in_flight=["w"]),
            "stopped before node n (cancelled): abandoned; still running on worker threads: w",
        ),
        (ToolCallFinished(call_id="c", name="t", status="completed"), "t completed"),
        (
            ToolCallFinished(
                call_id="c", name="t", status="completed", goto="b", update={"z": 1, "a": 2}
            ),
            "t completed; returned a Command: goto b, updated fields a, z",
        ),
        (
            ToolCallFinished(call_id="c", name="t", status="completed", update={"a": 1}),
            "t completed; returned a Command: updated fields a",
        ),
        (
            ToolCallFinished(
                call_id="c",
                name="t",
                status="completed",
                message=to_builtins(tool_result("r", "c", {"k": 1})),
            ),
            't completed; returned a tool message: {"k": 1}',
        ),
    ],
)
def test_history_summaries_of_the_transcript_events(event: Event, summary: str) -> None:
    assert summarize(record(event)) == summary


def test_people_see_reasoning_errors_and_structured_outputs() -> None:
    message = Message(
        role="tool",
        content=[
            ReasoningBlock(summary="thinking. "),
            TextBlock(text="text. "),
            ErrorBlock(message="it broke. "),
            ToolResultBlock(call_id="c", output={"temp": 21}),
        ],
    )
    assert message.text() == "text. "  # the seed's narrower definition
    assert message_text(message) == 'thinking. text. it broke. {"temp": 21}'
    assert message_line(message).plain == 'thinking. text. it broke. {"temp": 21}'
    summary = summarize(record(message_appended(message)))
    assert summary == 'tool: thinking. text. it broke. {"temp": 21}'


# ---- the command line --------------------------------------------------------------------


def test_history_renders_removal_stop_and_command(log: Path) -> None:
    done = agentlog("history", "rm", "--db", log)
    assert done.returncode == 0, done.stderr
    assert_inert(done)
    removed = next(r for r in rows(done) if "messages_removed" in r)
    assert "│ agent │ trim  │ removed 1 message: 'm-\\x1b[2J\\x1b[31m\\nX' (too old)" in removed
    assert "stopped after node agent" in done.stdout
    assert not any("forged" in r and "│ 99" in r[:6] for r in rows(done))

    cmd = agentlog("history", "cmd", "--db", log, "--json")
    summaries = {r["kind"]: r["summary"] for r in json.loads(cmd.stdout)}
    assert summaries["tool_call_finished"] == (
        "route completed; returned a tool message: routed; "
        "returned a Command: goto review, updated fields label, notes"
    )
    assert summaries["messages_replaced"] == "context replaced: now 1 message"
    assert summaries["context_summarized"] == (
        "context summarized: they asked to route; context now 0 messages"
    )
    assert summaries["stopped"] == (
        "stopped before node review (cancelled): abandoned: the caller went away; "
        "still running on worker threads: slow"
    )


def test_show_step_lists_what_the_step_recorded(log: Path) -> None:
    done = agentlog("show", "rm", "--step", "2", "--db", log)
    assert done.returncode == 0, done.stderr
    assert_inert(done)
    assert "step 2: 3 records (seq 6 to 8)" in done.stdout
    assert "removed 1 message: 'm-\\x1b[2J" in done.stdout and "(too old)" in done.stdout
    assert "│ 1 │ assistant │ m2 │ keep me │" in done.stdout  # the context left

    data = json.loads(agentlog("show", "rm", "--step", "-1", "--db", log, "--json").stdout)
    assert [r["kind"] for r in data["step_records"]] == [
        "node_entered",
        "messages_removed",
        "step_advanced",
    ]
    assert data["step_records"][1]["summary"] == f"removed 1 message: '{EVIL_ID}' (too old)"
    assert [m["message_id"] for m in data["messages"]] == ["m2"]
    latest = json.loads(agentlog("show", "rm", "--db", log, "--json").stdout)
    assert "step_records" not in latest


def test_show_says_how_a_stop_left_the_run(log: Path) -> None:
    after = agentlog("show", "rm", "--db", log)
    assert "stopped after node agent\n" in after.stdout
    before = agentlog("show", "cmd", "--db", log)
    assert "stopped before node review (cancelled; it runs again on resume)" in before.stdout


def test_diff_shows_the_removed_message_by_id_and_inert(log: Path) -> None:
    done = agentlog("diff", "rm", "1", "2", "--db", log)
    assert done.returncode == 0, done.stderr
    assert_inert(done)
    lines = rows(done)
    (removed,) = [r for r in lines if r.startswith("│ - user message")]
    assert "'m-\\x1b[2J\\x1b[31m\\nX'" in removed
    assert "old news \\x1b[2J\\x1b[31mred" in removed
    forged = [r for r in lines if "│ 99 │ forged │ row" in r]
    assert forged and all(r.startswith("│     ") for r in forged)  # in the removed cell

    data = json.loads(agentlog("diff", "rm", "1", "2", "--db", log, "--json").stdout)
    assert [m["message_id"] for m in data["messages_removed"]] == [EVIL_ID]
    assert data["messages_removed"][0]["content"][0]["text"] == EVIL_TEXT  # exact in JSON


def test_verify_reports_findings_apart_from_chain_damage(log: Path) -> None:
    done = agentlog("verify", "--db", log)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert_inert(done)
    assert "hash chains of 4 threads: all ok" in done.stdout
    found = [line for line in done.stdout.splitlines() if line.startswith("invariant finding ")]
    assert found == [
        "invariant finding [open_call]: thread open: the run completed with tool call 'c1' "
        "(lookup) left without a result",
        "invariant finding [unpaired_result]: thread stray: tool call 'ghost' has a result but "
        "no call in the context",
    ]
    assert "invariant findings: 2 in 2 of 4 threads" in done.stdout
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: 2 invariant finding(s) in 2 of 4 threads (hash chains intact)")

    report = json.loads(agentlog("verify", "--db", log, "--json").stdout)
    assert report["ok"] is True  # the chains
    invariants = report["invariants"]
    assert invariants["ok"] is False and invariants["not_checked"] == []
    assert sorted(invariants["checked"]) == ["cmd", "open", "rm", "stray"]
    assert invariants["findings"] == [
        {
            "thread_id": "open",
            "seq": 5,
            "kind": "open_call",
            "call_id": "c1",
            "tool": "lookup",
            "message": "the run completed with tool call 'c1' (lookup) left without a result",
        },
        {
            "thread_id": "stray",
            "seq": 3,
            "kind": "unpaired_result",
            "call_id": "ghost",
            "tool": None,
            "message": "tool call 'ghost' has a result but no call in the context",
        },
    ]

    one = agentlog("verify", "open", "--db", log, "--json")
    assert one.returncode == 3
    assert json.loads(one.stderr)["exit"] == 3

    fine = agentlog("verify", "rm", "--db", log)
    assert fine.returncode == 0, fine.stderr
    assert "tool-call invariants: ok in 1 of 1 threads" in fine.stdout
    assert "invariant finding " not in fine.stdout


def test_a_damaged_thread_is_not_replayed_and_damage_wins_the_exit_status(
    log: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "x.db"
    shutil.copy(log, copy)
    edit_db(copy, "UPDATE events SET at = at + 1 WHERE thread_id = 'open' AND seq = 2")

    done = agentlog("verify", "--db", copy)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "FAILED" in done.stdout and "1 failed" in done.stdout
    found = [line for line in done.stdout.splitlines() if line.startswith("invariant finding ")]
    assert len(found) == 1 and "thread stray:" in found[0]  # open is not replayed
    assert "1 not checked (damaged chain)" in done.stdout
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: 1 of 4 threads failed verification; thread 'open', seq 2")

    report = json.loads(agentlog("verify", "--db", copy, "--json").stdout)
    assert report["ok"] is False
    assert report["invariants"]["not_checked"] == ["open"]
    assert [f["thread_id"] for f in report["invariants"]["findings"]] == ["stray"]


def test_verify_help_documents_the_exit_statuses() -> None:
    done = agentlog("verify", "--help", columns=200)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "Exit status 0: every chain is intact and no invariant is broken" in text
    assert "Exit status 1: a chain or a snapshot is damaged" in text
    assert "Exit status 3: every chain is intact but a thread breaks an invariant" in text
