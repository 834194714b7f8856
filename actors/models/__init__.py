"""Real models for a graph: `ModelNode` over the OpenAI or Anthropic SDK, and the pure
converters between the providers' formats and `Message`s.

```python
from agentlog.actors.models import ModelNode
graph.add_node("agent", ModelNode(openai.AsyncOpenAI(), model="gpt-4o-mini", tools=tool_node))
```

The SDKs are optional extras (`agentlog[openai]`, `agentlog[anthropic]`); the converters
work on plain dicts too, with neither installed.
"""

from __future__ import annotations

from agentlog.actors.models._common import ModelAnswer, Tools, function_schemas, request_hash
from agentlog.actors.models.anthropic_messages import (
    AnthropicStream,
    anthropic_tools,
    from_anthropic_message,
    from_anthropic_messages,
    to_anthropic_messages,
)
from agentlog.actors.models.convert import CONVERTERS, ModelResponseConverter
from agentlog.actors.models.errors import (
    ModelEmptyRequestError,
    ModelError,
    ModelRefusedError,
    ModelResponseError,
    ModelSpecError,
    ModelStreamError,
    ModelTruncatedError,
    ModelUnavailableError,
)
from agentlog.actors.models.node import ModelNode
from agentlog.actors.models.openai_chat import (
    ChatStream,
    chat_tools,
    from_chat_completion,
    to_chat_messages,
)
from agentlog.actors.models.openai_responses import (
    ResponsesStream,
    from_response,
    responses_tools,
    to_responses_input,
)
from agentlog.actors.models.replay import LoggedAnswers
from agentlog.actors.models.retry import ModelRetry

__all__ = [
    "CONVERTERS",
    "AnthropicStream",
    "ChatStream",
    "LoggedAnswers",
    "ModelAnswer",
    "ModelEmptyRequestError",
    "ModelError",
    "ModelNode",
    "ModelRefusedError",
    "ModelResponseConverter",
    "ModelResponseError",
    "ModelRetry",
    "ModelSpecError",
    "ModelStreamError",
    "ModelTruncatedError",
    "ModelUnavailableError",
    "ResponsesStream",
    "Tools",
    "anthropic_tools",
    "chat_tools",
    "from_anthropic_message",
    "from_anthropic_messages",
    "from_chat_completion",
    "from_response",
    "function_schemas",
    "request_hash",
    "responses_tools",
    "to_anthropic_messages",
    "to_chat_messages",
    "to_responses_input",
]
