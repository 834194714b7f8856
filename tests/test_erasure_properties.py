"""For any sequence of appends, erasures and forks: every chain verifies, an erased subject's
text is in no read, follow or export, and every subject not erased still reads in clear
(replay of the log gives what the writer folded live)."""

from __future__ import annotations

import asyncio
import base64
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.actors.engine.commit import fork_thread
from agentlog.actors.engine.erasure import erase_subject
from agentlog.actors.engine.retention import prune_thread
from agentlog.events import (
    EventStore,
    MemoryEventStore,
    MessageAppended,
    RunStarted,
    SQLiteEventStore,
    StateUpdated,
    ToolCallStarted,
    export_jsonl,
    follow,
)
from agentlog.events.keystore import tag_thread
from agentlog.events.sealing import MASTER_KEY_ENV, SubjectErasedError, mark_personal
from agentlog.events.verify_export import verify
from agentlog.projections import AgentState, replay
from agentlog.projections.views import fold_at

from .conftest import examples


class Person(AgentState):
    email: str = ""


SUBJECTS = ("alice", "bob", "carol")
THREADS = ("t1", "t2", "t3", "t4")


@pytest.fixture(autouse=True)
def master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, base64.urlsafe_b64encode(bytes(32)).decode())


@dataclass(frozen=True)
class Append:
    thread: int
    subject: int


@dataclass(frozen=True)
class Erase:
    subject: int


@dataclass(frozen=True)
class Prune:
    thread: int


@dataclass(frozen=True)
class Fork:
    thread: int


ops = st.lists(
    st.one_of(
        st.builds(Append, st.integers(0, 3), st.integers(0, 2)),
        st.builds(Erase, st.integers(0, 2)),
        st.builds(Fork, st.integers(0, 3)),
        st.builds(Prune, st.integers(0, 3)),
    ),
    max_size=14,
)


def secret(subject: str, n: int) -> str:
    return f"SECRET-{subject}-{n:04d}"


class Model:
    """What the log should say: each thread's subject, each subject's texts, who is erased."""

    def __init__(self) -> None:
        self.subject_of: dict[str, str] = {}
        self.texts: dict[str, set[str]] = {s: set() for s in SUBJECTS}
        self.erased: set[str] = set()
        self.pruned: set[str] = set()
        self.n = 0


async def _apply(store: EventStore, model: Model, op: Any) -> None:
    if isinstance(op, Append):
        thread, subject = THREADS[op.thread], SUBJECTS[op.subject]
        subject = model.subject_of.setdefault(thread, subject)
        if subject in model.erased:
            with pytest.raises(SubjectErasedError):
                await tag_thread(store, thread, subject)
            return
        await tag_thread(store, thread, subject)
        model.n += 1
        text = secret(subject, model.n)
        message = {"message_id": f"m{model.n}", "role": "user", "timestamp": 1.0,
                   "content": [{"type": "text", "text": text}]}  # fmt: skip
        events = [
            RunStarted(input=text),
            MessageAppended(message=message),
            ToolCallStarted(call_id=f"c{model.n}", name="lookup", args={"q": text}),
            StateUpdated(values={"email": text}),
        ]
        await store.append(thread, events, expected_seq=await store.last_seq(thread))
        model.texts[subject].add(text)
    elif isinstance(op, Erase):
        subject = SUBJECTS[op.subject]
        await erase_subject(store, subject, by="dpo", reason="request")
        model.erased.add(subject)
    elif isinstance(op, Prune):
        thread = THREADS[op.thread]
        if await store.last_seq(thread) == 0 or isinstance(store, MemoryEventStore):
            return
        await prune_thread(store, thread, keep_runs=1, state_cls=Person)
        model.pruned.add(thread)
    else:
        model.n += 1
        source, into = THREADS[op.thread], f"{THREADS[op.thread]}-f{model.n}"
        if await store.last_seq(source) == 0 or model.subject_of[source] in model.erased:
            return
        await fork_thread(store, source, at_seq=await store.last_seq(source),
                          new_thread_id=into, state_cls=Person)  # fmt: skip
        model.subject_of[into] = model.subject_of[source]


async def _all_text(store: EventStore, model: Model) -> str:
    seen: list[str] = []
    for thread in await store.threads():
        seen.extend([repr(r.event) async for r in store.read(thread)])
        out = io.StringIO()
        await export_jsonl(store, thread, out)
        seen.append(out.getvalue())
        verify(out.getvalue().splitlines(), None)  # every export verifies on its own
        folded = await fold_at(store, thread, None, Person)  # from a prune's snapshot too
        seen.append(folded.state.model_dump_json())
        if thread not in model.pruned:  # replay of the whole log gives the same state
            replayed = replay([r async for r in store.read(thread)], Person)
            assert replayed.model_dump(exclude={"execution_meta"}) == folded.state.model_dump(
                exclude={"execution_meta"})  # fmt: skip
    last = await store.last_position()
    if last:
        async for record in follow(store, after=0):
            seen.append(repr(record.event))
            if record.position >= last:
                break
    return "\n".join(seen)


async def _check(store: EventStore, model: Model) -> None:
    for thread in await store.threads():
        assert (await store.verify(thread)).ok, thread
    text = await _all_text(store, model)
    for subject, texts in model.texts.items():
        for t in texts:
            if subject in model.erased:
                assert t not in text, (subject, t)
            else:
                assert t in text, (subject, t)


async def _run(store: EventStore, script: list[Any]) -> None:
    model = Model()
    for op in script:
        await _apply(store, model, op)
        await _check(store, model)


@settings(max_examples=examples(60))
@given(ops)
def test_memory_store(script: list[Any]) -> None:
    mark_personal("email")
    asyncio.run(_run(MemoryEventStore(), script))


@settings(max_examples=examples(15))
@given(ops)
def test_sqlite_store(script: list[Any]) -> None:
    mark_personal("email")

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            async with SQLiteEventStore(Path(tmp) / "log.db") as store:
                await _run(store, script)

    asyncio.run(main())
