"""Random legal and illegal transitions through a real SQLite log.

After every step: replaying the file (reopened from disk) equals the live state, and
snapshot + tail equals a full replay. Refused transitions leave the log untouched.
Messages come and go (tool calls and their results among them): a removal, a remove-all or
a replacement is refused exactly when it names a message the context lacks or would split a
tool call from its result, and no result is ever left without its call.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Annotated, Any

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from pydantic import Field

from agentlog.events import (
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
from agentlog.events.kinds import Event
from agentlog.projections import (
    REMOVE_ALL_MESSAGES,
    AgentState,
    Fold,
    IllegalTransitionError,
    InvalidStateUpdateError,
    Message,
    RemoveMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    add_messages,
    context_events,
    decide,
    message_appended,
    open_calls,
    replace_messages,
    replay,
    state_at,
    state_updated,
    take_snapshot,
    unpaired_results,
)


class NotesState(AgentState):
    notes: Annotated[list[str], lambda old, new: old + new] = []
    mood: str = "calm"


class WindowNotes(NotesState):
    """The same, with a context that a returned list replaces (`replace_messages`)."""

    context: Annotated[list[Message], replace_messages] = Field(default_factory=list)


nodes = st.sampled_from(["agent", "tools", "review"])
texts = st.text(max_size=30)
ids = st.sampled_from(["m1", "m2", "m3", None])
words = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
"""Text the log stores (no lone surrogates), so a refusal is the gate's alone."""
picks = st.lists(st.integers(0, 40), min_size=1, max_size=3)
"""Messages of the context, by index modulo its length."""


