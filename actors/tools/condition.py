"""`tools_condition`: the router that sends a model's tool calls to the tool node.

LangGraph's prebuilt router by the same name: after the model's node, go to `"tools"` when the
last message is an assistant message with tool calls, else end the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentlog.actors.engine.errors import GraphError
from agentlog.projections import AgentState, InvalidMessageError, Message, to_messages
from agentlog.projections.state import END

__all__ = ["tools_condition"]


def tools_condition(state: Any, messages_key: str = "messages") -> str:
    """`"tools"` when the last message of `state` asks for tool calls, else `END`.

    `state` is an `AgentState` (its context), a dict-like state holding the messages under
    `messages_key`, an object with that attribute, or the list of messages itself; the
    messages may be agentlog's, LangChain's or OpenAI-style dicts. Use it as
    `graph.add_conditional_edges("agent", tools_condition)` with a node named `"tools"`.
    """
    last = _last_message(state, messages_key)
    return "tools" if last.role == "assistant" and last.tool_calls() else END


def _last_message(state: Any, key: str) -> Message:
    if isinstance(state, AgentState):
        messages: Any = state.context
    elif isinstance(state, Mapping):
        messages = state.get(key, state.get("context"))
    elif isinstance(state, Sequence) and not isinstance(state, str | bytes):
        messages = state
    else:
        messages = getattr(state, key, None)
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes) or not messages:
        raise GraphError(
            f"tools_condition found no messages in the state ({type(state).__name__}, under "
            f"{key!r}): route with it after a node that adds the model's reply"
        )
    try:
        return to_messages([messages[-1]])[0]
    except InvalidMessageError as exc:
        raise GraphError(f"tools_condition cannot read the last message: {exc}") from exc
