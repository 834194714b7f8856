"""The hook a replay test answers through: while a replay session is set (by
`agentlog.actors.replay`), a tool node takes each call's result and a model node each answer
from the recorded log instead of running the tool or calling the model, so a replay has no
side effects. Outside a replay nothing here is set and both nodes run as always."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from agentlog.events.errors import AgentlogError
from agentlog.events.kinds import ModelCalled, ToolCallFinished

if TYPE_CHECKING:
    from agentlog.actors.engine.context import NodeContext
    from agentlog.projections import Message, ToolCallBlock

__all__ = ["LogAnswers", "ReplayUnansweredError", "answering", "log_answers"]


class ReplayUnansweredError(AgentlogError):
    """The code under replay asked for something the log cannot answer (a tool call it does
    not hold, a model request other than the recorded one): the replay stops there."""


class LogAnswers(Protocol):
    """What a replay session answers from the log, for the node running in `context`."""

    def tool_result(self, call: ToolCallBlock, context: NodeContext) -> ToolCallFinished:
        """The recorded result of `call`; `ReplayUnansweredError` when the log has none."""
        ...

    def model_answer(
        self, request_hash: str, request: dict[str, Any], context: NodeContext
    ) -> tuple[ModelCalled, Message]:
        """The recorded call and message answering this model request;
        `ReplayUnansweredError` when the recorded request differs or there is none."""
        ...


_session: ContextVar[LogAnswers | None] = ContextVar("agentlog_replay_answers", default=None)


def log_answers() -> LogAnswers | None:
    """The replay session answering this run's tools and models, or None (a live run)."""
    return _session.get()


@contextmanager
def answering(session: LogAnswers) -> Iterator[None]:
    """Answer the tools and models of the runs started inside from `session`."""
    token = _session.set(session)
    try:
        yield
    finally:
        _session.reset(token)
