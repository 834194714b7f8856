"""The public strategies: what they draw is valid, accepted or refused as they say, and
round-trips through a real SQLite store unchanged."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter

from agentlog.events import SQLiteEventStore
from agentlog.events.kinds import Event, Forked, RunCompleted, RunStarted, kind_of
from agentlog.events.record import EventRecord
from agentlog.projections import (
    AgentState,
    IllegalTransitionError,
    InvalidStateUpdateError,
    Message,
    append_items,
    apply,
    decide,
    message_appended,
    open_calls,
    replay,
    state_data,
    state_updated,
    to_builtins,
    unpaired_results,
)
from agentlog.projections import strategies as ps
from agentlog.projections.fold import uncommitted_record
from agentlog.projections.messages import ToolCallBlock, ToolResultBlock
from agentlog.projections.transcript import calls_of, results_of

BLOCK_KINDS = {
    "text",
    "image",
    "audio",
    "video",
    "document",
    "data",
    "tool_call",
    "remote_tool_call",
    "tool_result",
    "reasoning",
    "annotation",
    "error",
}


class Order(BaseModel):
    """A nested model in a user's state."""

    sku: str
    quantity: int
    price: float


class ShopState(AgentState):
    """A user's state with custom fields of several kinds, one with a reducer."""

    notes: Annotated[list[str], append_items] = []
    total: float = 0.0
    order: Order | None = None
    tags: dict[str, int] = {}
    stage: Literal["browse", "pay", "done"] = "browse"
    blob: bytes = b""


def store_round_trip(events: Sequence[Event]) -> list[EventRecord]:
    """Append `events` as a new thread of a fresh SQLite file and read them back."""

    async def go() -> list[EventRecord]:
        with tempfile.TemporaryDirectory() as tmp:
            async with SQLiteEventStore(Path(tmp) / "log.db") as store:
                await store.append("t", list(events), expected_seq=0)
                return [r async for r in store.read("t")]

    return asyncio.run(go())


fast = settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow])


# ---- messages and transcripts ------------------------------------------------------------


@fast
@given(st.lists(ps.messages(), min_size=1, max_size=4))
def test_messages_round_trip_through_sqlite(messages: list[Message]) -> None:
    records = store_round_trip([message_appended(m) for m in messages])
    back = [Message.model_validate(r.event.message) for r in records]  # type: ignore[attr-defined]
    assert all(ps.same(a, b) for a, b in zip(messages, back, strict=True))


def test_messages_draw_every_block_kind() -> None:
    seen: set[str] = set()

    @settings(max_examples=200, derandomize=True)
    @given(ps.messages())
    def collect(message: Message) -> None:
        seen.update(block.type for block in message.content)

    collect()
    assert seen == BLOCK_KINDS


@fast
@given(ps.text_messages())
def test_text_messages_are_plain(message: Message) -> None:
    assert [b.type for b in message.content] == ["text"]
    assert message.text().strip()


def provider_problems(transcript: list[Message]) -> list[str]:
    """What a major provider would refuse in `transcript`."""
    problems: list[str] = []
    roles = [m.role for m in transcript]
    if "system" in roles[1:]:
        problems.append("a system message after the first")
    body = [m for m in transcript if m.role != "system"]
    if body and body[0].role != "user":
        problems.append("the conversation does not begin with a user message")
    for before, after in itertools.pairwise(body):
        if before.role == after.role and before.role != "tool":
            problems.append(f"two {before.role} messages in a row")
        if after.role == "tool" and before.role not in ("assistant", "tool"):
            problems.append("a tool message not right after an assistant or tool message")
    for index, message in enumerate(body):
        calls = [c.id for c in calls_of(message)]
        if calls:
            following = body[index + 1 : index + 1 + len(calls)]
            answered = [r.call_id for m in following for r in results_of(m)]
            if sorted(answered) != sorted(calls) or any(m.role != "tool" for m in following):
                problems.append(f"calls {calls} not answered right after their message")
    if open_calls(transcript):
        problems.append("open calls")
    if unpaired_results(transcript):
        problems.append("unpaired results")
    if body and body[-1].role == "tool":
        problems.append("ends on a tool result")
    ids = [m.message_id for m in transcript]
    if len(set(ids)) != len(ids):
        problems.append("duplicate message ids")
    return problems


@fast
@given(ps.transcripts(max_turns=4))
def test_transcripts_follow_the_provider_rules(transcript: list[Message]) -> None:
    assert provider_problems(transcript) == []
    records = store_round_trip([message_appended(m) for m in transcript]) if transcript else []
    back = [Message.model_validate(r.event.message) for r in records]  # type: ignore[attr-defined]
    assert all(ps.same(a, b) for a, b in zip(transcript, back, strict=True))


