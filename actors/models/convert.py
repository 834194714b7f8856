"""What a node may return in place of messages, as the seed's nodes do: a
`ModelResponseConverter` (a provider's answer, possibly still awaited, and the converter
that reads it), or a provider SDK's raw answer itself (OpenAI's `ChatCompletion` or
`Response`, Anthropic's `Message`, LiteLLM's `ModelResponse`). Either joins the context as
the assistant message the provider's converter makes of it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agentlog.actors.engine.nodes import ANSWER_READERS
from agentlog.actors.models._common import ModelAnswer
from agentlog.actors.models.anthropic_messages import from_anthropic_message
from agentlog.actors.models.errors import ModelSpecError
from agentlog.actors.models.openai_chat import from_chat_completion
from agentlog.actors.models.openai_responses import from_response
from agentlog.projections import Message

CONVERTERS: dict[str, Callable[[Any], ModelAnswer]] = {
    "openai": from_chat_completion,
    "litellm": from_chat_completion,
    "openai_responses": from_response,
    "anthropic": from_anthropic_message,
}
"""The converters a `ModelResponseConverter` names, by the provider's (or library's) name."""


class ModelResponseConverter:
    """A model's answer to be read by `converter`: a name from `CONVERTERS` or a function
    of the response giving a `Message` (or a `ModelAnswer`). `response` may be an awaitable
    (the seed's deferred form): the engine awaits it when the node returns."""

    def __init__(
        self, response: Any, converter: str | Callable[[Any], Message | ModelAnswer] = "openai"
    ) -> None:
        if isinstance(converter, str) and converter not in CONVERTERS:
            raise ModelSpecError(
                f"no converter named {converter!r:.40}: use one of {', '.join(CONVERTERS)}, "
                "or a function of the response returning a Message"
            )
        if not isinstance(converter, str) and not callable(converter):
            raise ModelSpecError(f"converter must be a name or a function, not {converter!r:.40}")
        self.response = response
        self.converter = converter

    async def invoke(self) -> Message:
        """The assistant message the converter makes of the (awaited) response."""
        response = self.response
        if inspect.isawaitable(response):
            response = await response
        convert = CONVERTERS[self.converter] if isinstance(self.converter, str) else self.converter
        made = convert(response)
        if inspect.isawaitable(made):
            made = await made
        if isinstance(made, ModelAnswer):
            return made.message
        if not isinstance(made, Message):
            raise ModelSpecError(
                f"the converter returned {type(made).__name__}, not a Message or ModelAnswer"
            )
        return made


def provider_converter(output: Any) -> str | None:
    """The converter for a provider SDK's raw answer, or None when `output` is not one (a
    mapping is a node's state update, never read as an answer)."""
    if isinstance(output, Mapping | str | bytes | list | tuple):
        return None
    kind = getattr(output, "object", None)
    if kind == "chat.completion":
        return "openai"
    if kind == "response":
        return "openai_responses"
    if getattr(output, "type", None) == "message" and getattr(output, "role", None) == "assistant":
        return "anthropic"
    if type(output).__name__ == "ModelResponse" and hasattr(output, "choices"):
        return "litellm"
    return None


def read_answer(output: Any) -> Awaitable[list[Message]] | None:
    """The engine's reader (`ANSWER_READERS`) of a converter or a raw provider answer a node
    returned: the message it stands for, or None for any other output."""
    if isinstance(output, ModelResponseConverter):
        return _one(output)
    name = provider_converter(output)
    return None if name is None else _one(ModelResponseConverter(output, name))


async def _one(converter: ModelResponseConverter) -> list[Message]:
    return [await converter.invoke()]


if read_answer not in ANSWER_READERS:
    ANSWER_READERS.append(read_answer)
