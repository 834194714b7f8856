"""`OpenCalls` keeps up with a context as it changes: after any sequence of appends, edits
in place, removals and wholesale replacements it says what `open_calls` of the whole
context says."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.projections import Message, open_calls
from agentlog.projections.messages import ToolCallBlock, ToolResultBlock
from agentlog.projections.transcript import OpenCalls
from agentlog.projections.views import SharedContext

CALL_IDS = st.sampled_from(["a", "b", "c", "d"])


def _message(kind: str, call_ids: list[str]) -> Message:
    if kind == "call":
        blocks: list[Any] = [ToolCallBlock(id=c, name="t") for c in call_ids]
        return Message(role="assistant", content=blocks)
    return Message.tool_message([ToolResultBlock(call_id=c) for c in call_ids])


MESSAGES = st.builds(_message, st.sampled_from(["call", "result"]), st.lists(CALL_IDS, max_size=2))
OPS = st.one_of(
    st.tuples(st.just("append"), st.lists(MESSAGES, max_size=3)),
    st.tuples(st.just("set"), st.tuples(st.integers(0, 30), MESSAGES)),
    st.tuples(st.just("delete"), st.integers(0, 30)),
    st.tuples(st.just("swap"), st.lists(MESSAGES, max_size=3)),
    st.tuples(st.just("ask"), st.none()),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(OPS, max_size=25), st.booleans())
def test_open_calls_follow_every_change(ops: list[tuple[str, Any]], shared: bool) -> None:
    context: list[Message] = SharedContext.copy_on_read([]) if shared else []
    calls = OpenCalls()
    for op, arg in ops:
        if op == "append":
            context.extend(arg)
        elif op == "set" and context:
            context[arg[0] % len(context)] = arg[1]
        elif op == "delete" and context:
            del context[arg % len(context)]
        elif op == "swap":
            context = list(arg)
        got = [c.id for c in calls.of(context)]
        assert got == [c.id for c in open_calls(context)]


def test_a_read_of_a_shared_context_copies_nothing() -> None:
    """Reading the open calls of a node's view leaves its messages shared (uncopied)."""
    message = _message("call", ["a"])
    context = SharedContext.copy_on_read([message])
    assert [c.id for c in OpenCalls().of(context)] == ["a"]
    assert list.__getitem__(context, 0) is message
