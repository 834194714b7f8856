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
