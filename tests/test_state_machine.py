"""Random legal and illegal transitions through a real SQLite log.

After every step: replaying the file (reopened from disk) equals the live state, and
snapshot + tail equals a full replay. Refused transitions leave the log untouched.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Annotated, Any

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from events import (
    ContextSummarized,
    InterruptRaised,
    InvalidAppendError,
    NodeEntered,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    SQLiteEventStore,
    StepAdvanced,
    Stopped,
    StopRequested,
    ToolCallFinished,
    ToolCallStarted,
)
from events.kinds import Event
from projections import (
    AgentState,
    Fold,
    IllegalTransitionError,
    InvalidStateUpdateError,
    Message,
    decide,
    message_appended,
    replay,
    state_at,
    state_updated,
    take_snapshot,
)


class NotesState(AgentState):
    notes: Annotated[list[str], lambda old, new: old + new] = []
    mood: str = "calm"


nodes = st.sampled_from(["agent", "tools", "review"])
texts = st.text(max_size=30)
ids = st.sampled_from(["m1", "m2", "m3", None])


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "log.db"
        self.store = SQLiteEventStore(self.path)
        self.live: Fold[NotesState] = Fold.new(NotesState)
        self.seq = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def commit(self, actor: str, *events: Event) -> None:
        try:
            decide(self.live.state, events, seq=self.seq)
            records = self.run(
                self.store.append("t", list(events), expected_seq=self.seq, run_id="r", actor=actor)
            )
        except (IllegalTransitionError, InvalidStateUpdateError, InvalidAppendError) as exc:
            event(f"refused {type(exc).__name__}")
            assert self.run(self.store.last_seq("t")) == self.seq
            return
        event(f"committed {records[0].kind}")
        self.live.apply_all(records)
        self.seq = records[-1].seq

    @rule(node=nodes)
    def start_run(self, node: str) -> None:
        self.commit("user", RunStarted(entry_node=node))

    @rule(node=nodes)
    def enter(self, node: str) -> None:
        self.commit(node, NodeEntered(node=node))

    @rule(skip=st.integers(-1, 2), node=nodes | st.none())
    def advance(self, skip: int, node: str | None) -> None:
        step = self.live.state.execution_meta.step + 1 + (skip if skip != 1 else 0)
        self.commit("agent", StepAdvanced(step=step, next_node=node))

    @rule(text=texts, mid=ids, role=st.sampled_from(["user", "assistant"]))
    def message(self, text: str, mid: str | None, role: str) -> None:
        self.commit("agent", message_appended(Message.text_message(text, role, mid)))  # type: ignore[arg-type]

    @rule(
        note=texts,
        mood=st.sampled_from(["calm", "busy", 7]),
        field=st.sampled_from(["notes", "nope"]),
    )
    def update(self, note: str, mood: object, field: str) -> None:
        values: dict[str, Any] = {"mood": mood}
        values[field] = [note]
        self.commit("user", state_updated(values, source="user"))

    @rule(node=nodes, when=st.sampled_from(["before", "after"]))
    def interrupt(self, node: str, when: str) -> None:
        self.commit(node, InterruptRaised(node=node, reason="check", when=when, data={"n": 1}))  # type: ignore[arg-type]

    @rule(value=st.integers())
    def resume(self, value: int) -> None:
        self.commit("user", Resumed(value=value, by="user"))

    @rule()
    def request_stop(self) -> None:
        self.commit("user", StopRequested(by="user"))

    @rule()
    def stopped(self) -> None:
        self.commit("runtime", Stopped(node=self.live.state.execution_meta.current_node))

    @rule(call=st.sampled_from(["c1", "c2"]), finish=st.booleans())
    def tool_call(self, call: str, finish: bool) -> None:
        event: Event = (
            ToolCallFinished(call_id=call, name="lookup", output={"ok": True})
            if finish
            else ToolCallStarted(call_id=call, name="lookup", args={"q": call})
        )
        self.commit("tools", event)

    @rule(keep=st.integers(0, 3))
    def summarize(self, keep: int) -> None:
        kept = [m.model_dump(mode="json") for m in self.live.state.context[-keep:]] if keep else []
        self.commit("agent", ContextSummarized(summary=f"{keep} kept", messages=kept))

    @rule(ok=st.booleans())
    def finish(self, ok: bool) -> None:
        self.commit(
            "agent", RunCompleted() if ok else RunFailed(node="agent", error_type="E", message="x")
        )

    @rule()
    def snapshot(self) -> None:
        if self.seq:
            self.run(take_snapshot(self.store, "t", state_cls=NotesState))

    @invariant()
    def replay_from_disk_equals_live(self) -> None:
        if not self.seq:
            return

        async def reread() -> tuple[NotesState, NotesState, list[Any]]:
            async with SQLiteEventStore(self.path) as fresh:
                full = await state_at(fresh, "t", state_cls=NotesState, use_snapshots=False)
                fast = await state_at(fresh, "t", state_cls=NotesState)
                records = [r async for r in fresh.read("t")]
                assert (await fresh.verify("t")).ok
                return full, fast, records

        full, fast, records = self.run(reread())
        assert full == self.live.state
        assert fast == full
        assert replay(records, NotesState) == full
        assert [r.seq for r in records] == list(range(1, self.seq + 1))

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()
        self.dir.cleanup()


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(settings.default, stateful_step_count=25)
