"""Retrying what failed: `RetryPolicy`, the one policy of agentlog (a node's, given to
`add_node(..., retry_policy=...)`, and an agent runtime's entry point's), and the retry of a
node's failed step inside its run.

A node's failed attempt is recorded as any failure is (`run_failed`, naming the node and the
error), then the retry as a `resumed` record by `retry_policy`, then the wait, then the node
entered again: the retry is in the log, and a replay folds exactly what the live run did.
The step goes on as a resume after a failure does, so a tool call whose result committed is
never run again. A stop recorded during the wait pauses the run there (resumed later, the
node runs again); a caller cancelling the call cuts the wait short like any step.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentlog.actors.engine.errors import GraphError, NodeError
from agentlog.events import Resumed, Stopped, StopRequested

if TYPE_CHECKING:
    from agentlog.actors.engine.loop import RunLoop

RETRIED_BY = "retry_policy"
"""Who a retry's `resumed` record names as resuming the run."""

WATCH_S = 0.25
"""How often a retry's wait looks in the log for a stop request."""

RetryOn = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
"""Which errors a policy retries: a class, a tuple of classes, or a predicate."""


class InvalidRetryPolicyError(GraphError):
    """A `RetryPolicy` was given a value it cannot use; the message names the field."""


def _is_error_class(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class RetryPolicy:
    """Up to `max_attempts` attempts in all, waiting `backoff_s * backoff_factor**(n-1)`
    seconds after the n-th failed one (at most `max_backoff_s`, plus up to a second at random
    with `jitter`). An error is retried when `retry_on` (a class, a tuple of classes or a
    predicate; None: any) takes it and its class is not in `fatal` (classes or names)."""

    max_attempts: int = 3
    backoff_s: float = 1.0
    fatal: tuple[str | type[BaseException], ...] = ()
    backoff_factor: float = 2.0
    max_backoff_s: float | None = None
    jitter: bool = False
    retry_on: RetryOn | None = None

    INVALID: ClassVar[type[Exception]] = InvalidRetryPolicyError
    """What a bad field raises (an agent runtime's policy raises its `RegistrationError`)."""

    def __post_init__(self) -> None:
        fatal: object = self.fatal
        if isinstance(fatal, str) or _is_error_class(fatal):
            fatal = (fatal,)  # RetryPolicy(fatal=KeyError): one class, as a tuple
        if not isinstance(fatal, Sequence | set | frozenset) or not all(
            (isinstance(f, str) and f) or _is_error_class(f) for f in fatal
        ):
            raise self.INVALID(
                "fatal is a tuple of exception classes or their names (fatal=(KeyError, "
                f"'PaymentDeclined')), got {self.fatal!r}"
            )
        object.__setattr__(self, "fatal", tuple(fatal))
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise self.INVALID(f"max_attempts must be an int, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise self.INVALID(f"max_attempts counts the first run: >= 1, not {self.max_attempts}")
        if not _number(self.backoff_s) or self.backoff_s < 0:
            raise self.INVALID(f"backoff_s must be a finite number >= 0, got {self.backoff_s!r}")
        if not _number(self.backoff_factor) or self.backoff_factor < 1:
            raise self.INVALID(
                f"backoff_factor must be a finite number >= 1, got {self.backoff_factor!r}"
            )
        if self.max_backoff_s is not None and (
            not _number(self.max_backoff_s) or self.max_backoff_s < 0
        ):
            raise self.INVALID(
                f"max_backoff_s must be a finite number >= 0 or None, got {self.max_backoff_s!r}"
            )
        retry_on: object = self.retry_on
        if isinstance(retry_on, list):
            retry_on = tuple(retry_on)
            object.__setattr__(self, "retry_on", retry_on)
        if not (
            retry_on is None
            or _is_error_class(retry_on)
            or (isinstance(retry_on, tuple) and all(_is_error_class(c) for c in retry_on))
            or (callable(retry_on) and not isinstance(retry_on, type))
        ):
            raise self.INVALID(
                "retry_on is an exception class, a tuple of them, or a function of the error "
                f"returning True to retry; got {self.retry_on!r}"
            )

    def delay(
        self, attempt: int, uniform: Callable[[float, float], float] = random.uniform
    ) -> float:
        """Seconds to wait before attempt `attempt + 1`, after attempt `attempt` failed."""
        seconds = float(self.backoff_s) * float(self.backoff_factor) ** max(attempt - 1, 0)
        if self.max_backoff_s is not None:
            seconds = min(seconds, float(self.max_backoff_s))
        return seconds + (uniform(0.0, 1.0) if self.jitter else 0.0)

    def is_fatal(self, error_type: str) -> bool:
        names = {f if isinstance(f, str) else f.__name__ for f in self.fatal}
        return error_type in names

    def retries(self, error: BaseException) -> bool:
        """Whether this policy retries `error` (whatever attempts remain)."""
        if self.is_fatal(type(error).__name__) or any(
            isinstance(f, type) and isinstance(error, f) for f in self.fatal
        ):
            return False
        retry_on = self.retry_on
        if retry_on is None:
            return True
        if isinstance(retry_on, type | tuple):
            return isinstance(error, retry_on)
        return bool(retry_on(error))


def node_policies(name: str, given: object) -> tuple[RetryPolicy, ...]:
    """A node's `retry_policy=` as a tuple of policies (the first that retries an error
    decides); `GraphError` naming the node when it is no policy."""
    if given is None:
        return ()
    policies = (given,) if isinstance(given, RetryPolicy) else given
    if (
        not isinstance(policies, Sequence)
        or isinstance(policies, str)
        or not all(isinstance(p, RetryPolicy) for p in policies)
    ):
        raise GraphError(
            f"node {name!r}: retry_policy is a RetryPolicy(max_attempts=..., backoff_s=...) or "
            f"a list of them, got {given!r:.80}"
        )
    return tuple(policies)


Sleep = Callable[[float], Awaitable[Any]]
"""How a retry waits."""

SLEEP: Sleep = asyncio.sleep
"""The wait of every retry, read when it waits (a test sets its own, or uses zero backoffs)."""


async def retry_failed(run: RunLoop[Any], failure: NodeError) -> bool:
    """After `failure` of a node's step (already recorded), whether the run goes on to
    another attempt: True once the retry is recorded and its wait is over, or the wait was
    cut short by a stop (then recorded as a pause; `run.fold` is the log's)."""
    node = failure.node
    error = failure.__cause__ if failure.__cause__ is not None else failure
    policy = next(
        (p for p in run.engine.graph.retry_policies.get(node, ()) if p.retries(error)), None
    )
    if policy is None:
        return False
    attempts = run.failures[node] = run.failures.get(node, 0) + 1
    if attempts >= policy.max_attempts:
        return False
    await run.commits.commit([Resumed(by=RETRIED_BY, node=node)], actor="runtime")
    await run.commits.land()  # a wait is no time to hold records: a stop reads the log
    if await _stopped_while_waiting(run, policy.delay(attempts), SLEEP):
        await run.commits.land()
        run.fold = await run.engine.load(run.thread_id)  # holding the stop request
        stop = Stopped(node=node, when="before", duration_ms=run.elapsed_ms())
        await run.commits.commit([stop], actor="runtime")
    return True


async def _stopped_while_waiting(run: RunLoop[Any], seconds: float, sleep: Sleep) -> bool:
    """Wait `seconds` (through `sleep`), looking in the log for a stop request meanwhile."""
    waiting = asyncio.ensure_future(sleep(seconds))
    try:
        while True:
            async for record in run.engine.store.read(run.thread_id, run.durable_seq() + 1):
                if isinstance(record.event, StopRequested):
                    return True
            if waiting.done():
                waiting.result()
                return False
            await asyncio.wait([waiting], timeout=WATCH_S)
    finally:
        waiting.cancel()
