"""A node's view of the state: one copy-on-read list (`SharedContext.copy_on_read`)."""

from __future__ import annotations

from agentlog.actors.engine.view import node_view
from agentlog.projections import AgentState, Message
from agentlog.projections.views import SharedContext


def _state() -> AgentState:
    return AgentState(context=[Message.text_message(f"m{i}", message_id=f"m{i}") for i in range(3)])


def test_a_node_keeps_its_edits_and_the_log_never_sees_them() -> None:
    state = _state()
    view = node_view(state)
    assert isinstance(view.context, SharedContext)
    first = view.context[0]
    first.metadata["seen"] = True
    assert view.context[0] is first and view.context[0].metadata == {"seen": True}
    assert state.context[0].metadata == {} and first == view.context[0]
    assert [m.message_id for m in view.context] == ["m0", "m1", "m2"]
    assert all(a is not b for a, b in zip(view.context, state.context, strict=True))


def test_nothing_hands_out_the_logs_own_messages() -> None:
    state = _state()
    view = node_view(state)
    handed: list[Message] = []
    view.context.sort(key=lambda m: handed.append(m) or str(m.message_id), reverse=True)
    assert handed and not any(m is o for m in handed for o in state.context)
    assert [m.message_id for m in view.context] == ["m2", "m1", "m0"]
    assert not any(m is o for m in view.context[::-1] for o in state.context)
    assert view.context.pop() is not state.context[0]
    own = Message.text_message("new")
    view.context.append(own)
    assert view.context[-1] == own and [m.message_id for m in state.context] == ["m0", "m1", "m2"]
