"""A runtime trigger for a data subject: its input sealed on the runtime's own thread too,
the run's thread tagged, and an erasure blanking it everywhere, down to the file's bytes."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors.engine.erasure import erase_subject
from agentlog.actors.engine.errors import NodeError
from agentlog.actors.runtime import AgentRuntime, EntryPoint, RegistrationError
from agentlog.actors.testing import until
from agentlog.events import SQLiteEventStore
from agentlog.events.keystore import ThreadTaggedError, subject_of_thread, vacuum
from agentlog.events.sealing import MASTER_KEY_ENV, SubjectErasedError, is_sealed
from agentlog.projections import AgentState, Message
from tests.helpers import line

SECRET = "Alice Liddell lives at 7 Rabbit Hole Lane"


@pytest.fixture(autouse=True)
def master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, base64.urlsafe_b64encode(bytes(range(32))).decode())


def reply(state: AgentState) -> list[Message]:
    return [Message.text_message(f"noted: {state.context[-1].text()}", role="assistant")]


def runtime_of(store: Any) -> AgentRuntime:
    runtime = AgentRuntime(store)
    runtime.add_graph("support", line(("agent", reply)).compile(store))
    runtime.register_entry_point(EntryPoint(id="chat", graph_id="support"))
    return runtime


def everything(path: Path) -> bytes:
    """Every byte of the database: the file, its WAL and its shared memory."""
    return b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))


async def test_the_trigger_input_is_sealed_and_erased_everywhere(tmp_path: Path) -> None:
    db = tmp_path / "runtime.db"
    async with SQLiteEventStore(db) as store, runtime_of(store) as runtime:
        thread = await runtime.trigger("chat", SECRET, subject="alice")
        assert (await runtime.wait(thread, timeout=30))["status"] == "completed"
        assert await subject_of_thread(store, thread) == "alice"
        rows = [r async for r in store.read_rows("__runtime__") if r.kind == "trigger_accepted"]
        assert len(rows) == 1 and is_sealed(rows[0].payload)
        assert SECRET.encode() not in rows[0].payload
        (accepted, *_) = [r.event async for r in store.read("__runtime__")]
        assert accepted.subject == "alice" and SECRET in str(accepted.input)  # read in clear
        assert SECRET in str((await runtime.graphs["support"].app.aget_state(
            {"thread_id": thread})).context)  # fmt: skip
    async with SQLiteEventStore(db) as store:
        report = await erase_subject(store, "alice", by="dpo", reason="GDPR Art. 17")
        assert report.threads == [thread]
        await vacuum(store)
        shown = str([r.event async for r in store.read("__runtime__")])
        assert SECRET not in shown and "erased on" in shown
        assert (await store.verify("__runtime__")).ok and (await store.verify(thread)).ok
    raw = everything(db)
    assert SECRET.encode() not in raw and b"Rabbit Hole" not in raw


async def test_a_wrong_subject_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "r.db") as store, runtime_of(store) as runtime:
        before = await store.last_seq("__runtime__")
        with pytest.raises(RegistrationError, match="a data subject is"):
            await runtime.trigger("chat", SECRET, subject="no spaces")
        thread = await runtime.trigger("chat", "hi", subject="bob")
        await runtime.wait(thread, timeout=30)
        with pytest.raises(ThreadTaggedError, match="'bob'"):
            await runtime.trigger("chat", SECRET, thread_id=thread, subject="carol")
        await erase_subject(store, "carol", by="dpo", reason="request")
        with pytest.raises(SubjectErasedError):
            await runtime.trigger("chat", SECRET, subject="carol")
        rows = [r async for r in store.read_rows("__runtime__")]
        assert all(SECRET.encode() not in r.payload for r in rows)
        assert before < await store.last_seq("__runtime__")


async def test_a_run_started_by_a_subjects_record_is_the_subjects_too(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    audit = EntryPoint(id="audit", graph_id="audit", trigger="event", kinds=["message_appended"],
                       from_graph="support")  # fmt: skip
    async with SQLiteEventStore(db) as store:
        runtime = runtime_of(store)
        runtime.add_graph("audit", line(("log", reply)).compile(store))
        runtime.register_entry_point(audit)
        async with runtime:
            thread = await runtime.trigger("chat", SECRET, subject="alice")
            await runtime.wait(thread, timeout=30)

            def answered() -> list[Any]:  # the user's message and the reply: two records
                found = [t for t in runtime.ledger.triggers.values()
                         if t.accepted.entry_point == "audit"]  # fmt: skip
                return found if len(found) == 2 else []

            audits = await until(answered, what="both messages answered by the audit graph")
            for state in audits:  # each answering run's thread belongs to the subject too
                await runtime.wait(state.accepted.thread_id, timeout=30)
                assert await subject_of_thread(store, state.accepted.thread_id) == "alice"
            rows = [r async for r in store.read_rows("__runtime__") if r.kind == "trigger_accepted"]
            assert all(SECRET.encode() not in r.payload for r in rows)  # sealed, each one
        await erase_subject(store, "alice", by="dpo", reason="GDPR Art. 17")
        await vacuum(store)
    raw = everything(db)
    assert SECRET.encode() not in raw and b"Rabbit Hole" not in raw


async def test_an_error_quoting_the_subjects_data_is_sealed_and_erased(tmp_path: Path) -> None:
    def fails(state: AgentState) -> list[Message]:
        raise ValueError(f"cannot parse {state.context[-1].text()!r}")

    db = tmp_path / "failed.db"
    async with SQLiteEventStore(db) as store:
        app = line(("parse", fails)).compile(store)
        with pytest.raises(NodeError, match="Rabbit Hole"):
            await app.ainvoke(SECRET, {"thread_id": "t", "subject": "alice"})
        rows = [r async for r in store.read_rows("t") if r.kind == "run_failed"]
        assert len(rows) == 1 and is_sealed(rows[0].payload)
        await erase_subject(store, "alice", by="dpo", reason="GDPR Art. 17")
        await vacuum(store)
        failed = [r.event async for r in store.read("t") if r.kind == "run_failed"]
        assert failed[0].message.startswith("erased on")
    raw = everything(db)
    assert b"Rabbit Hole" not in raw
