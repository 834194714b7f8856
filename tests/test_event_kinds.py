"""An event kind is declared once, by its class: the registry, the codec and the fold follow."""

from __future__ import annotations

from pathlib import Path

from agentlog.events import EVENT_TYPES, KINDS
from agentlog.events.kinds import BaseEvent, kind_of
from agentlog.projections.fold import _HANDLERS


def test_every_declared_kind_is_registered_decodable_and_folded() -> None:
    declared = set(BaseEvent.__subclasses__())
    assert set(EVENT_TYPES) == declared
    assert {KINDS[kind] for kind in KINDS} == declared
    assert set(_HANDLERS) == declared
    for cls in EVENT_TYPES:
        assert KINDS[cls.__struct_config__.tag] is cls  # type: ignore[misc]


def test_kind_strings_are_the_tags() -> None:
    from agentlog.events import RunCompleted

    assert kind_of(RunCompleted()) == "run_completed"


async def test_thread_created_is_a_kind_stored_and_read_back_whole(tmp_path: Path) -> None:
    import msgspec

    from agentlog.events import SQLiteEventStore
    from agentlog.events.codec import encode_json
    from agentlog.events.kinds import ThreadCreated

    assert KINDS["thread_created"] is ThreadCreated
    event = ThreadCreated(
        by="alice", graph_id="support", metadata={"k": [1, {"n": None}], "\x1b": "\u202e"}
    )
    async with SQLiteEventStore(tmp_path / "log.db") as store:
        await store.append("t", [event], expected_seq=0, actor="alice")
        (record,) = [r async for r in store.read("t")]
    assert (record.kind, record.actor, record.event) == ("thread_created", "alice", event)
    assert msgspec.json.decode(encode_json(record.event), type=ThreadCreated) == event
    assert ThreadCreated(by="x").metadata == {} and ThreadCreated(by="x").graph_id is None


# ---- traits: what a kind is for, declared on the kind ---------------------------------------


def test_each_kind_knows_its_name() -> None:
    for cls in EVENT_TYPES:
        assert cls.__struct_config__.tag == cls.KIND  # type: ignore[misc]
    assert BaseEvent.KIND == ""


def test_the_traits_name_the_kinds_each_reader_used_to_list() -> None:
    from agentlog.events import kinds

    assert kinds.MESSAGE_KINDS == (
        "message_appended",
        "message_replaced",
        "messages_replaced",
        "context_summarized",
        "forked",
    )
    assert {"run_started", "forked", "state_updated"} == kinds.FIELD_KINDS
    assert {"run_started", "resumed"} == kinds.OPENING_KINDS
    assert {
        "run_completed",
        "run_failed",
        "interrupt_raised",
        "stopped",
        "run_cancelled",
    } == kinds.ENDING_KINDS
    assert {"step_advanced", "tool_call_finished"} == kinds.TIMED_KINDS
    assert {
        "erased",
        "resources_named",
        "trigger_accepted",
        "trigger_dispatched",
        "trigger_finished",
        "trigger_listening",
        "webhook_sent",
    } == kinds.RUNTIME_KINDS
    assert {
        "message_appended",
        "message_replaced",
        "messages_removed",
        "messages_replaced",
        "context_summarized",
        "state_updated",
        "shared_written",
        "outcome_recorded",
        "model_called",
        "tool_call_finished",
        "tasks_planned",
        "subgraph_ran",
    } == kinds.OUTPUT_KINDS


def test_a_kind_that_ends_a_run_is_one_the_fold_gives_a_status() -> None:
    import pytest

    from agentlog.events.kinds import kinds_where
    from agentlog.projections.lifecycle import status_after

    ending = {cls.KIND for cls in EVENT_TYPES if cls.ENDS_RUN}
    assert kinds_where("ENDS_RUN") == ending
    for cls in EVENT_TYPES:
        assert (status_after(_sample(cls)) is not None) == cls.ENDS_RUN, cls.KIND
    with pytest.raises(AttributeError, match="not a trait"):
        kinds_where("VERSION")


def _sample(cls: type[BaseEvent]) -> BaseEvent:
    """An event of kind `cls`, its required fields filled with values of their types."""
    import msgspec

    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    values = {f.encode_name: _value(f.type) for f in info.fields if f.required}
    return msgspec.convert(values, cls)


def _value(kind: object) -> object:
    import msgspec.inspect as mi

    if isinstance(kind, mi.UnionType):
        return None if kind.includes_none else _value(kind.types[0])
    if isinstance(kind, mi.LiteralType):
        return kind.values[0]
    simple = {mi.StrType: "x", mi.IntType: 0, mi.FloatType: 0.0, mi.BoolType: False}
    empty = {mi.DictType: {}, mi.ListType: [], mi.AnyType: None}
    return {**simple, **empty}[type(kind)]  # type: ignore[index]


def test_the_replay_reads_a_runs_input_by_the_kinds_trait() -> None:
    from agentlog.events.kinds import INPUT_KINDS, kinds_where

    assert kinds_where("RUN_INPUT") == INPUT_KINDS
    assert {
        "message_appended",
        "message_replaced",
        "messages_removed",
        "state_updated",
        "tasks_planned",
    } == INPUT_KINDS


SAME_WORD = {
    # words that are also a status, a key, an error code or a name of something else
    "stopped": {
        "actors/cli/runtime.py",
        "projections/fold.py",
        "projections/state.py",
        "projections/strategies.py",
        "projections/timetravel.py",
    },
    "erased": {"actors/cli/keep.py", "actors/http/routes/threads.py", "events/sealing.py"},
    "resumed": {"actors/testing/lanes.py", "actors/testing/machine.py"},
    "forked": {"projections/forks.py"},
    "stop_requested": {"projections/state.py"},  # a StopRequestStatus
    "run_failed": {"actors/http/errors.py", "actors/http/routes/runs.py"},  # HTTP error codes
    "run_cancelled": {"actors/http/errors.py"},
    "messages_removed": {"actors/cli/render.py"},  # a key of a state diff's JSON
    "message_appended": {"projections/__init__.py"},  # the reducers' names
    "messages_replaced": {"projections/__init__.py"},
    "state_updated": {"projections/__init__.py"},
    "node_entered": {"events/testing/log.py"},  # a dict posing as an event, refused
}
"""String literals equal to a kind's name that do not name the kind; and the OpenTelemetry
span events, whose names are their own (`agentlog.projections.spans`), below."""
SPAN_EVENTS = {"forked", "resumed", "run_superseded", "stop_requested", "stopped", "subgraph_ran"}


def test_no_kind_is_named_by_a_string_literal_outside_the_kinds_modules() -> None:
    """Readers name a kind by its class (`StepAdvanced.KIND`) or ask a trait, so renaming a
    kind cannot leave a reader matching a name no record has."""
    import ast

    root = Path(__file__).parent.parent
    kinds_modules = {"events/kinds.py", "events/kinds_base.py", "events/kinds_beside.py"}
    found = []
    for top in ("actors", "projections", "events"):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel in kinds_modules:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
            for n in ast.walk(tree):
                if not isinstance(n, ast.Constant) or n.value not in KINDS or id(n) in prose:
                    continue
                if rel in SAME_WORD.get(n.value, ()):
                    continue
                if rel == "projections/spans.py" and n.value in SPAN_EVENTS:
                    continue
                found.append(f"{rel}:{n.lineno}: {n.value!r}")
    assert not found, found
