"""An event kind is declared once, by its class: the registry, the codec and the fold follow."""

from __future__ import annotations

from events import EVENT_TYPES, KINDS
from events.kinds import BaseEvent, kind_of
from projections.fold import _HANDLERS


def test_every_declared_kind_is_registered_decodable_and_folded() -> None:
    declared = set(BaseEvent.__subclasses__())
    assert set(EVENT_TYPES) == declared
    assert {KINDS[kind] for kind in KINDS} == declared
    assert set(_HANDLERS) == declared
    for cls in EVENT_TYPES:
        assert KINDS[cls.__struct_config__.tag] is cls  # type: ignore[misc]


def test_kind_strings_are_the_tags() -> None:
    from events import RunCompleted

    assert kind_of(RunCompleted()) == "run_completed"
