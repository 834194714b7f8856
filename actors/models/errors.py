"""Typed errors of model calls: each names the provider, the model and what to do."""

from __future__ import annotations

from agentlog.events.errors import AgentlogError

__all__ = [
    "ModelEmptyRequestError",
    "ModelError",
    "ModelRefusedError",
    "ModelResponseError",
    "ModelSpecError",
    "ModelStreamError",
    "ModelTruncatedError",
    "ModelUnavailableError",
]


class ModelError(AgentlogError):
    """A model call went wrong; the step fails (recorded) and invoking the thread retries it."""


class ModelRefusedError(ModelError):
    """The provider refused the request (a bad key, an unknown model, a malformed request):
    retrying cannot help, so the run fails at once naming the cause."""

    def __init__(self, provider: str, model: str, status: int | None, cause: str) -> None:
        self.provider = provider
        self.model = model
        self.status = status
        hint = {
            401: "check the API key",
            403: "check the key's permissions",
            404: "check the model name and the base URL",
            400: "check the request's params, messages and tools",
            402: "check the account's plan and billing",
            429: "the account's quota is used up: check its plan and billing",
            422: "check the request's params, messages and tools",
        }.get(status or 0, "fix the request")
        super().__init__(
            f"{provider} refused the call to model {model!r} (HTTP {status}): {cause}; {hint}"
        )


class ModelEmptyRequestError(ModelError, ValueError):
    """The node has no message to send (an empty context, and for Anthropic a system prompt
    alone is not a message): the provider would refuse it, so it is not sent."""

    def __init__(self, provider: str, model: str, node: str) -> None:
        self.provider = provider
        self.model = model
        super().__init__(
            f"node {node!r} has no message to send to {provider} model {model!r}: the "
            "context is empty; start the run with a user message (Anthropic takes no "
            "request of a system prompt alone)"
        )


class ModelUnavailableError(ModelError):
    """Every attempt failed with a transient error (rate limit, timeout, 5xx, broken answer)."""

    def __init__(self, provider: str, model: str, attempts: int, cause: str) -> None:
        self.provider = provider
        self.model = model
        self.attempts = attempts
        super().__init__(
            f"{provider} model {model!r} failed {attempts} attempt(s), the last with: {cause}; "
            "each attempt is in the log (model_called); invoke the thread again to retry, or "
            "give the node more attempts: ModelNode(..., retry=ModelRetry(attempts=N))"
        )


class ModelResponseError(ModelError, ValueError):
    """A provider's answer cannot be read as a message (missing parts, arguments that are
    not a JSON object); treated as transient: the call is tried again."""


class ModelTruncatedError(ModelError, ValueError):
    """The answer stopped at the token limit in the middle of a tool call, so the call
    cannot be read; asking again with the same limit would stop there again, so it is
    not retried."""

    def __init__(self, tool: str, finish_reason: str) -> None:
        self.tool = tool
        self.finish_reason = finish_reason
        super().__init__(
            f"the model's call of tool {tool!r} was cut at the token limit (finish reason "
            f"{finish_reason!r}): raise max_tokens (max_output_tokens for the Responses API)"
        )


class ModelStreamError(ModelResponseError):
    """A streamed answer ended before the provider said it was complete."""


class ModelSpecError(ModelError, ValueError):
    """A model named as `provider:model` could not be set up (unknown provider, no key)."""