def splits_a_pair(before: list[Message], after: list[Message]) -> bool:
    """True when `after` keeps one half of a tool call answered in `before` without the other
    (the gate's rule, said independently: a call still waiting may stay or go)."""

    def calls(context: list[Message]) -> set[str]:
        return {c.id for m in context if m.role == "assistant" for c in m.tool_calls()}

    def results(context: list[Message]) -> set[str]:
        return {b.call_id for m in context for b in m.content if isinstance(b, ToolResultBlock)}

    paired = calls(before) & results(before)
    kept_calls, kept_results = calls(after), results(after)
    return any((c in kept_calls) != (c in kept_results) for c in paired)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "log.db"
        self.store = SQLiteEventStore(self.path)
        self.state_cls: type[NotesState] = NotesState
        self.live: Fold[NotesState] = Fold.new(NotesState)
        self.seq = 0
        self.made = 0
        """Messages and calls made by the rules, for fresh ids."""

    @initialize(replacing=st.booleans())
    def choose_state(self, replacing: bool) -> None:
        """Half the threads declare `replace_messages` for their context."""
        self.state_cls = WindowNotes if replacing else NotesState
        self.live = Fold.new(self.state_cls)

    def fresh(self, prefix: str) -> str:
        self.made += 1
        return f"{prefix}{self.made}"

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def commit(self, actor: str, *events: Event, refuse: bool | None = None) -> bool:
        """Decide and append `events`; True when committed. With `refuse`, the gate must
        refuse (True) or accept (False) them."""
        try:
            decide(self.live.state, events, seq=self.seq)
            records = self.run(
                self.store.append("t", list(events), expected_seq=self.seq, run_id="r", actor=actor)
            )
        except (IllegalTransitionError, InvalidStateUpdateError, InvalidAppendError) as exc:
            event(f"refused {type(exc).__name__}")
            assert self.run(self.store.last_seq("t")) == self.seq
            assert refuse is not False, f"refused {events}: {exc}"
            return False
        assert refuse is not True, f"the gate let {events} in"
        event(f"committed {records[0].kind}")
        self.live.apply_all(records)
        self.seq = records[-1].seq
        return True

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
        context = self.live.state.context
        left = context[-keep:] if keep else []
        kept = [m.model_dump(mode="json") for m in left]
        refuse = splits_a_pair(context, left)
        self.commit(
            "agent", ContextSummarized(summary=f"{keep} kept", messages=kept), refuse=refuse
        )

    @rule(ok=st.booleans())
    def finish(self, ok: bool) -> None:
        waiting = ok and bool(open_calls(self.live.state.context))
        self.commit(
            "agent",
            RunCompleted() if ok else RunFailed(node="agent", error_type="E", message="x"),
            refuse=True if waiting else None,  # refused for other reasons too (paused ...)
        )

    # ---- messages coming and going ------------------------------------------------------

    @rule(calls=st.integers(1, 3), answered=st.integers(0, 3))
    def ask_for_tools(self, calls: int, answered: int) -> None:
        """An assistant message asking for tools, and results for some calls at once."""
        blocks = [ToolCallBlock(id=self.fresh("call-"), name="lookup") for _ in range(calls)]
        message = Message(
            role="assistant",
            content=[TextBlock(text="calling"), *blocks],
            message_id=self.fresh("a"),
        )
        results = [self.result(b.id) for b in blocks[:answered]]
        self.commit("agent", message_appended(message), *results)

    def result(self, call_id: str) -> Event:
        block = ToolResultBlock(call_id=call_id, output="ok", status="completed")
        return message_appended(Message.tool_message([block], self.fresh("r")))

    @rule(pick=st.integers(0, 10))
    def answer_a_call(self, pick: int) -> None:
        waiting = open_calls(self.live.state.context)
        if waiting:
            self.commit("tools", self.result(waiting[pick % len(waiting)].id))

    @rule(what=st.sampled_from(["any", "call", "result", "pair", "ghost"]), picks=picks)
    def remove(self, what: str, picks: list[int]) -> None:
        """Remove messages: any, a call's message or a result alone (refused when answered),
        a call's message with all its results (legal), or an id the context lacks."""
        context = self.live.state.context
        asking = [m for m in context if m.role == "assistant" and m.tool_calls()]
        answering = [m for m in context if m.role == "tool"]
        chosen = {"call": asking, "result": answering, "pair": asking}.get(what) or context
        gone = list(dict.fromkeys(chosen[i % len(chosen)].message_id for i in picks if chosen))
        if what == "pair" and asking:
            call_ids = {c.id for m in chosen if m.message_id in gone for c in m.tool_calls()}
            gone += [
                m.message_id
                for m in answering
                if any(isinstance(b, ToolResultBlock) and b.call_id in call_ids for b in m.content)
            ]
        if what == "ghost" or not gone:
            gone.append("ghost")  # never in the context
        after = [m for m in context if m.message_id not in gone]
        refuse = "ghost" in gone or splits_a_pair(context, after)
        event(f"remove {what}: " + ("refused" if refuse else "legal"))
        items = [RemoveMessage(i) for i in gone]
        events = context_events(items, known=self.live.message_ids, reason="trim")
        if self.commit("user", *events, refuse=refuse):
            assert self.live.state.context == after

    @rule(new=st.lists(words, max_size=2))
    def remove_all(self, new: list[str]) -> None:
        fresh = [Message.text_message(t, "assistant", self.fresh("n")) for t in new]
        items: list[Message | RemoveMessage] = [RemoveMessage(REMOVE_ALL_MESSAGES), *fresh]
        events = context_events(items, known=self.live.message_ids)
        if self.commit("agent", *events, refuse=False):
            assert self.live.state.context == fresh

    @rule(
        keep=st.lists(st.booleans(), max_size=12) | st.sampled_from(["no calls", "no results"]),
        new=st.lists(words, max_size=2),
    )
    def return_a_context(self, keep: list[bool] | str, new: list[str]) -> None:
        """A node returns some of the context (by a mask, or all but the messages asking for
        tools or answering them) and new messages: under `replace_messages` that is the new
        context; under `add_messages` only the new messages join."""
        context = self.live.state.context
        if keep == "no calls":
            kept = [m for m in context if not (m.role == "assistant" and m.tool_calls())]
        elif keep == "no results":
            kept = [m for m in context if m.role != "tool"]
        else:
            kept = [m for m, k in zip(context, [*keep, *[True] * len(context)], strict=False) if k]
        fresh = [Message.text_message(t, "assistant", self.fresh("n")) for t in new]
        replacing = self.state_cls is WindowNotes
        reducer = replace_messages if replacing else add_messages
        events = context_events(
            [*kept, *fresh], known=self.live.message_ids, reducer=reducer, current=context
        )
        after = [*kept, *fresh] if replacing else [*context, *fresh]
        refuse = splits_a_pair(context, after)
        event(f"return a context: {'replace' if replacing else 'add'}{', split' if refuse else ''}")
        if events and self.commit("agent", *events, refuse=refuse):
            assert self.live.state.context == after

    @rule()
    def snapshot(self) -> None:
        if self.seq:
            self.run(take_snapshot(self.store, "t", state_cls=self.state_cls))

    @invariant()
    def no_result_without_its_call(self) -> None:
        assert unpaired_results(self.live.state.context) == []

    @invariant()
    def replay_from_disk_equals_live(self) -> None:
        if not self.seq:
            return

        cls = self.state_cls

        async def reread() -> tuple[NotesState, NotesState, list[Any]]:
            async with SQLiteEventStore(self.path) as fresh:
                full = await state_at(fresh, "t", state_cls=cls, use_snapshots=False)
                fast = await state_at(fresh, "t", state_cls=cls)
                records = [r async for r in fresh.read("t")]
                assert (await fresh.verify("t")).ok
                return full, fast, records

        full, fast, records = self.run(reread())
        assert full == self.live.state
        assert fast == full
        assert replay(records, cls) == full
        assert [r.seq for r in records] == list(range(1, self.seq + 1))

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()
        self.dir.cleanup()


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(settings.default, stateful_step_count=25)
