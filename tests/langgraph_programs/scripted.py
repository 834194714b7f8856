"""What the programs share, on LangGraph and on agentlog alike: a chat model answering from a
script (no network), and a printer of messages that leaves out their random ids."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel


class ScriptedChat(FakeMessagesListChatModel):
    """A chat model answering each call with the next message of its script."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        return self


def show(messages: list[Any]) -> None:
    for message in messages:
        calls = [(c["name"], c["args"]) for c in getattr(message, "tool_calls", None) or []]
        print(f"{message.type}: {message.content!r}" + (f" calls {calls}" if calls else ""))
