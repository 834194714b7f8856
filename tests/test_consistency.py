"""What a newcomer expects to be consistent: a human edit's row says what changed, every
record names who caused it, and the CLI's forks name who forked."""

from __future__ import annotations

import json
from pathlib import Path

from agentlog.actors.testing import wait_for_record
from agentlog.events import SQLiteEventStore
from agentlog.projections import AgentState, Message
from agentlog.projections.timetravel import changed_text, event_history
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


async def test_cli_fork_names_who_forked(tmp_path: Path) -> None:
    import os
    import pwd

    db = tmp_path / "fork.db"
    await edited(db)
    named = agentlog("fork", "t", "--step", "1", "--to", "b", "--actor", "bob", "--db", db)
    assert named.returncode == 0, named.stderr
    plain = agentlog("fork", "t", "--step", "1", "--to", "c", "--db", db)
    assert plain.returncode == 0, plain.stderr
    blank = agentlog("fork", "t", "--step", "1", "--to", "d", "--actor", " ", "--db", db)
    assert blank.returncode == 2 and "--actor" in blank.stderr
    async with SQLiteEventStore(db) as store:
        assert [r.actor async for r in store.read("b")] == ["bob"]
        assert [r.actor async for r in store.read("c")] == [pwd.getpwuid(os.getuid()).pw_name]
        assert await store.last_seq("d") == 0


async def test_a_drain_stop_is_the_runtimes_and_resumed_names_the_paused_node(
    tmp_path: Path,
) -> None:
    import asyncio

    from agentlog.actors.runtime import AgentRuntime, EntryPoint

    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(state: AgentState) -> list[Message]:
        entered.set()
        await release.wait()
        return [Message.text_message("x", role="assistant")]

    async with SQLiteEventStore(tmp_path / "drain.db") as store:
        runtime = AgentRuntime(store)
        runtime.add_graph("g", line(("a", slow), ("b", reply)).compile(store))
        runtime.register_entry_point(EntryPoint(id="e", graph_id="g"))
        await runtime.start()
        await runtime.trigger("e", "hi", thread_id="t", actor="alice")
        await entered.wait()
        stopping = asyncio.ensure_future(runtime.stop())
        await wait_for_record(store, "t", "stop_requested")
        release.set()
        await stopping
        (stop,) = [r async for r in store.read("t") if r.kind == "stop_requested"]
        assert stop.actor == "runtime" and stop.event.by == "runtime"
        await runtime.start()
        await runtime.wait("t", timeout=60)
        await runtime.stop()
        (resumed,) = [r async for r in store.read("t") if r.kind == "resumed"]
        assert resumed.event.node == "a"  # it stopped after node a


async def test_resumed_names_the_node_an_interrupt_paused(tmp_path: Path) -> None:
    from agentlog.actors import Command

    async with SQLiteEventStore(tmp_path / "pause.db") as store:
        app = line(("a", reply), ("b", reply)).compile(store, interrupt_before=["b"])
        await app.ainvoke("hi", {"thread_id": "t"})
        await app.ainvoke(Command(resume=None), {"thread_id": "t"})
        rows = await event_history(store, "t", ["resumed"])
        assert [r.summary for r in rows] == ["node=b"]


def test_help_is_never_cut_on_an_80_column_terminal() -> None:
    commands = ["threads", "history", "tail", "runtime", "worker", "serve", "show", "diff"]
    commands += ["fork", "verify", "export", "demo", "db upgrade", "db status", "ui"]
    for command in ["", *commands]:
        shown = agentlog(*command.split(), "--help", columns=80)
        assert shown.returncode == 0, shown.stderr
        cut = [line for line in shown.stdout.splitlines() if "…" in line]
        assert not cut, f"agentlog {command} --help: {cut}"


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_a_damaged_database_is_refused_leaving_no_wal_or_shm(tmp_path: Path) -> None:
    good = tmp_path / "good.db"
    await edited(good)
    damaged = tmp_path / "damaged" / "log.db"
    damaged.parent.mkdir()
    damaged.write_bytes(good.read_bytes()[:3000])  # a WAL-mode header, a body cut short
    for args in (["threads"], ["history", "t"], ["fork", "t", "--step", "1"]):
        refused = agentlog(*args, "--db", damaged)
        assert refused.returncode == 1 and "not an agentlog database" in refused.stderr
        assert _files(damaged.parent) == ["log.db"], args


async def test_a_read_only_database_is_refused_leaving_no_wal_or_shm(tmp_path: Path) -> None:
    """An immutable file (chattr +i), which even root cannot write."""
    import subprocess

    import pytest

    db = tmp_path / "archive" / "log.db"
    db.parent.mkdir()
    await edited(db)
    made = subprocess.run(["chattr", "+i", str(db)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not possible here: {made.stderr.strip()}")
    try:
        refused = agentlog("fork", "t", "--step", "1", "--db", db)
        assert refused.returncode == 1 and "read-only" in refused.stderr
        assert _files(db.parent) == ["log.db"]
        read = agentlog("threads", "--db", db)
        assert read.returncode == 0, read.stderr
        assert _files(db.parent) == ["log.db"]
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)


async def test_afork_of_a_value_nested_5000_deep_is_a_typed_error(tmp_path: Path) -> None:
    import pytest

    from agentlog.events import AgentlogError

    deep: object = "x"
    for _ in range(5000):
        deep = [deep]
    nested: object = "x"
    for _ in range(5000):
        nested = {"k": nested}
    async with SQLiteEventStore(tmp_path / "deep.db") as store:
        app = line(("a", reply)).compile(store)
        await app.ainvoke("hi", {"thread_id": "t"})
        threads = await store.threads()
        calls = [
            lambda: app.afork({"thread_id": deep}, at_step=1),
            lambda: app.afork({"configurable": {"thread_id": nested}}, at_step=1),
            lambda: app.afork({"thread_id": "t"}, at_step=1, new_thread_id=deep),  # type: ignore[arg-type]
            lambda: app.afork({"thread_id": "t"}, at_step=deep),  # type: ignore[arg-type]
            lambda: app.afork({"thread_id": "t"}, at_seq=nested),  # type: ignore[arg-type]
        ]
        for call in calls:
            with pytest.raises(AgentlogError) as refused:
                await call()
            assert len(str(refused.value)) < 400
        assert await store.threads() == threads
