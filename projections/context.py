"""Context managers: policies that keep a thread's message context within bounds.

Given to `compile(context_manager=...)`, a manager bounds what the nodes see: when a step's
commit leaves the context over its bound, the same commit records the trim (the messages
removed, and a summary when a summariser is given), so the log keeps every message, the
fold stays pure, and a replay trims exactly as the live run did.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from agentlog.events.errors import InvalidArgumentError
from agentlog.projections.messages import Message
from agentlog.projections.reducers import remove_tool_messages
from agentlog.projections.state import AgentState
from agentlog.projections.transcript import calls_of, open_calls, results_of

S = TypeVar("S", bound=AgentState)

Summarizer = Callable[[list[Message], str | None], str | Awaitable[str]]
"""Condenses the messages a trim drops, given the summary so far (None at first), into the
new summary: a function or an async function (it may call a model)."""


class ContextSummaryError(InvalidArgumentError):
    """A summariser was async where only a sync one can run, returned something other
    than text, or raised (the error names it; the original is its `__cause__`)."""


class BaseContextManager(ABC, Generic[S]):
    """Trims or condenses `state.context`; sync and async forms."""

    @abstractmethod
    def trim_context(self, state: S) -> S:
        """Return the state with its context trimmed."""

    @abstractmethod
    async def atrim_context(self, state: S) -> S:
        """Async form of `trim_context`."""


class MessageContextManager(BaseContextManager[S]):
    """Keep system messages and the most recent `max_messages` user turns (0: the system
    messages alone, as the seed's).

    A turn is a user message and everything after it up to the next one, so a tool call and
    its result always stay or go together, and the calls a tool node is about to answer
    always stay. With `remove_tool_msgs`, completed tool sequences (call, results, final answer)
    are condensed to their final answer first. With `summarizer`, the messages a trim drops
    are condensed into `context_summary` (see `Summarizer`).
    """

    def __init__(
        self,
        max_messages: int = 10,
        remove_tool_msgs: bool = False,
        summarizer: Summarizer | None = None,
    ) -> None:
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 0:
            raise InvalidArgumentError(f"max_messages must be an int >= 0, got {max_messages!r}")
        if not isinstance(remove_tool_msgs, bool):
            raise InvalidArgumentError(
                f"remove_tool_msgs must be True or False, got {remove_tool_msgs!r:.40}"
            )
        if summarizer is not None and not callable(summarizer):
            raise InvalidArgumentError(
                f"summarizer must be a function (dropped messages, summary so far) -> str, got "
                f"{type(summarizer).__name__}"
            )
        self.max_messages = max_messages
        self.remove_tool_msgs = remove_tool_msgs
        self.summarizer = summarizer

    def __repr__(self) -> str:
        return (
            f"MessageContextManager(max_messages={self.max_messages}, "
            f"remove_tool_msgs={self.remove_tool_msgs})"
        )

    def trimmed(self, messages: list[Message]) -> list[Message] | None:
        """The messages to keep, in their order, or None when nothing needs to change."""
        if not messages:
            return None
        users = [i for i, m in enumerate(messages) if m.role == "user"]
        if len(users) <= self.max_messages and not self.remove_tool_msgs:
            return None  # the common case, checked on every commit: one pass, nothing built
        keep = set(range(len(messages)))
        if self.remove_tool_msgs:  # it never drops a user message
            survivors = {id(m) for m in remove_tool_messages(messages)}
            keep = {i for i in keep if id(messages[i]) in survivors}
        if len(users) > self.max_messages:
            start = users[-self.max_messages] if self.max_messages else len(messages)
            keep = {i for i in keep if i >= start or messages[i].role == "system"}
        if len(keep) == len(messages):
            return None
        kept = [messages[i] for i in sorted(whole_exchanges(messages, keep))]
        return None if len(kept) == len(messages) else kept

    def trim_context(self, state: S) -> S:
        """Trim `state.context` in place and return the state (a summariser must be sync)."""
        trimmed = self.trimmed(state.context)
        if trimmed is not None:
            summarizer = self.summarizer
            if summarizer is not None:
                gone, previous = dropped(state.context, trimmed), state.context_summary
                said = self._call(lambda: summarizer(gone, previous))
                if inspect.isawaitable(said):
                    close = getattr(said, "close", None)
                    if close is not None:
                        close()  # never awaited: say so, without a warning later
                    raise ContextSummaryError(
                        "the summarizer is async: trim with atrim_context (the graph does)"
                    )
                state.context_summary = _text(said)
            state.context = trimmed
        return state

    async def atrim_context(self, state: S) -> S:
        """Async form of `trim_context`: an async summariser is awaited."""
        trimmed = self.trimmed(state.context)
        if trimmed is not None:
            state.context_summary = await self.summary(
                dropped(state.context, trimmed), state.context_summary
            )
            state.context = trimmed
        return state

    async def summary(self, gone: list[Message], previous: str | None) -> str | None:
        """The summary after dropping `gone`: the summariser's, else `previous` unchanged."""
        summarizer = self.summarizer
        if summarizer is None:
            return previous
        said = self._call(lambda: summarizer(gone, previous))
        if inspect.isawaitable(said):
            try:
                said = await said
            except Exception as exc:
                raise self._failed(exc) from exc
        return _text(said)

    def _call(self, call: Callable[[], object]) -> object:
        """Call the summariser; its failure becomes a `ContextSummaryError` naming it."""
        try:
            return call()
        except Exception as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: Exception) -> ContextSummaryError:
        name = getattr(self.summarizer, "__qualname__", None) or repr(self.summarizer)
        return ContextSummaryError(
            f"the summarizer {name} raised {type(exc).__name__}: {exc}; the commit it was "
            "trimming was not made, so running the thread again calls it again (make it "
            "return text, or catch what it can recover from)"
        )