def test_the_rule_check_catches_a_broken_transcript() -> None:
    call_turn = ps.transcripts(min_turns=1, max_turns=1, max_calls=2, system=False)

    @settings(max_examples=50, derandomize=True)
    @given(call_turn)
    def check(transcript: list[Message]) -> None:
        tool = [m for m in transcript if m.role == "tool"]
        if tool:
            assert provider_problems([m for m in transcript if m is not tool[0]])
            doubled = [*transcript, tool[0].model_copy(update={"message_id": "again"})]
            assert unpaired_results(doubled)

    check()


def anthropic_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What the Messages API refuses: a first turn not the user's, two turns of one role in a
    row, an empty turn, blank text, a tool_use not answered by tool_result blocks first in
    the very next turn."""
    problems = []
    if messages and messages[0]["role"] != "user":
        problems.append("the first turn is not the user's")
    for i, message in enumerate(messages):
        content = message["content"]
        if i and messages[i - 1]["role"] == message["role"]:
            problems.append(f"turn {i}: two {message['role']} turns in a row")
        if not content:
            problems.append(f"turn {i}: empty")
        if any(b["type"] == "text" and not b["text"].strip() for b in content):
            problems.append(f"turn {i}: blank text")
        uses = [b["id"] for b in content if b["type"] == "tool_use"]
        if uses:
            after = messages[i + 1]["content"] if i + 1 < len(messages) else []
            answers = [b["tool_use_id"] for b in after if b["type"] == "tool_result"]
            if sorted(answers) != sorted(uses):
                problems.append(f"turn {i}: tool_use {uses} answered by {answers}")
            if any(b["type"] != "tool_result" for b in after[: len(answers)]):
                problems.append(f"turn {i + 1}: tool results are not first")
    return problems


def chat_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What chat completions refuse: a tool message not answering the assistant message just
    before, a call left unanswered, an assistant message with neither text nor calls."""
    problems: list[str] = []
    pending: list[str] = []
    for i, message in enumerate(messages):
        if message["role"] == "tool":
            if message["tool_call_id"] in pending:
                pending.remove(message["tool_call_id"])
            else:
                problems.append(f"message {i}: a tool result answering no pending call")
            continue
        if pending:
            problems.append(f"message {i}: calls {pending} unanswered before it")
        pending = [call["id"] for call in message.get("tool_calls") or []]
        if message["role"] == "assistant" and not (message.get("content") or pending):
            problems.append(f"message {i}: an empty assistant message")
    if pending:
        problems.append(f"calls {pending} unanswered at the end")
    return problems


@fast
@given(ps.transcripts(max_turns=4))
def test_transcripts_pass_both_providers_converters_and_rules(transcript: list[Message]) -> None:
    from agentlog.actors.models.anthropic_messages import to_anthropic_messages
    from agentlog.actors.models.openai_chat import to_chat_messages

    _, anthropic = to_anthropic_messages(transcript)
    assert anthropic_problems(anthropic) == [], anthropic
    chat = to_chat_messages(transcript)
    assert chat_problems(chat) == [], chat


