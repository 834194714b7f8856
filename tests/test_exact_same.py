"""One exact comparison: the export verifier's `same`, which the strategies use too."""

from __future__ import annotations

from agentlog.events.verify_export import same
from agentlog.projections import Message
from agentlog.projections import strategies as ps


def test_exact_means_the_same_type_and_value() -> None:
    assert not same(1, 1.0) and not same(1, True) and not same(0.0, -0.0)
    assert same(float("nan"), float("nan")) and same([1, {"a": (2,)}], [1, {"a": (2,)}])
    assert not same(b"x", bytearray(b"x")) and not same([1], [1, 2])
    assert same({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert not same({"a": 1, "b": 2}, {"b": 2, "a": 1}, ordered=True)


def test_models_compare_field_by_field() -> None:
    one = Message.text_message("x", message_id="m")
    two = one.model_copy(update={"timestamp": one.timestamp})
    assert same(one, two) and ps.same(one, two)
    assert not same(one, one.model_copy(update={"message_id": 1}))
    assert not ps.same({"a": 1, "b": 2}, {"b": 2, "a": 1})  # a round trip keeps key order
