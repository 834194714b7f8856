"""What a newcomer expects to be consistent: a human edit's row says what changed, every
record names who caused it, and the CLI's forks name who forked."""

from __future__ import annotations

import json
from pathlib import Path

from events import SQLiteEventStore
from projections import AgentState, Message
from projections.timetravel import changed_text, event_history
from tests.helpers import agentlog, line

LONG = "Dear customer, we will refund {} EUR to your card within five working days. Regards"


def reply(state: AgentState) -> list[Message]:
    return [Message.text_message(LONG.format(100), role="assistant", message_id="m-reply")]


async def edited(db: Path) -> None:
    async with SQLiteEventStore(db) as store:
        app = line(("a", reply)).compile(store, interrupt_after=["a"])
        await app.ainvoke("hi", {"thread_id": "t"})
        fixed = Message.text_message(LONG.format(10), role="assistant", message_id="m-reply")
        await app.aupdate_state({"thread_id": "t"}, {"messages": [fixed]}, actor="alice")


async def test_history_shows_what_a_human_edit_changed(tmp_path: Path) -> None:
    db = tmp_path / "edit.db"
    await edited(db)
    async with SQLiteEventStore(db) as store:
        rows = await event_history(store, "t", ["message_replaced"])
    (row,) = rows
    assert row.actor == "alice"
    assert row.summary == (
        "replaced message 'm-reply': \"…we will refund 100 EUR to your card…\" -> "
        '"…we will refund 10 EUR to your card…"'
    )
    shown = agentlog("history", "t", "--db", db, "--json")
    assert shown.returncode == 0, shown.stderr
    (cli,) = [r for r in json.loads(shown.stdout) if r["kind"] == "message_replaced"]
    assert cli["summary"] == row.summary
    assert "Regards" not in cli["summary"]  # not the whole message again


def test_changed_text_keeps_only_the_difference() -> None:
    assert changed_text("abc", "abd") == '"abc" -> "abd"'
    assert changed_text("same", "same") == "its text unchanged"
    long = changed_text("x" * 500, "x" * 250 + "y" + "x" * 249)
    assert long.count("x") < 150 and "y" in long
