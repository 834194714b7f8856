"""One token-usage projection: every reader counts a model call's tokens the same way."""

from __future__ import annotations

from agentlog.actors.cli import render
from agentlog.actors.engine.results import token_usage
from agentlog.events import ModelCalled
from agentlog.projections import Message
from agentlog.projections.fold import uncommitted_record
from agentlog.projections.messages import TextBlock, TokenUsages
from agentlog.projections.timetravel import summarize
from agentlog.projections.usage import Tokens, counted, message_tokens, tokens_of

REASONED = {"input_tokens": 30, "output_tokens": 12, "reasoning_tokens": 5}


def test_a_total_is_the_stated_one_else_input_plus_output() -> None:
    assert tokens_of({"prompt_tokens": 3, "completion_tokens": 4}) == Tokens(3, 4, 7, 0)
    assert tokens_of({"input_tokens": 3, "output_tokens": 4, "total_tokens": 9}).total == 9
    assert tokens_of(REASONED) == Tokens(30, 12, 42, 5)
    details = {"prompt_tokens": 1, "completion_tokens_details": {"reasoning_tokens": 5}}
    assert tokens_of(details) == Tokens(1, 0, 1, 5)
    assert tokens_of({"reasoning_tokens": 2, "total_tokens": 8}) == Tokens(0, 0, 8, 2)
    assert tokens_of(None) == Tokens() == tokens_of({"prompt_tokens": True})
    usages = TokenUsages(prompt_tokens=10, completion_tokens=3, total_tokens=99, reasoning_tokens=2)
    assert tokens_of(usages) == Tokens(10, 3, 99, 2)
    assert tokens_of(usages).input_plus_output == 13
    assert not counted({"cost": 1}) and not counted(None) and counted({"output_tokens": 0})


def test_history_cli_and_ainvoke_read_a_call_alike() -> None:
    """The history's summary once summed every count ending in "tokens" (reasoning counted
    twice, 47 here); it now says the total every other reader says."""
    call = ModelCalled(
        node="a", provider="openai", model="m", request_hash="h", usage=REASONED, latency_ms=5
    )
    assert summarize(uncommitted_record(call, 1, "t")) == (
        "openai:m attempt 1 completed, 42 tokens, 5 ms"
    )
    report = render.usage_report([uncommitted_record(call, 1, "t")])
    assert (report.total.input_tokens, report.total.total_tokens) == (30, 42)
    assert report.total.reasoning_tokens == 5
    assert render.token_usage(REASONED) == tokens_of(REASONED).astuple()


def test_ainvoke_sums_the_messages_input_and_output() -> None:
    def said(usage: TokenUsages | None) -> Message:
        return Message(role="assistant", content=[TextBlock(text="x")], usages=usage)

    usage = TokenUsages(prompt_tokens=10, completion_tokens=3, total_tokens=99, reasoning_tokens=2)
    messages = [said(usage), said(None), said(usage)]
    assert message_tokens(messages) == Tokens(20, 6, 198, 4)
    assert token_usage(messages) == {
        "total_input_tokens": 20,
        "total_output_tokens": 6,
        "total_reasoning_tokens": 4,
        "total_tokens": 26,
    }
