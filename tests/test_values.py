"""Every value the events can store survives snapshots, forks and replays exactly.

NaN, the infinities, -0.0, bytes, ints to the 64-bit edge and deeply nested data in custom
fields come back from a snapshot, a fork and a full replay as the very values the events
hold; what the log cannot store (ints past 64 bits, lone surrogates, absurd nesting) is
refused with a typed error naming where it is, before anything is written.
"""

from __future__ import annotations

import asyncio
import math
import operator
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from msgspec import msgpack
from pydantic import Field

from agentlog.actors import END, NodeError, StateGraph
from agentlog.actors.testing import until
from agentlog.actors.tools.node import ToolNode
from agentlog.events import (
    EventRecord,
    EventStore,
    Forked,
    InvalidAppendError,
    MemoryEventStore,
    SQLiteEventStore,
    StateUpdated,
)
from agentlog.events.codec import (
    UnstorableValueError,
    decode_state,
    encode_payloads,
    encode_state,
    find_unstorable,
)
from agentlog.events.errors import AgentlogError
from agentlog.projections import (
    AgentState,
    Fold,
    Message,
    ToolCallBlock,
    ToolResultBlock,
    replay,
    snapshot_of,
    state_at,
    state_updated,
    take_snapshot,
)
from agentlog.projections.edge import state_data, to_builtins
from agentlog.projections.fold import uncommitted_record

from .strategies import (
    big_ints,
    binary,
    data,
    deep,
    floats,
    leaves,
    lone_surrogate_text,
    same,
    storable_ints,
    text,
)


class Values(AgentState):
    """Custom fields of every kind a user declares: untyped, dict, float, bytes, reduced."""

    anything: Any = None
    mapping: dict[str, Any] = Field(default_factory=dict)
    number: float = 0.0
    blob: bytes = b""
    items: Annotated[list[Any], operator.add] = Field(default_factory=list)
    total: Annotated[int, operator.add] = 0


update = st.fixed_dictionaries(
    {},
    optional={
        "anything": data(),
        "mapping": st.dictionaries(text, data(max_leaves=8), max_size=3),
        "number": floats,
        "blob": binary,
        "items": st.lists(data(max_leaves=6), max_size=3),
        "total": storable_ints,
    },
)
updates = st.lists(update, min_size=1, max_size=6)


def fields(state: AgentState) -> dict[str, Any]:
    """The whole state as python values (messages, metadata and custom fields)."""
    return state.model_dump(mode="python")


def custom(state: AgentState) -> dict[str, Any]:
    """The state without its execution metadata (which a fork rewrites on purpose)."""
    return state.model_dump(mode="python", exclude={"execution_meta"})


async def write(store: EventStore, thread_id: str, changes: list[dict[str, Any]]) -> None:
    """One `state_updated` commit per change."""
    for seq, change in enumerate(changes):
        await store.append(thread_id, [state_updated(change)], expected_seq=seq, actor="node")


async def records_of(store: EventStore, thread_id: str) -> list[EventRecord]:
    return [r async for r in store.read(thread_id)]


# ---- the comparison helper must itself be able to tell values apart ------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (math.nan, None),
        (-0.0, 0.0),
        (1, 1.0),
        (1, True),
        (b"x", bytearray(b"x")),
        (b"x", "x"),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ([math.inf], [-math.inf]),
        (2**64, 2**64 + 1),
    ],
)
def test_same_tells_apart_what_equality_conflates(a: Any, b: Any) -> None:
    assert not same(a, b)
    assert same(a, a)


# ---- (b) the snapshot codec is exact --------------------------------------------------------


@given(st.dictionaries(text, data(leaves | big_ints)))
def test_encode_state_decode_state_is_exact(state: dict[str, Any]) -> None:
    assert same(decode_state("t", 1, encode_state(state)), state)


@given(deep(leaves | big_ints, depth=200))
def test_deeply_nested_state_round_trips(value: Any) -> None:
    state = {"deep": value}
    assert same(decode_state("t", 1, encode_state(state)), state)


def test_snapshot_int_beyond_64_bits_is_kept_and_unknown_extensions_are_corrupt() -> None:
    state = {"n": [2**64, -(2**63) - 1, 3**200, -(7**90)], "m": 2**63}
    assert same(decode_state("t", 1, encode_state(state)), state)
    with pytest.raises(AgentlogError, match="extension code 9"):
        decode_state("t", 7, msgpack.encode({"x": msgpack.Ext(9, b"\x01")}))


