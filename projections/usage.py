"""Token usage: one reading of what a model call cost, for every reader.

A model call's usage is recorded as the provider gave it (`ModelCalled.usage`, in OpenAI's
names, prompt/completion, or Anthropic's, input/output) and kept on the message it produced
(`Message.usages`). `tokens_of` reads either into `Tokens`, whose `total` has one meaning
everywhere: the call's total as the provider stated it (`total_tokens`), else input +
output. Reasoning tokens are part of the output, never added to a total again.

`ainvoke`'s `token_usage` keeps Agentflow's own sum, named for what it is
(`Tokens.input_plus_output`): Agentflow ignores a stated total.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentlog.projections.messages import Message, TokenUsages

_INPUT_KEYS = ("prompt_tokens", "input_tokens")
_OUTPUT_KEYS = ("completion_tokens", "output_tokens")
_DETAIL_KEYS = ("completion_tokens_details", "output_tokens_details")


@dataclass(frozen=True)
class Tokens:
    """Tokens of one model call, or summed over several: input, output, reasoning (part of
    the output) and `total`, the calls' stated totals (input + output where none was
    stated)."""

    input: int = 0
    output: int = 0
    total: int = 0
    reasoning: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.input + other.input,
            self.output + other.output,
            self.total + other.total,
            self.reasoning + other.reasoning,
        )

    @property
    def input_plus_output(self) -> int:
        """Input and output tokens, whatever total the provider stated (Agentflow's sum)."""
        return self.input + self.output

    def astuple(self) -> tuple[int, int, int, int]:
        """(input, output, total, reasoning)."""
        return self.input, self.output, self.total, self.reasoning


def _count(usage: Mapping[str, Any], keys: Sequence[str]) -> int | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def tokens_of(usage: Mapping[str, Any] | TokenUsages | None) -> Tokens:
    """The tokens of a recorded usage (a `ModelCalled.usage` dict in any provider's names,
    or a message's `TokenUsages`); a count not given is 0."""
    if isinstance(usage, TokenUsages):
        return Tokens(
            usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, usage.reasoning_tokens
        )
    if not isinstance(usage, Mapping):
        return Tokens()
    took_in = _count(usage, _INPUT_KEYS) or 0
    took_out = _count(usage, _OUTPUT_KEYS) or 0
    total = _count(usage, ("total_tokens",))
    reasoning = _count(usage, ("reasoning_tokens",))
    for key in _DETAIL_KEYS:
        detail = usage.get(key)
        if reasoning is None and isinstance(detail, Mapping):
            reasoning = _count(detail, ("reasoning_tokens",))
    return Tokens(took_in, took_out, took_in + took_out if total is None else total, reasoning or 0)


def counted(usage: Mapping[str, Any] | None) -> bool:
    """Whether a recorded usage states any token count at all."""
    return isinstance(usage, Mapping) and any(
        _count(usage, keys) is not None
        for keys in (_INPUT_KEYS, _OUTPUT_KEYS, ("total_tokens",), ("reasoning_tokens",))
    )


def message_tokens(messages: Iterable[Message]) -> Tokens:
    """The tokens of the model calls that produced `messages` (their `usages`), summed."""
    return sum((tokens_of(m.usages) for m in messages if m.usages is not None), Tokens())
