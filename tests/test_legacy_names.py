"""A log written before the `agentlog` namespace reads, resumes, forks and verifies today.

`fixtures/legacy.db` is fixed bytes written by commit 9287b1c's code
(`fixtures/make_legacy_fixture.py`): its records name the library's reducers and state class
by the old top-level modules (`projections.reducers.append_items`,
`projections.state.AgentState`) inside the hash chain. `projections.names.current_name` maps
those names; without it a custom field reduced by `append_items` reads as replaced, and a
snapshot of `AgentState` is passed over for the whole log.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import Command
from agentlog.events import SQLiteEventStore, verify_store
from agentlog.projections import AgentState, state_at
from agentlog.projections.generic import open_states
from agentlog.projections.names import current_name

from .fixtures.legacy_graph import DONE, FORK, PAUSED, PLAIN, LegacyState, build_graph

HERE = Path(__file__).resolve().parent / "fixtures"
DB = HERE / "legacy.db"
EXPECTED: dict[str, Any] = json.loads((HERE / "legacy.json").read_text())["threads"]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    """A private copy of the fixture (opening a database may write to it)."""
    before = hashlib.sha256(DB.read_bytes()).hexdigest()
    copy = tmp_path / DB.name
    shutil.copyfile(DB, copy)
    yield copy
    assert hashlib.sha256(DB.read_bytes()).hexdigest() == before, "a test wrote to the fixture"


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SQLiteEventStore]:
    async with SQLiteEventStore(db) as opened:
        yield opened


def cls_of(thread: str) -> type[AgentState]:
    return AgentState if thread == PLAIN else LegacyState


def test_the_fixture_names_the_library_by_its_old_modules(db: Path) -> None:
    """The file really holds the legacy names this module is about."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    types = {row[0] for row in conn.execute("SELECT DISTINCT state_type FROM snapshots")}
    conn.close()
    assert "projections.state.AgentState" in types
    assert "tests.fixtures.legacy_graph.LegacyState" in types


@pytest.mark.parametrize(
    ("recorded", "today"),
    [
        ("projections.reducers.append_items", "agentlog.projections.reducers.append_items"),
        ("projections.state.AgentState", "agentlog.projections.state.AgentState"),
        ("actors.tools.ToolNode", "agentlog.actors.tools.node.ToolNode"),
        ("actors.compiled.CompiledGraph", "agentlog.actors.engine.compiled.CompiledGraph"),
        ("events.sqlite.SQLiteEventStore", "agentlog.events.stores.sqlite.SQLiteEventStore"),
        ("agentlog.projections.state.AgentState", "agentlog.projections.state.AgentState"),
        ("my_app.state.Ticket", "my_app.state.Ticket"),
        ("projections", "projections"),
        ("eventsource.X", "eventsource.X"),
    ],
)
def test_current_name_maps_only_legacy_library_names(recorded: str, today: str) -> None:
    assert current_name(recorded) == today


async def test_every_thread_verifies_and_reads_to_what_its_writer_read(
    store: SQLiteEventStore,
) -> None:
    assert sorted(await store.threads()) == sorted(EXPECTED)
    reports = await verify_store(store)
    assert reports and all(r.ok for r in reports), reports
    for thread, expected in EXPECTED.items():
        assert [r.kind async for r in store.read(thread)] == expected["kinds"]
        for use_snapshots in (False, True):
            state = await state_at(
                store, thread, state_cls=cls_of(thread), use_snapshots=use_snapshots
            )
            assert state.model_dump(mode="json") == expected["state"], (thread, use_snapshots)


async def test_a_legacy_snapshot_of_agent_state_is_used_not_passed_over(
    store: SQLiteEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read with snapshots, the plain thread starts from its snapshot, not from seq 1."""
    starts: list[int] = []
    read = store.read

    def spy(thread_id: str, from_seq: int = 1, *args: Any, **kwargs: Any) -> Any:
        starts.append(from_seq)
        return read(thread_id, from_seq, *args, **kwargs)

    monkeypatch.setattr(store, "read", spy)
    state = await state_at(store, PLAIN)
    assert state.model_dump(mode="json") == EXPECTED[PLAIN]["state"]
    assert starts and min(starts) > 1, starts


async def test_recorded_library_reducers_resolve_without_the_state_class(
    store: SQLiteEventStore,
) -> None:
    """Read with the class built from the log alone, `notes` is appended, not replaced."""
    last = await store.last_seq(DONE)
    for use_snapshots in (False, True):
        [opened] = await open_states(store, DONE, [last], use_snapshots=use_snapshots)
        notes = getattr(opened.state, "notes", None)
        assert "notes" not in opened.notes, opened.notes
        assert notes == EXPECTED[DONE]["state"]["notes"]
        assert len(notes) > 1


async def test_a_paused_legacy_thread_resumes_and_forks_with_todays_code(
    store: SQLiteEventStore,
) -> None:
    app = build_graph().compile(checkpointer=store, snapshot_every=4)
    await app.ainvoke(Command(resume="no"), {"thread_id": PAUSED})
    state = await state_at(store, PAUSED, state_cls=LegacyState)
    assert state.status == "no"
    assert state.notes == [*EXPECTED[PAUSED]["state"]["notes"], "answered no"]
    fork = await app.afork({"thread_id": FORK}, at_step=3, new_thread_id="fork-today")
    await app.ainvoke(None, {"thread_id": fork})
    await app.ainvoke(Command(resume="yes"), {"thread_id": fork})
    forked = await state_at(store, fork, state_cls=LegacyState)
    assert forked.status == "yes" and forked.notes[-1] == "answered yes"
    reports = await verify_store(store)
    assert len(reports) == len(EXPECTED) + 1 and all(r.ok for r in reports), reports