@given(lone_surrogate_text)
def test_snapshot_with_a_lone_surrogate_is_refused_naming_the_place(bad: str) -> None:
    with pytest.raises(UnstorableValueError, match="lone surrogate") as caught:
        encode_state({"f": {"inner": ["ok", bad]}})
    assert caught.value.path == "state['f']['inner'][1]"


# ---- events: exact values, or a typed refusal naming the field -------------------------------


@given(data())
def test_an_update_is_stored_exactly(value: Any) -> None:
    (encoded,) = encode_payloads("t", [state_updated({"anything": value})])
    assert isinstance(encoded.event, StateUpdated)
    assert same(encoded.event.values["anything"], value)


@given(
    bad=big_ints | lone_surrogate_text,
    where=st.sampled_from(["top", "list", "dict", "key"]),
)
def test_an_unstorable_update_is_refused_naming_the_field(bad: Any, where: str) -> None:
    placed: dict[str, Any] = {
        "top": {"anything": bad},
        "list": {"items": [1, [2, bad]]},
        "dict": {"mapping": {"a": {"b": bad}}},
        "key": {"mapping": {bad: 1}} if isinstance(bad, str) else {"anything": bad},
    }[where]
    path = {
        "top": "values['anything']",
        "list": "values['items'][1][1]",
        "dict": "values['mapping']['a']['b']",
        "key": f"values['mapping'] key {bad!r}" if isinstance(bad, str) else "values['anything']",
    }[where]

    async def attempt() -> None:
        store = MemoryEventStore()
        with pytest.raises(UnstorableValueError) as caught:
            await store.append("t", [state_updated(placed)], expected_seq=0)
        assert caught.value.path == path
        assert path in str(caught.value)
        assert isinstance(caught.value, InvalidAppendError)
        assert await store.last_seq("t") == 0  # nothing was written

    asyncio.run(attempt())


def test_unstorable_finds_nothing_in_storable_edges() -> None:
    edges = [2**64 - 1, -(2**63), math.nan, -0.0, b"\xff", "\x00\U0010ffff", [{"k": None}]]
    assert find_unstorable(edges) is None
    assert find_unstorable([2**64])[0] == "value[0]"  # type: ignore[index]
    assert find_unstorable([-(2**63) - 1])[0] == "value[0]"  # type: ignore[index]
    assert find_unstorable({"o": object()})[0] == "value['o']"  # type: ignore[index]


def test_absurdly_deep_data_is_refused_not_a_recursion_crash() -> None:
    value: Any = 1
    for _ in range(5000):
        value = [value]
    with pytest.raises(UnstorableValueError, match="deeper than the codec"):
        to_builtins({"anything": value})
    with pytest.raises(UnstorableValueError, match="deeper than the codec"):
        encode_payloads("t", [StateUpdated(values={"anything": value})])
    with pytest.raises(UnstorableValueError, match="deeper than the codec"):
        encode_state({"anything": value})


def test_to_builtins_keeps_floats_bytes_and_ints_and_converts_the_rest() -> None:
    import datetime
    import enum

    class Color(enum.Enum):
        RED = "red"

    value = {
        "nan": math.nan,
        "neg_zero": -0.0,
        "blob": b"\x00\xff",
        "big": 2**70,
        "when": datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC),
        "color": Color.RED,
        "set": {3},
        "model": Message.text_message("hi", message_id="m1"),
        1: "int key",
    }
    out = to_builtins(value)
    assert math.isnan(out["nan"]) and same(out["neg_zero"], -0.0)
    assert same(out["blob"], b"\x00\xff") and same(out["big"], 2**70)
    assert out["when"].startswith("2024-05-01T12:00:00") and out["color"] == "red"
    assert out["set"] == [3] and out["model"]["message_id"] == "m1"
    assert out["1"] == "int key"  # non-str keys become str keys, as in JSON
    assert to_builtins({True: b"\xff", (1, 2): math.nan})["true"] == b"\xff"


# ---- (a) fold == snapshot decoded and validated back == replay ------------------------------


@given(changes=updates, cut=st.integers(min_value=1, max_value=6))
def test_snapshot_plus_tail_equals_the_full_replay(changes: list[dict[str, Any]], cut: int) -> None:
    asyncio.run(_snapshot_plus_tail(changes, min(cut, len(changes))))