def _text(said: object) -> str:
    if not isinstance(said, str):
        raise ContextSummaryError(
            f"the summarizer returned {type(said).__name__} {said!r:.60}: return the summary text"
        )
    return said


def dropped(before: Sequence[Message], kept: Sequence[Message]) -> list[Message]:
    """The messages of `before` that `kept` leaves out, in order."""
    staying = {id(m) for m in kept}
    return [m for m in before if id(m) not in staying]


def whole_exchanges(messages: Sequence[Message], keep: set[int]) -> set[int]:
    """The indices of `keep` whose tool exchanges are kept whole.

    A tool call and its results are one exchange (messages linked through call ids); an
    exchange is kept only when all its messages are, except that the calls of the last
    assistant message still waiting for their results (the ones a tool node answers next)
    keep their exchange whatever `keep` says. Only assistant and tool messages
    are ever added or left out here, so the count of user messages never grows.
    """
    parent = list(range(len(messages)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    asked: dict[str, int] = {}
    for i, message in enumerate(messages):
        for call in calls_of(message):
            asked[call.id] = i
        for result in results_of(message):
            caller = asked.get(result.call_id)
            if caller is not None:
                parent[root(i)] = root(caller)
    waiting = _pending(messages)
    members: dict[int, list[int]] = {}
    for i in range(len(messages)):
        members.setdefault(root(i), []).append(i)
    out: set[int] = set()
    for group in members.values():
        linked = len(group) > 1 or any(calls_of(messages[i]) for i in group)
        asks = any(c.id in waiting for i in group for c in calls_of(messages[i]))
        if not linked:
            out.update(i for i in group if i in keep)
        elif asks or all(i in keep for i in group):
            out.update(group)
    return out


def _pending(messages: Sequence[Message]) -> set[str]:
    """Ids of the calls of the last assistant message that no message answers yet."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            asked = {c.id for c in calls_of(messages[index])}
            return asked & {c.id for c in open_calls(messages)}
    return set()
