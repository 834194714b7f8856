"""LangGraph's `RetryPolicy` (its field names and defaults), read as agentlog's one retry
policy (`agentlog.actors.engine.retry.RetryPolicy`), which runs and records every retry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.retry import RetryPolicy as EngineRetryPolicy

_NOT_RETRIED = (
    ValueError,
    TypeError,
    ArithmeticError,
    ImportError,
    LookupError,
    NameError,
    SyntaxError,
    RuntimeError,
    ReferenceError,
    StopIteration,
    StopAsyncIteration,
    OSError,
)
"""Errors of the program itself, which another attempt would meet again."""


def default_retry_on(error: BaseException) -> bool:
    """LangGraph's default choice: a lost connection and a server's 5xx answer are retried;
    a mistake of the program (a `ValueError`, a `KeyError`, an `OSError` ...) is not."""
    if isinstance(error, ConnectionError):
        return True
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(status, int) and type(error).__name__ in ("HTTPStatusError", "HTTPError"):
        return 500 <= status < 600
    return not isinstance(error, _NOT_RETRIED)


class RetryPolicy(NamedTuple):
    """How a node is retried, as LangGraph names it: `initial_interval` seconds before the
    first retry, times `backoff_factor` after each, at most `max_interval`, plus up to a
    second at random with `jitter`; `max_attempts` counts the first; `retry_on` is an error
    class, a list of them, or a function of the error."""

    initial_interval: float = 0.5
    backoff_factor: float = 2.0
    max_interval: float = 128.0
    max_attempts: int = 3
    jitter: bool = True
    retry_on: type[BaseException] | Sequence[type[BaseException]] | Callable[[Any], bool] = (
        default_retry_on
    )


def engine_policies(node: str, given: Any) -> tuple[EngineRetryPolicy, ...] | None:
    """A node's `retry_policy=` (LangGraph's, agentlog's, or a list of them) as agentlog's."""
    if given is None:
        return None
    items = [given] if isinstance(given, RetryPolicy | EngineRetryPolicy) else given
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise GraphError(
            f"add_node({node!r}): retry_policy is a RetryPolicy or a list of them, "
            f"got {given!r:.80}"
        )
    out = []
    for item in items:
        if isinstance(item, RetryPolicy):
            retry_on: Any = item.retry_on
            out.append(
                EngineRetryPolicy(
                    max_attempts=item.max_attempts,
                    backoff_s=item.initial_interval,
                    backoff_factor=item.backoff_factor,
                    max_backoff_s=item.max_interval,
                    jitter=item.jitter,
                    retry_on=tuple(retry_on) if isinstance(retry_on, list) else retry_on,
                )
            )
        elif isinstance(item, EngineRetryPolicy):
            out.append(item)
        else:
            raise GraphError(
                f"add_node({node!r}): retry_policy is a RetryPolicy or a list of them, "
                f"got {item!r:.80}"
            )
    return tuple(out)