async def _snapshot_plus_tail(changes: list[dict[str, Any]], cut: int) -> None:
    store = MemoryEventStore()
    await write(store, "t", changes)
    records = await records_of(store, "t")

    live: Fold[Values] = Fold.new(Values)  # what the runtime folds: the events as decided
    for seq, change in enumerate(changes, 1):
        live.apply(uncommitted_record(state_updated(change), seq, "t"))
    replayed = replay(records, Values)
    assert same(fields(live.state), fields(replayed))

    at_cut = await state_at(store, "t", cut, Values, use_snapshots=False)
    snapshot = await take_snapshot(store, "t", cut, Values)
    loaded = await store.load_snapshot("t", cut)
    assert loaded is not None and loaded.seq == cut
    assert same(loaded.state, snapshot.state)  # the store gives back exactly what it was given
    assert same(fields(Values.model_validate(loaded.state)), fields(at_cut))

    reads: list[int] = []
    original_read = store.read

    def spy(thread_id: str, from_seq: int = 1, to_seq: int | None = None, **how: Any) -> Any:
        reads.append(from_seq)
        return original_read(thread_id, from_seq, to_seq, **how)

    store.read = spy  # type: ignore[method-assign]
    via_snapshot = await state_at(store, "t", None, Values)
    assert reads == [cut + 1]  # the snapshot was used: only its anchor and the tail are read
    assert same(fields(via_snapshot), fields(replayed))


@given(changes=updates)
def test_a_fork_value_folds_back_to_the_source_state(changes: list[dict[str, Any]]) -> None:
    source = replay([], Values)
    fold = Fold(source)
    for seq, change in enumerate(changes, 1):
        fold.apply(uncommitted_record(state_updated(change), seq, "t"))
    data_ = state_data(fold.state)
    if find_unstorable(data_) is not None:  # a reducer summed past 64 bits: refused, clearly
        with pytest.raises(UnstorableValueError, match=r"state\['total'\]"):
            encode_payloads("f", [Forked(source_thread="t", source_seq=1, state=data_)])
        return
    (encoded,) = encode_payloads("f", [Forked(source_thread="t", source_seq=1, state=data_)])
    forked: Fold[Values] = Fold.new(Values)
    forked.apply(uncommitted_record(encoded.event, 1, "f"))
    assert same(custom(forked.state), custom(fold.state))


def test_a_reducer_summing_past_64_bits_survives_a_snapshot() -> None:
    async def scenario() -> None:
        store = MemoryEventStore()
        await write(store, "t", [{"total": 2**64 - 1}, {"total": 2**64 - 1}])
        full = await state_at(store, "t", None, Values, use_snapshots=False)
        assert full.total == 2**65 - 2
        await take_snapshot(store, "t", None, Values)
        assert same(fields(await state_at(store, "t", None, Values)), fields(full))

    asyncio.run(scenario())


def test_snapshot_of_keeps_values_a_json_dump_would_lose() -> None:
    state = Values(anything={"x": [math.nan, math.inf, -math.inf]}, number=-0.0, blob=b"\xff")
    snapshot = snapshot_of("t", 1, state)
    assert same(snapshot.state["anything"], {"x": [math.nan, math.inf, -math.inf]})
    assert same(snapshot.state["number"], -0.0) and same(snapshot.state["blob"], b"\xff")
    assert same(fields(Values.model_validate(snapshot.state)), fields(state))


# ---- end to end: the public graph API on a real SQLite file ---------------------------------


BLOB = b"\x00\xff\xfe binary"
ODD = {"x": [math.inf, -math.inf, -0.0, math.nan], "raw": b"\x80", "n": 2**64 - 1}


def read_blob(name: str) -> bytes:
    """Bytes a tool returns: not valid UTF-8."""
    return BLOB + name.encode()


def values_graph() -> StateGraph[Values]:
    graph: StateGraph[Values] = StateGraph(Values)

    async def plan(state: Values) -> dict[str, Any]:
        call = ToolCallBlock(id="c1", name="read_blob", args={"name": "a"})
        return {
            "messages": [Message(role="assistant", content=[call])],
            "blob": b"\x00\xff",
            "number": math.nan,
            "anything": ODD,
        }

    def count(state: Values) -> dict[str, Any]:
        return {"items": [math.nan, b"\x01"], "mapping": {"inf": math.inf}, "total": 2**63}

    graph.add_node("plan", plan)
    graph.add_node("tools", ToolNode([read_blob]))
    graph.add_node("count", count)
    graph.set_entry_point("plan")
    graph.add_edge("plan", "tools")
    graph.add_edge("tools", "count")
    graph.add_edge("count", END)
    return graph


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Path]:
    yield tmp_path / "values.db"


