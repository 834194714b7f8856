"""What `ainvoke` returns: Agentflow's result shapes, chosen by `response_granularity`."""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum
from typing import Any

from agentlog.events.errors import InvalidArgumentError
from agentlog.projections import AgentState, Message, present
from agentlog.projections.usage import message_tokens


class ResponseGranularity(StrEnum):
    """How much `ainvoke` returns, by Agentflow's names.

    LOW: this call's messages and their token usage. PARTIAL: also the whole context and
    its summary. FULL: the state itself instead.
    """

    LOW = "low"
    PARTIAL = "partial"
    FULL = "full"


def granularity(value: ResponseGranularity | str) -> ResponseGranularity:
    """`value` as a `ResponseGranularity`, or a `ValueError` naming the accepted ones."""
    try:
        return ResponseGranularity(value)
    except ValueError:
        accepted = ", ".join(repr(g.value) for g in ResponseGranularity)
        raise InvalidArgumentError(
            f"response_granularity must be one of {accepted} (or a ResponseGranularity), "
            f"got {value!r}"
        ) from None


def token_usage(messages: Collection[Message]) -> dict[str, int]:
    """Token totals over `messages`, from each one's `usages`; zeros when none carries any.
    `total_tokens` is Agentflow's: input + output, whatever total a provider stated."""
    tokens = message_tokens(messages)
    return {
        "total_input_tokens": tokens.input,
        "total_output_tokens": tokens.output,
        "total_reasoning_tokens": tokens.reasoning,
        "total_tokens": tokens.input_plus_output,
    }


def run_result(
    state: AgentState,
    own: Collection[str | int],
    shape: ResponseGranularity,
    *,
    include_state: bool = False,
) -> dict[str, Any]:
    """The result of a call: the shape's keys, the run's status, and, when it paused, why.

    `messages` are this call's own (its input, and what the nodes added after it) that are
    still in the context, in context order; `status` and `__interrupt__` (LangGraph's key)
    come with every shape.
    """
    messages = [m for m in state.context if m.message_id in own] if own else []
    return present.run_result(
        state,
        messages,
        token_usage(messages),
        context=shape is ResponseGranularity.PARTIAL,
        whole_state=shape is ResponseGranularity.FULL or include_state,
    )
