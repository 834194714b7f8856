"""Context managers: policies that keep a thread's message context within bounds."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from events.errors import InvalidArgumentError

from .messages import Message
from .reducers import remove_tool_messages
from .state import AgentState

S = TypeVar("S", bound=AgentState)


class BaseContextManager(ABC, Generic[S]):
    """Trims or condenses `state.context`; sync and async forms."""

    @abstractmethod
    def trim_context(self, state: S) -> S:
        """Return the state with its context trimmed."""

    @abstractmethod
    async def atrim_context(self, state: S) -> S:
        """Async form of `trim_context`."""


class MessageContextManager(BaseContextManager[S]):
    """Keep system messages and the most recent `max_messages` user turns.

    With `remove_tool_msgs`, completed tool sequences (call, results, final answer) are
    condensed to their final answer first.
    """

    def __init__(self, max_messages: int = 10, remove_tool_msgs: bool = False) -> None:
        if max_messages < 1:
            raise InvalidArgumentError(f"max_messages must be >= 1, got {max_messages}")
        self.max_messages = max_messages
        self.remove_tool_msgs = remove_tool_msgs

    def trimmed(self, messages: list[Message]) -> list[Message] | None:
        """The trimmed list, or None when nothing needs to change."""
        if not messages:
            return None
        if self.remove_tool_msgs:
            messages = remove_tool_messages(messages)
        users = sum(1 for m in messages if m.role == "user")
        if users <= self.max_messages:
            return messages if self.remove_tool_msgs else None
        rest = [m for m in messages if m.role != "system"]
        start, seen = len(rest), 0
        for i in range(len(rest) - 1, -1, -1):
            if rest[i].role == "user":
                seen += 1
                if seen == self.max_messages:
                    start = i
                    break
        return [m for m in messages if m.role == "system"] + rest[start:]

    def trim_context(self, state: S) -> S:
        """Trim `state.context` in place and return the state."""
        trimmed = self.trimmed(state.context)
        if trimmed is not None:
            state.context = trimmed
        return state

    async def atrim_context(self, state: S) -> S:
        """Async form of `trim_context`."""
        return self.trim_context(state)