async def test_graph_values_survive_snapshots_replay_and_reopen(db: Path) -> None:
    cfg = {"thread_id": "v"}
    async with SQLiteEventStore(db) as store:
        app = values_graph().compile(checkpointer=store, snapshot_every=2)
        out = await app.ainvoke({"messages": [Message.text_message("go")]}, cfg, include_state=True)
        state: Values = out["state"]
        assert same(state.blob, b"\x00\xff") and math.isnan(state.number)
        assert same(state.anything, ODD) and same(state.total, 2**63)
        assert same(state.items[1], b"\x01") and math.isnan(state.items[0])
        tool_result = state.context[-1].content[0]
        assert isinstance(tool_result, ToolResultBlock)
        assert same(tool_result.output, read_blob("a"))

        await app.aupdate_state(cfg, {"blob": b"\xfe", "anything": [b"\xff", -0.0, math.nan]})

        async def landed() -> Any:  # background snapshot writes land
            found = await store.load_snapshot("v")
            return found if found is not None and found.seq >= 2 else None

        snapshot = await until(landed)
        assert snapshot.state_type.endswith("Values")

        records = await records_of(store, "v")
        replayed = replay(records, Values)
        live = await app.aget_state(cfg)
        full = await state_at(store, "v", None, Values, use_snapshots=False)
        assert same(fields(live), fields(replayed)) and same(fields(full), fields(replayed))
        assert same(replayed.anything, [b"\xff", -0.0, math.nan])
        for seq in range(1, len(records) + 1):  # every point, through whichever snapshot
            assert same(
                fields(await app.aget_state(cfg, at_seq=seq)),
                fields(await state_at(store, "v", seq, Values, use_snapshots=False)),
            )
        await take_snapshot(store, "v", None, Values)
        assert (await store.verify("v")).ok

    async with SQLiteEventStore(db) as reopened:
        again = values_graph().compile(checkpointer=reopened)
        assert same(fields(await again.aget_state(cfg)), fields(replayed))


async def test_graph_fork_keeps_exact_values(db: Path) -> None:
    cfg = {"thread_id": "v"}
    async with SQLiteEventStore(db) as store:
        app = values_graph().compile(checkpointer=store, snapshot_every=2)
        await app.ainvoke({"messages": [Message.text_message("go")]}, cfg)
        source = await app.aget_state(cfg)
        new_id = await app.afork(cfg, new_thread_id="v2")
        forked = await app.aget_state({"thread_id": new_id})
        assert same(custom(forked), custom(source))


@pytest.mark.parametrize(
    ("bad", "why"),
    [(2**70, "int of 71 bits"), (-(2**64), "int of 65 bits"), ("a\ud800b", "lone surrogate")],
)
async def test_graph_refuses_an_unstorable_node_output_naming_the_field(
    db: Path, bad: Any, why: str
) -> None:
    def emit(state: Values) -> dict[str, Any]:
        return {"number": 1.5, "mapping": {"deep": [bad]}}

    graph: StateGraph[Values] = StateGraph(Values)
    graph.add_node("emit", emit)
    graph.set_entry_point("emit")
    graph.add_edge("emit", END)
    cfg = {"thread_id": "bad"}
    async with SQLiteEventStore(db) as store:
        app = graph.compile(checkpointer=store, snapshot_every=2)
        for _ in range(2):  # a retry fails the same clear way, and never half-writes
            with pytest.raises(NodeError, match=why) as caught:
                await app.ainvoke({"messages": [Message.text_message("go")]}, cfg)
            cause = caught.value.__cause__
            assert isinstance(cause, UnstorableValueError)
            assert cause.path == "values['mapping']['deep'][0]"
        records = await records_of(store, "bad")
        assert "state_updated" not in [r.kind for r in records]
        assert [r.kind for r in records].count("run_failed") == 2
        state = await app.aget_state(cfg)
        assert state.number == 0.0 and state.mapping == {}
        with pytest.raises(UnstorableValueError, match=why):
            await app.aupdate_state(cfg, {"anything": bad})
        assert len(await records_of(store, "bad")) == len(records)