def test_the_provider_rules_catch_what_providers_refuse() -> None:
    use = {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    assert anthropic_problems([{"role": "assistant", "content": [use]}])
    assert anthropic_problems([{"role": "user", "content": [{"type": "text", "text": " "}]}]) == [
        "turn 0: blank text"
    ]
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert chat_problems(
        [{"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "user"}]
    ) == ["message 1: calls ['c1'] unanswered before it"]


# ---- states ------------------------------------------------------------------------------


def fork_round_trip(state: AgentState) -> AgentState:
    """`state` stored as a fork's first event in SQLite, and replayed."""
    event = Forked(source_thread="source", source_seq=3, state=state_data(state))
    records = store_round_trip([event])
    back = replay(records, type(state))
    back.execution_meta.thread_id = state.execution_meta.thread_id
    back.execution_meta.internal_data.pop("forked_from")
    return back


@fast
@given(ps.states())
def test_agent_states_round_trip(state: AgentState) -> None:
    assert type(state) is AgentState
    assert open_calls(state.context) == [] and unpaired_results(state.context) == []
    assert ps.same(state_data(fork_round_trip(state)), state_data(state))


@fast
@given(ps.states(ShopState))
def test_subclass_states_round_trip(state: ShopState) -> None:
    assert isinstance(state, ShopState)
    assert ps.same(state_data(fork_round_trip(state)), state_data(state))


@fast
@given(ps.states(ShopState, stage=st.just("pay"), tags=st.just({"a": 1})))
def test_fields_can_be_given_by_name(state: ShopState) -> None:
    assert state.stage == "pay" and state.tags == {"a": 1}


def test_an_unknown_field_is_named() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        ps.states(ShopState, nope=st.none())


FIELD = dict[str, tuple[int, ...]] | list[bytes | float] | Order | None


@fast
@given(ps.for_type(FIELD))
def test_for_type_draws_values_the_log_stores_exactly(value: Any) -> None:
    """Stored in an update and read back, the value validates to itself."""
    records = store_round_trip([state_updated({"x": value})])
    back = TypeAdapter(FIELD).validate_python(records[0].event.values["x"])  # type: ignore[attr-defined]
    assert ps.same(back, value)


# ---- events ------------------------------------------------------------------------------


def check_accepted(state: AgentState, events: list[Event], seq: int) -> None:
    """`decide` accepts `events`; stored after `seq` and replayed, they give what applying
    them one by one gives."""
    decide(state, events, seq=seq)
    applied = state
    for offset, event in enumerate(events):
        applied = apply(applied, uncommitted_record(event, seq + offset + 1, "t"))

    async def go() -> list[EventRecord]:
        with tempfile.TemporaryDirectory() as tmp:
            async with SQLiteEventStore(Path(tmp) / "log.db") as store:
                if seq:
                    fork = Forked(source_thread="s", source_seq=1, state=state_data(state))
                    await store.append("t", [fork], expected_seq=0)
                await store.append("t", events, expected_seq=seq)
                return [r async for r in store.read("t", from_seq=seq + 1)]

    records = asyncio.run(go())
    assert ps.same([to_builtins(r.event) for r in records], [to_builtins(e) for e in events])
    replayed = replay(records, type(state), state=state)
    expected, got = state_data(applied), state_data(replayed)
    for data in (expected, got):
        data["execution_meta"]["internal_data"].pop("run_id", None)
        data["execution_meta"]["internal_data"].pop("entered", None)
    assert ps.same(got, expected)


@fast
@given(ps.event_sequences(ShopState))
def test_event_sequences_are_accepted_and_replay_as_applied(events: list[Event]) -> None:
    assert isinstance(events[0], RunStarted)
    check_accepted(ShopState(), events, 0)


@fast
@given(st.data())
def test_accepted_events_from_a_drawn_state(data: st.DataObject) -> None:
    state = data.draw(ps.states(ShopState))
    events = data.draw(ps.accepted_events(state))
    check_accepted(state, events, 1)


@fast
@given(st.data())
def test_refused_events_are_refused(data: st.DataObject) -> None:
    state = data.draw(ps.states(ShopState))
    if data.draw(st.booleans()):  # or a state in the middle of a run
        events = data.draw(ps.event_sequences(ShopState))
        cut = data.draw(st.integers(1, len(events)))
        state = replay(
            [uncommitted_record(e, i + 1, "t") for i, e in enumerate(events[:cut])], ShopState
        )
    event = data.draw(ps.refused_events(state))
    with pytest.raises((IllegalTransitionError, InvalidStateUpdateError)):
        decide(state, [event], seq=5)


NAMED = ["step_advanced", "resumed", "tool_call_finished", "run_completed"]


@fast
@given(ps.states(ShopState, context=st.just([])), st.sampled_from(NAMED), st.data())
def test_refused_events_of_each_named_kind(
    state: ShopState, kind: str, data: st.DataObject
) -> None:
    paused_or_failed = state.is_interrupted() or state.execution_meta.status == "error"
    if kind == "resumed" and paused_or_failed:  # a resume is legal here: none is offered
        with pytest.raises(ValueError, match="resumed"):
            data.draw(ps.refused_events(state, kinds=[kind]))
        return
    event = data.draw(ps.refused_events(state, kinds=[kind]))
    assert kind_of(event) == kind
    with pytest.raises((IllegalTransitionError, InvalidStateUpdateError)):
        decide(state, [event], seq=5)


@settings(max_examples=5)
@given(st.data())
def test_refused_events_say_when_no_kind_asked_for_applies(data: st.DataObject) -> None:
    running = AgentState()  # a run in progress, no stop asked for: resumed is refused
    with pytest.raises(ValueError, match=r"'nonesuch'.*run_started"):
        data.draw(ps.refused_events(running, kinds=["nonesuch"]))
    assert kind_of(data.draw(ps.refused_events(running, kinds=["resumed"]))) == "resumed"


def test_an_open_call_makes_run_completed_refused() -> None:
    call = ToolCallBlock(id="c1", name="look")
    state = AgentState(context=[Message(role="assistant", content=[call])])
    with pytest.raises(IllegalTransitionError, match="c1"):
        decide(state, [RunCompleted()], seq=3)
    result = Message.tool_message([ToolResultBlock(call_id="c1", output="ok")])
    decide(state, [message_appended(result), RunCompleted()], seq=3)


def test_import_projections_needs_no_hypothesis() -> None:
    code = (
        "import sys; sys.modules['hypothesis'] = None; import agentlog.projections; "
        "assert 'agentlog.projections.strategies' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    hidden = subprocess.run(
        [
            sys.executable,
            "-c",
            code.replace("import agentlog.projections;", "import agentlog.projections.strategies;"),
        ],
        capture_output=True,
        text=True,
    )
    assert hidden.returncode != 0 and "hypothesis" in hidden.stderr


@fast
@given(st.data())
def test_refused_events_round_trip_through_sqlite(data: st.DataObject) -> None:
    """The store keeps what it is given (the gate is above it): a refused event too."""
    event = data.draw(ps.refused_events(data.draw(ps.states(ShopState))))
    records = store_round_trip([event])
    assert ps.same(to_builtins(records[0].event), to_builtins(event))
